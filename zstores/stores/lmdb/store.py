"""LMDBStore: keys and values in an LMDB environment (a memory-mapped B+tree)."""

from __future__ import annotations

import errno
import mmap
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import lmdb

from ...base import Buffer, Mode, Store, children_by_seek
from ...errors import (
    CorruptValueError,
    InvalidKeyError,
    ReadOnlyError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
    StoreNotFoundError,
    UnsupportedOperationError,
)
from ...keys import normalize_key
from ...readers import BufferReader, ValueReader
from .._reserve import SpaceReserve, free_bytes

if TYPE_CHECKING:
    from ...base import Version
    from ...transactions import ChangeSet

__all__ = ["DEFAULT_MAP_SIZE", "LMDBStore"]

T = TypeVar("T")

#: Map size a new environment starts with; the map doubles whenever it fills.
DEFAULT_MAP_SIZE = 1 << 30 if sys.maxsize > 2**32 else 1 << 26

# Map sizes are kept a multiple of this, which is a multiple of the page size
# (and of the allocation granularity) on every platform LMDB runs on.
_MAP_GRANULE = 1 << 16

# lmdb.open options that the store derives from its own parameters.
_MANAGED_OPTIONS = ("readonly", "create")

# What a transaction raises when this process must resize its map first.
_REMAP_ERRORS = (lmdb.MapFullError, lmdb.MapResizedError, lmdb.ReadersFullError)
_RETRY = object()

# How often one operation may grow or re-adopt the map before giving up.
_MAX_RETRIES = 64

# Room kept in the reserve file next to the data file (see _reserve.py): a
# delete on a full disk releases it, since copy-on-write needs new pages.
_RESERVE_BYTES = 1 << 20

# LMDB's lock file: a header, then one 64-byte slot per reader.  LMDB sizes a
# new one with ftruncate (a sparse file) and writes it through a shared map,
# so on a full disk opening an environment without one kills the process with
# SIGBUS; the store gives it real blocks first (releasing the reserve for the
# room if need be).  The header is given a page of its own here, generously.
_LOCK_HEADER_BYTES = 4096
_READER_SLOT_BYTES = 64

# Keys per transaction when a delete is retried on a full disk: each piece
# reuses the pages the pieces before it freed, so the room needed stays small.
_FULL_DISK_PIECE = 64

# A key no store key can equal (keys never hold NUL): put and deleted again in
# one transaction, it commits a transaction that changes no value.
_NUDGE_KEY = b"\x00zstores: not a key"

# A write that fails with EIO is taken for a full disk when the file system has
# less than this many bytes free beyond the write's own size: LMDB reports a
# short write (the disk filled up during it) as EIO, not ENOSPC.
_FULL_MARGIN = 1 << 20

# Zero-copy reads (getview/getviews): values of at least _VIEW_MIN_BYTES are
# handed out as read-only views of the map, which keep their read transaction
# open while they live; smaller ones are copied, which costs less than a view.
# Measured (warm, each value copied into an array and dropped, as zarr does;
# time per get): with 8 values held at once (zarr reads several chunks at a
# time) 16 KiB 5.1 us copied against 7.8 as a view, 32 KiB 6.1 against 8.2,
# 64 KiB 23.8 against 9.3 (from there a fresh copy faults its pages in),
# 1 MiB 542 against 88; each dropped at once, the copy stays cheaper up to
# 64 KiB (7.2 against 11.5 us).
_VIEW_MIN_BYTES = 64 << 10
# Before the first view, the map grows to this (zarr-python 2's map size on
# 64-bit platforms): the map cannot be resized while views live, and a map
# this size never needs to be for any data the disk holds.  Address space
# only: without writemap the data file stays the size of the data.
_VIEW_MAP_SIZE = 1 << 40
# How long a remap waits for views other threads hold (they are short-lived:
# zarr copies or decodes a chunk and drops it) before giving up.
_VIEW_WAIT_SECONDS = 5.0
# Read transactions views may hold at once, as a share of max_readers: the
# rest stay for other readers and processes; beyond, values are copied.
_VIEW_READER_SHARE = 8

# Values of at least this size are read with their pages asked for at once
# (madvise MADV_WILLNEED: one read-ahead of the whole value) before they are
# copied: a cold map otherwise faults in a read-ahead window at a time, which
# made cold 4 MiB chunks several times slower than read() of a file.
_PREFETCH_BYTES = 256 << 10

# Bytes committed between two requests to the kernel to start writing the data
# file to disk (Linux's sync_file_range with SYNC_FILE_RANGE_WRITE: it queues
# the dirty pages for writing and waits for none of them).  With sync=False a
# commit only reaches the page cache, and close() or flush() then waits for
# the disk to take everything written since the last flush at once (an
# fdatasync: for 64 MiB here 25-30 ms, as long as writing it took).  Asked
# every 4 MiB, the disk writes while the program goes on and the flush waits
# for little more than the last few MiB.  Only advice: what a commit, flush()
# or close() promises is unchanged, and a failed request is left for the
# flush to report.  The cost moves rather than goes: the writes themselves
# then share the machine with the disk's work (block allocation, and on this
# VM the host's I/O).  Measured on ext4 in a VM at load 0.8, zarr-python 3
# writing 64 MiB in 4 MiB chunks then closing, medians of 15 alternating
# runs: writing 29 -> 36 ms, close 36 -> 8 ms, in all 76 -> 59 ms (CPU 41 ->
# 46 ms); py-lmdb's raw loop of 4 MiB puts, 57 -> 39 ms.  Figures that time
# writes without the close that follows lose 15-30% (64 KiB sets).  Asking
# every 16 or 64 MiB, or from a thread of its own, measured no better.
_WRITEBACK_BYTES = 4 << 20
# Only values of at least this size count (_large_bytes).  Where values are
# large the disk's time dominates, and starting it early halves what a write
# and its close take (zarr 3, 64 MiB in 4 MiB chunks, bench_zarr at load
# 1.5-2, 3 rounds each of two runs: 410-1,088 MiB/s before, 439-1,616 after,
# most rounds 440 against 530-1,600).  Where they are small the writes' own
# CPU dominates: 64 KiB chunks wrote and closed no faster (224-276 against
# 244-259 MiB/s) while sets timed without their close lost 30% (64 KiB sets
# awaited one by one 24,000 -> 16,000 keys/s), so small values leave it all to
# the flush.  A setitems of many small values counts none of them.
_WRITEBACK_VALUE_BYTES = 1 << 20

# Errors by which LMDB says the file is not a sound environment.
_CORRUPT = (
    lmdb.CorruptedError,
    lmdb.InvalidError,
    lmdb.PageNotFoundError,
    lmdb.VersionMismatchError,
    lmdb.IncompatibleError,
    lmdb.BadChecksumError,
)

# The C library's codes py-lmdb reports only as text ("mdb_txn_commit: Input/
# output error"): recognised by their strerror at the end of the message.
_TEXT_CODES = (errno.EIO, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM,
               errno.EROFS, errno.ENOENT, errno.EAGAIN, errno.ENOMEM, errno.EFBIG)


def _errno_of(error: lmdb.Error) -> int | None:
    """The errno behind a py-lmdb exception, when it says (LMDB's own codes: None)."""
    if isinstance(error, lmdb.DiskError):
        return errno.ENOSPC
    if isinstance(error, lmdb.ReadonlyError):
        return errno.EACCES
    text = str(error)
    for code in _TEXT_CODES:
        if text.endswith(os.strerror(code)):
            return code
    return None


def _translate(what: str, error: lmdb.Error, *, folder: str, write: bool,
               payload: int = 0) -> OSError | ValueError:
    """The zstores error for a py-lmdb exception raised while working on ``what``.

    Disk full: ENOSPC/EDQUOT, a map that cannot grow, or (for a write) EIO
    while the file system has less than the write's size plus ``_FULL_MARGIN``
    free.  Any other EIO is an I/O failure: a StoreIOError.
    """
    code = _errno_of(error)
    if isinstance(error, lmdb.MapFullError):
        return StoreFullError(f"{what}: the map is full and could not grow ({error})")
    if isinstance(error, lmdb.MemoryError) or code == errno.ENOMEM:
        return StoreFullError(f"{what}: out of memory or address space for the map ({error})")
    if isinstance(error, _CORRUPT):
        return CorruptValueError(f"{what}: the environment is damaged or not LMDB ({error})")
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return StoreFullError(f"{what}: the disk is full ({error})")
    if code == errno.EIO and write:
        free = _free_or_none(folder)
        if free is not None and free < payload + _FULL_MARGIN:
            return StoreFullError(
                f"{what}: the disk is full ({free} bytes free; LMDB said {error})")
    if code == errno.EROFS:
        return ReadOnlyError(f"{what}: the file system is read-only; open with mode='r' ({error})")
    if code in (errno.EACCES, errno.EPERM):
        return ReadOnlyError(f"{what}: permission denied ({error})")
    if isinstance(error, lmdb.LockError) or code == errno.EAGAIN:
        return StoreLockedError(f"{what}: the environment is locked ({error})")
    if code == errno.ENOENT:
        return StoreNotFoundError(f"{what}: a file of the environment is missing ({error})")
    if isinstance(error, lmdb.BadValsizeError):
        return InvalidKeyError(f"{what}: LMDB refused the key or value size ({error})")
    return StoreIOError(code or errno.EIO, f"{what}: LMDB failed ({error})")


def _free_or_none(folder: str) -> int | None:
    try:
        return free_bytes(folder)
    except OSError:
        return None


class _Gate:
    """A readers/writer gate: transactions share it, remapping the file is exclusive.

    LMDB lets a process change its map size only while the process has no
    transaction open.  Every store call passes the gate, so entering it shared
    costs two atomic deque operations and one attribute read, no lock: a
    transaction first registers itself, then checks that no remap is wanted
    (and backs off if one is); a remap first says it is wanted, then waits
    until no transaction is registered.  One of the two always sees the
    other, so they never overlap.  Remaps are rare and go first, so a stream
    of transactions cannot starve them.  Not re-entrant: no code path nests
    ``shared()`` or takes ``exclusive()`` inside it.
    """

    def __init__(self) -> None:
        self._open: deque[None] = deque()  # one entry per transaction in progress
        self._wanted = False  # a remap is waiting or running
        self._remap = threading.Lock()  # one remap at a time
        self._done = threading.Condition(threading.Lock())  # signalled when a remap ends

    def enter_shared(self) -> None:
        """Register a transaction (plain calls: the read hot path avoids a generator)."""
        self._open.append(None)
        if self._wanted:
            self._open.pop()
            self._enter_after_remap()

    def _enter_after_remap(self) -> None:
        with self._done:
            while True:
                while self._wanted:
                    self._done.wait()
                self._open.append(None)
                if not self._wanted:
                    return
                self._open.pop()

    def leave_shared(self) -> None:
        self._open.pop()

    @contextmanager
    def shared(self) -> Iterator[None]:
        self.enter_shared()
        try:
            yield
        finally:
            self.leave_shared()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._remap:
            self._wanted = True
            try:
                pause = 1e-5
                while self._open:
                    time.sleep(pause)
                    pause = min(2 * pause, 1e-3)
                yield
            finally:
                with self._done:
                    self._wanted = False
                    self._done.notify_all()


class _SharedEnv:
    """One open environment, shared by every store on the same files in this process.

    LMDB forbids opening an environment twice in one process (its fcntl locks
    belong to the process, so closing one handle would drop the other's), and
    py-lmdb refuses it.
    """

    def __init__(self, key: str, opener: Callable[[bool], lmdb.Environment], readonly: bool,
                 writeback_file: str | None = None):
        self.key = key
        # The data file whose writing to disk commits start early (see
        # _WRITEBACK_BYTES), or None: not on this platform, or the environment
        # flushes every commit itself (sync=True) or writes through its map
        # (writemap=True, where written-back pages fault again when rewritten).
        self.writeback_file = writeback_file if _SYNC_FILE_RANGE is not None else None
        self.writeback_fd: int | None = None
        self.unwritten = 0  # bytes committed since writing back was last asked for
        # Opening, using and closing writeback_fd: a store closed while another
        # thread asks must neither leak a descriptor nor have its number reused.
        self.writeback_lock = threading.Lock()
        self.gate = _Gate()
        self.refs = 0
        # Snapshots holding a read transaction: py-lmdb ends every transaction
        # of an environment whose map is resized, so no remap while one lives.
        # Changed only inside the gate (shared), read inside it (exclusive).
        self.pins = 0
        # One entry per read transaction that zero-copy views keep open
        # (_ViewTxn): no remap while there is one.  Appended inside the gate.
        self.viewers: deque[None] = deque()
        self.view_local = threading.local()  # each thread's newest _ViewTxn
        self.view_txns: set[_ViewTxn] = set()  # every live one
        self.views_possible: bool | None = None  # None: the map was not made room for views yet
        self.max_view_txns = 1
        # Its last store closed while views lived: the last view closes it.
        self.orphaned = False
        # The process that opened it.  LMDB registers every reader slot under
        # that process's id, so in a forked child closing the environment
        # would clear the parent's slots, and a remap would end (free) the
        # parent's read transactions the child inherited (see inherit()).
        self.pid = os.getpid()
        # Read transactions of the parent (snapshots, views) this child has
        # parked instead of ending: never ended here, and no remap while any.
        self.inherited = 0
        self.env = opener(readonly)
        self.readonly = readonly
        self.map_size = self.env.info()["map_size"]

    def make_writable(self, opener: Callable[[bool], lmdb.Environment]) -> None:
        """Reopen a read-only environment read-write for a store that writes."""
        with self.gate.exclusive():
            self._refuse_while_pinned("open the environment for writing beside a snapshot "
                                      "of a read-only store")
            self.env.close()
            try:
                self.env = opener(False)
            except BaseException:
                self.env = opener(True)
                raise
            self.readonly = False
            self.map_size = self.env.info()["map_size"]

    def grow(self, seen: int, payload: int) -> None:
        """Enlarge the map after ``MapFullError`` unless another thread already did."""
        with self.gate.exclusive():
            if self.map_size != seen:
                return
            self._refuse_while_pinned("grow the map for this write")
            target = max(2 * seen, seen + 2 * payload + _MAP_GRANULE)
            self.env.set_mapsize(_round_up(target))
            self.map_size = self.env.info()["map_size"]

    def adopt(self) -> None:
        """Take over the map size another process grew the file to (``MapResizedError``)."""
        with self.gate.exclusive():
            self._refuse_while_pinned("follow the map another process grew")
            self.env.set_mapsize(0)
            self.map_size = self.env.info()["map_size"]

    def inherit(self, txn: lmdb.Transaction) -> None:
        """Park a read transaction this forked child inherited instead of ending it.

        Ending it here (an abort, py-lmdb's end of every transaction at a
        remap) would free the reader slot, which is the parent's: a writer
        could then reuse the pages the parent's snapshot or views still read.
        """
        _INHERITED_TXNS.append(txn)
        self.inherited += 1

    def _refuse_while_pinned(self, what: str) -> None:
        if self.inherited:
            raise StoreFullError(
                f"LMDB environment {self.key}: cannot {what} in this process: it was forked "
                f"from process {self.pid} while {self.inherited} read transaction(s) of that "
                "process (snapshots, zero-copy views) were open, and resizing the map here "
                "would end them and free the parent's reader slots; write from a process "
                "started with 'spawn' or 'forkserver', or fork before taking snapshots"
            )
        if self.viewers:
            self._wait_for_views()
        if self.pins:
            raise StoreFullError(
                f"LMDB environment {self.key}: cannot {what} while {self.pins} snapshot(s) of "
                "it are open in this process (resizing the map would end their read "
                "transactions); close the snapshots and try again"
            )
        if self.viewers:
            raise StoreFullError(
                f"LMDB environment {self.key}: cannot {what} while zero-copy views of its "
                f"values (getview/getviews, {len(self.viewers)} read transaction(s)) are "
                f"still referenced in this process after {_VIEW_WAIT_SECONDS:g} s (resizing "
                "the map would pull the memory from under them); drop them and try again"
            )

    def _wait_for_views(self) -> None:
        """Give views that other threads hold a moment to go (inside the exclusive gate).

        No new view can start meanwhile (the gate is held), so the count only falls.
        """
        deadline = time.monotonic() + _VIEW_WAIT_SECONDS
        pause = 1e-4
        while self.viewers and time.monotonic() < deadline:
            time.sleep(pause)
            pause = min(2 * pause, 0.05)

    def room_for_views(self, data_file: str) -> bool:
        """Whether views may be handed out: the map made large first, once (see ``_VIEW_MAP_SIZE``).

        False where so large a map is not wise or possible (32-bit platforms,
        Windows, where LMDB makes the file as large as the map, or a limit on
        the address space: a failed remap would leave the environment without
        a map); values are then copied.
        """
        if self.views_possible is not None:
            return self.views_possible
        possible = _large_maps_possible()
        if possible:
            target = _round_up(max(_VIEW_MAP_SIZE, 2 * _file_size(data_file)))
            with self.gate.exclusive():
                if target > self.map_size and not (self.pins or self.viewers):
                    self.env.set_mapsize(target)
                    self.map_size = self.env.info()["map_size"]
                possible = self.map_size >= target
        self.max_view_txns = max(1, self.env.max_readers() // _VIEW_READER_SHARE)
        self.views_possible = possible
        return possible

    def headroom_for_snapshot(self, data_file: str) -> None:
        """Grow the map well past the data before the first snapshot pins it.

        Address space is cheap (the map is not memory): 1 GiB of room beyond
        the data file lets writers go on for long before the map must grow,
        which it cannot while a snapshot lives.
        """
        if self.readonly or self.pins:
            return
        target = _round_up(_file_size(data_file) + DEFAULT_MAP_SIZE)
        if target > self.map_size:
            with self.gate.exclusive():
                if self.pins or target <= self.map_size:
                    return
                self.env.set_mapsize(target)
                self.map_size = self.env.info()["map_size"]

    def committed(self, nbytes: int) -> None:
        """Count ``nbytes`` of large values just committed; past ``_WRITEBACK_BYTES``,
        start writing them back (see ``_WRITEBACK_VALUE_BYTES``).

        Called outside the gate: the request touches the file, not the map.
        Threads may race on the count; it only decides when to ask.
        """
        if self.writeback_file is None:
            return
        self.unwritten += nbytes
        if self.unwritten >= _WRITEBACK_BYTES:
            self.unwritten = 0
            self._start_writeback()

    def _start_writeback(self) -> None:
        with self.writeback_lock:
            path = self.writeback_file
            if path is None:  # closed meanwhile, or no descriptor to be had
                return
            fd = self.writeback_fd
            if fd is None:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    self.writeback_file = None  # advice only: carry on without it
                    return
                self.writeback_fd = fd
            assert _SYNC_FILE_RANGE is not None
            # The whole file: only its dirty pages not being written yet are queued.
            _SYNC_FILE_RANGE(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)

    def _stop_writeback(self) -> None:
        with self.writeback_lock:
            self.writeback_file = None
            fd, self.writeback_fd = self.writeback_fd, None
        if fd is not None:
            os.close(fd)

    def sync(self) -> None:
        with self.gate.shared():
            self.env.sync(True)
        self.unwritten = 0

    def close(self) -> None:
        with self.gate.exclusive():
            self._stop_writeback()
            if not self.readonly:
                self.env.sync(True)
            if os.getpid() != self.pid:
                # A forked child: LMDB's close clears every reader slot of the
                # opening process, i.e. the parent's live read transactions.
                # The environment is left to the process's exit instead.
                _INHERITED_ENVS.append(self.env)
                return
            self.env.close()


class _ViewTxn:
    """A read transaction kept open while zero-copy views of values read in it live.

    Each view is a read-only numpy array over the map (handed out as a
    ``memoryview`` of it; whatever is made from it, zarr's buffers included,
    keeps the array alive through its ``base``).  The transaction tracks its
    arrays by weak reference and ends when the last one is gone, freeing its
    reader slot and the pages it pinned.  LMDB never changes the pages a live
    read transaction can reach, and the map is not resized while one exists
    (``_SharedEnv.viewers``), so a view's bytes stay valid and unchanged for
    as long as anything can read them.  The environment keeps every live one
    (``_SharedEnv.view_txns``): a weak reference's callback only runs while
    the reference itself lives.
    """

    __slots__ = ("txn", "txnid", "shared", "pid", "arrays", "lock", "busy")

    def __init__(self, shared: _SharedEnv, txn: lmdb.Transaction) -> None:
        self.txn: lmdb.Transaction | None = txn
        self.txnid = txn.id()
        self.shared = shared
        self.pid = os.getpid()
        self.arrays: dict[int, weakref.ref[Any]] = {}
        # Re-entrant: an array of this transaction may die (and its callback
        # run) in the thread that is reading through it.
        self.lock = threading.RLock()
        self.busy = False
        shared.viewers.append(None)
        shared.view_txns.add(self)

    def read(self, keys: list[bytes]) -> list[Buffer | None] | None:
        """The values of ``keys`` (views of the large ones), or None if it has ended."""
        with self.lock:
            txn = self.txn
            if txn is None:
                return None
            self.busy = True
            try:
                found = [self._view(txn.get(key)) for key in keys]
            finally:
                self.busy = False
            if not self.arrays:
                self.end()  # nothing refers to it: no transaction stays open idle
            return found

    def _view(self, value: Any) -> Buffer | None:
        if value is None:
            return None
        if len(value) < _VIEW_MIN_BYTES:
            return bytes(value)
        if len(value) >= _PREFETCH_BYTES:
            _prefetch(value)  # zarr copies or decodes it next
        import numpy as np

        array = np.frombuffer(value, np.uint8)  # read-only: the memoryview is
        ref = weakref.ref(array, self._gone)
        self.arrays[id(ref)] = ref
        return memoryview(array)

    def _gone(self, ref: weakref.ref[Any]) -> None:
        with self.lock:
            self.arrays.pop(id(ref), None)
            if not self.arrays and not self.busy:
                self.end()

    def end(self) -> None:
        """End the transaction (once); the environment may resize its map again."""
        txn, self.txn = self.txn, None
        if txn is None:
            return
        shared = self.shared
        if os.getpid() != self.pid:
            # Inherited through fork: its reader slot is the parent's, which
            # an abort here would free under the parent's views.
            shared.inherit(txn)
        else:
            txn.abort()
        shared.view_txns.discard(self)
        shared.viewers.pop()
        if shared.orphaned:
            _close_orphan(shared)


#: Read transactions (views, snapshots) a forked child inherited: never ended in the child.
_INHERITED_TXNS: list[lmdb.Transaction] = []
#: Environments a forked child inherited and its stores closed: never closed in the child.
_INHERITED_ENVS: list[lmdb.Environment] = []


def _large_maps_possible() -> bool:
    """Whether a map of ``_VIEW_MAP_SIZE`` costs only address space here."""
    if sys.maxsize <= 2**32 or sys.platform == "win32":
        return False
    try:
        import resource
    except ImportError:
        return False
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return soft == resource.RLIM_INFINITY


def _close_orphan(shared: _SharedEnv) -> None:
    """Close an environment whose stores are all closed, once its last view is gone.

    A view may go at any moment (a garbage collection), also in a thread that
    holds another environment's gate while some thread holding the lock waits
    for that gate: without the lock at once, the next store opened or closed
    closes it (``_close_pending_orphans``).
    """
    if not _ENVIRONMENTS_LOCK.acquire(blocking=False):
        _PENDING_ORPHANS.append(shared)
        return
    try:
        _close_if_orphaned(shared)
    finally:
        _ENVIRONMENTS_LOCK.release()


def _close_if_orphaned(shared: _SharedEnv) -> None:
    """With ``_ENVIRONMENTS_LOCK`` held: close ``shared`` if no store or view uses it."""
    if (shared.orphaned and not shared.refs and not shared.viewers
            and _ENVIRONMENTS.get(shared.key) is shared):
        del _ENVIRONMENTS[shared.key]
        shared.close()


def _close_pending_orphans() -> None:
    """With ``_ENVIRONMENTS_LOCK`` held: close the orphans left for later."""
    while _PENDING_ORPHANS:
        _close_if_orphaned(_PENDING_ORPHANS.pop())


_PENDING_ORPHANS: list[_SharedEnv] = []


_ENVIRONMENTS: dict[str, _SharedEnv] = {}
_ENVIRONMENTS_LOCK = threading.RLock()  # re-entrant: a store's __del__ may run inside it


def _after_fork_in_child() -> None:
    # py-lmdb refuses to reopen an environment a forked child inherited, so the
    # child keeps using the inherited one; only the Python locks, which another
    # parent thread may have held at the fork, are renewed.
    global _ENVIRONMENTS_LOCK
    _ENVIRONMENTS_LOCK = threading.RLock()
    for shared in _ENVIRONMENTS.values():
        shared.gate = _Gate()
        shared.writeback_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _round_up(size: int) -> int:
    return -(-size // _MAP_GRANULE) * _MAP_GRANULE


class LMDBStore(Store):
    """Keys and values in an LMDB environment, safe for many threads and processes.

    The on-disk layout is zarr-python 2's ``LMDBStore``: the default (unnamed)
    database of the environment at ``path``, keys as UTF-8 bytes, values as
    stored.  Each reads what the other wrote.

    The memory map starts at ``map_size`` (or the data file's size, if larger)
    and doubles whenever a write finds it full, so there is no need to guess a
    size up front; when another process has grown the map, this one adopts the
    new size.  ``store[key]``, ``getitems`` and range reads hand out ``bytes``
    copied inside the read transaction, so remapping cannot invalidate them.

    ``getview``/``getviews`` (what the zarr adapters read with) hand out
    values of 64 KiB or more without a copy: read-only ``memoryview``s of
    numpy arrays over the map.  Each keeps its read transaction open until
    the last object made from it (numpy arrays, zarr buffers) is gone, so
    no later write, here or in another process, changes its bytes; the
    transaction is shared by the views a thread takes until the next commit.
    Before the first view the map is made 1 TiB (address space only: the
    file stays the size of the data), because the map cannot be resized
    while a view lives: a write that would need it to grow waits 5 s for
    views to go, then raises ``StoreFullError`` saying so.  Views use at most
    an eighth of ``max_readers`` read transactions; past that, values are
    copied.  A view also keeps LMDB from reusing the pages it shows, so drop
    views when done: a view held for long makes a busy writer's file grow.

    The map is read-only by default (``writemap=False``), unlike zarr-python
    2's on Linux.  With a writable map, a write into the sparse data file on a
    full disk kills the process with ``SIGBUS`` instead of raising
    ``lmdb.Error``, a stray write through the map can reach the data, and the
    data file shows the whole map size.  Python code cannot write through the
    map (py-lmdb's views are read-only); C code in the process can (an
    extension's bug, ctypes), and with a writable map its damage is committed
    with the next transaction instead of crashing the process.  Measured on
    Linux (ext4, one process), it left single-key gets as fast and single-key
    sets no faster (with 1 MiB values several times slower); zarr-python 3
    writing 1 MiB chunks used more CPU with it (6.9 against 2.3 ms per MB),
    zarr-python 2.18 less (2.8 against 3.5), see docs/parallel-writes.md.
    Pass ``writemap=True`` while
    zarr-python 2 processes use the same environment: LMDB warns that mixing
    the two modes can defeat ``flush()`` and ``sync=True``.

    A full disk raises ``StoreFullError`` (errno ``ENOSPC``) naming the store,
    py-lmdb's exception chained: for ``ENOSPC``, for a map that cannot grow,
    and for the ``EIO`` LMDB reports when a write was cut short, if the file
    system then has less free than the write plus 1 MiB (any other ``EIO`` is
    a ``StoreIOError``).  The failed transaction is aborted, so every value
    committed before stays, and a failed overwrite leaves the old value.
    Copy-on-write needs free pages even to delete, so a writable store keeps
    a 1 MiB reserve file, ``data.mdb.zstores-reserve`` (``<path>.zstores-reserve``
    with ``subdir=False``; it holds no data and may be deleted at any time):
    a delete that finds the disk full releases it and deletes in pieces of
    64 keys, each reusing the pages the pieces before freed; the reserve is
    set aside again from what room is left.  LMDB never gives space back to
    the file system: deleted pages are reused for new values.  Opening needs
    room only for LMDB's lock file, which the store allocates before LMDB
    maps it (a sparse one on a full disk would kill the process with
    ``SIGBUS``), from the reserve if the disk is full; without room it
    raises ``StoreFullError``.  Other py-lmdb
    errors become ``CorruptValueError`` (a damaged or foreign file),
    ``ReadOnlyError`` (permissions, read-only media), ``StoreLockedError`` or
    ``StoreIOError``; no bare ``lmdb.Error`` reaches the caller.

    Mode ``"r"`` on read-only media, where LMDB cannot open its lock file
    for writing, opens the environment without LMDB's locks
    (``lock=False``): nothing can write there, so it reads one consistent
    state.  A folder that is only unwritable to this user (others may write)
    is not opened that way: it raises ``ReadOnlyError``.

    Every store on the same environment in one process shares one LMDB handle
    (LMDB forbids opening an environment twice in a process); its options are
    those of the first store opened.  Processes started with ``spawn`` or
    ``forkserver`` reopen the environment when the store is unpickled.

    Parameters
    ----------
    path : str or os.PathLike
        The environment: a directory holding ``data.mdb`` and ``lock.mdb``
        (``subdir=True``), or the data file itself (``subdir=False``).
    map_size : int, optional
        Initial map size in bytes; default ``DEFAULT_MAP_SIZE`` (1 GiB on 64-bit
        platforms).  It only sets where growth starts.
    sync : bool
        ``False`` (default, as zarr-python 2): commits are not flushed to disk
        one by one; ``close()`` and ``flush()`` flush.  A crash of the process
        never loses or corrupts committed data.  An operating-system crash or
        power loss may lose the latest commits and, as LMDB documents for this
        mode, may even leave the file corrupt if the disk reordered writes;
        ``True`` flushes every commit, which rules both out.  On Linux, with
        ``sync=False`` and no ``writemap``, the store asks the kernel to start
        writing the file to disk every 4 MiB committed in values of 1 MiB or
        more (``sync_file_range``, which waits for nothing), so the flush at
        ``close()`` waits for little more than the last 4 MiB of them
        instead of for everything written; neither promise changes (the
        kernel writes dirty pages back on its own within about 30 s anyway).
        Smaller values are left to the flush: for them the writes' own CPU,
        not the disk, is what a write and its close take.
    lock : bool
        ``True`` (default) uses LMDB's locks so several processes may read and
        write.  ``False`` leaves all coordination between processes to the
        caller (``supports_process_writers`` is then ``False``).
    subdir : bool
        Whether ``path`` is a directory (default, zarr-python 2's layout).
    max_readers : int
        Read transactions open at once across all processes; fixed by the first
        process that opens the environment.
    max_spare_txns : int
        Finished read transactions this process keeps for reuse.
    mode : {"a", "r", "r+", "w", "w-"}
        ``"r"`` opens the environment read-only (it must exist); ``"r+"``
        requires it to exist; ``"a"`` creates it if missing; ``"w"`` clears it;
        ``"w-"`` refuses an existing one.
    **lmdb_kwargs
        Further options for ``lmdb.open`` (``writemap``, ``readahead``,
        ``meminit`` ...); ``readonly`` and ``create`` follow from ``mode``.

    Attributes
    ----------
    supports_range_reads : bool
        True: a range is sliced out inside the read transaction.
    supports_process_writers : bool
        True (unless ``lock=False``): LMDB serializes writers across processes.
    max_value_size : int
        4 GiB - 1, LMDB's limit for one value.  Keys are limited to the
        environment's maximum key size (511 bytes of UTF-8).

    Examples
    --------
    >>> import tempfile, os
    >>> from zstores.stores.lmdb import LMDBStore
    >>> path = os.path.join(tempfile.mkdtemp(), "data.lmdb")
    >>> with LMDBStore(path, map_size=1 << 20) as store:
    ...     store["foo/.zarray"] = b"{}"
    ...     store["foo/0.0"] = bytes(4 << 20)  # larger than the map: it grows
    ...     store.listdir("foo"), store.get_range("foo/.zarray", 1)
    (['.zarray', '0.0'], b'}')
    """

    supports_range_reads = True
    supports_process_writers = True
    max_value_size = 0xFFFFFFFF
    blocking = False  # a read is a memory copy out of the map
    supports_transactions = True
    supports_snapshots = True
    supports_create_if_absent = True  # put(overwrite=False) in a write transaction
    supports_compare_and_swap = True  # compared and put in one write transaction

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int | None = None,
        sync: bool = False,
        lock: bool = True,
        subdir: bool = True,
        max_readers: int = 512,
        max_spare_txns: int = 4,
        mode: Mode = "a",
        **lmdb_kwargs: Any,
    ) -> None:
        super().__init__(mode=mode)
        self._shared: _SharedEnv | None = None
        for name in _MANAGED_OPTIONS:
            if name in lmdb_kwargs:
                raise TypeError(
                    f"LMDBStore sets lmdb.open's {name!r} option from mode=; do not pass it"
                )
        if map_size is not None and (not isinstance(map_size, int) or map_size <= 0):
            raise ValueError(
                f"map_size must be a positive number of bytes or None, not {map_size!r}"
            )
        self._path = os.path.abspath(os.fspath(path))
        self._map_size_option = map_size
        self._subdir = subdir
        self._options = {
            "subdir": subdir,
            "lock": lock,
            "sync": sync,
            "max_readers": max_readers,
            "max_spare_txns": max_spare_txns,
            **lmdb_kwargs,
        }
        self._options.setdefault("metasync", sync)
        if not lock:
            self.supports_process_writers = False

        data_file = os.path.join(self._path, "data.mdb") if subdir else self._path
        self._data_file = data_file
        key = os.path.realpath(self._path)
        writable = mode != "r"

        self._folder = os.path.dirname(data_file)
        self._reserve = SpaceReserve(data_file, _RESERVE_BYTES)

        def opener(readonly: bool) -> lmdb.Environment:
            for attempt in range(_MAX_RETRIES):
                size = max(map_size or DEFAULT_MAP_SIZE, _file_size(data_file))
                options = {
                    "map_size": _round_up(size),
                    "readonly": readonly,
                    "create": not readonly and mode not in ("r", "r+"),
                    **self._options,
                }
                try:
                    return lmdb.open(self._path, **options)
                except lmdb.MapResizedError:
                    # Another process wrote past the map sized from the file
                    # a moment ago, before py-lmdb's first transaction: size
                    # it again from the file as it is now.
                    if attempt == _MAX_RETRIES - 1:
                        raise
                except lmdb.Error as error:
                    if not (readonly and options["lock"] and _errno_of(error) == errno.EROFS):
                        raise
                    break
            # Read-only media: LMDB cannot open its lock file for writing.
            # Nothing can write the environment there either, so reading it
            # without LMDB's locks sees one consistent state.
            return lmdb.open(self._path, **{**options, "lock": False})

        with self._translated(write=writable), _ENVIRONMENTS_LOCK:
            shared = _ENVIRONMENTS.get(key)
            self._check_existence(shared is not None or os.path.isfile(data_file))
            if shared is None:
                if mode not in ("r", "r+"):
                    os.makedirs(
                        self._path if subdir else os.path.dirname(self._path), exist_ok=True
                    )
                if self._options["lock"]:
                    self._allocate_lock_file(max_readers)
                early = not (self._options["sync"] or self._options.get("writemap"))
                shared = _SharedEnv(key, opener, readonly=not writable,
                                    writeback_file=data_file if early else None)
                _ENVIRONMENTS[key] = shared
            elif writable and shared.readonly:
                shared.make_writable(opener)
            shared.refs += 1
            shared.orphaned = False
            _close_pending_orphans()
            self._shared = shared
        self._max_key_size = shared.env.max_key_size()
        if writable:
            self._reserve.ensure()
        self._clear_if_mode_w()

    def _allocate_lock_file(self, max_readers: int) -> None:
        """Give LMDB's lock file real blocks before LMDB maps it (see ``_LOCK_HEADER_BYTES``).

        On a full disk the reserve (no data) is released for the room; with
        none, the store refuses to open with ``StoreFullError`` instead of
        letting LMDB die of ``SIGBUS``.  Blocks already allocated are left
        as they are, so this is safe while other processes use the file.
        Where the lock file cannot be opened for writing (read-only media,
        permissions) LMDB's own open says what is wrong.
        """
        lock_path = os.path.join(self._path, "lock.mdb") if self._subdir else self._path + "-lock"
        existed = os.path.exists(lock_path)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                         self._options.get("mode", 0o755))
        except OSError:
            return
        try:
            size = max(os.fstat(fd).st_size,
                       _LOCK_HEADER_BYTES + _READER_SLOT_BYTES * max_readers)
            for attempt in range(2):
                try:
                    os.posix_fallocate(fd, 0, size)
                    return
                except OSError as error:
                    if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                        return  # no fallocate here: LMDB does as it always did
                    if attempt or not self._reserve.release():
                        if not existed:
                            os.unlink(lock_path)
                        raise StoreFullError(
                            f"{self!r}: cannot open: the disk is full and LMDB's lock file "
                            f"{lock_path} needs {size} bytes; free space on the disk and "
                            f"open the store again"
                        ) from error
        finally:
            os.close(fd)

    # --------------------------------------------------------------- errors
    def _error(self, error: lmdb.Error, write: bool, payload: int = 0) -> OSError | ValueError:
        return _translate(repr(self), error, folder=self._folder, write=write, payload=payload)

    @contextmanager
    def _translated(self, write: bool) -> Iterator[None]:
        """Raise py-lmdb's exceptions as zstores errors naming the store, chained."""
        try:
            yield
        except lmdb.Error as error:
            raise self._error(error, write) from error

    def _freeing(self, attempt: Callable[[], None], in_pieces: Callable[[], None]) -> None:
        """Run a delete; on a full disk release the reserve and run it in pieces.

        Copy-on-write needs free pages even to delete, and a full disk has
        none: the reserve file gives them.  Each piece commits on its own and
        the next reuses the pages it freed, so a large delete needs only a few
        pages of room; a delete that fails part way has deleted the pieces
        before.  The reserve is set aside again when the disk has room.
        """
        try:
            attempt()
            return
        except StoreFullError:
            self._reserve.release()
        in_pieces()
        self._reserve.ensure()

    def _after_nudge(self, attempt: Callable[[], T]) -> T:
        """Retry a write that found the disk full, once the pages freed last are reusable.

        LMDB keeps the pages the latest commit freed for readers of the
        snapshot before it: only the commit after next may reuse them.  After
        a delete the first write would thus find no room although the delete
        made some; one commit that changes no value (a key that cannot exist,
        put and deleted) makes the delete's pages reusable.
        """
        def nudge(txn: lmdb.Transaction) -> None:
            txn.put(_NUDGE_KEY, b"")
            txn.delete(_NUDGE_KEY)

        self._run(nudge, write=True)
        return attempt()

    def _delete_in_pieces(self, keys: list[str]) -> None:
        for i in range(0, len(keys), _FULL_DISK_PIECE):
            piece = [key.encode() for key in keys[i : i + _FULL_DISK_PIECE]]
            self._run(lambda txn, piece=piece: [txn.delete(key) for key in piece], write=True)

    # --------------------------------------------------------- transactions
    def _run(
        self, work: Callable[[lmdb.Transaction], T], *, write: bool = False, payload: int = 0,
        large: int = 0,
    ) -> T:
        """Run ``work`` in one transaction, growing or re-adopting the map as needed.

        Read transactions use ``buffers=True`` (values are views of the map),
        so ``work`` must copy what it returns.  ``payload`` is the number of
        bytes a write adds, to grow the map enough in one step; ``large`` the
        bytes of its large values, counted for early writeback once it commits.
        """
        shared = self._shared
        assert shared is not None
        try:
            for _ in range(_MAX_RETRIES):
                with shared.gate.shared():
                    seen = shared.map_size
                    try:
                        with shared.env.begin(write=write, buffers=not write) as txn:
                            result = work(txn)
                    except _REMAP_ERRORS as error:
                        problem = error
                    else:
                        problem = None
                if problem is None:
                    if large:
                        shared.committed(large)
                    return result
                if isinstance(problem, lmdb.MapFullError):
                    shared.grow(seen, payload)
                elif isinstance(problem, lmdb.MapResizedError):
                    shared.adopt()
                else:
                    # Slots may be held by processes that died; free them once.
                    if shared.env.reader_check() == 0:
                        raise problem
        except lmdb.Error as error:
            # No bare py-lmdb exception leaves the store (a try costs nothing
            # until something raises).
            raise self._error(error, write, payload) from error
        raise StoreFullError(
            f"{self!r}: the map kept filling up after {_MAX_RETRIES} enlargements"
        )

    # ------------------------------------------------------------ primitives
    def _key(self, key: str) -> str:
        # normalize_key is what Store._key is; calling it directly spares the
        # super() lookup on every call.
        key = normalize_key(key)
        if len(key) <= self._max_key_size and key.isascii():
            return key
        size = len(key.encode("utf-8"))  # normalize_key refused lone surrogates
        if size > self._max_key_size:
            raise InvalidKeyError(
                f"invalid key {key[:60]!r}...: it is {size} bytes in UTF-8 and LMDB keys "
                f"hold at most {self._max_key_size} bytes"
            )
        return key

    def _get(self, key: str) -> bytes:
        # The hot path: one read transaction, no closure, no retry loop; the
        # value is copied into bytes inside the transaction, once (_copy asks
        # for a large value's pages first).
        encoded = key.encode()
        shared = self._shared
        gate = shared.gate  # type: ignore[union-attr]
        gate.enter_shared()
        try:
            with shared.env.begin(buffers=True) as txn:  # type: ignore[union-attr]
                value = _copy(txn.get(encoded))
        except _REMAP_ERRORS:
            value = _RETRY
        except lmdb.Error as error:
            raise self._error(error, False) from error
        finally:
            gate.leave_shared()
        if value is _RETRY:  # outside the gate: growing the map needs it exclusive
            value = self._run(lambda txn: _copy(txn.get(encoded)))
        if value is None:
            raise KeyError(key)
        return value

    def _getview(self, key: str) -> Buffer:
        # A view of the map through this thread's view transaction while it
        # still sees the newest commit (else a new one); anything unusual (no
        # room for views, a map to adopt, readers used up) copies instead.
        found = self._read_views([key])
        if found is None:
            return self._get(key)
        value = found[0]
        if value is None:
            raise KeyError(key)
        return value

    def _open_reader(self, key: str) -> ValueReader:
        # The value as a view (its read transaction pins the pages) or a
        # copy; its version is the environment's last commit, when no commit
        # came between the two looks around the read (then the read saw that
        # commit's state; a commit in any process changes the id).
        before = self._last_txnid()
        value = self._getview(key)
        return BufferReader(key, value, None if self._last_txnid() != before else
                            ("lmdb", before))

    def _last_txnid(self) -> int:
        shared = self._shared
        gate = shared.gate  # type: ignore[union-attr]
        gate.enter_shared()  # never while the map is being remapped
        try:
            return shared.env.info()["last_txnid"]  # type: ignore[union-attr]
        finally:
            gate.leave_shared()

    def _getviews(self, keys: list[str]) -> dict[str, Buffer]:
        found = self._read_views(keys)
        if found is None:
            return self._get_many(keys)
        return {key: value for key, value in zip(keys, found, strict=True) if value is not None}

    def _read_views(self, keys: list[str]) -> list[Buffer | None] | None:
        """The values of ``keys`` (None where missing) in one view transaction, or None.

        None: views are not possible now; the caller copies instead (which
        also grows or adopts the map, or reports what LMDB said).
        """
        shared = self._shared
        assert shared is not None
        if not (shared.views_possible or self._room_for_views(shared)):
            return None
        encoded = [key.encode() for key in keys]
        gate = shared.gate
        gate.enter_shared()
        try:
            holder = _view_txn(shared)
            return None if holder is None else holder.read(encoded)
        except lmdb.Error:
            return None
        finally:
            gate.leave_shared()

    def _room_for_views(self, shared: _SharedEnv) -> bool:
        if shared.views_possible is not None:
            return shared.views_possible
        with self._translated(write=False):
            return shared.room_for_views(self._data_file)

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        def work(txn: lmdb.Transaction) -> bytes:
            value = txn.get(key.encode())
            if value is None:
                raise KeyError(key)
            size = len(value)
            first = start if start >= 0 else max(size + start, 0)
            stop = size if length is None else min(first + length, size)
            return _copy(value[first:stop])

        return self._run(work)

    def _set(self, key: str, value: Buffer) -> None:
        # The hot path, as _get's: one write transaction, no closure, no retry
        # loop.  Anything LMDB refuses (a full map, a map another process
        # grew, a full disk) goes to the general path below, which grows,
        # re-adopts or reports; writing the same value again is harmless.
        encoded = key.encode()
        shared = self._shared
        gate = shared.gate  # type: ignore[union-attr]
        gate.enter_shared()
        try:
            with shared.env.begin(write=True) as txn:  # type: ignore[union-attr]
                txn.put(encoded, value)
            done = True
        except lmdb.Error:
            done = False
        finally:
            gate.leave_shared()
        large = len(value) if len(value) >= _WRITEBACK_VALUE_BYTES else 0
        if done:
            if large:
                shared.committed(large)  # type: ignore[union-attr]
            return

        def work(txn: lmdb.Transaction) -> None:
            txn.put(encoded, value)

        def attempt() -> None:
            self._run(work, write=True, payload=len(value), large=large)

        try:
            attempt()
        except StoreFullError:
            self._after_nudge(attempt)

    def _delete(self, key: str) -> None:
        def work(txn: lmdb.Transaction) -> None:
            if not txn.delete(key.encode()):
                raise KeyError(key)

        def attempt() -> None:
            self._run(work, write=True)

        self._freeing(attempt, attempt)

    def _contains(self, key: str) -> bool:
        return self._run(lambda txn: txn.get(key.encode()) is not None)

    def _list_prefix(self, prefix: str) -> list[str]:
        def work(txn: lmdb.Transaction) -> list[str]:
            return [bytes(k).decode() for k in _keys_under(txn.cursor(), prefix.encode())]

        return self._run(work)

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        def work(txn: lmdb.Transaction) -> dict[str, bytes]:
            views = [(key, txn.get(key.encode())) for key in keys]
            for _, value in views:  # every large value's read-ahead started before any copy
                if value is not None and len(value) >= _PREFETCH_BYTES:
                    _prefetch(value)
            return {key: bytes(value) for key, value in views if value is not None}

        return self._run(work)

    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        if not items:
            return

        def work(txn: lmdb.Transaction) -> None:
            for key, value in items:
                txn.put(key.encode(), value)

        def attempt() -> None:
            self._run(work, write=True, payload=sum(len(value) for _, value in items),
                      large=_large_bytes(value for _, value in items))

        try:
            attempt()
        except StoreFullError:
            self._after_nudge(attempt)

    def _delete_many(self, keys: list[str]) -> None:
        if not keys:
            return

        def work(txn: lmdb.Transaction) -> None:
            for key in keys:
                txn.delete(key.encode())

        self._freeing(lambda: self._run(work, write=True), lambda: self._delete_in_pieces(keys))

    def _listdir(self, prefix: str) -> list[str]:
        encoded = prefix.encode()

        def work(txn: lmdb.Transaction) -> list[str]:
            cursor = txn.cursor()

            def first_key_from(lower: str) -> str | None:
                if not cursor.set_range(lower.encode()):
                    return None
                key = bytes(cursor.key())
                return key.decode() if key.startswith(encoded) else None

            return children_by_seek(prefix, first_key_from)

        return self._run(work)

    def _rmdir(self, prefix: str) -> None:
        encoded = prefix.encode()

        def work(txn: lmdb.Transaction) -> None:
            cursor = txn.cursor()
            if cursor.set_range(encoded):
                # delete() moves to the next entry; past the last one key() is b"".
                while cursor.key().startswith(encoded) and cursor.delete():
                    pass

        self._freeing(
            lambda: self._run(work, write=True),
            lambda: self._delete_in_pieces(self._list_prefix(prefix)),
        )

    def _getsize_key(self, key: str) -> int:
        def work(txn: lmdb.Transaction) -> int:
            value = txn.get(key.encode())
            if value is None:
                raise KeyError(key)
            return len(value)

        return self._run(work)

    def _stat(self, key: str) -> int | None:
        # One read transaction; the value is a view of the map, never copied.
        def work(txn: lmdb.Transaction) -> int | None:
            value = txn.get(key.encode())
            return None if value is None else len(value)

        return self._run(work)

    def _getsize_prefix(self, prefix: str) -> int:
        encoded = prefix.encode()

        def work(txn: lmdb.Transaction) -> int:
            cursor = txn.cursor()
            if not cursor.set_range(encoded):
                return 0
            total = 0
            for key, value in cursor.iternext(keys=True, values=True):
                if not bytes(key).startswith(encoded):
                    break
                total += len(value)
            return total

        return self._run(work)

    def _rename_key(self, src: str, dst: str) -> None:
        def work(txn: lmdb.Transaction) -> None:
            value = txn.get(src.encode())
            if value is None:
                raise KeyError(src)
            txn.put(dst.encode(), value)
            txn.delete(src.encode())

        self._run(work, write=True)

    def _rename_prefix(self, src_prefix: str, dst_prefix: str) -> None:
        def work(txn: lmdb.Transaction) -> None:
            old = [bytes(k).decode() for k in _keys_under(txn.cursor(), src_prefix.encode())]
            moves = {key: dst_prefix + key[len(src_prefix) :] for key in old}
            # A target can be another source key only when the source lies
            # inside the destination; its target is then shorter, so moving
            # shorter keys first reads every source before it is overwritten.
            for key in sorted(old, key=len):
                txn.put(moves[key].encode(), txn.get(key.encode()))
            targets = set(moves.values())
            for key in old:
                if key not in targets:
                    txn.delete(key.encode())

        self._run(work, write=True)

    def _len(self) -> int:
        shared = self._shared
        assert shared is not None
        return self._run(lambda txn: txn.stat(shared.env.open_db())["entries"])

    def _clear(self) -> None:
        shared = self._shared
        assert shared is not None
        self._freeing(
            lambda: self._run(lambda txn: txn.drop(shared.env.open_db(), delete=False),
                              write=True),
            lambda: self._delete_in_pieces(self._list_prefix("")),
        )

    # ------------------------------------------ transactions and snapshots
    def _commit_changes(self, changes: ChangeSet) -> None:
        # One write transaction: LMDB serializes writers across processes, so
        # the reads checked here cannot change before it commits, and readers
        # see all of it or none.  A map that must grow aborts it and runs it
        # again (_run); a full disk aborts it: nothing is applied.
        shared = self._shared
        assert shared is not None

        def work(txn: lmdb.Transaction) -> None:
            changes.check(lambda key: txn.get(key.encode()), self)
            for prefix in changes.cleared:
                if not prefix:
                    txn.drop(shared.env.open_db(), delete=False)
                    continue
                cursor = txn.cursor()
                if cursor.set_range(prefix.encode()):
                    while cursor.key().startswith(prefix.encode()) and cursor.delete():
                        pass
            for key, value in changes.writes.items():
                if value is None:
                    txn.delete(key.encode())
                else:
                    txn.put(key.encode(), value)

        def attempt() -> None:
            self._run(work, write=True, payload=changes.nbytes,
                      large=_large_bytes(changes.writes.values()))

        try:
            attempt()
        except StoreFullError:
            self._after_nudge(attempt)

    def _snapshot(self) -> Store:
        return _LMDBSnapshot(self)

    # ---------------------------------------------------- conditional writes
    # One write transaction each: LMDB serializes writers across processes
    # (its lock file), so nothing changes the key between the look and the put.
    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        encoded = key.encode()
        return self._write_conditionally(
            lambda txn: txn.put(encoded, value, overwrite=False), value)

    def _replace_if(self, key: str, expected: Buffer | Version, value: Buffer) -> bool:
        encoded = key.encode()

        def work(txn: lmdb.Transaction) -> bool:
            if not self._holds(txn.get(encoded), expected):
                return False
            return txn.put(encoded, value)

        return self._write_conditionally(work, value)

    def _write_conditionally(self, work: Callable[[lmdb.Transaction], bool],
                             value: Buffer) -> bool:
        """Run a conditional write as ``_set`` runs its general path (grow, nudge)."""
        large = len(value) if len(value) >= _WRITEBACK_VALUE_BYTES else 0

        def attempt() -> bool:
            return self._run(work, write=True, payload=len(value), large=large)

        try:
            return attempt()
        except StoreFullError:
            return self._after_nudge(attempt)

    # ------------------------------------------------------------- lifecycle
    def _close(self) -> None:
        shared, self._shared = self._shared, None
        if shared is None:
            return
        with self._translated(write=not shared.readonly), _ENVIRONMENTS_LOCK:
            _close_pending_orphans()
            shared.refs -= 1
            if shared.refs:
                if not self.read_only:
                    shared.sync()
                return
            shared.orphaned = True  # first: a view ending now closes it, or this does
            if shared.viewers:
                # Views of the map still live: the last of them closes it.
                if not shared.readonly:
                    shared.sync()
                return
            del _ENVIRONMENTS[shared.key]
            shared.close()

    def flush(self) -> None:
        """Write committed data through to disk (what ``sync=True`` does on every commit)."""
        self._check_open()
        shared = self._shared
        assert shared is not None
        if not shared.readonly:
            with self._translated(write=True):
                shared.sync()

    @property
    def map_size(self) -> int:
        """The current size of the memory map in bytes (it grows as data is written)."""
        self._check_open()
        shared = self._shared
        assert shared is not None
        return shared.map_size

    @property
    def path(self) -> str:
        """The absolute path of the environment."""
        return self._path

    def _location(self) -> Any:
        return ("lmdb", os.path.realpath(self._path))

    def _describe(self) -> str:
        return self._path

    def _params(self) -> dict[str, Any]:
        options = dict(self._options)
        return {"path": self._path, "map_size": self._map_size_option, **options}


class _LMDBSnapshot(LMDBStore):
    """A read-only view of an LMDB environment at one moment: a read transaction held open.

    LMDB keeps every page the transaction can reach until it ends, so the
    view never changes while writers (here or in other processes) go on; the
    file grows instead of reusing those pages until ``close()``.  py-lmdb
    opens environments with ``MDB_NOTLS``, so the transaction may move
    between threads; a lock makes them take turns.  The transaction is not
    registered with the environment's gate while idle, so this process may
    still grow its map: an idle read transaction holds no pointer into the
    map (each call makes its own cursors and copies what it returns inside
    the gate).
    """

    supports_transactions = False
    supports_snapshots = False

    def __init__(self, store: LMDBStore) -> None:
        Store.__init__(self, mode="r")
        self._shared = None
        for name in ("_path", "_map_size_option", "_subdir", "_options", "_folder",
                     "_reserve", "_max_key_size", "_data_file"):
            setattr(self, name, getattr(store, name))
        self.supports_process_writers = store.supports_process_writers  # type: ignore[misc]
        self._lock = threading.Lock()
        shared = store._shared
        assert shared is not None
        with store._translated(write=False), _ENVIRONMENTS_LOCK:
            shared.refs += 1  # the environment stays open while the view lives
            self._shared = shared
        self._txn: lmdb.Transaction | None = None
        self._pid = os.getpid()  # the read transaction's reader slot is this process's
        try:
            with store._translated(write=False):
                shared.headroom_for_snapshot(store._data_file)
            self._txn = self._begin(shared)
        except BaseException:
            self._close()
            raise

    def _begin(self, shared: _SharedEnv) -> lmdb.Transaction:
        for _ in range(_MAX_RETRIES):
            with shared.gate.shared():
                try:
                    txn = shared.env.begin(buffers=True)
                except lmdb.MapResizedError:
                    pass
                except lmdb.Error as error:
                    raise self._error(error, False) from error
                else:
                    shared.pins += 1  # inside the gate: no remap can be under way
                    return txn
            shared.adopt()
        raise StoreIOError(f"{self!r}: the map kept being resized by other processes")

    def _run(
        self, work: Callable[[lmdb.Transaction], T], *, write: bool = False, payload: int = 0
    ) -> T:
        if write:
            raise ReadOnlyError(f"{self!r} is a snapshot: it cannot be written")
        if self._closed:
            self._check_open()
        if os.getpid() != self._pid:
            self._refuse_inherited()
        shared = self._shared
        assert shared is not None
        with self._lock:
            shared.gate.enter_shared()  # no remap while a value is copied out
            try:
                return work(self._txn)
            except lmdb.Error as error:
                raise self._error(error, False) from error
            finally:
                shared.gate.leave_shared()

    def _get(self, key: str) -> bytes:
        encoded = key.encode()
        value = self._run(lambda txn: _copy(txn.get(encoded)))
        if value is None:
            raise KeyError(key)
        return value

    def _getview(self, key: str) -> Buffer:
        return self._get(key)  # the snapshot's own transaction: values are copied out of it

    def _getviews(self, keys: list[str]) -> dict[str, Buffer]:
        return self._get_many(keys)

    def _open_reader(self, key: str) -> ValueReader:
        # Every value of a snapshot belongs to its one moment.
        return BufferReader(key, self._getview(key), ("lmdb snapshot", id(self)))

    def _refuse_inherited(self) -> None:
        raise UnsupportedOperationError(
            f"{self!r} was taken in process {self._pid}: a forked process cannot read it "
            "(its LMDB read transaction is the parent's, which may end it at any moment); "
            "take a snapshot in this process"
        )

    def _close(self) -> None:
        txn = getattr(self, "_txn", None)
        shared = self._shared
        if txn is not None and shared is not None:
            if os.getpid() != self._pid:
                # Closed (or collected) in a forked child: the reader slot is
                # the parent's, whose snapshot still reads through it.  No
                # lock: a parent thread may have held it at the fork.
                shared.inherit(txn)
                self._txn = None
                shared.pins -= 1
            else:
                with self._lock, shared.gate.shared():
                    txn.abort()
                    self._txn = None
                    shared.pins -= 1  # inside the gate: no remap can be under way
        super()._close()

    def _snapshot(self) -> Store:
        raise UnsupportedOperationError(f"{self!r} is already a snapshot")

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError(f"{self!r} cannot be pickled: a snapshot belongs to its process")

    def _reopen_as(self, mode: str) -> Store:
        raise UnsupportedOperationError(f"{self!r} is a snapshot: reopen the store instead")

    def _location(self) -> Any:
        return id(self)

    def __repr__(self) -> str:
        return f"LMDBStore({self._path!r}, snapshot)"


def _large_bytes(values: Iterable[Buffer | None]) -> int:
    """The bytes of the values early writeback counts (``_WRITEBACK_VALUE_BYTES``)."""
    return sum(len(value) for value in values
               if value is not None and len(value) >= _WRITEBACK_VALUE_BYTES)


def _keys_under(cursor: lmdb.Cursor, prefix: bytes) -> Iterable[Any]:
    """Keys starting with ``prefix``, in order, by a range scan from ``set_range``."""
    if not cursor.set_range(prefix):
        return
    for key in cursor.iternext(keys=True, values=False):
        if not bytes(key).startswith(prefix):
            return
        yield key


def _view_txn(shared: _SharedEnv) -> _ViewTxn | None:
    """This thread's view transaction if it sees the newest commit, else a new one.

    Called inside the gate.  A read after a commit (here or in another
    process) must see it: a transaction older than the environment's last
    commit is not reused.  None when views already hold their share of the
    readers (the caller copies instead).
    """
    holder = getattr(shared.view_local, "txn", None)
    if (holder is not None and holder.txn is not None
            and holder.txnid == shared.env.info()["last_txnid"]):
        return holder
    if len(shared.viewers) >= shared.max_view_txns:
        return None
    holder = _ViewTxn(shared, shared.env.begin(buffers=True))
    shared.view_local.txn = holder
    return holder


def _copy(value: Any) -> bytes | None:
    """A value of a ``buffers=True`` transaction as bytes that outlive it."""
    if value is None:
        return None
    if len(value) >= _PREFETCH_BYTES:
        _prefetch(value)
    return bytes(value)


def _load_madvise() -> Callable[[int, int, int], int] | None:
    """libc's ``madvise`` through ctypes, where there is one (else None: no prefetch)."""
    if not hasattr(mmap, "MADV_WILLNEED") or sys.platform == "win32":
        return None
    import ctypes

    return _libc_function("madvise", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range`` (Linux only; else None: no early writeback)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    return _libc_function("sync_file_range",
                          [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint])


def _libc_function(name: str, argtypes: list[Any]) -> Any:
    """The C library's function ``name`` through ctypes (it releases the GIL), or None."""
    try:
        import ctypes

        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function


_MADVISE = _load_madvise()
_SYNC_FILE_RANGE = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writing dirty pages, wait for none
_PAGE = mmap.PAGESIZE


def _prefetch(value: Any) -> None:
    """Ask the kernel to read all of a view of the map in at once (``MADV_WILLNEED``).

    Only advice: it changes no byte, and a failure (an old kernel, another
    platform) leaves the copy to fault the pages in as before.
    """
    if _MADVISE is None:
        return
    import numpy as np

    address = np.frombuffer(value, np.uint8).__array_interface__["data"][0]
    start = address - address % _PAGE
    _MADVISE(start, address + len(value) - start, mmap.MADV_WILLNEED)


def _file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
