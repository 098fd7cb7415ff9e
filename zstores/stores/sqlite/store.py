"""SQLiteStore: keys and values in one table of an SQLite database.

The store's side: keys, modes, the full-disk rules and each primitive as SQL.
Its connections (one per thread, the checkpoint thread, errors) are
``connection.py``'s.
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

from ...base import Buffer, Mode, Store, children_by_scan
from ...errors import StoreClosedError, StoreFullError, StoreIOError
from ...keys import prefix_upper_bound
from ...readers import BufferReader, SnapshotReader, ValueReader
from .._reserve import SpaceReserve, free_bytes
from .._snapshot import SnapshotRefusals
from .connection import (
    _FULL,
    _INHERITED,
    _OPEN_FAILURES,
    _OPEN_ROOM,
    MEMORY,
    _check_synchronous,
    _Checkpointer,
    _code,
    _connect,
    _Connection,
    _has_room_to_open,
    _translate,
    remove_wal_files,
)

if TYPE_CHECKING:
    from ...base import Version
    from ...transactions import ChangeSet

__all__ = ["SQLiteStore"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Keys per statement in batched reads; far below every SQLite variable limit.
_BATCH = 500

# Values above this size are read with incremental blob I/O instead of a
# SELECT of the column.  A SELECT makes SQLite assemble the value in a buffer
# of its own, which the driver then copies into the bytes returned: each get
# allocates (and faults in) two fresh buffers.  Measured (CPU time per get of
# a warm value, one key after another, SQLite 3.40): 4 MiB 116 MiB/s against
# 628 MiB/s through a blob handle, which reads the pages straight into the
# bytes returned; and a cliff between 400 KiB (180 against 166 us) and
# 512 KiB (807 against 201 us; 768 KiB 1,418 against 320 us), where the
# SELECT's buffers leave the heap for fresh mappings.  From 128 KiB to
# 400 KiB the blob handle was even or 3-8% ahead; at 64 KiB even, at 16 KiB
# the SELECT twice as fast.  zarr's 1 MiB zstd chunks (~530 KiB stored)
# read one by one cost 735 us of CPU each by SELECT, 148 us by blob handle.
_BLOB_READ_ABOVE = 256 << 10
# Values at least this large are pinned for a reader (``open_reader``, an
# open file of a mount) by a snapshot instead of being read whole.
_PIN_BY_SNAPSHOT_ABOVE = 8 << 20

# Room left in SQLite's length limit for the key and the row header.
_ROW_OVERHEAD = 1 << 16

# Page size of a new database file (an existing one keeps its own).  A chunk
# spans a quarter of the pages it would at SQLite's default 4 KiB, so a write
# appends a quarter of the WAL frames (each two write calls) and a read
# fetches a quarter of the pages; rows of small values still share a page.
_PAGE_SIZE = 16384

T = TypeVar("T")

# Full disks.  In WAL mode everything, deletes included, is first appended to
# the WAL and only a checkpoint copies it into the database file, which then
# grows: a WAL holding more than the disk has free can never be copied, and
# the store could not even delete any more.  So while the file system has less
# than _LOW_SPACE_BYTES free (checked every _SPACE_CHECK_BYTES written), each
# write is checkpointed at once; once a checkpoint finds the disk full, further
# writes are refused (StoreFullError) and only deletes go on.  A delete that
# meets a full disk releases the reserve (see _reserve.py), copies the WAL in,
# deletes, and copies again; the freed pages then take new writes.
_LOW_SPACE_BYTES = 256 << 20  # above what the WAL holds between normal checkpoints
_SPACE_CHECK_BYTES = 1 << 20
_RESERVE_BYTES = 2 << 20
# Keys per transaction when a delete is retried on a full disk.
_FULL_DISK_PIECE = 32
# The reserve is set aside again only from room beyond this, which the WAL
# (deleted when the last connection closes) needs when the store reopens.
_RESERVE_KEEP_FREE = 1 << 20


def _check_table(table: str) -> str:
    if (
        not isinstance(table, str)
        or not _IDENTIFIER.match(table)
        or table.lower().startswith("sqlite_")
    ):
        raise ValueError(
            f"invalid table {table!r}: the table option must be a plain identifier "
            "(ASCII letters, digits and '_', not starting with a digit or 'sqlite_')"
        )
    return table


def _key_range(prefix: str) -> tuple[str, tuple[str, ...]]:
    """A WHERE clause selecting the keys under ``prefix`` by a primary-key range."""
    upper = prefix_upper_bound(prefix)
    if upper is None:
        return "k >= ?", (prefix,)
    return "k >= ? AND k < ?", (prefix, upper)


# The size of a value in bytes without loading it (length() of a BLOB reads
# only the row header; of a TEXT value it would count characters).
_SIZE = "CASE typeof(v) WHEN 'text' THEN length(CAST(v AS BLOB)) ELSE length(v) END"


# Columns of a read: the value unless it is a blob read better by blob I/O,
# and whether it is one (see _BLOB_READ_ABOVE; length() of a blob reads no data).
_LARGE_BLOB = f"(typeof(v) = 'blob' AND length(v) > {_BLOB_READ_ABOVE})"
_SMALL_VALUE = f"CASE WHEN {_LARGE_BLOB} THEN NULL ELSE v END"


def _as_bytes(value: Any) -> bytes:
    # Values are BLOBs; a TEXT value (written by another tool) reads as its UTF-8.
    return value.encode() if isinstance(value, str) else bytes(value)


class SQLiteStore(Store):
    """Keys and values in a table of an SQLite database file (or ``":memory:"``).

    The table layout is zarr-python 2's ``SQLiteStore``: ``zarr(k TEXT PRIMARY
    KEY, v BLOB)``, so each reads the other's files.  ``table=`` names another
    table, letting several stores share one file.

    A file is opened in WAL mode with a busy timeout, so readers never wait and
    writers from many threads and processes take turns.  Every thread uses its
    own connection.  Single writes commit on their own; ``setitems``,
    ``delitems``, ``rmdir``, ``rename`` and ``clear`` each run in one
    ``BEGIN IMMEDIATE`` transaction, so a reader sees all or none of them.
    Prefix operations are range queries on the primary-key index (``k >=
    prefix AND k < bound``), never ``LIKE``, so ``_`` and ``%`` in names are
    ordinary characters and case matters.  Durability is SQLite's
    ``synchronous`` setting, chosen with ``synchronous=``: ``"normal"``
    (default) fsyncs the WAL only at checkpoints, so a power loss or an
    operating-system crash may roll back the latest commits, but never
    corrupts the file or tears a value (a crash of the program alone loses
    nothing); ``"full"`` fsyncs the WAL at every commit, so a write that
    returned survives a power loss, at the cost of one fsync per commit
    (``setitems`` is one commit).  A new
    file gets 16 KiB pages instead of SQLite's 4 KiB: a chunk then spans a
    quarter of the pages, so writing it appends a quarter of the WAL frames
    and reading it fetches a quarter of the pages (a file made elsewhere keeps
    its page size).  The WAL is checkpointed into the file every 16 MiB
    written, by a thread of the store's own while writes go on (SQLite's
    automatic checkpoint would stall the commit that triggers it).

    A full disk raises ``StoreFullError`` (errno ``ENOSPC``) naming the store,
    SQLite's error chained; the failed transaction is rolled back, so every
    value committed before stays and a failed overwrite leaves the old value.
    In WAL mode a write lands in the WAL first and a checkpoint later copies
    it into the database file, which must then grow: a WAL larger than the
    room left could never be copied in, and even deletes would fail.  So
    while the file system has less than 256 MiB free, every write is
    checkpointed at once (writes there cost about twice the I/O), and once a
    checkpoint finds the disk full, writes that add data are refused until
    one succeeds.  Deletes still work: a writable store keeps a 2 MiB reserve
    file, ``<path>.zstores-reserve`` (it holds no data and may be deleted at
    any time); a delete that finds the disk full releases it, copies the WAL
    in, and deletes in pieces of 32 keys without zeroing the freed pages
    (``secure_delete=FAST``, whatever SQLite's build default).  SQLite never
    gives space back to the file system: freed pages take new values.  Other
    SQLite errors become ``CorruptValueError`` (not a database, damaged),
    ``StoreLockedError`` (locked beyond ``timeout``), ``ReadOnlyError``,
    ``StoreNotFoundError`` or ``StoreIOError``, each naming the file.

    A full disk does not lock the data away: SQLite cannot open a WAL
    database, not even to read, without room for its ``-shm`` (32 KiB) and
    ``-wal``, so when they are missing and the disk is full, opening (any
    mode) deletes the reserve file to make that room; mode ``"r"`` sets it
    aside again at ``close()``, a writable store from the room left over.
    Without a reserve, mode ``"r"`` reads the file ``immutable`` (when no
    ``-wal`` holds recent commits; see below for what that means) and other
    modes raise ``StoreFullError`` naming the file and saying to free space.

    Mode ``"r"`` leaves no files behind.  With a ``-wal`` present (a writer at
    work) it reads through SQLite's ``-wal`` and ``-shm``.  Otherwise, where
    the folder can be written, the ``-wal``/``-shm`` its reading creates are
    removed on ``close()`` (unless another connection still uses them).  On
    read-only media, or in a folder this user cannot write, where SQLite could
    not create them, the file is opened ``immutable``: no locks and no files.
    Such a store does not see changes made after it opened (by another user,
    or through another, writable path to the same file), and must not be
    used while a writer works on the file: SQLite may then read a mix of old
    and new pages.

    ``":memory:"`` keeps the table in this process only: one connection,
    guarded by a lock; ``persistent`` is ``False`` and pickling copies the data.

    Parameters
    ----------
    path : str or os.PathLike
        The database file, or ``":memory:"``.  Missing parent folders are
        created.
    table : str
        The table, a plain SQL identifier; default ``"zarr"`` (zarr-python 2's).
    mode : {"a", "r", "r+", "w", "w-"}
        ``"r"`` opens the file read-only; ``"r"`` and ``"r+"`` require the
        table to exist; ``"a"`` creates it if missing; ``"w"`` empties it;
        ``"w-"`` refuses an existing table.  For ``":memory:"`` only ``"r"``
        differs (it refuses writes).
    timeout : float
        Seconds a writer waits for another connection's write to finish
        before ``StoreLockedError``.
    synchronous : {"normal", "full"}
        When commits reach the disk (see above); ``"normal"`` by default.
        It applies to this store's connections, not to the file: another
        connection chooses its own.

    Attributes
    ----------
    supports_range_reads : bool
        True: a range is read through SQLite's incremental blob I/O, touching
        only the pages it covers.
    supports_process_writers : bool
        True for a file, False for ``":memory:"``.
    persistent : bool
        True for a file, False for ``":memory:"``.
    max_value_size : int
        SQLite's length limit for a row (1e9 bytes by default) less room for
        the key.

    Examples
    --------
    >>> import tempfile, os
    >>> from zstores.stores.sqlite import SQLiteStore
    >>> path = os.path.join(tempfile.mkdtemp(), "data.sqlite")
    >>> with SQLiteStore(path) as store:
    ...     store.setitems({"foo/.zarray": b"{}", "foo/0.0": b"chunk"})
    ...     store.listdir("foo"), store.get_range("foo/0.0", -3)
    (['.zarray', '0.0'], b'unk')
    >>> with SQLiteStore(":memory:", table="scratch") as scratch:
    ...     scratch["a_b/x"] = b"1"
    ...     scratch.listdir("axb")
    []
    """

    supports_range_reads = True
    supports_process_writers = True
    max_value_size = 1_000_000_000 - _ROW_OVERHEAD
    supports_transactions = True
    supports_snapshots = True
    supports_create_if_absent = True  # INSERT ... ON CONFLICT DO NOTHING
    supports_compare_and_swap = True  # compared and updated in one BEGIN IMMEDIATE

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        table: str = "zarr",
        mode: Mode = "a",
        timeout: float = 30.0,
        synchronous: str = "normal",
    ) -> None:
        super().__init__(mode=mode)
        self._table = _check_table(table)
        self._timeout = float(timeout)
        self._synchronous = _check_synchronous(synchronous)
        path = os.fspath(path)
        if not isinstance(path, str) or not path:
            raise ValueError(f"path must be a file name or ':memory:', not {path!r}")
        self._memory = path == MEMORY
        self._path = path if self._memory else os.path.abspath(path)
        self._pid = os.getpid()
        self._local = threading.local()
        self._connections: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._connections_lock = threading.Lock()
        self._q = f'"{self._table}"'  # the quoted table name for SQL
        self._checkpointer: _Checkpointer | None = None
        self._reserve: SpaceReserve | None = None
        self._reserve_whole = False
        self._low_space = False  # the file system is nearly full: checkpoint every write
        self._unchecked = 0  # bytes written since free space was last checked
        # The error of the checkpoint that found the disk full, until one succeeds.
        self._full: sqlite3.Error | None = None
        self._immutable = False  # mode "r" on media nothing can write
        self._tidy_wal = False  # mode "r" remove the -wal/-shm its reading created
        self._released_at_open = False  # the reserve was deleted to make room to open
        if self._memory:
            self.persistent = False
            self.supports_process_writers = False
            self.supports_snapshots = False  # one connection: no second read transaction
            # A shared-cache memory database would have table locks that ignore
            # the busy timeout; one connection behind a lock is simpler.
            self._memory_db: sqlite3.Connection | None = self._connect()
            lock = threading.RLock()
            self._read_lock: Any = lock
            self._write_lock: Any = lock
            self._create_table()
        else:
            self._memory_db = None
            self._read_lock = nullcontext()
            # Threads of this process queue here rather than in SQLite's
            # sleeping busy handler; other processes still meet the timeout.
            self._write_lock = threading.Lock()
            try:
                self._open_file()
            except BaseException:
                self._close()  # no connection or thread outlives a failed open
                raise
        with self._sql_errors():
            limit = self._db().getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
        self.max_value_size = limit - _ROW_OVERHEAD
        self._clear_if_mode_w()

    def _open_file(self) -> None:
        """Open the database file for the store's mode, making room first on a full disk."""
        if self._mode == "r":
            self._choose_read_only_access()
        if not self._immutable:
            self._make_room_to_open()
        try:
            exists = os.path.isfile(self._path) and self._table_exists()
            self._check_existence(exists)
            if self._mode != "r":
                self._start_checkpointer()
                self._create_table()
        except StoreIOError as error:
            if isinstance(error, StoreFullError) or self._no_room_to_open(error):
                raise self._full_at_open() from error
            raise
        if self._mode != "r":
            self._reserve = SpaceReserve(self._path, _RESERVE_BYTES)
            self._reserve_whole = self._reserve.ensure(_RESERVE_KEEP_FREE)
            self._check_space()

    def _make_room_to_open(self) -> None:
        """On a full disk, free the room SQLite needs to open the file, or give up clearly.

        A WAL database cannot be opened, not even to read, without its
        ``-shm`` index (32 KiB, allocated when it is created) and a ``-wal``.
        When they are missing and the disk has less room than
        ``_OPEN_ROOM``, the store's reserve file (no data) is deleted to give
        that room; a mode ``"r"`` store sets it aside again when it closes, a
        writable one at once, from the room left beyond what SQLite needs.
        Without a reserve, mode ``"r"`` reads the file ``immutable`` (no
        files needed, as on read-only media) when no ``-wal`` holds recent
        commits, and other modes raise ``StoreFullError``.
        """
        if not os.path.isfile(self._path) or _has_room_to_open(self._path):
            return
        if SpaceReserve(self._path, _RESERVE_BYTES).release():
            self._released_at_open = True
            if _has_room_to_open(self._path):
                return
        if self._mode == "r" and not os.path.exists(self._path + "-wal"):
            self._immutable = True
            self._tidy_wal = False
            return
        raise self._full_at_open()

    def _no_room_to_open(self, error: StoreIOError) -> bool:
        """Whether an error at open is SQLite failing to create its files on a full disk."""
        cause = error.__cause__
        if not isinstance(cause, sqlite3.Error) or _code(cause) not in _OPEN_FAILURES:
            return False
        try:
            return free_bytes(os.path.dirname(self._path)) < _OPEN_ROOM
        except OSError:
            return False

    def _full_at_open(self) -> StoreFullError:
        return StoreFullError(
            f"{self!r}: cannot open {self._path}: the disk is full, and SQLite needs about "
            f"{_OPEN_ROOM >> 10} KiB next to the database for its -wal and -shm files even "
            f"to read; free space on the disk (delete other files, or keys through a store "
            f"opened elsewhere) and open the store again"
        )

    def _choose_read_only_access(self) -> None:
        """Mode ``"r"``: read without leaving files next to the database.

        With a ``-wal`` file present (a writer is at work, or the last one did
        not close) a read-only connection reads it through the ``-shm``, both
        already there.  Without one, a read-only connection to a WAL database
        still creates both; where the folder and file can be written they are
        removed at close, by a connection that opens, reads nothing and closes:
        SQLite's own last-close cleanup, which leaves them alone while anyone
        else uses them.  Where they cannot (read-only media), the file is opened
        ``immutable``: no locks, no files, and no sight of changes made by
        others (through a writable path to the same file, say).
        """
        if os.path.exists(self._path + "-wal"):
            return
        folder = os.path.dirname(self._path)
        if os.access(folder, os.W_OK) and os.access(self._path, os.W_OK):
            self._tidy_wal = not os.path.exists(self._path + "-shm")
        else:
            self._immutable = os.path.isfile(self._path)

    def _remove_wal_files(self) -> None:
        """Let SQLite delete the ``-wal`` and ``-shm`` a mode ``"r"`` store created."""
        remove_wal_files(self._path)

    # --------------------------------------------------------------- errors
    def _error(self, error: sqlite3.Error) -> Exception:
        return _translate(repr(self), self._path, error)

    @contextmanager
    def _sql_errors(self) -> Iterator[None]:
        """Raise ``sqlite3`` exceptions as zstores errors naming the store, chained."""
        try:
            yield
        except sqlite3.Error as error:
            raise self._error(error) from error

    # ----------------------------------------------------------- full disks
    def _check_space(self) -> None:
        self._unchecked = 0
        if self._memory:
            return
        try:
            free = free_bytes(os.path.dirname(self._path))
        except OSError:
            return
        self._low_space = free < _LOW_SPACE_BYTES

    def _copy_wal(self, db: sqlite3.Connection) -> None:
        """Checkpoint now, under the write lock; note whether the disk was full."""
        try:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as error:
            if _code(error) == _FULL:
                self._full = error
            return  # busy or locked: a later checkpoint does it
        self._full = None

    def _checkpoint_now(self) -> None:
        with self._sql_errors(), self._write_lock:
            self._copy_wal(self._db())

    def _refuse_while_full(self) -> None:
        """Before a write that adds data: refuse it while the WAL cannot be copied in."""
        self._checkpoint_now()
        if self._full is not None:
            raise StoreFullError(
                f"{self!r}: the disk is full: the database file cannot take in its "
                "write-ahead log; delete keys or free room on the disk"
            ) from self._full

    def _freeing(self, attempt: Callable[[], T], in_pieces: Callable[[], T]) -> T:
        """Run a delete; on a full disk make room with the reserve and delete in pieces.

        The room a delete needs in the WAL is kept small three ways: the WAL
        is copied in first, so that the delete's frames reuse it from its
        start; freed pages are not zeroed (``secure_delete=FAST``; a build of
        SQLite with ``SECURE_DELETE``, as Debian's, would otherwise write a
        page of zeros for every page freed); and each piece of
        ``_FULL_DISK_PIECE`` keys commits and is copied in on its own.  A
        delete that fails part way has deleted the pieces before.  The
        reserve is set aside again from what room is left.
        """
        try:
            result = attempt()
        except StoreFullError:
            if self._reserve is None:
                raise
            self._reserve.release()
            self._reserve_whole = False
            self._low_space = True
            self._checkpoint_now()
            with self._sql_errors():
                db = self._db()
                zeroing = db.execute("PRAGMA secure_delete").fetchone()[0]
                db.execute("PRAGMA secure_delete=FAST")
            try:
                result = in_pieces()
            finally:
                with self._sql_errors():
                    db.execute(f"PRAGMA secure_delete={zeroing}")
        reserve = self._reserve
        if reserve is not None and (self._full is not None or not self._reserve_whole):
            self._checkpoint_now()
            self._reserve_whole = reserve.ensure(_RESERVE_KEEP_FREE)
        return result

    def _delete_in_pieces(self, keys: list[str]) -> None:
        for i in range(0, len(keys), _FULL_DISK_PIECE):
            with self._transaction(write=True) as db:
                db.executemany(f"DELETE FROM {self._q} WHERE k = ?",
                               [(k,) for k in keys[i : i + _FULL_DISK_PIECE]])

    # ---------------------------------------------------------- connections
    def _connect(self) -> sqlite3.Connection:
        return _connect(self._path, self._mode, self._timeout, self._immutable,
                        self._synchronous)

    def _start_checkpointer(self) -> None:
        # The thread knows the file, not the store: an unclosed store can
        # still be collected, and stopping the thread is its finalizer's job.
        checkpointer = _Checkpointer(
            functools.partial(_connect, self._path, self._mode, self._timeout,
                              synchronous=self._synchronous), self._write_lock)
        self._checkpointer = checkpointer
        weakref.finalize(self, checkpointer.close, False)

    def _db(self) -> sqlite3.Connection:
        """The calling thread's connection (the only one for ``":memory:"``)."""
        if self._memory_db is not None:
            return self._memory_db
        if self._pid != os.getpid():
            self._forget_inherited_connections()
        holder = getattr(self._local, "connection", None)
        if holder is None:
            holder = _Connection(self._connect())
            self._local.connection = holder
            with self._connections_lock:
                self._connections.add(holder)
        return holder.db

    def _forget_inherited_connections(self) -> None:
        """In a forked child: set the parent's connections (and locks) aside."""
        _INHERITED.extend(self._connections)
        self._connections = weakref.WeakSet()
        self._connections_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self._pid = os.getpid()
        if self._checkpointer is not None:  # the parent's thread did not come along
            self._start_checkpointer()

    def _table_exists(self) -> bool:
        row = self._fetchone(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (self._table,)
        )
        return row is not None

    def _create_table(self) -> None:
        with self._sql_errors(), self._write_lock:
            db = self._db()
            if not self._memory:
                # Both persistent in the file.  The page size takes effect only
                # while the file is still empty (SQLite ignores it afterwards);
                # journal_mode is a no-op once set.
                db.execute(f"PRAGMA page_size={_PAGE_SIZE}")
                db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"CREATE TABLE IF NOT EXISTS {self._q}(k TEXT PRIMARY KEY, v BLOB)")

    @contextmanager
    def _transaction(self, write: bool = False, size: int = _PAGE_SIZE
                     ) -> Iterator[sqlite3.Connection]:
        """One transaction: ``BEGIN IMMEDIATE`` to write, a consistent snapshot to read.

        ``size`` estimates the bytes a write adds to the WAL (for checkpoints).
        """
        try:
            with self._write_lock if write else self._read_lock:
                db = self._db()
                db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
                if write and self._low_space:
                    self._copy_wal(db)
        except sqlite3.Error as error:
            raise self._error(error) from error
        if write:
            self._wrote(size)

    def _wrote(self, size: int) -> None:
        self._unchecked += size
        if self._unchecked >= _SPACE_CHECK_BYTES:
            self._check_space()
        if self._checkpointer is not None and not self._low_space:
            self._checkpointer.wrote(size)

    def _fetchone(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        try:
            with self._read_lock:
                return self._db().execute(sql, params).fetchone()
        except sqlite3.Error as error:
            raise self._error(error) from error

    def _fetchall(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        try:
            with self._read_lock:
                return self._db().execute(sql, params).fetchall()
        except sqlite3.Error as error:
            raise self._error(error) from error

    def _write(self, sql: str, params: tuple[Any, ...] = (), size: int = _PAGE_SIZE) -> int:
        """Run one statement in its own (automatic) transaction; the rows changed."""
        try:
            with self._write_lock:
                db = self._db()
                changed = db.execute(sql, params).rowcount
                if self._low_space:
                    self._copy_wal(db)
        except sqlite3.Error as error:
            raise self._error(error) from error
        self._wrote(size)
        return changed

    # ------------------------------------------------------------ primitives
    def _get(self, key: str) -> bytes:
        row = self._fetchone(f"SELECT {_SMALL_VALUE}, {_LARGE_BLOB} FROM {self._q} WHERE k = ?",
                             (key,))
        if row is None:
            raise KeyError(key)
        if row[1]:
            # A large blob: read through a blob handle, in a transaction of its
            # own (the row may have changed since; the range read looks again).
            return self._get_range(key, 0, None)
        return _as_bytes(row[0])

    def _open_reader(self, key: str) -> ValueReader:
        # A small value is read whole; a large one through a snapshot (a read
        # transaction on a connection of its own, ~0.3 ms to open), so a
        # reader of a GiB value holds a transaction, not a GiB of memory.
        size = self._stat(key)
        if size is None:
            raise KeyError(key)
        if size < _PIN_BY_SNAPSHOT_ABOVE or not self.supports_snapshots:
            return BufferReader(key, self._get(key))
        return SnapshotReader(self._snapshot(), key)

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        with self._transaction() as db:
            row = db.execute(
                f"SELECT rowid, length(v), typeof(v) FROM {self._q} WHERE k = ?", (key,)
            ).fetchone()
            if row is None:
                raise KeyError(key)
            rowid, size, kind = row
            if kind != "blob":
                value = _as_bytes(
                    db.execute(f"SELECT v FROM {self._q} WHERE rowid = ?", (rowid,)).fetchone()[0]
                )
                size = len(value)
            first = start if start >= 0 else max(size + start, 0)
            stop = size if length is None else min(first + length, size)
            if first >= stop:
                return b""
            if kind != "blob":
                return value[first:stop]
            # Incremental blob I/O reads only the pages the range covers; the
            # transaction keeps the row from changing between the two steps.
            with db.blobopen(self._table, "v", rowid, readonly=True) as blob:
                blob.seek(first)
                return blob.read(stop - first)

    def _set(self, key: str, value: Buffer) -> None:
        if self._full is not None:
            self._refuse_while_full()
        self._write(f"INSERT OR REPLACE INTO {self._q}(k, v) VALUES (?, ?)", (key, value),
                    len(value) + _PAGE_SIZE)

    def _delete(self, key: str) -> None:
        def attempt() -> int:
            return self._write(f"DELETE FROM {self._q} WHERE k = ?", (key,))

        if not self._freeing(attempt, attempt):
            raise KeyError(key)

    def _contains(self, key: str) -> bool:
        return self._fetchone(f"SELECT 1 FROM {self._q} WHERE k = ?", (key,)) is not None

    def _list_prefix(self, prefix: str) -> list[str]:
        where, params = _key_range(prefix)
        return [k for (k,) in self._fetchall(f"SELECT k FROM {self._q} WHERE {where}", params)]

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        with self._transaction() as db:
            for i in range(0, len(keys), _BATCH):
                batch = keys[i : i + _BATCH]
                marks = ", ".join("?" * len(batch))
                rows = db.execute(
                    f"SELECT k, {_SMALL_VALUE}, {_LARGE_BLOB}, rowid FROM {self._q} "
                    f"WHERE k IN ({marks})", batch)
                for k, v, large, rowid in rows.fetchall():
                    if large:  # the transaction keeps the row as the query saw it
                        with db.blobopen(self._table, "v", rowid, readonly=True) as blob:
                            v = blob.read()
                    found[k] = _as_bytes(v)
        return found

    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        if items:
            if self._full is not None:
                self._refuse_while_full()
            size = sum(len(value) for _, value in items) + _PAGE_SIZE
            with self._transaction(write=True, size=size) as db:
                db.executemany(f"INSERT OR REPLACE INTO {self._q}(k, v) VALUES (?, ?)", items)

    def _delete_many(self, keys: list[str]) -> None:
        if keys:
            def attempt() -> None:
                with self._transaction(write=True) as db:
                    db.executemany(f"DELETE FROM {self._q} WHERE k = ?", [(k,) for k in keys])

            self._freeing(attempt, lambda: self._delete_in_pieces(keys))

    def _listdir(self, prefix: str) -> list[str]:
        upper = prefix_upper_bound(prefix)
        where, tail = ("k >= ?", ()) if upper is None else ("k >= ? AND k < ?", (upper,))
        sql = f"SELECT k FROM {self._q} WHERE {where} ORDER BY k"
        with self._transaction() as db:
            # One range query read in order serves a folder of keys; a big
            # child folder is jumped over with a new query past it.
            return children_by_scan(
                prefix, lambda lower: (k for (k,) in db.execute(sql, (lower, *tail)))
            )

    def _rmdir(self, prefix: str) -> None:
        where, params = _key_range(prefix)

        def attempt() -> None:
            with self._transaction(write=True) as db:
                db.execute(f"DELETE FROM {self._q} WHERE {where}", params)

        self._freeing(attempt, lambda: self._delete_in_pieces(self._list_prefix(prefix)))

    def _getsize_key(self, key: str) -> int:
        row = self._fetchone(f"SELECT {_SIZE} FROM {self._q} WHERE k = ?", (key,))
        if row is None:
            raise KeyError(key)
        return row[0]

    def _stat(self, key: str) -> int | None:
        # One query: no row means no key, so an empty value needs no second look.
        row = self._fetchone(f"SELECT {_SIZE} FROM {self._q} WHERE k = ?", (key,))
        return None if row is None else row[0]

    def _getsize_prefix(self, prefix: str) -> int:
        where, params = _key_range(prefix)
        row = self._fetchone(
            f"SELECT coalesce(sum({_SIZE}), 0) FROM {self._q} WHERE {where}", params
        )
        return row[0]

    def _rename_key(self, src: str, dst: str) -> None:
        if self._full is not None:
            self._refuse_while_full()
        with self._transaction(write=True) as db:
            copied = db.execute(
                f"INSERT OR REPLACE INTO {self._q}(k, v) SELECT ?, v FROM {self._q} WHERE k = ?",
                (dst, src),
            ).rowcount
            if not copied:
                raise KeyError(src)
            db.execute(f"DELETE FROM {self._q} WHERE k = ?", (src,))

    def _rename_prefix(self, src_prefix: str, dst_prefix: str) -> None:
        if self._full is not None:
            self._refuse_while_full()
        where, params = _key_range(src_prefix)
        with self._transaction(write=True) as db:
            old = [k for (k,) in db.execute(f"SELECT k FROM {self._q} WHERE {where}", params)]
            moves = {key: dst_prefix + key[len(src_prefix) :] for key in old}
            # A target can be another source key only when the source lies
            # inside the destination; its target is then shorter, so moving
            # shorter keys first reads every source before it is overwritten.
            db.executemany(
                f"INSERT OR REPLACE INTO {self._q}(k, v) SELECT ?, v FROM {self._q} WHERE k = ?",
                [(moves[key], key) for key in sorted(old, key=len)],
            )
            targets = set(moves.values())
            db.executemany(
                f"DELETE FROM {self._q} WHERE k = ?", [(k,) for k in old if k not in targets]
            )

    def _len(self) -> int:
        return self._fetchone(f"SELECT count(*) FROM {self._q}")[0]

    def _clear(self) -> None:
        def attempt() -> None:
            with self._transaction(write=True) as db:
                db.execute(f"DELETE FROM {self._q}")

        self._freeing(attempt, lambda: self._delete_in_pieces(self._list_prefix("")))

    # ------------------------------------------ transactions and snapshots
    def _commit_changes(self, changes: ChangeSet) -> None:
        # One BEGIN IMMEDIATE transaction: it holds SQLite's write lock, so the
        # reads checked here cannot change before COMMIT, and readers (each in
        # a read transaction of WAL mode) see all of it or none.  A full disk
        # rolls it back: nothing is applied.
        if self._full is not None and changes.nbytes:
            self._refuse_while_full()
        size = changes.nbytes + _PAGE_SIZE
        with self._transaction(write=True, size=size) as db:
            def current(key: str) -> bytes | None:
                row = db.execute(f"SELECT v FROM {self._q} WHERE k = ?", (key,)).fetchone()
                return None if row is None else _as_bytes(row[0])

            changes.check(current, self)
            for prefix in changes.cleared:
                where, params = _key_range(prefix)
                db.execute(f"DELETE FROM {self._q} WHERE {where}", params)
            writes = changes.writes.items()
            db.executemany(f"DELETE FROM {self._q} WHERE k = ?",
                           [(key,) for key, value in writes if value is None])
            db.executemany(f"INSERT OR REPLACE INTO {self._q}(k, v) VALUES (?, ?)",
                           [(key, value) for key, value in writes if value is not None])

    def _snapshot(self) -> Store:
        return _SQLiteSnapshot(self)

    # ---------------------------------------------------- conditional writes
    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        # One statement: the primary key decides, under SQLite's write lock.
        if self._full is not None:
            self._refuse_while_full()
        return self._write(
            f"INSERT INTO {self._q}(k, v) VALUES (?, ?) ON CONFLICT(k) DO NOTHING",
            (key, value), len(value) + _PAGE_SIZE) == 1

    def _replace_if(self, key: str, expected: Buffer | Version, value: Buffer) -> bool:
        # BEGIN IMMEDIATE holds the write lock from the read to the commit.
        if self._full is not None:
            self._refuse_while_full()
        with self._transaction(write=True, size=len(value) + _PAGE_SIZE) as db:
            row = db.execute(f"SELECT v FROM {self._q} WHERE k = ?", (key,)).fetchone()
            if not self._holds(None if row is None else _as_bytes(row[0]), expected):
                return False
            db.execute(f"UPDATE {self._q} SET v = ? WHERE k = ?", (value, key))
            return True

    # ------------------------------------------------------------- lifecycle
    def _close(self) -> None:
        if self._memory_db is not None:
            with self._write_lock:
                self._memory_db.close()
            return
        if self._checkpointer is not None:
            self._checkpointer.close()
        with self._connections_lock:
            holders = list(self._connections)
            self._connections = weakref.WeakSet()
        self._local = threading.local()
        # Closing the last connection checkpoints the WAL into the file.
        for holder in holders:
            holder.db.close()
        if self._tidy_wal:
            self._remove_wal_files()
        if self._released_at_open and self._mode == "r":
            # The room the -wal and -shm took while reading is back: set the
            # reserve aside again for the next open (writable stores already did).
            SpaceReserve(self._path, _RESERVE_BYTES).ensure(_RESERVE_KEEP_FREE)

    @property
    def path(self) -> str:
        """The absolute path of the database file, or ``":memory:"``."""
        return self._path

    @property
    def table(self) -> str:
        """The table holding the keys and values."""
        return self._table

    def _location(self) -> Any:
        if self._memory:
            return id(self)
        return ("sqlite", os.path.realpath(self._path), self._table)

    def _describe(self) -> str:
        return self._path if self._table == "zarr" else f"{self._path}#{self._table}"

    def _params(self) -> dict[str, Any]:
        return {"path": self._path, "table": self._table, "timeout": self._timeout,
                "synchronous": self._synchronous}


class _SQLiteSnapshot(SnapshotRefusals, SQLiteStore):
    """A read-only view of an SQLite table at one moment: a read transaction held open.

    It has a connection of its own, in a read transaction begun (in WAL mode
    a read transaction sees the database as of its first read) when the view
    is made and ended by ``close()``.  The reads of ``SQLiteStore`` run on it
    unchanged; a lock makes threads take turns on the one connection.  While
    the view lives, checkpoints cannot copy the WAL past its moment, so the
    WAL grows with the writes made meanwhile.
    """

    def __init__(self, store: SQLiteStore) -> None:
        Store.__init__(self, mode="r")
        for name in ("_table", "_q", "_timeout", "_memory", "_path", "_immutable",
                     "_synchronous", "max_value_size", "supports_process_writers"):
            setattr(self, name, getattr(store, name))
        self._memory_db = None
        self._checkpointer = None
        self._full = None
        self._lock = threading.RLock()
        self._read_lock = self._lock
        self._write_lock = self._lock
        self._connection: sqlite3.Connection | None = None
        with self._sql_errors():
            db = _connect(self._path, store.mode, self._timeout, self._immutable)
            self._connection = db
            try:
                db.execute("BEGIN")
                # The snapshot is taken at the first read, not at BEGIN.
                db.execute(f"SELECT 1 FROM {self._q} LIMIT 1").fetchall()
            except BaseException:
                db.close()
                self._connection = None
                raise

    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            self._check_open()
            raise StoreClosedError(f"{self!r} is closed")
        return self._connection

    @contextmanager
    def _transaction(self, write: bool = False, size: int = _PAGE_SIZE
                     ) -> Iterator[sqlite3.Connection]:
        if write:
            self._refuse_write()
        try:
            with self._lock:
                yield self._db()
        except sqlite3.Error as error:
            raise self._error(error) from error

    def _close(self) -> None:
        with self._lock:
            db, self._connection = self._connection, None
        if db is not None:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # closing ends the read transaction anyway
            db.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self._describe()!r}, snapshot)"

