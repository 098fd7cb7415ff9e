"""The LMDB engine under LMDBStore: one shared environment per file, its gate, views and forks.

Everything here speaks py-lmdb and knows nothing of ``Store`` (an engine
module never imports it): ``_SharedEnv`` is the one open environment that
every store on the same files in this process shares, ``_Gate`` keeps
transactions and remaps of its map apart, ``_SharedEnv.transact``/``run``
are the one way a transaction enters the map (the gate, the begin, and the
retry after growing or re-adopting the map), ``_ViewTxn`` keeps the read
transaction of zero-copy views open, and the registries here keep a forked
child from ending its parent's read transactions.  ``translate`` turns
py-lmdb's exceptions into zstores errors.
"""

from __future__ import annotations

import errno
import mmap
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import lmdb

from ...errors import (
    CorruptValueError,
    InvalidKeyError,
    ReadOnlyError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
    StoreNotFoundError,
)
from .._libc import SYNC_FILE_RANGE_WRITE, find_madvise, find_sync_file_range
from .._reserve import free_bytes

T = TypeVar("T")
A = TypeVar("A")

#: Map size a new environment starts with; the map doubles whenever it fills.
DEFAULT_MAP_SIZE = 1 << 30 if sys.maxsize > 2**32 else 1 << 26

# Map sizes are kept a multiple of this, which is a multiple of the page size
# (and of the allocation granularity) on every platform LMDB runs on.
_MAP_GRANULE = 1 << 16

# What a transaction raises when this process must resize its map first.
_REMAP_ERRORS = (lmdb.MapFullError, lmdb.MapResizedError, lmdb.ReadersFullError)

# How often one operation may grow or re-adopt the map before giving up.
_MAX_RETRIES = 64

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


class _Remap:
    """What ``_SharedEnv.transact`` returns for a transaction the map must change for."""

    __slots__ = ("error", "seen")

    def __init__(self, error: lmdb.Error, seen: int) -> None:
        self.error = error  # one of _REMAP_ERRORS
        self.seen = seen  # the map size the transaction ran with


class MapKeptChanging(Exception):
    """One transaction found the map full (or resized) ``_MAX_RETRIES`` times in a row."""


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

    # ------------------------------------------------- the way into the map
    def transact(self, work: Callable[[lmdb.Transaction, A], T] | None, arg: A,
                 write: bool = False, keep: bool = False) -> T | _Remap:
        """One attempt at ``work(txn, arg)`` in a new transaction, inside the gate.

        The transaction ends with ``work`` (a write commits, or aborts if
        ``work`` raises) unless ``keep``: then ``work`` takes it over (a
        snapshot's or views' read transaction) and must not raise.  Read
        transactions use ``buffers=True`` (values are views of the map), so
        ``work`` copies what it returns.  A transaction this process cannot
        run until its map changes (the map is full, another process grew it,
        the reader slots are used up) returns a ``_Remap`` saying which, for
        ``remedy`` to deal with outside the gate; any other ``lmdb.Error``
        propagates.  The hot paths (``LMDBStore._get``, ``_set``) make one
        attempt and only on a miss take ``run``'s loop.  ``work`` None reads
        the value of the key ``arg`` (bytes, or None if absent): a get, done
        here without a call to a work function.
        """
        gate = self.gate
        gate.enter_shared()
        try:
            # One keyword each way: py-lmdb parses every keyword given, and a
            # second one cost the 16-byte get about 6% (bench_versions.py).
            txn = self.env.begin(write=True) if write else self.env.begin(buffers=True)
            if work is None:
                # The hottest path, a get: _copy written out here, so that a
                # get makes no more calls than before the gate protocol was
                # written once (bench_versions.py: LMDB get of 16 bytes).
                with txn:
                    value = txn.get(arg)
                    if value is None:
                        return None  # type: ignore[return-value]
                    if len(value) >= _PREFETCH_BYTES:
                        _prefetch(value)
                    return bytes(value)  # type: ignore[return-value]
            if keep:
                return work(txn, arg)
            with txn:
                return work(txn, arg)
        except _REMAP_ERRORS as error:
            # Still inside the gate: the map cannot have changed since begin
            # (every change holds it exclusive), so this is the size seen.
            return _Remap(error, self.map_size)
        finally:
            gate.leave_shared()

    def run(self, work: Callable[[lmdb.Transaction, A], T], arg: A, write: bool = False,
            payload: int = 0, large: int = 0, keep: bool = False) -> T:
        """Run ``work(txn, arg)`` in one transaction, growing or re-adopting the map as needed.

        ``payload`` is the number of bytes a write adds, to grow the map
        enough in one step; ``large`` the bytes of its large values, counted
        for early writeback once it commits (``committed``).  Raises
        ``lmdb.Error`` as py-lmdb does, and ``MapKeptChanging`` when the map
        had to change ``_MAX_RETRIES`` times for one transaction.
        """
        for _ in range(_MAX_RETRIES):
            result = self.transact(work, arg, write, keep)
            if result.__class__ is not _Remap:
                if large:
                    self.committed(large)
                return result  # type: ignore[return-value]
            self.remedy(result, payload)  # type: ignore[arg-type]
        raise MapKeptChanging(f"LMDB environment {self.key}: the map had to change "
                              f"{_MAX_RETRIES} times for one transaction")

    def remedy(self, miss: _Remap, payload: int) -> None:
        """Make the map ready for the transaction ``miss`` stopped (outside the gate)."""
        problem = miss.error
        if isinstance(problem, lmdb.MapFullError):
            self.grow(miss.seen, payload)
        elif isinstance(problem, lmdb.MapResizedError):
            self.adopt()
        elif self.env.reader_check() == 0:
            # Reader slots used up: free those of processes that died, once.
            raise problem

    def read_views(self, keys: list[bytes]) -> list[Any] | None:
        """The values of ``keys`` (views of the large ones, None where missing), or None.

        Read in this thread's view transaction while it sees the newest
        commit (here or in another process: a read after a commit must see
        it), else in a new one.  None: views are not possible now (readers
        used up, a map to adopt, anything LMDB refused); the caller copies
        instead, which also grows or adopts the map, or reports the error.
        """
        gate = self.gate
        gate.enter_shared()
        try:
            holder = getattr(self.view_local, "txn", None)
            if (holder is not None and holder.txn is not None
                    and holder.txnid == self.env.info()["last_txnid"]):
                return holder.read(keys)
        except lmdb.Error:
            return None
        finally:
            gate.leave_shared()
        try:
            found = self.transact(_read_in_new_view, (self, keys), keep=True)
        except lmdb.Error:
            return None
        return None if found.__class__ is _Remap else found

    def begin_pinned(self) -> lmdb.Transaction:
        """A read transaction kept open (a snapshot's): no remap until ``unpin``."""
        return self.run(_pin, self, keep=True)

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
            _SYNC_FILE_RANGE(fd, 0, 0, SYNC_FILE_RANGE_WRITE)

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

    def read(self, keys: list[bytes]) -> list[bytes | memoryview | None] | None:
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

    def _view(self, value: Any) -> bytes | memoryview | None:
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


def _read_in_new_view(txn: lmdb.Transaction, arg: tuple[_SharedEnv, list[bytes]]
                      ) -> list[Any] | None:
    """``transact`` work (``keep``): read ``keys`` in ``txn``, made this thread's view transaction.

    None when views already hold their share of the readers (the caller
    copies instead); ``txn`` then ends here.
    """
    shared, keys = arg
    if len(shared.viewers) >= shared.max_view_txns:
        txn.abort()
        return None
    holder = _ViewTxn(shared, txn)
    shared.view_local.txn = holder
    return holder.read(keys)


def _pin(txn: lmdb.Transaction, shared: _SharedEnv) -> lmdb.Transaction:
    """``transact`` work (``keep``): count ``txn`` as a snapshot's (no remap while it lives)."""
    shared.pins += 1  # inside the gate: no remap can be under way
    return txn


def _copy(value: Any) -> bytes | None:
    """A value of a ``buffers=True`` transaction as bytes that outlive it."""
    if value is None:
        return None
    if len(value) >= _PREFETCH_BYTES:
        _prefetch(value)
    return bytes(value)


_MADVISE = find_madvise()
_SYNC_FILE_RANGE = find_sync_file_range()
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


def open_environment(path: str, options: dict[str, Any], map_size: int | None,
                     data_file: str, create: bool, readonly: bool) -> lmdb.Environment:
    """``lmdb.open`` the environment at ``path``, its map sized from the data file.

    ``create`` lets a writable open make a missing environment.  On
    read-only media, where LMDB cannot open its lock file for writing, a
    read-only open goes without LMDB's locks: nothing can write the
    environment there either, so it reads one consistent state.
    """
    for attempt in range(_MAX_RETRIES):
        size = max(map_size or DEFAULT_MAP_SIZE, _file_size(data_file))
        chosen = {"map_size": _round_up(size), "readonly": readonly,
                  "create": create and not readonly, **options}
        try:
            return lmdb.open(path, **chosen)
        except lmdb.MapResizedError:
            # Another process wrote past the map sized from the file a moment
            # ago, before py-lmdb's first transaction: size it again from the
            # file as it is now.
            if attempt == _MAX_RETRIES - 1:
                raise
        except lmdb.Error as error:
            if not (readonly and chosen["lock"] and _errno_of(error) == errno.EROFS):
                raise
            break
    return lmdb.open(path, **{**chosen, "lock": False})


def attach(key: str, opener: Callable[[bool], lmdb.Environment], writable: bool,
           found: Callable[[bool], None], prepare: Callable[[], None],
           writeback_file: str | None) -> _SharedEnv:
    """The environment ``key`` for one more store: this process's open one, or a new one.

    ``found(open_here)`` runs first (the store checks its mode against what
    exists), ``prepare()`` before a new environment is opened (folders, the
    lock file's blocks).  A read-only environment is reopened for writing
    when a writable store joins it.
    """
    with _ENVIRONMENTS_LOCK:
        shared = _ENVIRONMENTS.get(key)
        found(shared is not None)
        if shared is None:
            prepare()
            shared = _SharedEnv(key, opener, readonly=not writable,
                                writeback_file=writeback_file)
            _ENVIRONMENTS[key] = shared
        elif writable and shared.readonly:
            shared.make_writable(opener)
        shared.refs += 1
        shared.orphaned = False
        _close_pending_orphans()
        return shared


def hold(shared: _SharedEnv) -> None:
    """Count one more user of an open environment (a snapshot): it stays open meanwhile."""
    with _ENVIRONMENTS_LOCK:
        shared.refs += 1


def detach(shared: _SharedEnv, writer: bool) -> None:
    """One store of ``shared`` closed: close the environment if it was the last user.

    A writer's close flushes what it committed when others still use the
    environment; the last one's close flushes and closes, unless zero-copy
    views still live: then the last view closes it (``_close_orphan``).
    """
    with _ENVIRONMENTS_LOCK:
        _close_pending_orphans()
        shared.refs -= 1
        if shared.refs:
            if writer:
                shared.sync()
            return
        shared.orphaned = True  # first: a view ending now closes it, or this does
        if shared.viewers:
            if not shared.readonly:
                shared.sync()
            return
        del _ENVIRONMENTS[shared.key]
        shared.close()
