"""DirectoryStore and NestedDirectoryStore: one file per key under a folder.

The layout is zarr-python 2's: key ``a/b/c`` is the file ``<root>/a/b/c``, so
either library reads the other's folders.  Three rules keep the folder a
faithful key/value mapping:

* Writes are atomic.  A value is written to a temporary file in the key's own
  folder and moved into place with ``os.replace``; a reader sees the old or the
  new value, and a crash leaves at worst a temporary file.  Temporary files are
  named ``.zstores-tmp.<32 hex digits>`` (a fixed length, so a long key never
  makes its temporary name overflow ``NAME_MAX``); that name is reserved, and
  every listing skips it.
* A key is a file and a prefix is a folder, so no key is also a prefix
  (``hierarchical = True``): the conflict is refused, never resolved by
  deleting data as zarr-python 2 did.
* A folder exists only while it holds a key.  Deleting, moving or removing the
  last key of a folder removes the emptied folders up to the root; listings
  treat a folder holding no key (left by another tool, or by a crash) as absent.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from ..base import Buffer, Mode, Store
from ..errors import InvalidKeyError, KeyConflictError, StoreExistsError, StoreNotFoundError
from ..keys import is_chunk_key_segment

__all__ = ["NAME_MAX", "TEMP_PREFIX", "DirectoryStore", "NestedDirectoryStore"]

#: The longest file name, in bytes of UTF-8, that common file systems accept.
NAME_MAX = 255
#: Temporary files are ``TEMP_PREFIX`` followed by 32 lowercase hex digits.
TEMP_PREFIX = ".zstores-tmp."
_TEMP_NAME = re.compile(r"\.zstores-tmp\.[0-9a-f]{32}")

# A concurrent prune can remove a folder between our creating it and writing
# into it; each retry makes progress unless another thread keeps emptying it.
_RETRIES = 100
_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation
_LONGEST_SAFE_SEGMENT = NAME_MAX // 4  # a UTF-8 character takes at most 4 bytes


def _is_temp(name: str) -> bool:
    return name.startswith(TEMP_PREFIX) and _TEMP_NAME.fullmatch(name) is not None


def _scandir(folder: str) -> Iterator[os.DirEntry[str]]:
    """The entries of ``folder``, lazily; none if it is missing or not a folder."""
    try:
        entries = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return
        raise
    with entries:
        yield from entries


def _is_folder(entry: os.DirEntry[str]) -> bool:
    # Symbolic links to folders are not followed, as zarr-python 2's os.walk
    # does not: a link cycle cannot make a listing endless.
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _is_key_file(entry: os.DirEntry[str]) -> bool:
    if _is_temp(entry.name):
        return False
    try:
        return entry.is_file()
    except OSError:
        return False


def _first_key(folder: str) -> str | None:
    """The path (below ``folder``, ``/``-separated) of some key file under it.

    Looks at a folder's files before its sub-folders and stops at the first
    key, so a folder of chunks costs one ``scandir``.
    """
    pending = [(folder, "")]
    while pending:
        current, relative = pending.pop()
        subfolders = []
        for entry in _scandir(current):
            if _is_folder(entry):
                subfolders.append((entry.path, relative + entry.name + "/"))
            elif _is_key_file(entry):
                return relative + entry.name
        pending.extend(subfolders)
    return None


def _has_keys(folder: str) -> bool:
    return _first_key(folder) is not None


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _remove_keyless_tree(folder: str) -> bool:
    """Remove ``folder`` if it holds no key (only temporary files and folders).

    Returns True when the folder is gone.  A concurrent writer whose temporary
    file is removed sees its rename fail and writes again, so this never loses
    a value; ``os.rmdir`` refuses if a key appeared meanwhile.
    """
    for entry in list(_scandir(folder)):
        if _is_folder(entry):
            if not _remove_keyless_tree(entry.path):
                return False
        elif _is_temp(entry.name):
            _unlink_quietly(entry.path)
        else:
            return False
    try:
        os.rmdir(folder)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def _remove_tree(folder: str) -> None:
    """Remove ``folder`` and everything in it, tolerating concurrent changes."""
    for attempt in range(_RETRIES):
        try:
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                return
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            shutil.rmtree(folder)
            return
        except FileNotFoundError:
            continue  # something inside vanished mid-walk: look again
        except OSError as error:
            # A writer added a file after rmtree had emptied that folder.
            if error.errno != errno.ENOTEMPTY or attempt == _RETRIES - 1:
                raise


def _read_all(fd: int, size: int) -> bytes:
    data = os.read(fd, size)
    if len(data) == size:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        part = os.read(fd, size - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _pread(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # Windows; the descriptor is never shared
    return os.read(fd, size)


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    data = _pread(fd, size, offset)
    if len(data) == size:
        return data
    parts = [data]
    got = len(data)
    while got < size:  # one pread returns at most ~2 GiB on Linux
        part = _pread(fd, size - got, offset + got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _write_all(fd: int, value: Buffer) -> None:
    view = memoryview(value)
    written = 0
    while written < len(view):
        written += os.write(fd, view[written:])


class DirectoryStore(Store):
    """Keys as files in a folder tree: key ``a/b/c`` is the file ``<path>/a/b/c``.

    The on-disk layout is zarr-python 2.18's ``DirectoryStore``, so each
    reads the other's folders.  Differences: a key that is also a prefix is
    refused (``KeyConflictError``) instead of deleting the folder in the way;
    deleting a key prunes the folders it leaves empty; temporary files use a
    reserved name and never show up as keys.

    Writes go to a temporary file in the key's folder, then ``os.replace``
    moves it over the key, so readers (threads or processes) see either the
    old or the new value and a crash leaves no partial value.  By default the
    file is not fsync-ed, as zarr-python 2 did not: after a power loss a value
    written just before may be lost (old value or empty), but never mixed.
    ``fsync=True`` makes each write durable at a large cost per key.

    Parameters
    ----------
    path : str or os.PathLike
        The root folder.  Stored as an absolute path; it is also what a pickled
        store reopens.
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

    Notes
    -----
    Capability flags: ``supports_range_reads`` (``os.pread``),
    ``supports_process_writers`` (atomic renames; the last write wins),
    ``persistent``, ``hierarchical`` (a key cannot also be a prefix).

    Key rules on top of the common ones: a path segment may be at most
    ``NAME_MAX`` (255) bytes of UTF-8, and may not be a temporary-file name
    (``.zstores-tmp.`` + 32 hex digits).  Symbolic links to files read as keys;
    links to folders are not followed by listings.

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

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        normalize_keys: bool = False,
        fsync: bool = False,
        mode: Mode = "a",
    ) -> None:
        super().__init__(mode=mode)
        self._root = os.path.abspath(os.fsdecode(path))
        self._normalize_keys = bool(normalize_keys)
        self._fsync = bool(fsync)
        self._open_root()
        self._real_root = os.path.realpath(self._root)
        self._clear_if_mode_w()

    @property
    def path(self) -> str:
        """The absolute path of the root folder."""
        return self._root

    def _open_root(self) -> None:
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
            return
        self._check_existence(exists and _has_keys(self._root))
        try:
            os.makedirs(self._root, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise StoreExistsError(
                f"cannot create the folder {self._root!r}: a file is in the way"
            ) from None

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

    def _file(self, key: str) -> str:
        return os.path.join(self._root, key)

    def _folder(self, prefix: str) -> str:
        return os.path.join(self._root, prefix[:-1]) if prefix else self._root

    # ------------------------------------------------------------- conflicts
    def _ancestor_key(self, key: str) -> str | None:
        """The first proper prefix of ``key`` that exists as a file, if any."""
        segments = key.split("/")
        for depth in range(1, len(segments)):
            ancestor = "/".join(segments[:depth])
            try:
                mode = os.stat(self._file(ancestor)).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return None
            if not stat.S_ISDIR(mode):
                return ancestor
        return None

    def _ancestor_conflict(self, key: str, ancestor: str) -> KeyConflictError:
        return KeyConflictError(
            f"cannot write key {key!r}: {ancestor!r} is a key, and in a "
            f"{type(self).__name__} a key (a file) cannot also be a prefix (a folder)"
        )

    def _prefix_conflict(self, key: str) -> KeyConflictError:
        below = _first_key(self._file(key))
        example = f"{key}/{below}" if below else f"{key}/..."
        return KeyConflictError(
            f"cannot write key {key!r}: it is a prefix of existing keys such as "
            f"{example!r}, and in a {type(self).__name__} a prefix (a folder) cannot "
            "also be a key (a file)"
        )

    def _make_folder(self, key: str, folder: str) -> None:
        """Create ``folder`` (the folder of ``key``) and its parents.

        Returns quietly if a concurrent prune removed part of it meanwhile:
        callers retry.
        """
        try:
            os.makedirs(folder, exist_ok=True)
        except FileNotFoundError:
            return
        except (FileExistsError, NotADirectoryError):
            ancestor = self._ancestor_key(key)
            if ancestor is not None:
                raise self._ancestor_conflict(key, ancestor) from None

    def _replace(self, source: str, key: str) -> None:
        """``os.replace`` a file onto ``key``; a folder in the way is a conflict.

        Raises ``FileNotFoundError`` when the source or the key's folder
        vanished (a concurrent clear or prune): the caller retries.
        """
        target = self._file(key)
        for _ in range(_RETRIES):
            try:
                os.replace(source, target)
                return
            except FileNotFoundError:
                raise
            except OSError:
                if not os.path.isdir(target):
                    raise
                # A folder holding no key is not a prefix in the key/value
                # model: remove it (stray temporary files and all) and retry.
                if not _remove_keyless_tree(target):
                    raise self._prefix_conflict(key) from None
        raise self._prefix_conflict(key)

    def _prune(self, folder: str) -> None:
        """Remove ``folder`` and its parents while they are empty, up to the root."""
        while len(folder) > len(self._root):
            try:
                os.rmdir(folder)
            except FileNotFoundError:
                pass  # pruned by a concurrent delete; its parent may be empty too
            except OSError:
                return  # not empty (or not ours to remove): stop
            folder = os.path.dirname(folder)

    # ------------------------------------------------------------ primitives
    def _get(self, key: str) -> bytes:
        fd = self._open_value(key)
        try:
            return _read_all(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)

    def _open_value(self, key: str) -> int:
        """An open file descriptor on the value of ``key``; KeyError if none."""
        try:
            fd = os.open(self._file(key), os.O_RDONLY | _O_BINARY)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise KeyError(key) from None
        except PermissionError:
            if os.path.isdir(self._file(key)):  # Windows opens no folder
                raise KeyError(key) from None
            raise
        try:
            is_folder = stat.S_ISDIR(os.fstat(fd).st_mode)
        except BaseException:
            os.close(fd)
            raise
        if is_folder:
            os.close(fd)
            raise KeyError(key)
        return fd

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        fd = self._open_value(key)
        try:
            size = os.fstat(fd).st_size
            first = max(size + start, 0) if start < 0 else min(start, size)
            stop = size if length is None else min(first + length, size)
            if stop <= first:
                return b""
            return _pread_all(fd, stop - first, first)
        finally:
            os.close(fd)

    def _set(self, key: str, value: Buffer) -> None:
        target = self._file(key)
        folder = os.path.dirname(target)
        for _ in range(_RETRIES):
            temp = self._write_temp(key, folder, value)
            try:
                self._replace(temp, key)
            except FileNotFoundError:
                continue  # the folder was pruned or cleared under us: write again
            except BaseException:
                _unlink_quietly(temp)
                self._prune(folder)
                raise
            if self._fsync:
                _fsync_folder(folder)
            return
        raise OSError(
            errno.EAGAIN,
            f"could not write key {key!r}: its folder was removed {_RETRIES} times "
            "while writing (a concurrent rmdir or clear?)",
        )

    def _write_temp(self, key: str, folder: str, value: Buffer) -> str:
        """Write ``value`` to a new temporary file in ``folder``; return its path."""
        for _ in range(_RETRIES):
            temp = os.path.join(folder, TEMP_PREFIX + uuid.uuid4().hex)
            try:
                # 0o666 minus the umask, like a plain open(): not mkstemp's 0o600.
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY, 0o666)
            except FileNotFoundError:
                self._make_folder(key, folder)
                continue
            except NotADirectoryError:
                ancestor = self._ancestor_key(key)
                if ancestor is not None:
                    raise self._ancestor_conflict(key, ancestor) from None
                continue
            try:
                _write_all(fd, value)
                if self._fsync:
                    os.fsync(fd)
            except BaseException:
                os.close(fd)
                _unlink_quietly(temp)
                self._prune(folder)
                raise
            os.close(fd)
            return temp
        raise OSError(
            errno.EAGAIN,
            f"could not create the folder of key {key!r}: it was removed {_RETRIES} "
            "times while writing (a concurrent rmdir or clear?)",
        )

    def _delete(self, key: str) -> None:
        target = self._file(key)
        try:
            os.unlink(target)
        except (FileNotFoundError, NotADirectoryError):
            raise KeyError(key) from None
        except OSError:
            if os.path.isdir(target):  # a prefix, not a key
                raise KeyError(key) from None
            raise
        self._prune(os.path.dirname(target))

    def _contains(self, key: str) -> bool:
        try:
            return stat.S_ISREG(os.stat(self._file(key)).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def _walk(self, prefix: str) -> list[tuple[str, os.DirEntry[str]]]:
        """Every key under ``prefix`` (as stored) with its directory entry."""
        found = []
        pending = [(self._folder(prefix), prefix)]
        while pending:
            folder, relative = pending.pop()
            for entry in _scandir(folder):
                if _is_folder(entry):
                    pending.append((entry.path, relative + entry.name + "/"))
                elif _is_key_file(entry):
                    found.append((relative + entry.name, entry))
        return found

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        return [key for key, _ in self._walk(self._fold(prefix))]

    def _len(self) -> int:
        return len(self._walk(""))

    def _listdir(self, prefix: str) -> Iterable[str]:
        names = []
        for entry in _scandir(self._folder(self._fold(prefix))):
            if _is_folder(entry):
                # A folder without keys (a crash's leftovers, another tool's
                # empty folder) is not a prefix in the key/value model.
                if _has_keys(entry.path):
                    names.append(entry.name)
            elif _is_key_file(entry):
                names.append(entry.name)
        return names

    def _getsize_key(self, key: str) -> int:
        try:
            info = os.stat(self._file(key))
        except (FileNotFoundError, NotADirectoryError):
            raise KeyError(key) from None
        if not stat.S_ISREG(info.st_mode):
            raise KeyError(key)
        return info.st_size

    def _getsize_prefix(self, prefix: str) -> int:
        total = 0
        for _, entry in self._walk(self._fold(prefix)):
            try:
                total += entry.stat().st_size
            except FileNotFoundError:
                pass  # deleted since the walk saw it
        return total

    def _rmdir(self, prefix: str) -> None:
        if not prefix:
            self._clear()
            return
        folder = self._folder(self._fold(prefix))
        _remove_tree(folder)
        self._prune(os.path.dirname(folder))

    def _clear(self) -> None:
        for entry in list(_scandir(self._root)):
            if _is_folder(entry):
                _remove_tree(entry.path)
            else:
                _unlink_quietly(entry.path)

    def _rename_key(self, src: str, dst: str) -> None:
        source = self._file(src)
        folder = os.path.dirname(self._file(dst))
        for _ in range(_RETRIES):
            if not self._contains(src):
                raise KeyError(src)
            self._make_folder(dst, folder)
            try:
                self._replace(source, dst)
            except FileNotFoundError:
                continue  # src moved away, or dst's folder was pruned: look again
            except BaseException:
                self._prune(folder)
                raise
            self._prune(os.path.dirname(source))
            return
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
            if os.path.isdir(self._file(new)) and _has_keys(self._file(new)):
                raise self._prefix_conflict(new)
        for old, new in moves:
            self._rename_key(old, new)

    def _move_folder(self, src: str, dst: str) -> bool:
        """Rename folder ``src`` to ``dst`` in one step if ``dst`` holds no key.

        Returns False when ``dst`` holds keys (the caller merges key by key).
        """
        source, target = self._file(src), self._file(dst)
        for _ in range(_RETRIES):
            if os.path.lexists(target) and not _remove_keyless_tree(target):
                return False
            self._make_folder(dst + "/...", os.path.dirname(target))
            try:
                os.rename(source, target)
            except FileNotFoundError:
                if not os.path.isdir(source):
                    return False  # moved or removed meanwhile: nothing left to move
                continue  # the destination's parent was pruned meanwhile
            except OSError as error:
                if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    continue  # a writer created the destination meanwhile
                self._prune(os.path.dirname(target))
                raise
            self._prune(os.path.dirname(source))
            return True
        return False

    # ------------------------------------------------------------- identity
    def _location(self) -> Any:
        return self._real_root

    def _describe(self) -> str:
        return self._root

    def _params(self) -> dict[str, Any]:
        return {"path": self._root, "normalize_keys": self._normalize_keys, "fsync": self._fsync}


class NestedDirectoryStore(DirectoryStore):
    """A DirectoryStore that writes chunk ``foo/0.1.2`` as the file ``foo/0/1/2``.

    A key whose last segment is a dotted chunk index of two or more dimensions
    (``0.1``, ``3.0.12``) has its dots turned into folder separators, with the
    rule of older zarr-python 2 ``NestedDirectoryStore`` releases (2.18 instead
    records ``dimension_separator: "/"`` in ``.zarray`` and receives ``0/1``;
    the files are the same).  One-dimensional chunk keys (``3``)
    and all other keys are unchanged.  Every operation (get, set, delete,
    contains, ranges, sizes, rename) maps the key, so ``foo/0.1`` and
    ``foo/0/1`` name the same value; listings show the on-disk form
    (``foo/0/1``), as zarr-python 2 does.

    This reads arrays written by zarr-python 2's ``NestedDirectoryStore``
    whether or not their ``.zarray`` records ``dimension_separator``, and
    arrays with ``dimension_separator: "/"`` are also readable by
    zarr-python 3's ``LocalStore``.  An array whose ``.zarray`` says
    ``dimension_separator: "."`` cannot keep dotted chunk files here.

    Parameters and capability flags are those of :class:`DirectoryStore`.

    Examples
    --------
    >>> import os, tempfile
    >>> from zstores.stores.directory import NestedDirectoryStore
    >>> root = tempfile.mkdtemp()
    >>> store = NestedDirectoryStore(root)
    >>> store["arr/1.2"] = b"chunk"
    >>> list(store), store["arr/1/2"] == store["arr/1.2"]
    (['arr/1/2'], True)
    >>> os.path.isfile(os.path.join(root, "arr", "1", "2"))
    True
    """

    def _key(self, key: str) -> str:
        key = super()._key(key)
        folder, _, last = key.rpartition("/")
        if is_chunk_key_segment(last):
            nested = last.replace(".", "/")
            return f"{folder}/{nested}" if folder else nested
        return key


def _check_segment(key: str, segment: str) -> None:
    try:
        size = len(os.fsencode(segment))
    except UnicodeEncodeError:
        raise InvalidKeyError(
            f"invalid key {key!r}: segment {segment!r} cannot be encoded as a file name"
        ) from None
    if size > NAME_MAX:
        raise InvalidKeyError(
            f"invalid key {key!r}: a path segment may be at most {NAME_MAX} bytes of "
            f"UTF-8 (the file name limit), and segment {segment[:16] + '...'!r} is {size}"
        )
    if _is_temp(segment):
        raise InvalidKeyError(
            f"invalid key {key!r}: segment {segment!r} has the form of a temporary "
            f"file name ({TEMP_PREFIX!r} + 32 hex digits), which is reserved"
        )


def _fsync_folder(folder: str) -> None:
    if os.name != "posix":
        return  # folders cannot be opened for fsync on Windows
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
