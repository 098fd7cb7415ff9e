"""The FUSE handlers over a ``StoreView``: each turns a FUSE call into view calls and errnos.

What the mount shows (files, folders, caches) is ``zfuse.view``; inode
numbers and times are ``zfuse.identity``; which errno a store error becomes
is ``zfuse.errors``; which names the mount makes and lists is
``zfuse.names``; open files and their buffers are ``zfuse.handles``.
This module keeps the handle tables (file and folder handles by number)
and the checks a local disk makes before a change (EEXIST, ENOTDIR,
ENOTEMPTY ...).

Every handler is wrapped by ``fuse_operation``: a store error raised inside
reaches the kernel as its errno (a full disk is ENOSPC at ``close``, where
the value is committed).  The handlers on the hot path (``getattr``,
``read``, ``listing``) call the view's methods bound once, without layers
of their own.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import mfusepy
from mfusepy import FuseOSError

from zstores import Store
from zstores.errors import UnsupportedOperationError

from .errors import errno_for, fail, fuse_operation
from .handles import Handle, OpenFile
from .names import NAME_MAX, name_error, parent
from .view import BLOCK_SIZE, Attrs, LocalDirs, StoreView

__all__ = ["BLOCK_SIZE", "Attrs", "LocalDirs", "ReadOnlyOperations", "StoreOperations",
           "StoreView", "errno_for", "name_error", "operations_for"]

log = logging.getLogger("zfuse")

# A read-only mount keeps the read window of this many recently read keys.
_MAX_READERS = 16

# A nominal capacity for statfs: key/value stores have no fixed size.
_NOMINAL_BYTES = 1 << 50


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

    Attributes
    ----------
    view : StoreView
        What the mount shows of the store.

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
        self.view = view = StoreView(store, read_only=read_only, attr_timeout=attr_timeout)
        self.store = store
        self.read_only = view.read_only
        self.attr_timeout = view.attr_timeout
        self.on_ready = on_ready
        self.ready = threading.Event()
        self._ranged = bool(store.supports_range_reads)
        self._handles: dict[int, Handle] = {}
        self._dir_handles: dict[int, str] = {}
        self._next_handle = itertools.count(1)
        # The view's methods on the hot path, bound once.
        self._stat = view.stat
        self._file_stat = view.file_stat
        self._size_to_report = view.kernel.size_to_report
        #: Nobody changes the store while mounted (a snapshot): no version to pin.
        self.immutable = False
        if self.read_only:
            self.flush = None  # nothing to write back: libfuse answers close itself
        self._identity = view.identities.of

    def describe_call(self, args: tuple[Any, ...]) -> str:
        """The path a failed call's log line names: the open file's key for handle calls."""
        if args and isinstance(args[0], str):
            return args[0]
        fi = args[-1] if args else None
        handle = self._handles.get(getattr(fi, "fh", None)) if fi is not None else None
        return f"/{handle.file.key} (open file)" if handle is not None else "(open file)"

    # --------------------------------------------------------- lifecycle
    def init(self, path: str) -> None:
        self.ready.set()
        if self.on_ready is not None:
            self.on_ready()

    def destroy(self, path: str) -> None:
        for file in list(self.view.files.values()):
            try:
                file.commit_all(self.store)
            except Exception as error:  # noqa: BLE001 - unmounting; report and go on
                log.error("writing %r at unmount failed: %s: %s", file.key,
                          type(error).__name__, error)

    # ------------------------------------------------------------ metadata
    @fuse_operation
    def getattr(self, path: str | None, fh: Any = None) -> Attrs:
        if fh is not None:
            handle = self._handles.get(fh.fh)
            if handle is not None:
                file = handle.file
                if handle.buffer is not None:
                    return self._file_stat(file.key, len(handle.buffer))
                pinned = handle.pinned
                if pinned is not None:  # the size of the version it reads
                    return self._file_stat(file.key,
                                           self._size_to_report(file.key, pinned.size))
                if file.pending:
                    return self._file_stat(file.key, file.size())
                return self._stat(file.key)
        if path is None:
            raise fail(errno.ENOENT)
        key = path[1:]
        attrs = self._stat(key)
        if (attrs["st_mode"] & stat.S_IFREG and not self.immutable
                and self.view.pending(key) is None):
            # The kernel cuts cached reads at the size it is told: while files
            # read a version through the page cache, that version's size.
            size = self._size_to_report(key, attrs["st_size"])
            if size != attrs["st_size"]:
                return self._file_stat(key, size)
        return attrs

    @fuse_operation
    def statfs(self, path: str) -> dict[str, int]:
        blocks = _NOMINAL_BYTES // BLOCK_SIZE
        free = 0 if self.read_only else blocks
        return {
            "f_bsize": BLOCK_SIZE, "f_frsize": BLOCK_SIZE, "f_blocks": blocks,
            "f_bfree": free, "f_bavail": free, "f_files": blocks, "f_ffree": free,
            "f_favail": free, "f_namemax": NAME_MAX,
        }

    @fuse_operation
    def opendir(self, path: str) -> int:
        key = path[1:]
        if key:
            kind = self.view.kind(key)
            if kind != "dir":
                raise fail(errno.ENOTDIR if kind == "file" else errno.ENOENT)
        fh = next(self._next_handle)
        self._dir_handles[fh] = key
        return fh

    @fuse_operation
    def releasedir(self, path: str | None, fh: int) -> int:
        self._dir_handles.pop(fh, None)
        return 0

    @fuse_operation
    def readdir(self, path: str | None, fh: int) -> list[tuple[str, dict[str, int], int]]:
        return [(name, {"st_mode": mode, "st_ino": ino}, 0)
                for name, mode, ino in self.listing(path, fh)]

    @fuse_operation
    def listing(self, path: str | None, fh: int) -> list[tuple[str, int, int]]:
        """``readdir`` as ``(name, mode, inode)`` triples, what the kernel keeps of an entry."""
        key = self._dir_handles.get(fh)
        if key is None:
            if path is None:
                raise fail(errno.EBADF)
            key = path[1:]
        view, identity = self.view, self._identity
        file_mode, dir_mode = view.file_mode, view.dir_mode
        entries = [(".", dir_mode, identity(key)[0]),
                   ("..", dir_mode, identity(parent(key))[0] if key else 1)]
        prefix = key + "/" if key else ""
        children = view.children(prefix)
        inodes = view.identities.inodes([prefix + name for name in children])
        entries += [(name, file_mode if is_file else dir_mode, ino)
                    for (name, is_file), ino in zip(children.items(), inodes, strict=True)]
        return entries

    # ------------------------------------------------------------ reading
    @fuse_operation
    def open(self, path: str, fi: Any) -> int:
        flags = fi.flags
        writing = flags & os.O_ACCMODE != os.O_RDONLY
        if writing and self.read_only:
            raise fail(errno.EROFS)
        key = path[1:]
        handle = self._open_handle(key, flags)
        try:
            if writing and flags & os.O_TRUNC:
                handle.truncate(self.store, 0)
            if flags & os.O_ACCMODE != os.O_WRONLY and not handle.file.pending:
                handle.pin(self.store)  # the version this open file reads (ENOENT if gone)
                keep, handle.direct = self.view.kernel.opened(key, handle.identity,
                                                              handle.pinned.size)
                fi.keep_cache, fi.direct_io = int(keep), int(handle.direct)
            else:
                fi.keep_cache = 0  # pending writes: pages of no committed version
        except BaseException:
            self._release(handle, commit=False)
            raise
        fh = next(self._next_handle)
        self._handles[fh] = handle
        fi.fh = fh
        return 0

    def _open_handle(self, key: str, flags: int, *, created: bool = False) -> Handle:
        """A new handle on ``key``, sharing the key's ``OpenFile`` with the others."""
        return Handle(self.view.open_file(key, created=created), flags, ranged=self._ranged)

    @fuse_operation
    def read(self, path: str | None, size: int, offset: int, fi: Any) -> bytes:
        return self._reader(path, fi).read(self.store, size, offset)

    @fuse_operation
    def read_view(self, path: str | None, size: int, offset: int, fi: Any
                  ) -> tuple[bytes, int, int]:
        """``read`` without the copy: ``(data, start, length)`` (see ``Handle.read_view``)."""
        return self._reader(path, fi).read_view(self.store, size, offset)

    def _reader(self, path: str | None, fi: Any) -> Handle:
        """The handle a read goes through: the open file's own."""
        return self._handles[fi.fh]

    # ------------------------------------------------------------ writing
    @fuse_operation
    def create(self, path: str, mode: int, fi: Any) -> int:
        view = self.view
        key = view.key_to_create(path)
        flags = fi.flags
        # The kernel sends CREATE when it believes the name is free, which
        # may be a belief of up to attr_timeout: another door may have
        # written the key since.  O_EXCL claims the key in the store
        # atomically (EEXIST if another got there first); a plain O_CREAT
        # of a key that exists opens it, as open(2) would.
        if view.pending(key) is None:
            if flags & os.O_EXCL:
                if not self._claim(key):
                    view.forget(key)
                    raise fail(errno.EEXIST)
            elif self.store.stat(key) is not None:
                view.forget(key)
                return self.open(path, fi)
        handle = self._open_handle(key, flags, created=True)
        handle.truncate(self.store, 0)  # the new file reaches the store at close, even if empty
        with view.lock:
            view.created(key)
        fh = next(self._next_handle)
        self._handles[fh] = handle
        fi.fh = fh
        return 0

    def _claim(self, key: str) -> bool:
        """Create ``key`` empty if it holds no value, atomically where the store can."""
        try:
            return self.store.set_if_not_exists(key, b"")
        except UnsupportedOperationError:
            # No atomic create in this store: the check is as close as it gets.
            return self.store.stat(key) is None

    @fuse_operation
    def write(self, path: str | None, data: bytes, offset: int, fi: Any) -> int:
        return self._handles[fi.fh].write(self.store, data, offset)

    @fuse_operation
    def truncate(self, path: str | None, length: int, fh: Any = None) -> int:
        if self.read_only:
            raise fail(errno.EROFS)
        if fh is not None:
            self._handles[fh.fh].truncate(self.store, length)
            return 0
        if path is None:
            raise fail(errno.EBADF)
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
            self.view.committed(handle.file)

    @fuse_operation
    def flush(self, path: str | None, fi: Any) -> int:
        self._commit(self._handles[fi.fh])
        return 0

    @fuse_operation
    def fsync(self, path: str | None, datasync: int, fi: Any) -> int:
        handle = self._handles.get(fi.fh)
        if handle is not None:
            self._commit(handle)
        sync = getattr(self.store, "flush", None)
        if callable(sync):
            sync()
        return 0

    @fuse_operation
    def release(self, path: str | None, fi: Any) -> int:
        handle = self._handles.pop(fi.fh, None)
        if handle is not None:
            self._release(handle)
        return 0

    def _release(self, handle: Handle, *, commit: bool = True) -> None:
        """Write what the handle left unsaved, then forget it (and its file, if last).

        Not after a failed commit the writer was told of (``close`` returned
        the error): a retry here could store a value its writer believes lost.
        """
        file = handle.file
        if handle.pinned is not None:
            self.view.kernel.closed(handle.pinned.key, handle.identity, direct=handle.direct)
            handle.unpin()
        if commit:
            self._commit_at_release(handle)
        file.forget_writer(handle)
        self.view.close_file(file)

    def _commit_at_release(self, handle: Handle) -> None:
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

    # ---------------------------------------------------------- namespace
    @fuse_operation
    def mkdir(self, path: str, mode: int) -> int:
        view = self.view
        key = view.key_to_create(path)
        with view.lock:
            if view.kind(key) is not None:
                raise fail(errno.EEXIST)
            view.make_dir(key)
        return 0

    @fuse_operation
    def rmdir(self, path: str) -> int:
        if self.read_only:
            raise fail(errno.EROFS)
        view, key = self.view, path[1:]
        with view.lock:
            kind = view.kind(key)
            if kind is None:
                raise fail(errno.ENOENT)
            if kind == "file":
                raise fail(errno.ENOTDIR)
            if not view.is_empty_dir(key) or not view.remove_dir(key):
                raise fail(errno.ENOTEMPTY)
        return 0

    @fuse_operation
    def unlink(self, path: str) -> int:
        if self.read_only:
            raise fail(errno.EROFS)
        view = self.view
        with view.lock:
            view.remove_file(path[1:])
        return 0

    @fuse_operation
    def rename(self, old: str, new: str) -> int:
        if self.read_only:
            raise fail(errno.EROFS)
        view = self.view
        src = old[1:]
        dst = view.key_to_create(new)
        with view.lock:
            kind = view.kind(src)
            if kind is None:
                raise fail(errno.ENOENT)
            target = view.kind(dst)
            if kind == "file":
                if target == "dir":
                    raise fail(errno.EISDIR)
                view.rename_file(src, dst)
            else:
                if target == "file":
                    raise fail(errno.ENOTDIR)
                if target == "dir" and not view.is_empty_dir(dst):
                    raise fail(errno.ENOTEMPTY)
                view.rename_dir(src, dst)
        return 0

    @fuse_operation
    def link(self, target: str, source: str) -> int:
        """Hard link ``source`` as ``target``: a new key holding a copy of the value.

        zarr-python 3 creates keys only-if-absent with ``os.link`` and then
        ``os.unlink``; the copy is what it needs, and EEXIST when ``target``
        exists is the part that matters.
        """
        view = self.view
        dst = view.key_to_create(target)
        src = source[1:]
        with view.lock:
            if view.kind(dst) is not None:
                raise fail(errno.EEXIST)
            kind = view.kind(src)
            if kind is None:
                raise fail(errno.ENOENT)
            if kind == "dir":
                raise fail(errno.EPERM)
            view.copy_file(src, dst)
        return 0

    @fuse_operation
    def mknod(self, path: str, mode: int, dev: int) -> int:
        if not stat.S_ISREG(mode):
            raise fail(errno.EPERM)  # no device files, FIFOs or sockets in a key/value store
        view = self.view
        key = view.key_to_create(path)
        with view.lock:
            if view.kind(key) is not None:
                raise fail(errno.EEXIST)
            self.store[key] = b""
            view.created(key)
        return 0

    @fuse_operation
    def symlink(self, target: str, source: str) -> int:
        raise fail(errno.EPERM)  # a key/value store has no symbolic links

    @fuse_operation
    def chmod(self, path: str | None, mode: int) -> int:
        self._exists(path)
        return 0

    @fuse_operation
    def chown(self, path: str | None, uid: int, gid: int) -> int:
        self._exists(path)
        return 0

    @fuse_operation
    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        if path is None:
            return 0
        key = path[1:]
        self._stat(key)
        self.view.set_mtime(key, None if times is None else int(times[1]))
        return 0

    def _exists(self, path: str | None) -> None:
        if path is not None:
            self._stat(path[1:])


class ReadOnlyOperations(StoreOperations):
    """The operations of a mount of data nobody changes while mounted: no file handles.

    For a snapshot (``zfuse mount --snapshot``, ``mount(..., snapshot=True)``)
    or a store the user declared unchanging with ``kernel_cache``: every
    version is the only one, so there is nothing to pin and the kernel may
    keep every page it loaded.  With nothing to write back or release,
    libfuse answers ``flush`` and ``release`` itself without calling into
    Python, and reads find their key by path.  With ``kernel_cache`` (or
    ``auto_cache``) even ``open`` leaves Python: libfuse 3 declines it once
    and the kernel stops sending OPEN, FLUSH and RELEASE altogether; libfuse
    2 answers it itself.  A warm file is then served entirely by the kernel.
    A read-only mount of a store others may change uses ``StoreOperations``
    with ``read_only=True`` instead, whose open files each pin their version.

    Sequential readers of a key share one read window (see ``Handle``), kept
    for the ``_MAX_READERS`` keys read most recently.

    Parameters
    ----------
    store : Store
        A store nobody changes while mounted; it must stay open while mounted.
    attr_timeout : float
        Seconds metadata may be served from caches before the store is asked again.
    kernel_cache : bool
        Keep ``open`` out of Python (mount with libfuse's ``kernel_cache`` or
        ``auto_cache`` option).
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
        self.immutable = True
        self._readers: OrderedDict[str, Handle] = OrderedDict()
        self._readers_lock = threading.Lock()
        if kernel_cache:
            # libfuse 3 passes ENOSYS from open on to the kernel, which then
            # never sends OPEN, FLUSH or RELEASE again and keeps pages as
            # kernel_cache does; libfuse 2 cannot, so it answers open itself.
            self.open = _decline_open if mfusepy.fuse_version_major >= 3 else None  # type: ignore[assignment]

    @fuse_operation
    def open(self, path: str, fi: Any) -> int:
        if fi.flags & os.O_ACCMODE != os.O_RDONLY:
            raise fail(errno.EROFS)
        fi.keep_cache = 1  # the one version there is
        return 0

    def _reader(self, path: str | None, fi: Any) -> Handle:
        """The read window shared by the readers of ``path``'s key (there are no handles)."""
        if path is None:
            raise fail(errno.EBADF)
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
    raise FuseOSError(errno.ENOSYS)


def operations_for(
    store: Store,
    *,
    read_only: bool = False,
    attr_timeout: float = 1.0,
    kernel_cache: bool = False,
    immutable: bool = False,
    on_ready: Callable[[], None] | None = None,
) -> StoreOperations:
    """The operations for a mount of ``store``.

    A read-only mount of data nobody changes while mounted (``immutable``: a
    snapshot; or ``kernel_cache``, where libfuse decides what the kernel
    keeps) gets ``ReadOnlyOperations``, without file handles; every other
    mount, read-only ones included, pins a version per open file.

    Examples
    --------
    >>> from zstores import MemoryStore
    >>> type(operations_for(MemoryStore(), read_only=True, immutable=True)).__name__
    'ReadOnlyOperations'
    >>> operations_for(MemoryStore(), read_only=True).read_only
    True
    """
    read_only = read_only or store.read_only
    if read_only and (immutable or kernel_cache):
        return ReadOnlyOperations(store, attr_timeout=attr_timeout, kernel_cache=kernel_cache,
                                  on_ready=on_ready)
    return StoreOperations(store, read_only=read_only, attr_timeout=attr_timeout,
                           on_ready=on_ready)
