"""The FUSE operations over any Store: paths <-> keys, handles, errno.

The file ``/a/b/c`` is the key ``a/b/c``; every prefix of a key (``a``,
``a/b``) is a directory with no key of its own.  If a key is also a prefix
(``a`` and ``a/b`` both keys, which non-hierarchical stores allow), the key
wins: ``a`` shows as a file and the keys below it are not reachable through
the mount.

Metadata is cached for ``attr_timeout`` seconds, the time the kernel caches
it too: positive entries (what a listing learnt about each child, so the
``stat`` of ``ls -l``, ``du`` or ``cp -r`` that follows costs no store round
trip) and negative ones (zarr readers probe ``.zarray``, ``.zattrs``,
``zarr.json`` again and again).  Every change made through the mount updates the cache at once;
changes made to the store by others show after at most ``attr_timeout``.

Names follow a local disk's rules: one that is not UTF-8 is refused with
EILSEQ, one longer than 255 bytes with ENAMETOOLONG, wherever a name is made
(create, mknod, mkdir, link, the target of rename).  Keys that other writers
stored with such names stay reachable through the library only: a listing
leaves them out and a lookup does not find them, so ``ls`` never shows a
name that ``open`` then refuses.

Store errors reach the mount's users as the errno a local disk would give
(``errno_for``): a full disk is ENOSPC at ``close`` (where the value is
committed), a symbolic link a folder store refuses to follow is EACCES.

Inode numbers (``use_ino``) come from the key's name while the mount has not
changed the key, and are allocated afresh when the mount creates it; a
replaced value always gets a new modification time (nanoseconds, strictly
increasing), so writers that detect change by (device, inode, mtime), as
tensorstore does, see every change made through the mount.
"""

from __future__ import annotations

import errno
import functools
import itertools
import logging
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import mfusepy
from mfusepy import FuseOSError

from zstores import Store
from zstores.errors import (
    InvalidKeyError,
    ReadOnlyError,
    StoreClosedError,
    StoreConnectionError,
    StoreIOError,
    StoreLockedError,
    UnsupportedOperationError,
    ValueTooLargeError,
)

from .handles import Handle, OpenFile

__all__ = ["BLOCK_SIZE", "Attrs", "ReadOnlyOperations", "StoreOperations", "errno_for",
           "name_error", "operations_for"]

log = logging.getLogger("zfuse")

#: The I/O size the mount advertises (``st_blksize``) and its statfs block.
BLOCK_SIZE = 128 << 10

# The longest name (bytes of UTF-8) the mount creates, looks up or lists, as
# on local file systems (statfs reports it as f_namemax).  The kernel itself
# passes FUSE names up to 1024 bytes, but tools size their buffers by
# NAME_MAX: a longer name is refused with ENAMETOOLONG when created and is
# not shown, so what the mount lists is exactly what it can open.
_NAME_MAX = 255

# Inode numbers: 1 is the root, small numbers are allocated to keys the
# mount creates, and keys it never changed get a number from their name's
# hash with this bit set, so the two ranges never meet.
_HASH_BIT = 1 << 62
_HASH_MASK = _HASH_BIT - 1

# The mount remembers the identity (inode, times) of at most this many keys
# it changed; the oldest are forgotten first (they fall back to the defaults).
_MAX_IDENTITIES = 1_000_000

# Directories with at least this many names are classified by one prefix
# scan when a sample of this many names is (nearly) all files.
_SCAN_MIN = 256
_SCAN_SAMPLE = 16

# Folders remembered as big and flat (see _kinds_of_flat).
_MAX_FLAT = 10_000

# Entries in the attribute cache before expired ones are swept out.
_MAX_CACHED = 200_000

# A read-only mount keeps the read window of this many recently read keys.
_MAX_READERS = 16

# A nominal capacity for statfs: key/value stores have no fixed size.
_NOMINAL_BYTES = 1 << 50

# Errors from the operating system that name a real condition of the
# backend, reported as they are (StoreFullError is ENOSPC, UnsafePathError
# EACCES); any other failure is EIO with a log line.
_PASS_THROUGH = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.ENAMETOOLONG, errno.EACCES, errno.EPERM,
     errno.EROFS}
)


def errno_for(error: BaseException) -> int | None:
    """The errno a store error maps to, or None for an unexpected failure (EIO, logged).

    =================================  ===========
    error                              errno
    =================================  ===========
    KeyError (missing key)             ENOENT
    ReadOnlyError                      EROFS
    ValueTooLargeError                 EFBIG
    InvalidKeyError                    EINVAL
    UnsupportedOperationError          EOPNOTSUPP
    MemoryError                        ENOMEM
    StoreFullError                     ENOSPC
    UnsafePathError                    EACCES
    StoreLockedError                   EAGAIN
    StoreConnectionError               EIO
    StoreIOError, CorruptValueError    EIO
    StoreClosedError                   EIO
    OSError: ENOSPC, EDQUOT, EACCES    the same
    anything else                      None (EIO)
    =================================  ===========

    A server that cannot be reached is EIO, as on an NFS soft mount, not
    ENOTCONN: that is what a dead FUSE mount answers, and would send users
    to unmount a mount that recovers when the server is back.  Only errors
    whose cause a user can act on keep their own errno; the rest are EIO,
    which the wrapper logs with the store's message.

    Examples
    --------
    >>> from zstores.errors import StoreFullError, UnsafePathError
    >>> errno_for(KeyError("a")) == errno.ENOENT
    True
    >>> errno_for(StoreFullError("SQLiteStore('x'): the disk is full")) == errno.ENOSPC
    True
    >>> errno_for(UnsafePathError("DirectoryStore('d'): 'a' is a link")) == errno.EACCES
    True
    """
    if isinstance(error, FuseOSError):
        return error.errno
    if isinstance(error, KeyError):
        return errno.ENOENT
    if isinstance(error, ReadOnlyError):
        return errno.EROFS
    if isinstance(error, ValueTooLargeError):
        return errno.EFBIG
    if isinstance(error, InvalidKeyError):
        return errno.EINVAL
    if isinstance(error, UnsupportedOperationError):
        return errno.EOPNOTSUPP
    if isinstance(error, MemoryError):
        return errno.ENOMEM
    if isinstance(error, StoreLockedError):
        return errno.EAGAIN
    if isinstance(error, (StoreConnectionError, StoreClosedError)):
        return errno.EIO
    if isinstance(error, OSError) and error.errno in _PASS_THROUGH:
        return error.errno  # StoreFullError (ENOSPC), UnsafePathError (EACCES) among them
    if isinstance(error, StoreIOError):
        return errno.EIO
    return None


class Attrs(dict[str, int]):
    """A ``stat`` result as a dict, with room for the FUSE layer's packed form.

    The mount caches these and hands the same object out again; the FUSE
    layer fills libfuse's ``struct stat`` from it once and copies the bytes
    afterwards (``packed``).
    """

    __slots__ = ("packed",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.packed: bytes | None = None


def _operation(method: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a store error raised by a FUSE operation into its errno."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: StoreOperations, *args: Any) -> Any:
        try:
            return method(self, *args)
        except FuseOSError:
            raise
        except Exception as error:  # noqa: BLE001 - every failure must become an errno
            code = errno_for(error)
            if code is None:
                code = errno.EIO
            if code not in (errno.ENOENT, errno.EINVAL):
                # EIO says nothing to the user: the log line is where the cause is.
                level = logging.ERROR if code == errno.EIO else logging.WARNING
                log.log(level, "%s %s failed: %s: %s", name, _path_arg(self, args),
                        type(error).__name__, error)
            raise FuseOSError(code) from None

    return wrapper


def _path_arg(ops: StoreOperations, args: tuple[Any, ...]) -> str:
    """The path an operation's log line names: the open file's key for handle operations."""
    if args and isinstance(args[0], str):
        return args[0]
    fi = args[-1] if args else None
    handle = ops._handles.get(getattr(fi, "fh", None)) if fi is not None else None
    return f"/{handle.file.key} (open file)" if handle is not None else "(open file)"


def _fail(code: int) -> FuseOSError:
    return FuseOSError(code)


def name_error(key: str) -> int | None:
    """Why the mount refuses to create ``key``: EILSEQ, ENAMETOOLONG, or None if it may.

    The kernel hands names over as bytes, decoded with ``surrogateescape``:
    bytes that are not UTF-8 arrive as lone surrogates, which no store can
    keep as a key (EILSEQ, as file systems that require UTF-8 answer).  A
    segment longer than ``_NAME_MAX`` bytes is ENAMETOOLONG, as on a local
    disk, instead of a file that would never be listed.

    Examples
    --------
    >>> name_error("a/b") is None
    True
    >>> name_error("a/" + "x" * 256) == errno.ENAMETOOLONG
    True
    >>> name_error(b"caf\\xe9".decode("utf-8", "surrogateescape")) == errno.EILSEQ
    True
    """
    if key.isascii():
        if len(key) <= _NAME_MAX:
            return None
        return _too_long(key.split("/"))
    try:
        encoded = key.encode("utf-8")
    except UnicodeEncodeError:
        return errno.EILSEQ
    if len(encoded) <= _NAME_MAX:
        return None
    return _too_long(encoded.split(b"/"))


def _too_long(segments: list[str] | list[bytes]) -> int | None:
    return errno.ENAMETOOLONG if any(len(s) > _NAME_MAX for s in segments) else None


def _listable(name: str) -> bool:
    """Whether a listed name is one the mount can also look up (and the kernel accept).

    Keys that other writers stored with a longer segment, a backslash (the
    store reads it as ``/``) or bytes that are not UTF-8 (a folder store's
    stray file) stay reachable through the library, not through the mount.
    """
    if name.isascii():
        return len(name) <= _NAME_MAX and "\\" not in name
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return size <= _NAME_MAX and "\\" not in name


def _parent(key: str) -> str:
    return key.rpartition("/")[0]


def _ancestors(key: str) -> Iterable[str]:
    """``a/b`` and ``a`` for the key ``a/b/c`` (never the root)."""
    while "/" in key:
        key = key.rpartition("/")[0]
        yield key


class LocalDirs:
    """Directories that exist in the mount only: made by ``mkdir``, or emptied.

    A key/value store has no empty folders, so these live as long as the
    mount.  Indexed by parent, so listing a folder does not scan them all.

    Examples
    --------
    >>> dirs = LocalDirs()
    >>> dirs.add("a/b"); dirs.add("a/c/d")
    >>> "a/b" in dirs, sorted(dirs.children("a/")), dirs.any_below("a/c/")
    (True, ['b'], True)
    """

    def __init__(self) -> None:
        self._by_parent: dict[str, set[str]] = {}

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        parent, _, name = key.rpartition("/")
        names = self._by_parent.get(parent)
        return names is not None and name in names

    def add(self, key: str) -> None:
        parent, _, name = key.rpartition("/")
        self._by_parent.setdefault(parent, set()).add(name)

    def discard(self, key: str) -> None:
        parent, _, name = key.rpartition("/")
        names = self._by_parent.get(parent)
        if names is not None:
            names.discard(name)
            if not names:
                del self._by_parent[parent]

    def children(self, prefix: str) -> list[str]:
        """Names of the local directories directly under ``prefix`` ("" or "a/")."""
        return list(self._by_parent.get(prefix[:-1], ()))

    def any_below(self, prefix: str) -> bool:
        return bool(self._by_parent.get(prefix[:-1]))

    def below(self, key: str) -> list[str]:
        """``key`` and every local directory under it."""
        prefix = key + "/"
        found = [key] if key in self else []
        for parent, names in list(self._by_parent.items()):
            if parent == key or parent.startswith(prefix):
                found.extend(f"{parent}/{name}" for name in names)
        return found


class StoreOperations(mfusepy.Operations):
    """The FUSE operations that show a ``Store`` as a folder tree.

    Parameters
    ----------
    store : Store
        Any zstores store; it must stay open while mounted.
    read_only : bool
        Refuse every change with EROFS (also when the store itself is read-only).
    attr_timeout : float
        Seconds metadata (and, for unchanged values, file contents) may be
        served from caches before the store is asked again.
    on_ready : callable, optional
        Called once, when the kernel has connected the mount.

    Examples
    --------
    >>> from zstores import MemoryStore
    >>> store = MemoryStore()
    >>> store["arr/.zarray"] = b"{}"
    >>> ops = StoreOperations(store)
    >>> ops.getattr("/arr/.zarray")["st_size"], stat.S_ISDIR(ops.getattr("/arr")["st_mode"])
    (2, True)
    """

    use_ns = True
    # Operations on open files find everything through their handle, so
    # libfuse need not build a path for them (and an unlinked file has none).
    flag_nopath = 1
    flag_nullpath_ok = 1

    def __init__(
        self,
        store: Store,
        *,
        read_only: bool = False,
        attr_timeout: float = 1.0,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.read_only = bool(read_only or store.read_only)
        self.attr_timeout = float(attr_timeout)
        self.on_ready = on_ready
        self.ready = threading.Event()
        self._ranged = bool(store.supports_range_reads)
        self._uid, self._gid = os.getuid(), os.getgid()
        self._mount_ns = time.time_ns()
        self._last_ns = self._mount_ns
        self._file_mode = stat.S_IFREG | (0o444 if self.read_only else 0o644)
        self._dir_mode = stat.S_IFDIR | (0o555 if self.read_only else 0o755)
        self._lock = threading.RLock()  # namespace changes and the open-file table
        self._clock = threading.Lock()  # strictly increasing times; identity eviction
        self._files: dict[str, OpenFile] = {}
        self._handles: dict[int, Handle] = {}
        self._dir_handles: dict[int, str] = {}
        self._next_handle = itertools.count(1)
        self._next_ino = itertools.count(2)
        self._identities: dict[str, tuple[int, int, int]] = {}  # key -> ino, mtime, ctime
        self._dirs = LocalDirs()
        self._stats: dict[str, tuple[float, Attrs | None]] = {}
        self._page_cache: dict[str, float] = {}  # key -> until when its pages may be kept
        self._flat: dict[str, None] = {}  # big folders of keys, listed by one scan
        self._witness: dict[str, str] = {}  # folder -> a key seen below it

    # ------------------------------------------------------------ identity
    def _now(self) -> int:
        """The current time in ns, strictly later than any time handed out before."""
        now = time.time_ns()
        with self._clock:
            if now <= self._last_ns:
                now = self._last_ns + 1
            self._last_ns = now
        return now

    def _identity(self, key: str) -> tuple[int, int, int]:
        identity = self._identities.get(key)
        if identity is not None:
            return identity
        if not key:
            return (1, self._mount_ns, self._mount_ns)
        return ((hash(key) & _HASH_MASK) | _HASH_BIT, self._mount_ns, self._mount_ns)

    def _set_identity(self, key: str, identity: tuple[int, int, int]) -> None:
        identities = self._identities
        identities.pop(key, None)
        identities[key] = identity
        if len(identities) > _MAX_IDENTITIES:
            with self._clock:
                # Forget the oldest tenth at once, so this runs rarely.
                for old in list(identities)[: _MAX_IDENTITIES // 10]:
                    identities.pop(old, None)

    def _new_identity(self, key: str) -> None:
        now = self._now()
        self._set_identity(key, (next(self._next_ino), now, now))

    def _touch(self, key: str, mtime: int | None = None) -> None:
        """Record a change of ``key``'s value: same inode, new times."""
        ino, _, _ = self._identity(key)
        now = self._now()
        self._set_identity(key, (ino, now if mtime is None else mtime, now))

    # ----------------------------------------------------------- attributes
    def _file_stat(self, key: str, size: int) -> Attrs:
        ino, mtime, ctime = self._identity(key)
        return Attrs(
            st_mode=self._file_mode, st_ino=ino, st_nlink=1, st_uid=self._uid,
            st_gid=self._gid, st_size=size, st_blocks=(size + 511) >> 9,
            st_blksize=BLOCK_SIZE, st_atime=mtime, st_mtime=mtime, st_ctime=ctime,
        )

    def _dir_stat(self, key: str) -> Attrs:
        ino, mtime, ctime = self._identity(key)
        return Attrs(
            st_mode=self._dir_mode, st_ino=ino, st_nlink=2, st_uid=self._uid,
            st_gid=self._gid, st_size=0, st_blocks=0, st_blksize=BLOCK_SIZE,
            st_atime=mtime, st_mtime=mtime, st_ctime=ctime,
        )

    def _pending(self, key: str) -> OpenFile | None:
        """The open file whose pending contents ``key`` shows, if any."""
        file = self._files.get(key)
        if file is not None and file.pending:
            return file
        return None

    def _remember(self, key: str, attrs: Attrs | None) -> None:
        if self.attr_timeout > 0:
            stats = self._stats
            now = time.monotonic()
            if len(stats) >= _MAX_CACHED:
                self._prune(stats, now)
            stats[key] = (now + self.attr_timeout, attrs)

    @staticmethod
    def _prune(cache: dict[str, Any], now: float) -> None:
        """Drop expired entries, or all of them if that is not enough.

        A walk over millions of keys must not grow the cache without bound.
        """
        expired = [key for key, entry in list(cache.items()) if entry[0] <= now]
        for key in expired:
            cache.pop(key, None)
        if len(cache) >= _MAX_CACHED // 2:
            cache.clear()

    def _forget(self, key: str) -> None:
        """Drop what is cached about ``key``, and negative entries of its parents."""
        stats = self._stats
        stats.pop(key, None)
        for parent in _ancestors(key):
            entry = stats.get(parent)
            if entry is not None and entry[1] is None:
                del stats[parent]
        self._page_cache.pop(key, None)

    def _forget_all(self) -> None:
        self._stats.clear()
        self._page_cache.clear()

    def _stat(self, key: str) -> Attrs:
        """The attributes of ``key`` ("" is the root); ENOENT if it is nothing."""
        if not key:
            return self._dir_stat("")
        if len(key) > _NAME_MAX // 4 and name_error(key) == errno.ENAMETOOLONG:
            # Never listed, so never looked up either (a local disk says the same).
            raise _fail(errno.ENAMETOOLONG)
        file = self._pending(key)
        if file is not None:
            return self._file_stat(key, file.size())
        entry = self._stats.get(key)
        if entry is not None and entry[0] > time.monotonic():
            if entry[1] is None:
                raise _fail(errno.ENOENT)
            return entry[1]
        attrs = self._probe(key)
        self._remember(key, attrs)
        if attrs is None:
            raise _fail(errno.ENOENT)
        return attrs

    def _probe(self, key: str) -> Attrs | None:
        """Ask the store what ``key`` is: a file, a directory or nothing."""
        if key in self._dirs or self._dirs.any_below(key + "/"):
            return self._dir_stat(key)
        if not self._storable(key):
            return None
        size = self._size(key)
        if size is not None:
            self._note_file(key)
            return self._file_stat(key, size)
        if self._has_children(key):
            return self._dir_stat(key)
        return None

    def _note_file(self, key: str) -> None:
        """Remember ``key`` as a witness that the folders above it exist."""
        witness = self._witness
        if len(witness) >= _MAX_CACHED:
            witness.clear()
        for folder in _ancestors(key):
            witness[folder] = key

    def _size(self, key: str) -> int | None:
        """The value's length, or None if ``key`` is not a key."""
        try:
            size = self.store._getsize_key(key)
        except KeyError:
            return None
        # Some backends report 0 for a missing key (Redis' STRLEN): confirm.
        if size == 0 and not self.store._contains(key):
            return None
        return size

    def _has_children(self, key: str) -> bool:
        """Whether any key lies below ``key``.

        A key seen below it before (its witness) answers with one cheap
        lookup; only when that key is gone is the folder listed.
        """
        witness = self._witness.get(key)
        if witness is not None:
            if self._pending(witness) is not None or self.store._contains(witness):
                return True
            self._witness.pop(key, None)
        prefix = key + "/" if key else ""
        return any(True for _ in self.store._listdir(prefix))

    def _storable(self, key: str) -> bool:
        try:
            return self.store._key(key) == key
        except (InvalidKeyError, TypeError):
            return False

    def _key_to_write(self, path: str) -> str:
        """The key of a path the caller wants to create.

        EILSEQ if the name is not UTF-8, ENAMETOOLONG if a segment is longer
        than ``_NAME_MAX`` bytes, EINVAL if the store refuses the key or
        would keep it under another name.
        """
        if self.read_only:
            raise _fail(errno.EROFS)
        key = path[1:]
        code = name_error(key)
        if code is not None:
            log.warning("refused name %r: %s", path, os.strerror(code))
            raise _fail(code)
        try:
            normalized = self.store._key(key)
        except InvalidKeyError as error:
            log.warning("refused name %r: %s", path, error)
            raise _fail(errno.EINVAL) from None
        if normalized != key:
            log.warning("refused name %r: the store would keep it as %r", path, normalized)
            raise _fail(errno.EINVAL)
        return key

    def _kind(self, key: str) -> str | None:
        """"file", "dir" or None, by the same rules as ``getattr``."""
        try:
            attrs = self._stat(key)
        except FuseOSError:
            return None
        return "dir" if stat.S_ISDIR(attrs["st_mode"]) else "file"

    def _is_empty_dir(self, key: str) -> bool:
        prefix = key + "/"
        if self._has_children(key):
            return False
        if self._dirs.any_below(prefix):
            return False
        return not any(k.startswith(prefix) for k, f in list(self._files.items()) if f.pending)

    def _keep_parent(self, key: str) -> None:
        """Keep the folders above a removed entry (``rm -r`` removes them next)."""
        for parent in _ancestors(key):
            self._dirs.add(parent)

    # --------------------------------------------------------- lifecycle
    def init(self, path: str) -> None:
        self.ready.set()
        if self.on_ready is not None:
            self.on_ready()

    def destroy(self, path: str) -> None:
        for file in list(self._files.values()):
            try:
                file.commit_all(self.store)
            except Exception as error:  # noqa: BLE001 - unmounting; report and go on
                log.error("writing %r at unmount failed: %s: %s", file.key,
                          type(error).__name__, error)

    # ------------------------------------------------------------ metadata
    @_operation
    def getattr(self, path: str | None, fh: Any = None) -> Attrs:
        if fh is not None:
            handle = self._handles.get(fh.fh)
            if handle is not None:
                file = handle.file
                if handle.buffer is not None:
                    return self._file_stat(file.key, len(handle.buffer))
                if file.pending:
                    return self._file_stat(file.key, file.size())
                return self._stat(file.key)
        if path is None:
            raise _fail(errno.ENOENT)
        return self._stat(path[1:])

    @_operation
    def statfs(self, path: str) -> dict[str, int]:
        blocks = _NOMINAL_BYTES // BLOCK_SIZE
        free = 0 if self.read_only else blocks
        return {
            "f_bsize": BLOCK_SIZE, "f_frsize": BLOCK_SIZE, "f_blocks": blocks,
            "f_bfree": free, "f_bavail": free, "f_files": blocks, "f_ffree": free,
            "f_favail": free, "f_namemax": _NAME_MAX,
        }

    @_operation
    def opendir(self, path: str) -> int:
        key = path[1:]
        if key and self._kind(key) != "dir":
            raise _fail(errno.ENOTDIR if self._kind(key) == "file" else errno.ENOENT)
        fh = next(self._next_handle)
        self._dir_handles[fh] = key
        return fh

    @_operation
    def releasedir(self, path: str | None, fh: int) -> int:
        self._dir_handles.pop(fh, None)
        return 0

    @_operation
    def readdir(self, path: str | None, fh: int) -> list[tuple[str, dict[str, int], int]]:
        return [(name, {"st_mode": mode, "st_ino": ino}, 0)
                for name, mode, ino in self.listing(path, fh)]

    @_operation
    def listing(self, path: str | None, fh: int) -> list[tuple[str, int, int]]:
        """``readdir`` as ``(name, mode, inode)`` triples, what the kernel keeps of an entry."""
        key = self._dir_handles.get(fh)
        if key is None:
            if path is None:
                raise _fail(errno.EBADF)
            key = path[1:]
        identity = self._identity
        entries = [(".", self._dir_mode, identity(key)[0]),
                   ("..", self._dir_mode, identity(_parent(key))[0] if key else 1)]
        prefix = key + "/" if key else ""
        file_mode, dir_mode = self._file_mode, self._dir_mode
        for name, is_file in self._children(prefix).items():
            entries.append((name, file_mode if is_file else dir_mode, identity(prefix + name)[0]))
        return entries

    def _children(self, prefix: str) -> dict[str, bool]:
        """Every name directly under ``prefix``: True for a file, False for a directory."""
        kinds = self._kinds_of_flat(prefix) if prefix in self._flat else None
        if kinds is None:
            names = list(self.store._listdir(prefix))
            if len(names) >= _SCAN_MIN and self._mostly_files(prefix, names):
                kinds = self._kinds_of_flat(prefix)
            if kinds is None:
                kinds = {name: self._is_file(prefix + name) for name in names}
        for name in self._dirs.children(prefix):
            kinds.setdefault(name, False)
        for key, file in list(self._files.items()):
            if file.pending and key.startswith(prefix) and "/" not in key[len(prefix):]:
                kinds[key[len(prefix):]] = True
        return {name: kind for name, kind in kinds.items() if _listable(name)}

    def _mostly_files(self, prefix: str, names: list[str]) -> bool:
        """Whether a sample of ``names`` is (nearly) all keys: a folder of chunks."""
        sample = names[:: max(1, len(names) // _SCAN_SAMPLE)][:_SCAN_SAMPLE]
        return sum(self._is_file(prefix + name) for name in sample) >= 0.9 * len(sample)

    def _kinds_of_flat(self, prefix: str) -> dict[str, bool] | None:
        """Names and kinds under ``prefix`` from one scan of its keys; None if not flat.

        One prefix scan costs a step per key below ``prefix``, against a
        store round trip per name: it pays for a big folder of keys (chunks),
        not for a folder of sub-folders full of keys.  Folders found big and
        flat are remembered, so the next listing is this one scan alone.
        """
        start = len(prefix)
        kinds: dict[str, bool] = {}
        deeper = 0
        for key in self.store._list_prefix(prefix):
            rest = key[start:]
            slash = rest.find("/")
            if slash < 0:
                kinds[rest] = True
                self._witness[prefix[:-1]] = key
            else:
                deeper += 1
                kinds.setdefault(rest[:slash], False)
        if len(kinds) < _SCAN_MIN or deeper > len(kinds):
            self._flat.pop(prefix, None)
            return None if deeper > len(kinds) else kinds
        if len(self._flat) >= _MAX_FLAT:
            self._flat.clear()
        self._flat[prefix] = None
        return kinds

    def _is_file(self, key: str) -> bool:
        """Whether a listed name is a key (else, being listed, it is a prefix).

        Asks the store for the size, and caches the full attributes, so the
        ``stat`` that ``ls -l``, ``du`` or ``cp`` sends next costs no round trip.
        """
        file = self._pending(key)
        if file is not None:
            return True
        entry = self._stats.get(key)
        if entry is not None and entry[1] is not None and entry[0] > time.monotonic():
            return not stat.S_ISDIR(entry[1]["st_mode"])
        size = self._size(key)
        if size is None:
            self._remember(key, self._dir_stat(key))
            return False
        self._note_file(key)
        self._remember(key, self._file_stat(key, size))
        return True

    # ------------------------------------------------------------ reading
    @_operation
    def open(self, path: str, fi: Any) -> int:
        flags = fi.flags
        writing = flags & os.O_ACCMODE != os.O_RDONLY
        if writing and self.read_only:
            raise _fail(errno.EROFS)
        key = path[1:]
        handle = self._open_handle(key, flags)
        if writing and flags & os.O_TRUNC:
            handle.truncate(self.store, 0)
        fi.keep_cache = self._keep_cache(key, handle.file)
        fh = next(self._next_handle)
        self._handles[fh] = handle
        fi.fh = fh
        return 0

    def _open_handle(self, key: str, flags: int, *, created: bool = False) -> Handle:
        """A new handle on ``key``, sharing the key's ``OpenFile`` with the others."""
        with self._lock:
            file = self._files.get(key)
            if file is None or created:
                if file is not None:
                    file.orphan(self.store)
                file = self._files[key] = OpenFile(key, created=created)
            file.refs += 1
        return Handle(file, flags, ranged=self._ranged)

    def _keep_cache(self, key: str, file: OpenFile | None) -> int:
        """Whether the kernel may keep the pages it cached at an earlier open.

        For at most ``attr_timeout`` after the pages were loaded (the same
        bound as for metadata), and never after the mount changed the value:
        every change through the mount forgets the entry.  Answered from
        memory, so an ``open`` costs no store round trip.
        """
        cache = self._page_cache
        if (file is not None and file.pending) or self.attr_timeout <= 0:
            cache.pop(key, None)
            return 0
        now = time.monotonic()
        loaded_until = cache.get(key)
        if loaded_until is not None and loaded_until > now:
            return 1
        if len(cache) >= _MAX_CACHED:
            cache.clear()
        cache[key] = now + self.attr_timeout
        return 0

    @_operation
    def read(self, path: str | None, size: int, offset: int, fi: Any) -> bytes:
        return self._reader(path, fi).read(self.store, size, offset)

    @_operation
    def read_view(self, path: str | None, size: int, offset: int, fi: Any
                  ) -> tuple[bytes, int, int]:
        """``read`` without the copy: ``(data, start, length)`` (see ``Handle.read_view``)."""
        return self._reader(path, fi).read_view(self.store, size, offset)

    def _reader(self, path: str | None, fi: Any) -> Handle:
        """The handle a read goes through: the open file's own."""
        return self._handles[fi.fh]

    # ------------------------------------------------------------ writing
    @_operation
    def create(self, path: str, mode: int, fi: Any) -> int:
        key = self._key_to_write(path)
        handle = self._open_handle(key, fi.flags, created=True)
        handle.truncate(self.store, 0)  # the new file reaches the store at close, even if empty
        with self._lock:
            self._dirs.discard(key)
            self._new_identity(key)
            self._forget(key)
        fh = next(self._next_handle)
        self._handles[fh] = handle
        fi.fh = fh
        return 0

    @_operation
    def write(self, path: str | None, data: bytes, offset: int, fi: Any) -> int:
        return self._handles[fi.fh].write(self.store, data, offset)

    @_operation
    def truncate(self, path: str | None, length: int, fh: Any = None) -> int:
        if self.read_only:
            raise _fail(errno.EROFS)
        if fh is not None:
            self._handles[fh.fh].truncate(self.store, length)
            return 0
        if path is None:
            raise _fail(errno.EBADF)
        handle = self._open_handle(path[1:], os.O_WRONLY)  # truncate(2): a change of its own
        try:
            handle.truncate(self.store, length)
            self._commit(handle)
        finally:
            self._release(handle)
        return 0

    def _commit(self, handle: Handle) -> None:
        """Commit one handle's writes; the file then shows a new modification time."""
        if handle.commit(self.store):
            self._committed(handle.file)

    def _committed(self, file: OpenFile) -> None:
        self._touch(file.key, self._identity(file.key)[1] if file.mtime_explicit else None)
        self._forget(file.key)

    @_operation
    def flush(self, path: str | None, fi: Any) -> int:
        self._commit(self._handles[fi.fh])
        return 0

    @_operation
    def fsync(self, path: str | None, datasync: int, fi: Any) -> int:
        handle = self._handles.get(fi.fh)
        if handle is not None:
            self._commit(handle)
        sync = getattr(self.store, "flush", None)
        if callable(sync):
            sync()
        return 0

    @_operation
    def release(self, path: str | None, fi: Any) -> int:
        handle = self._handles.pop(fi.fh, None)
        if handle is not None:
            self._release(handle)
        return 0

    def _release(self, handle: Handle) -> None:
        """Write what the handle left unsaved, then forget it (and its file, if last).

        Not after a failed commit the writer was told of (``close`` returned
        the error): a retry here could store a value its writer believes lost.
        """
        file = handle.file
        if handle.failed:
            log.warning("%r keeps its previous value: the writes of a closed handle were not "
                        "saved (the writer was told at flush)", file.key)
        else:
            try:
                self._commit(handle)
            except Exception as error:  # noqa: BLE001 - nobody is left to tell but the log
                log.error("writing %r failed when its handle closed: %s: %s", file.key,
                          type(error).__name__, error)
        file.forget_writer(handle)
        with self._lock:
            file.refs -= 1
            if file.refs <= 0 and self._files.get(file.key) is file:
                del self._files[file.key]

    # ---------------------------------------------------------- namespace
    @_operation
    def mkdir(self, path: str, mode: int) -> int:
        key = self._key_to_write(path)
        with self._lock:
            if self._kind(key) is not None:
                raise _fail(errno.EEXIST)
            self._dirs.add(key)
            self._forget(key)
        return 0

    @_operation
    def rmdir(self, path: str) -> int:
        if self.read_only:
            raise _fail(errno.EROFS)
        key = path[1:]
        with self._lock:
            kind = self._kind(key)
            if kind is None:
                raise _fail(errno.ENOENT)
            if kind == "file":
                raise _fail(errno.ENOTDIR)
            if not self._is_empty_dir(key):
                raise _fail(errno.ENOTEMPTY)
            self._dirs.discard(key)
            self._identities.pop(key, None)
            self._keep_parent(key)
            self._forget(key)
            self._remember(key, None)
        return 0

    @_operation
    def unlink(self, path: str) -> int:
        if self.read_only:
            raise _fail(errno.EROFS)
        key = path[1:]
        with self._lock:
            file = self._files.pop(key, None)
            unsaved = file is not None and file.created
            if file is not None:
                file.orphan(self.store)
            try:
                del self.store[key]
            except KeyError:
                if not unsaved:  # a new file that never reached the store is gone all the same
                    raise
            self._identities.pop(key, None)
            self._keep_parent(key)
            self._forget(key)
            self._remember(key, None)
        return 0

    @_operation
    def rename(self, old: str, new: str) -> int:
        if self.read_only:
            raise _fail(errno.EROFS)
        src = old[1:]
        dst = self._key_to_write(new)
        with self._lock:
            kind = self._kind(src)
            if kind is None:
                raise _fail(errno.ENOENT)
            target = self._kind(dst)
            if kind == "file":
                if target == "dir":
                    raise _fail(errno.EISDIR)
                self._rename_file(src, dst)
            else:
                if target == "file":
                    raise _fail(errno.ENOTDIR)
                if target == "dir" and not self._is_empty_dir(dst):
                    raise _fail(errno.ENOTEMPTY)
                self._rename_dir(src, dst)
            self._keep_parent(src)
        return 0

    def _rename_file(self, src: str, dst: str) -> None:
        moving = self._files.get(src)
        if moving is not None and moving.commit_all(self.store):  # the store holds what it shows
            self._committed(moving)
        replaced = self._files.pop(dst, None)
        if replaced is not None:
            replaced.orphan(self.store)
        ino, mtime, _ = self._identity(src)
        self.store.rename(src, dst)
        if moving is not None:
            with moving.lock:
                moving.key = dst
            del self._files[src]
            self._files[dst] = moving
        self._identities.pop(src, None)
        self._set_identity(dst, (ino, mtime, self._now()))
        self._dirs.discard(dst)
        self._forget(src)
        self._forget(dst)
        self._remember(src, None)

    def _rename_dir(self, src: str, dst: str) -> None:
        src_prefix, dst_prefix = src + "/", dst + "/"
        for file in list(self._files.values()):
            if file.key.startswith(src_prefix) and file.commit_all(self.store):
                self._committed(file)
        if self._has_children(src):
            self.store.rename(src, dst)
        for key in self._dirs.below(src):
            self._dirs.discard(key)
            self._dirs.add(dst + key[len(src):])
        self._dirs.add(dst)
        for key, file in list(self._files.items()):
            if key.startswith(src_prefix):
                with file.lock:
                    file.key = dst_prefix + key[len(src_prefix):]
                del self._files[key]
                self._files[file.key] = file
        for key in [k for k in list(self._identities) if k == src or k.startswith(src_prefix)]:
            self._set_identity(dst + key[len(src):], self._identities.pop(key))
        self._forget_all()

    @_operation
    def link(self, target: str, source: str) -> int:
        """Hard link ``source`` as ``target``: a new key holding a copy of the value.

        zarr-python 3 creates keys only-if-absent with ``os.link`` and then
        ``os.unlink``; the copy is what it needs, and EEXIST when ``target``
        exists is the part that matters.
        """
        dst = self._key_to_write(target)
        src = source[1:]
        with self._lock:
            if self._kind(dst) is not None:
                raise _fail(errno.EEXIST)
            kind = self._kind(src)
            if kind is None:
                raise _fail(errno.ENOENT)
            if kind == "dir":
                raise _fail(errno.EPERM)
            file = self._pending(src)
            if file is not None:
                with file.lock:
                    value = bytes(file.current() or b"")
            else:
                value = self.store[src]
            self.store[dst] = value
            self._dirs.discard(dst)
            self._new_identity(dst)
            self._forget(dst)
        return 0

    @_operation
    def mknod(self, path: str, mode: int, dev: int) -> int:
        if not stat.S_ISREG(mode):
            raise _fail(errno.EPERM)  # no device files, FIFOs or sockets in a key/value store
        key = self._key_to_write(path)
        with self._lock:
            if self._kind(key) is not None:
                raise _fail(errno.EEXIST)
            self.store[key] = b""
            self._new_identity(key)
            self._forget(key)
        return 0

    @_operation
    def symlink(self, target: str, source: str) -> int:
        raise _fail(errno.EPERM)  # a key/value store has no symbolic links

    @_operation
    def chmod(self, path: str | None, mode: int) -> int:
        self._exists(path)
        return 0

    @_operation
    def chown(self, path: str | None, uid: int, gid: int) -> int:
        self._exists(path)
        return 0

    @_operation
    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        if path is None:
            return 0
        key = path[1:]
        self._stat(key)
        mtime = self._now() if times is None else int(times[1])
        ino, _, _ = self._identity(key)
        self._set_identity(key, (ino, mtime, self._now()))
        file = self._files.get(key)
        if file is not None:
            file.mtime_explicit = True
        self._forget(key)
        return 0

    def _exists(self, path: str | None) -> None:
        if path is not None:
            self._stat(path[1:])


class ReadOnlyOperations(StoreOperations):
    """The operations of a mount that never writes: no file handles at all.

    With nothing to write back, ``close`` has nothing to do, so libfuse
    answers ``flush`` and ``release`` itself without calling into Python, and
    reads find their key by path.  ``open`` only tells the kernel whether it
    may keep the pages it read before (for ``attr_timeout``, as on a
    read-write mount).  With ``kernel_cache`` (or ``auto_cache``) even
    ``open`` leaves Python: libfuse 3 declines it once and the kernel stops
    sending OPEN, FLUSH and RELEASE altogether; libfuse 2 answers it itself.
    A warm file is then served entirely by the kernel, but changes made to
    the store by others may not show until the file drops out of the page cache.

    Sequential readers of a key share one read window (see ``Handle``), kept
    for the ``_MAX_READERS`` keys read most recently.

    Parameters
    ----------
    store : Store
        Any zstores store; it must stay open while mounted.
    attr_timeout : float
        Seconds metadata (and, for unchanged values, file contents) may be
        served from caches before the store is asked again.
    kernel_cache : bool
        Keep ``open`` out of Python (mount with libfuse's ``kernel_cache`` or
        ``auto_cache`` option); only for stores nobody else changes while mounted.
    on_ready : callable, optional
        Called once, when the kernel has connected the mount.

    Examples
    --------
    >>> from zstores import MemoryStore
    >>> store = MemoryStore()
    >>> store["arr/0"] = b"chunk"
    >>> ops = ReadOnlyOperations(store)
    >>> ops.read("/arr/0", 3, 1, None), ops.release is None
    (b'hun', True)
    """

    # libfuse hands reads the path: there is no handle to find the key by.
    flag_nopath = 0
    flush = None  # type: ignore[assignment]
    release = None  # type: ignore[assignment]

    def __init__(
        self,
        store: Store,
        *,
        attr_timeout: float = 1.0,
        kernel_cache: bool = False,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(store, read_only=True, attr_timeout=attr_timeout, on_ready=on_ready)
        self._readers: OrderedDict[str, Handle] = OrderedDict()
        self._readers_lock = threading.Lock()
        if kernel_cache:
            # libfuse 3 passes ENOSYS from open on to the kernel, which then
            # never sends OPEN, FLUSH or RELEASE again and keeps pages as
            # kernel_cache does; libfuse 2 cannot, so it answers open itself.
            self.open = _decline_open if mfusepy.fuse_version_major >= 3 else None  # type: ignore[assignment]

    @_operation
    def open(self, path: str, fi: Any) -> int:
        if fi.flags & os.O_ACCMODE != os.O_RDONLY:
            raise _fail(errno.EROFS)
        key = path[1:]
        fi.keep_cache = keep = self._keep_cache(key, None)
        if not keep:  # the kernel reads afresh: so does the mount
            with self._readers_lock:
                self._readers.pop(key, None)
        return 0

    def _reader(self, path: str | None, fi: Any) -> Handle:
        """The read window shared by the readers of ``path``'s key (there are no handles)."""
        if path is None:
            raise _fail(errno.EBADF)
        key = path[1:]
        readers = self._readers
        with self._readers_lock:
            reader = readers.get(key)
            if reader is None:
                reader = readers[key] = Handle(OpenFile(key), os.O_RDONLY, ranged=self._ranged)
                if len(readers) > _MAX_READERS:
                    readers.popitem(last=False)
            else:
                readers.move_to_end(key)
        return reader


def _decline_open(path: str, fi: Any) -> int:
    raise _fail(errno.ENOSYS)


def operations_for(
    store: Store,
    *,
    read_only: bool = False,
    attr_timeout: float = 1.0,
    kernel_cache: bool = False,
    on_ready: Callable[[], None] | None = None,
) -> StoreOperations:
    """The operations for a mount of ``store``: read-only ones when nothing may change.

    ``kernel_cache`` (libfuse decides what the kernel keeps) matters only
    to a read-only mount, which then leaves ``open`` to libfuse too.

    Examples
    --------
    >>> from zstores import MemoryStore
    >>> type(operations_for(MemoryStore(), read_only=True)).__name__
    'ReadOnlyOperations'
    """
    if read_only or store.read_only:
        return ReadOnlyOperations(store, attr_timeout=attr_timeout, kernel_cache=kernel_cache,
                                  on_ready=on_ready)
    return StoreOperations(store, attr_timeout=attr_timeout, on_ready=on_ready)
