"""DirectoryStore: one file per key under a folder (the rules: this package's docstring).

The store's side: keys, modes, conflicts, pruning and each primitive as
descriptor-relative calls; the file-system machinery is ``posixfs.py``'s.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from ...base import Buffer, Mode, Store
from ...errors import (
    KeyConflictError,
    StoreExistsError,
    StoreFullError,
    StoreNotFoundError,
    UnsafePathError,
    UnsupportedOperationError,
    ZStoresError,
)
from ...readers import ValueReader
from .._libc import find_openat2
from .posixfs import (
    _CLOEXEC,
    _CREATE,
    _DIRECTORY,
    _FULL,
    _LIST,
    _LONGEST_SAFE_SEGMENT,
    _NOFOLLOW,
    _NOT_A_FOLDER,
    _O_PATH,
    _READ,
    _RETRIES,
    _WALK,
    TEMP_PREFIX,
    _check_segment,
    _empty_folder,
    _FileInTheWay,
    _first_key,
    _fsync_folder,
    _link_no_replace,
    _listing,
    _lstat_mode,
    _open_folder_at,
    _pread_all,
    _read_all,
    _release,
    _remove_keyless_tree,
    _remove_tree,
    _split,
    _unlink_quietly,
    _walk_folder,
    _write_all,
)
from .reader import _DescriptorReader

__all__ = ["DirectoryStore"]

# openat2(dir_fd, path, for_stat) refusing every link on the path, or None
# (before Linux 5.6, or refused by seccomp): one call resolves a whole key
# path below the root where the walk takes two per folder.  Read here (by
# _open_value_once and _stat_key), so a test may take it away.
_openat2 = find_openat2(_READ, _O_PATH | _NOFOLLOW | _CLOEXEC)


class DirectoryStore(Store):
    """Keys as files in a folder tree: key ``a/b/c`` is the file ``<path>/a/b/c``.

    The on-disk layout is zarr-python 2.18's ``DirectoryStore``, so each
    reads the other's folders.  Differences: a key that is also a prefix is
    refused (``KeyConflictError``) instead of deleting the folder in the way;
    deleting a key prunes the folders it leaves empty; temporary files use a
    reserved name and never show up as keys; symbolic links below the root
    are never followed.

    Writes go to a temporary file in the key's folder, then ``rename`` moves
    it over the key, so readers (threads or processes) see either the old or
    the new value and a crash leaves no partial value.  By default the file
    is not fsync-ed, as zarr-python 2 did not: after a power loss a value
    written just before may be lost (old value or empty), but never mixed.
    ``fsync=True`` makes each write durable at a large cost per key.

    Parameters
    ----------
    path : str or os.PathLike
        The root folder.  Stored as an absolute path; it is also what a pickled
        store reopens.  It may be a symbolic link (followed once, when the
        store opens it).
    normalize_keys : bool
        Lower-case every key (and every path given to ``listdir``, ``rmdir``,
        ``getsize``), as zarr-python 2's option did, for case-insensitive file
        systems.
    fsync : bool
        Flush each value (and its folder entry) to disk before returning.
    mode : {"a", "r", "r+", "w", "w-"}
        ``"r"`` and ``"r+"`` need the root folder to exist (an empty folder is
        an empty store), else ``StoreNotFoundError``.  ``"a"``, ``"w"`` and
        ``"w-"`` create it; ``"w"`` then deletes everything in it; ``"w-"``
        raises ``StoreExistsError`` if the folder already holds a key (an
        empty folder, or one with only temporary files, is accepted).  A file
        where the folder should be is an error in every mode.

    Raises
    ------
    UnsafePathError
        (a ``PermissionError``, errno ``EACCES``) when a key, or a folder on
        its path, is a symbolic link: reading it, writing or deleting below
        it.  Writing or deleting a key that is itself a link replaces or
        removes the link, never what it points to.
    StoreFullError
        (an ``OSError``, errno ``ENOSPC``) when the disk or a quota is full;
        the key keeps its old value and no temporary file is left.

    Notes
    -----
    Capability flags: ``supports_range_reads`` (``os.pread``),
    ``supports_process_writers`` (atomic renames; the last write wins),
    ``persistent``, ``hierarchical`` (a key cannot also be a prefix).

    Key rules on top of the common ones: a path segment may be at most
    ``NAME_MAX`` (255) bytes of UTF-8, and may not be a temporary-file name
    (``.zstores-tmp.`` + 32 hex digits).  Listings skip symbolic links and
    entries whose names are not valid UTF-8 (with a warning naming them).

    The root stays open for the store's life (one file descriptor).  If the
    folder at ``path`` is replaced (another program deleted and re-created
    it), the store notices at its next miss or failed write and reopens it.

    Examples
    --------
    >>> import os, tempfile
    >>> from zstores.stores.directory import DirectoryStore
    >>> root = os.path.join(tempfile.mkdtemp(), "data.zarr")
    >>> store = DirectoryStore(root)
    >>> store["foo/bar/0.0"] = b"abc"
    >>> os.listdir(os.path.join(root, "foo", "bar"))
    ['0.0']
    >>> del store["foo/bar/0.0"]
    >>> os.listdir(root)  # the emptied folders are gone
    []
    """

    supports_range_reads = True
    supports_process_writers = True
    persistent = True
    hierarchical = True
    #: A temporary file linked into place: link() fails if the name exists.
    supports_create_if_absent = True
    supports_compare_and_swap = False
    _compare_and_swap_refusal = (
        "a value is a file replaced by rename(), and no file-system call replaces a file "
        "only while it holds given bytes: a plain write by another process (zarr, "
        "LocalStore, cp) could land between the comparison and the rename.  Use LMDB, "
        "SQLite, Redis, MongoDB or an object store to compare and swap")

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        normalize_keys: bool = False,
        fsync: bool = False,
        mode: Mode = "a",
    ) -> None:
        super().__init__(mode=mode)
        if not _NOFOLLOW or os.open not in os.supports_dir_fd:
            raise UnsupportedOperationError(
                f"{type(self).__name__} needs descriptor-relative file calls (openat, "
                "O_NOFOLLOW) to keep symbolic links from leading outside its folder; "
                f"this system ({os.name}) has none"
            )
        self._root = os.path.abspath(os.fsdecode(path))
        self._normalize_keys = bool(normalize_keys)
        self._fsync = bool(fsync)
        self._retired: list[int] = []
        self._reopen_lock = threading.Lock()
        self._lock_pid = os.getpid()
        self._root_fd = self._open_root()
        self._real_root = os.path.realpath(self._root)
        self._clear_if_mode_w()

    @property
    def path(self) -> str:
        """The absolute path of the root folder."""
        return self._root

    # ------------------------------------------------------------------ root
    def _open_root(self) -> int:
        """Check the root against the mode, create it if allowed, and open it."""
        try:
            is_folder = stat.S_ISDIR(os.stat(self._root).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            exists = False
        else:
            if not is_folder:
                error = StoreNotFoundError if self._mode in ("r", "r+") else StoreExistsError
                raise error(
                    f"{self._root!r} is a file; {type(self).__name__} needs a folder there"
                )
            exists = True
        if self._mode in ("r", "r+"):
            self._check_existence(exists)
        else:
            self._check_existence(exists and self._root_has_keys())
            try:
                os.makedirs(self._root, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise StoreExistsError(
                    f"cannot create the folder {self._root!r}: a file is in the way"
                ) from None
        # The root itself is followed if it is a link: the user named it.
        return os.open(self._root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)

    def _root_has_keys(self) -> bool:
        folder = os.open(self._root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
        try:
            return _first_key(folder) is not None
        finally:
            os.close(folder)

    def _root_replaced(self, *, create: bool = False) -> bool:
        """Reopen the root if the folder held open was deleted (and ``path`` made again).

        Called after a miss or a failed write, never on the fast path: one
        ``fstat`` unless the held folder is gone (zarr-python 2's ``rmdir()``
        deletes and re-creates a store's folder).  The old descriptor stays
        open until ``close()``: another thread may be using it, and a closed
        number could be reused for another file.
        """
        if os.fstat(self._root_fd).st_nlink > 0:
            return False
        if self._lock_pid != os.getpid():  # forked while another thread held it?
            self._reopen_lock, self._lock_pid = threading.Lock(), os.getpid()
        with self._reopen_lock:
            held = os.fstat(self._root_fd)
            try:
                now = os.stat(self._root)
            except (FileNotFoundError, NotADirectoryError):
                if not create or self._mode == "r":
                    return False
                try:
                    os.makedirs(self._root, exist_ok=True)
                except OSError:
                    return False
                now = os.stat(self._root)
            if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino) or not stat.S_ISDIR(
                now.st_mode
            ):
                return False
            self._retired.append(self._root_fd)
            self._root_fd = os.open(self._root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
            return True

    def _close(self) -> None:
        fds = [getattr(self, "_root_fd", None), *getattr(self, "_retired", [])]
        for fd in fds:
            if fd is not None:
                os.close(fd)
        self._retired = []

    # ------------------------------------------------------------------ keys
    def _key(self, key: str) -> str:
        key = super()._key(key)
        if self._normalize_keys:
            key = key.lower()
        if len(key) > _LONGEST_SAFE_SEGMENT or TEMP_PREFIX in key:
            for segment in key.split("/"):
                _check_segment(key, segment)
        return key

    def _fold(self, prefix: str) -> str:
        """A prefix as stored (``listdir``/``rmdir``/``getsize`` skip ``_key``)."""
        return prefix.lower() if self._normalize_keys else prefix

    # ---------------------------------------------------------- path walking
    def _folders(
        self, key: str, segments: list[str], *, create: bool, locate: bool = False
    ) -> list[int]:
        """Open the folders ``segments`` below the root one by one, never following a link.

        Returns the descriptors ``[root, first, ..., last]`` (``[root]`` for
        no segment); the caller closes them with ``_release``.

        Raises
        ------
        KeyError
            Reading (``create=False``): a folder is missing, or a file (a key)
            stands where a folder should be (``_FileInTheWay``, naming it,
            when ``locate``).
        KeyConflictError
            Creating: a folder on the way is a key.
        UnsafePathError
            A folder on the way is a symbolic link.
        FileNotFoundError
            Creating: a folder was removed (pruned) between creating and
            opening it, or the root is gone; the caller starts again.
        """
        chain = [self._root_fd]
        try:
            for depth in range(len(segments)):
                chain.append(self._open_segment(key, chain[-1], segments, depth, create))
        except _FileInTheWay:
            _release(chain)
            if locate:
                raise
            raise KeyError(key) from None
        except BaseException:
            if create:  # remove the folders made so far (if still empty)
                self._prune(chain, segments[: len(chain) - 1])
            _release(chain)
            raise
        return chain

    def _open_segment(
        self, key: str, parent: int, segments: list[str], depth: int, create: bool
    ) -> int:
        segment = segments[depth]
        for _ in range(_RETRIES):
            try:
                return os.open(segment, _WALK, dir_fd=parent)
            except FileNotFoundError:
                if not create:
                    raise KeyError(key) from None
                try:
                    os.mkdir(segment, dir_fd=parent)
                except FileExistsError:
                    pass  # a concurrent writer made it (or it is a link): open tells
                continue
            except OSError as error:
                if error.errno == errno.ENAMETOOLONG and not create:
                    raise KeyError(key) from None
                if error.errno not in _NOT_A_FOLDER:
                    raise
            mode = _lstat_mode(segment, parent)
            path = "/".join(segments[: depth + 1])
            if mode is None or stat.S_ISDIR(mode):
                continue  # changed since the open: look again
            if stat.S_ISLNK(mode):
                raise self._unsafe(key, path)
            if create:
                raise self._ancestor_conflict(key, path)
            raise _FileInTheWay(key, path)
        raise OSError(
            errno.EAGAIN,
            f"{self!r}: could not open the folder {'/'.join(segments[: depth + 1])!r} of "
            f"key {key!r}: it kept changing ({_RETRIES} tries)",
        )

    def _prune(self, chain: list[int], segments: list[str]) -> None:
        """Remove the folders of a chain, deepest first, while they are empty.

        ``chain`` holds the descriptors of the root and of ``segments``, so
        each ``rmdir`` names its folder from its parent's descriptor: a folder
        swapped for a link meanwhile is not removed (rmdir refuses links).
        """
        for depth in range(len(segments) - 1, -1, -1):
            try:
                os.rmdir(segments[depth], dir_fd=chain[depth])
            except FileNotFoundError:
                pass  # pruned by a concurrent delete; its parent may be empty too
            except OSError:
                return  # not empty (or not ours to remove): stop

    def _unsafe(self, key: str, link: str) -> UnsafePathError:
        if link == key:
            where = f"key {key!r} is a symbolic link"
        else:
            where = f"key {key!r} lies below {link!r}, a symbolic link"
        return UnsafePathError(
            f"{self!r}: {where}; {type(self).__name__} never follows links below its "
            "root, so that a link planted in the store cannot reach files outside it "
            "(remove the link, or open the folder it points to as a store of its own)"
        )

    def _reraise(self, error: OSError, doing: str, key: str) -> NoReturn:
        """Raise ``error`` again naming the store and key; ``StoreFullError`` for a full disk.

        ``OSError(errno, message)`` builds the subclass of the errno
        (``PermissionError`` for ``EACCES`` ...), so callers catch what they did.
        Errors of zstores' own already name both and go up unchanged.
        """
        if isinstance(error, ZStoresError):
            raise error
        message = f"{self!r}: cannot {doing} key {key!r}: {error.strerror or error}"
        if error.errno in _FULL:
            raise StoreFullError(error.errno, message + " (the file system is full)") from error
        raise OSError(error.errno, message) from error

    def _whole_paths(self, error: OSError, doing: str, *folders: str) -> OSError:
        """``error`` naming the store and the whole path of each file it names.

        The OS names a file relative to the open folder it was reached through
        (``'0'`` for ``a/0``); ``folders`` are those folders' store paths, one
        per name (``filename``, ``filename2``).  Zstores' own errors stay.
        """
        if isinstance(error, ZStoresError):
            return error
        names = (error.filename, error.filename2)[:len(folders)]
        whole = [os.path.join(self._root, folder, name) if isinstance(name, str) else name
                 for folder, name in zip(folders, names, strict=True)]
        whole += [None] * (2 - len(whole))
        return OSError(error.errno, f"{self!r}: cannot {doing}: {error.strerror or error}",
                       whole[0], None, whole[1])

    # ------------------------------------------------------------- conflicts
    def _ancestor_key(self, key: str) -> str | None:
        """The first proper prefix of ``key`` that exists as a file, if any."""
        segments, _ = _split(key)
        try:
            _release(self._folders(key, segments, create=False, locate=True))
        except _FileInTheWay as in_the_way:
            return in_the_way.path
        except KeyError:
            pass
        return None

    def _ancestor_conflict(self, key: str, ancestor: str) -> KeyConflictError:
        return KeyConflictError(
            f"cannot write key {key!r}: {ancestor!r} is a key, and in a "
            f"{type(self).__name__} a key (a file) cannot also be a prefix (a folder)"
        )

    def _keys_below(self, path: str) -> str | None:
        """Some key under folder ``path`` (relative to it), or None."""
        segments, name = _split(path)
        try:
            chain = self._folders(path, segments, create=False)
        except KeyError:
            return None
        try:
            folder = _open_folder_at(chain[-1], name)
            if folder is None:
                return None
            try:
                return _first_key(folder)
            finally:
                os.close(folder)
        finally:
            _release(chain)

    def _prefix_conflict(self, key: str) -> KeyConflictError:
        below = self._keys_below(key)
        example = f"{key}/{below}" if below else f"{key}/..."
        return KeyConflictError(
            f"cannot write key {key!r}: it is a prefix of existing keys such as "
            f"{example!r}, and in a {type(self).__name__} a prefix (a folder) cannot "
            "also be a key (a file)"
        )

    def _replace(self, source: int, name: str, target: int, key: str, key_name: str) -> None:
        """Rename ``name`` of folder ``source`` onto ``key`` (``key_name`` of folder ``target``).

        A link at the key is replaced (rename never follows it); a folder
        holding no key is removed first; a folder with keys is a conflict.
        Raises ``FileNotFoundError`` when the source or the key's folder
        vanished (a concurrent clear or prune): the caller retries.
        """
        for _ in range(_RETRIES):
            try:
                os.rename(name, key_name, src_dir_fd=source, dst_dir_fd=target)
                return
            except FileNotFoundError:
                raise
            except OSError:
                mode = _lstat_mode(key_name, target)
                if mode is None or not stat.S_ISDIR(mode):
                    raise
                # A folder holding no key is not a prefix in the key/value
                # model: remove it (stray temporary files and all) and retry.
                if not _remove_keyless_tree(target, key_name):
                    raise self._prefix_conflict(key) from None
        raise self._prefix_conflict(key)

    # ------------------------------------------------------------ primitives
    def _get(self, key: str) -> bytes:
        fd, size = self._open_value(key)
        try:
            return _read_all(fd, size)
        except OSError as error:
            self._reraise(error, "read", key)
        finally:
            os.close(fd)

    def _open_value(self, key: str) -> tuple[int, int]:
        """An open file descriptor on the value of ``key`` and its size; KeyError if none."""
        try:
            return self._open_value_once(key)
        except KeyError:
            if not self._root_replaced():
                raise
        return self._open_value_once(key)

    def _open_value_once(self, key: str) -> tuple[int, int]:
        segments, name = _split(key)
        if not segments:  # a key at the root: no folder to open
            return self._open_file(key, self._root_fd, name)
        if _openat2 is not None:
            fd = _openat2(self._root_fd, key, False)
            if fd >= 0:
                return self._checked_value(key, fd)
            if fd == -errno.ENOENT:
                raise KeyError(key)
            # A link (ELOOP), a file where a folder should be (ENOTDIR),
            # anything else: the walk finds which, and says so.
        chain = self._folders(key, segments, create=False)
        try:
            return self._open_file(key, chain[-1], name)
        finally:
            _release(chain)

    def _open_file(self, key: str, parent: int, name: str) -> tuple[int, int]:
        try:
            fd = os.open(name, _READ, dir_fd=parent)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise KeyError(key) from None
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise self._unsafe(key, key) from None
            if error.errno == errno.ENAMETOOLONG:
                raise KeyError(key) from None
            self._reraise(error, "open", key)
        return self._checked_value(key, fd)

    def _checked_value(self, key: str, fd: int) -> tuple[int, int]:
        """``fd`` and its size if it is a regular file; else close it and raise KeyError."""
        try:
            info = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if not stat.S_ISREG(info.st_mode):  # a folder (a prefix), a FIFO, a device
            os.close(fd)
            raise KeyError(key)
        return fd, info.st_size

    def _open_reader(self, key: str) -> ValueReader:
        # Writes replace a file by rename, so the open descriptor keeps the
        # version it found readable whole, however many writes follow.
        fd, _ = self._open_value(key)
        try:
            return _DescriptorReader(self, key, fd)
        except BaseException:
            os.close(fd)
            raise

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        fd, size = self._open_value(key)
        try:
            first = max(size + start, 0) if start < 0 else min(start, size)
            stop = size if length is None else min(first + length, size)
            if stop <= first:
                return b""
            return _pread_all(fd, stop - first, first)
        except OSError as error:
            self._reraise(error, "read", key)
        finally:
            os.close(fd)

    def _set(self, key: str, value: Buffer) -> None:
        segments, name = _split(key)
        for _ in range(_RETRIES):
            try:
                chain = self._folders(key, segments, create=True)
            except FileNotFoundError:
                self._root_replaced(create=True)
                continue  # a folder on the way was pruned, or the root is gone
            except OSError as error:
                self._reraise(error, "write", key)
            try:
                if self._write_in(chain, segments, key, name, value):
                    return
            finally:
                _release(chain)
            self._root_replaced(create=True)
        raise OSError(
            errno.EAGAIN,
            f"{self!r}: could not write key {key!r}: its folder was removed {_RETRIES} "
            "times while writing (a concurrent rmdir or clear?)",
        )

    def _write_in(
        self, chain: list[int], segments: list[str], key: str, name: str, value: Buffer
    ) -> bool:
        """Write ``value`` as ``name`` in the last folder of ``chain``.

        Returns False when that folder or the temporary file vanished (a
        concurrent prune or clear): the caller writes again.  On any failure
        the temporary file is removed and so are the folders this write
        created, if empty.
        """
        def replace(folder: int, temp: str) -> bool:
            self._replace(folder, temp, folder, key, name)
            return True

        return self._through_temp(chain, segments, key, value, replace) is not None

    def _through_temp(self, chain: list[int], segments: list[str], key: str, value: Buffer,
                      place: Callable[[int, str], bool]) -> bool | None:
        """Write ``value`` to a temporary file in the last folder of ``chain``, then
        ``place(folder, temp)``: whether it took the key's name (the folder is then
        synced if asked).  None when the folder or the temporary file vanished;
        on any failure the temporary file is removed and so are the folders
        this write created, if empty."""
        folder = chain[-1]
        temp = TEMP_PREFIX + os.urandom(16).hex()
        try:
            # 0o666 minus the umask, like a plain open(): not mkstemp's 0o600.
            fd = os.open(temp, _CREATE, 0o666, dir_fd=folder)
        except FileNotFoundError:
            return None
        except OSError as error:
            self._prune(chain, segments)
            self._reraise(error, "write", key)
        try:
            try:
                _write_all(fd, value)
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            placed = place(folder, temp)
            if placed and self._fsync:
                _fsync_folder(folder)
        except FileNotFoundError:
            _unlink_quietly(temp, folder)
            return None
        except BaseException as error:
            _unlink_quietly(temp, folder)
            self._prune(chain, segments)
            if isinstance(error, OSError):
                self._reraise(error, "write", key)
            raise
        return placed

    # ---------------------------------------------------- conditional writes
    # set_if_not_exists writes a temporary file as _set does, then gives it the
    # key's name with link() (renameat2(RENAME_NOREPLACE) where the file
    # system has no hard links), which fails when the name exists: the kernel
    # decides, against writers in every process, and readers only ever see a
    # whole file.  All calls are relative to the folder's descriptor, and
    # neither follows a link.
    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        segments, name = _split(key)
        for _ in range(_RETRIES):
            try:
                chain = self._folders(key, segments, create=True)
            except FileNotFoundError:
                self._root_replaced(create=True)
                continue  # a folder on the way was pruned, or the root is gone
            except OSError as error:
                self._reraise(error, "write", key)
            try:
                created = self._create_in(chain, segments, key, name, value)
            finally:
                _release(chain)
            if created is not None:
                return created
            self._root_replaced(create=True)
        raise OSError(
            errno.EAGAIN,
            f"{self!r}: could not create key {key!r}: its folder was removed {_RETRIES} "
            "times while writing (a concurrent rmdir or clear?)",
        )

    def _create_in(
        self, chain: list[int], segments: list[str], key: str, name: str, value: Buffer
    ) -> bool | None:
        """Write ``value`` as a temporary file in the last folder of ``chain``, then
        link it to ``name`` unless that exists.  True: created; False: the key
        exists; None: the folder or the temporary file vanished (write again)."""
        def link(folder: int, temp: str) -> bool:
            created = self._link_if_absent(folder, temp, key, name)
            _unlink_quietly(temp, folder)  # linked (a second name) or not wanted
            return created

        return self._through_temp(chain, segments, key, value, link)

    def _link_if_absent(self, folder: int, temp: str, key: str, name: str) -> bool:
        """Give ``temp`` the name ``name`` unless it exists; whether it did.

        A folder holding no key in the way is removed (as ``_replace`` does);
        one with keys is a conflict, a link at the key is refused as reads
        refuse it.
        """
        for _ in range(_RETRIES):
            try:
                _link_no_replace(temp, name, folder)
                return True
            except FileExistsError:
                mode = _lstat_mode(name, folder)
                if mode is None:
                    continue  # deleted since: try again
                if stat.S_ISLNK(mode):
                    raise self._unsafe(key, key) from None
                if not stat.S_ISDIR(mode):
                    return False
                if not _remove_keyless_tree(folder, name):
                    raise self._prefix_conflict(key) from None
        raise self._prefix_conflict(key)

    def _delete(self, key: str) -> None:
        try:
            self._delete_once(key)
        except KeyError:
            if not self._root_replaced():
                raise
            self._delete_once(key)

    def _delete_once(self, key: str) -> None:
        segments, name = _split(key)
        chain = self._folders(key, segments, create=False)
        try:
            try:
                os.unlink(name, dir_fd=chain[-1])  # a link is removed itself
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                raise KeyError(key) from None
            except OSError as error:
                mode = _lstat_mode(name, chain[-1])
                if mode is not None and stat.S_ISDIR(mode):  # a prefix, not a key
                    raise KeyError(key) from None
                self._reraise(error, "delete", key)
            self._prune(chain, segments)
        finally:
            _release(chain)

    def _stat_key(self, key: str) -> os.stat_result | None:
        """The ``lstat`` of ``key``'s file; None if missing or not a regular file."""
        segments, name = _split(key)
        if _openat2 is not None and segments:  # one call instead of a walk
            fd = _openat2(self._root_fd, key, True)
            if fd == -errno.ENOENT:
                return None
            if fd >= 0:
                try:
                    info = os.fstat(fd)
                finally:
                    os.close(fd)
                if stat.S_ISLNK(info.st_mode):  # O_PATH | O_NOFOLLOW opens a last link
                    raise self._unsafe(key, key)
                return info if stat.S_ISREG(info.st_mode) else None
            # A link, a file on the way ...: the walk below finds which.
        try:
            chain = self._folders(key, segments, create=False)
        except KeyError:
            return None
        try:
            info = os.stat(name, dir_fd=chain[-1], follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as error:
            if error.errno == errno.ENAMETOOLONG:
                return None
            self._reraise(error, "look up", key)
        finally:
            _release(chain)
        if stat.S_ISLNK(info.st_mode):
            raise self._unsafe(key, key)
        return info if stat.S_ISREG(info.st_mode) else None

    def _contains(self, key: str) -> bool:
        if self._stat_key(key) is not None:
            return True
        return self._root_replaced() and self._stat_key(key) is not None

    def _stat(self, key: str) -> int | None:
        info = self._stat_key(key)
        if info is None and self._root_replaced():
            info = self._stat_key(key)
        return None if info is None else info.st_size

    def _getsize_key(self, key: str) -> int:
        size = self._stat(key)
        if size is None:
            raise KeyError(key)
        return size

    # -------------------------------------------------------------- listings
    def _open_prefix(self, prefix: str) -> int | None:
        """A new descriptor (for scandir) on the folder of ``prefix``; None if absent.

        Raises ``UnsafePathError`` if the prefix, or a folder above it, is a link.
        """
        if not prefix:
            self._root_replaced()
            return os.open(".", _LIST, dir_fd=self._root_fd)
        path = prefix[:-1]
        segments, name = _split(path)
        try:
            chain = self._folders(path, segments, create=False)
        except KeyError:
            return None
        try:
            folder = _open_folder_at(chain[-1], name)
            if folder is None:
                mode = _lstat_mode(name, chain[-1])
                if mode is not None and stat.S_ISLNK(mode):
                    raise self._unsafe(path, path)
            return folder
        finally:
            _release(chain)

    def _walk(self, prefix: str, *, sizes: bool = False) -> list[tuple[str, int]]:
        """Every key under ``prefix`` (as stored) with its size (0 unless ``sizes``)."""
        folder = self._open_prefix(prefix)
        if folder is None:
            return []
        found: list[tuple[str, int]] = []
        skipped: list[str] = []
        try:
            _walk_folder(folder, prefix, found, skipped, sizes)
        finally:
            os.close(folder)
        self._warn_skipped(skipped)
        return found

    def _warn_skipped(self, skipped: list[str]) -> None:
        if skipped:
            shown = ", ".join(repr(os.fsencode(name)) for name in skipped[:3])
            more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
            warnings.warn(
                f"{self!r}: skipped {len(skipped)} folder entries whose names are not "
                f"valid UTF-8, so cannot be keys: {shown}{more}",
                UserWarning,
                stacklevel=4,
            )

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        return [key for key, _ in self._walk(self._fold(prefix))]

    def _len(self) -> int:
        return len(self._walk(""))

    def _listdir(self, prefix: str) -> Iterable[str]:
        folder = self._open_prefix(self._fold(prefix))
        if folder is None:
            return []
        try:
            names, skipped = _listing(folder, prefix)
        finally:
            os.close(folder)
        self._warn_skipped(skipped)
        # Sub-folders are listed without looking inside: this store's deletes,
        # moves and failed writes remove the folders they empty, so a folder
        # holds a key (see the module's rules for what else may leave one).
        # Looking into each would cost an open and a scandir per sub-folder,
        # where zarr-python 2 and 3 list a folder with one os.listdir.
        return names

    def _getsize_prefix(self, prefix: str) -> int:
        return sum(size for _, size in self._walk(self._fold(prefix), sizes=True))

    # ------------------------------------------------------------- removals
    def _rmdir(self, prefix: str) -> None:
        if not prefix:
            self._clear()
            return
        path = self._fold(prefix)[:-1]
        segments, name = _split(path)
        try:
            chain = self._folders(path, segments, create=False)
        except KeyError:
            return
        try:
            _remove_tree(chain[-1], name)
            self._prune(chain, segments)
        except OSError as error:
            raise self._whole_paths(error, f"remove {prefix[:-1]!r}",
                                    path.rpartition("/")[0]) from error
        finally:
            _release(chain)

    def _remove_empty_folder(self, prefix: str) -> bool:
        path = self._fold(prefix)[:-1]
        segments, name = _split(path)
        try:
            chain = self._folders(path, segments, create=False)
        except KeyError:
            return True  # no folder on the way
        try:
            mode = _lstat_mode(name, chain[-1])
            if mode is None or stat.S_ISREG(mode):
                return True  # no folder there (a key is no folder)
            # Temporary files of writers inside are removed with it: their
            # rename then fails and they write again (see the function).  A
            # link in its place counts as content.
            return _remove_keyless_tree(chain[-1], name)
        finally:
            _release(chain)

    def _clear(self) -> None:
        self._root_replaced()
        root = os.open(".", _LIST, dir_fd=self._root_fd)  # a descriptor of our own to list
        try:
            _empty_folder(root)
        except OSError as error:
            raise self._whole_paths(error, "clear the store", "") from error
        finally:
            os.close(root)

    # --------------------------------------------------------------- renames
    def _rename_key(self, src: str, dst: str) -> None:
        src_segments, src_name = _split(src)
        dst_segments, dst_name = _split(dst)
        for _ in range(_RETRIES):
            source = self._folders(src, src_segments, create=False)
            try:
                if self._stat_key(src) is None:
                    raise KeyError(src)
                try:
                    target = self._folders(dst, dst_segments, create=True)
                except FileNotFoundError:
                    continue  # a folder on the way was pruned meanwhile
                try:
                    self._replace(source[-1], src_name, target[-1], dst, dst_name)
                except FileNotFoundError:
                    continue  # src moved away, or dst's folder was pruned: look again
                except BaseException as error:
                    self._prune(target, dst_segments)
                    if isinstance(error, OSError):
                        raise self._whole_paths(error, f"rename {src!r} to {dst!r}",
                                                src.rpartition("/")[0],
                                                dst.rpartition("/")[0]) from error
                    raise
                finally:
                    _release(target)
                self._prune(source, src_segments)
                return
            finally:
                _release(source)
        raise KeyError(src)

    def _rename_prefix(self, src_prefix: str, dst_prefix: str) -> None:
        src, dst = src_prefix[:-1], dst_prefix[:-1]
        if self._contains(dst):
            raise KeyConflictError(
                f"cannot move {src!r} to {dst!r}: {dst!r} is a key, and in a "
                f"{type(self).__name__} a key (a file) cannot also be a prefix (a folder)"
            )
        if self._move_folder(src, dst):
            return
        moves = [(key, dst + key[len(src):]) for key, _ in self._walk(src + "/")]
        for _, new in moves:  # refuse before moving anything
            ancestor = self._ancestor_key(new)
            if ancestor is not None:
                raise self._ancestor_conflict(new, ancestor)
            if self._keys_below(new) is not None:
                raise self._prefix_conflict(new)
        for old, new in moves:
            self._rename_key(old, new)

    def _move_folder(self, src: str, dst: str) -> bool:
        """Rename folder ``src`` to ``dst`` in one step if ``dst`` holds no key.

        A link at ``dst`` is removed (the link itself) first.  Returns False
        when ``dst`` holds keys (the caller merges key by key) or ``src`` is
        no longer a folder.
        """
        src_segments, src_name = _split(src)
        dst_segments, dst_name = _split(dst)
        for _ in range(_RETRIES):
            try:
                source = self._folders(src, src_segments, create=False)
            except KeyError:
                return False
            try:
                mode = _lstat_mode(src_name, source[-1])
                if mode is not None and stat.S_ISLNK(mode):
                    raise self._unsafe(src, src)
                if mode is None or not stat.S_ISDIR(mode):
                    return False
                try:
                    target = self._folders(dst + "/...", dst_segments, create=True)
                except FileNotFoundError:
                    continue
                try:
                    moved = self._move_into(source[-1], src_name, target, dst_segments, dst_name)
                except OSError as error:
                    raise self._whole_paths(error, f"rename {src!r} to {dst!r}",
                                            src.rpartition("/")[0],
                                            dst.rpartition("/")[0]) from error
                finally:
                    _release(target)
                if moved is None:
                    continue
                if moved:
                    self._prune(source, src_segments)
                return moved
            finally:
                _release(source)
        return False

    def _move_into(
        self, source: int, name: str, target: list[int], segments: list[str], dst_name: str
    ) -> bool | None:
        """One try of ``_move_folder``: True moved, False merge instead, None try again."""
        folder = target[-1]
        mode = _lstat_mode(dst_name, folder)
        if mode is not None:
            if stat.S_ISLNK(mode):
                _unlink_quietly(dst_name, folder)
            elif not _remove_keyless_tree(folder, dst_name):
                return False
        try:
            os.rename(name, dst_name, src_dir_fd=source, dst_dir_fd=folder)
        except FileNotFoundError:
            moved_away = _lstat_mode(name, source) is None
            return False if moved_away else None
        except OSError as error:
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return None  # a writer created the destination meanwhile
            self._prune(target, segments)
            raise
        return True

    # ------------------------------------------------------------- identity
    def _location(self) -> Any:
        return self._real_root

    def _describe(self) -> str:
        return self._root

    def _params(self) -> dict[str, Any]:
        return {"path": self._root, "normalize_keys": self._normalize_keys, "fsync": self._fsync}
