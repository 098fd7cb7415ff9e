"""LMDBStore: keys and values in an LMDB environment (a memory-mapped B+tree).

The store's side: keys, modes, the full-disk rules and each primitive as one
transaction's work.  The environment it runs them in (shared per process,
the gate, views, forks) is ``env.py``'s.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import lmdb

from ...base import Buffer, Mode, Store, children_by_seek
from ...errors import InvalidKeyError, StoreFullError, StoreIOError, UnsupportedOperationError
from ...keys import normalize_key
from ...readers import BufferReader, ValueReader
from .._reserve import SpaceReserve
from .._snapshot import SnapshotRefusals
from .env import (
    _MAX_RETRIES,
    _PREFETCH_BYTES,
    _WRITEBACK_VALUE_BYTES,
    DEFAULT_MAP_SIZE,
    MapKeptChanging,
    _copy,
    _prefetch,
    _Remap,
    _SharedEnv,
    _translate,
    attach,
    detach,
    hold,
    open_environment,
)

if TYPE_CHECKING:
    from ...base import Version
    from ...transactions import ChangeSet

__all__ = ["DEFAULT_MAP_SIZE", "LMDBStore"]

T = TypeVar("T")

# lmdb.open options that the store derives from its own parameters.
_MANAGED_OPTIONS = ("readonly", "create")

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


def _check_options(map_size: int | None, lmdb_kwargs: dict[str, Any]) -> None:
    """Refuse what LMDBStore's own parameters decide, and a map size that is no size."""
    for name in _MANAGED_OPTIONS:
        if name in lmdb_kwargs:
            raise TypeError(
                f"LMDBStore sets lmdb.open's {name!r} option from mode=; do not pass it"
            )
    if map_size is not None and (not isinstance(map_size, int) or map_size <= 0):
        raise ValueError(
            f"map_size must be a positive number of bytes or None, not {map_size!r}"
        )


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
        _check_options(map_size, lmdb_kwargs)
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
        self._data_file = os.path.join(self._path, "data.mdb") if subdir else self._path
        self._folder = os.path.dirname(self._data_file)
        self._reserve = SpaceReserve(self._data_file, _RESERVE_BYTES)
        writable = mode != "r"
        self._shared = self._attach(writable)
        self._max_key_size = self._shared.env.max_key_size()
        if writable:
            self._reserve.ensure()
        self._clear_if_mode_w()

    def _attach(self, writable: bool) -> _SharedEnv:
        """This process's environment on the store's files, opened if it is not yet."""
        opener = partial(open_environment, self._path, self._options, self._map_size_option,
                         self._data_file, self.mode not in ("r", "r+"))
        options = self._options
        early = not (options["sync"] or options.get("writemap"))
        with self._translated(write=writable):
            return attach(os.path.realpath(self._path), opener, writable,
                          found=self._check_found, prepare=self._prepare_files,
                          writeback_file=self._data_file if early else None)

    def _check_found(self, open_here: bool) -> None:
        """Apply the mode's rule to the environment found (open here, or its data file)."""
        self._check_existence(open_here or os.path.isfile(self._data_file))

    def _prepare_files(self) -> None:
        """Before LMDB opens a new environment: its folder, and its lock file's blocks."""
        if self.mode not in ("r", "r+"):
            os.makedirs(self._path if self._subdir else os.path.dirname(self._path),
                        exist_ok=True)
        if self._options["lock"]:
            self._allocate_lock_file(self._options["max_readers"])

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

        ``_SharedEnv.run`` does it (read transactions use ``buffers=True``,
        so ``work`` must copy what it returns); here py-lmdb's exceptions
        become zstores errors naming the store.  ``payload`` is the number of
        bytes a write adds, ``large`` the bytes of its large values.
        """
        shared = self._shared
        assert shared is not None
        try:
            return shared.run(_apply, work, write, payload, large)
        except lmdb.Error as error:
            # No bare py-lmdb exception leaves the store (a try costs nothing
            # until something raises).
            raise self._error(error, write, payload) from error
        except MapKeptChanging:
            raise StoreFullError(
                f"{self!r}: the map kept filling up after {_MAX_RETRIES} enlargements"
            ) from None

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
        # The hot path: one attempt, no closure, no retry loop; transact
        # copies the value into bytes inside the transaction, once (a large
        # value's pages asked for first).  A miss (the map must change first)
        # takes the general path, outside the gate.
        encoded = key.encode()
        try:
            value = self._shared.transact(None, encoded)  # type: ignore[union-attr]
        except lmdb.Error as error:
            raise self._error(error, False) from error
        if value.__class__ is _Remap:
            value = self._run(lambda txn: _copy(txn.get(encoded)))
        if value is None:
            raise KeyError(key)
        return value  # type: ignore[return-value]

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
        return shared.read_views([key.encode() for key in keys])

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
        # The hot path, as _get's: one attempt, no closure, no retry loop.
        # Anything LMDB refuses (a full map, a map another process grew, a
        # full disk) goes to the general path below, which grows, re-adopts
        # or reports; writing the same value again is harmless.
        shared = self._shared
        item = (key.encode(), value)
        try:
            missed = shared.transact(_put, item, True)  # type: ignore[union-attr]
        except lmdb.Error:
            missed = True
        large = len(value) if len(value) >= _WRITEBACK_VALUE_BYTES else 0
        if missed is None:
            if large:
                shared.committed(large)  # type: ignore[union-attr]
            return

        def attempt() -> None:
            self._run(lambda txn: _put(txn, item), write=True, payload=len(value), large=large)

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
        with self._translated(write=not shared.readonly):
            detach(shared, writer=not self.read_only)

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


class _LMDBSnapshot(SnapshotRefusals, LMDBStore):
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
        with store._translated(write=False):
            hold(shared)  # the environment stays open while the view lives
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
        try:
            return shared.begin_pinned()
        except lmdb.Error as error:
            raise self._error(error, False) from error
        except MapKeptChanging:
            raise StoreIOError(
                f"{self!r}: the map kept being resized by other processes") from None

    def _run(
        self, work: Callable[[lmdb.Transaction], T], *, write: bool = False, payload: int = 0,
        large: int = 0,
    ) -> T:
        if write:
            self._refuse_write()
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


def _apply(txn: lmdb.Transaction, work: Callable[[lmdb.Transaction], T]) -> T:
    """``_SharedEnv.run`` work running a store's own ``work(txn)``."""
    return work(txn)


def _put(txn: lmdb.Transaction, item: tuple[bytes, Buffer]) -> None:
    """``_SharedEnv.transact`` work of ``_set``: put one value (returns None: done)."""
    txn.put(*item)
