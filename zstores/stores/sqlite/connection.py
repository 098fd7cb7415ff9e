"""SQLite connections for SQLiteStore: opening them, one per thread, checkpoints, errors.

Everything here speaks ``sqlite3`` and knows nothing of ``Store`` (an engine
module never imports it): ``_connect`` opens a connection for a store's mode,
``_Connection`` closes a thread's connection with the thread, the
``_Checkpointer`` thread copies the WAL into the database file, and
``_translate`` turns ``sqlite3`` exceptions into zstores errors.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from ...errors import (
    CorruptValueError,
    ReadOnlyError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
    StoreNotFoundError,
    ValueTooLargeError,
)
from .._reserve import free_bytes

#: The path of a database in memory (one connection, nothing on disk).
MEMORY = ":memory:"

# Bytes written between two checkpoints of the WAL into the database file
# (SQLite's own default is 1,000 pages: 16 MiB at our page size).
_CHECKPOINT_BYTES = 16 << 20

# Checkpoints the background thread may fall behind by before a writer waits
# for it, which bounds the WAL at about this many times _CHECKPOINT_BYTES.
_CHECKPOINT_LAG = 4


# Opening a WAL database needs its -shm index (32 KiB, allocated when SQLite
# creates it) and a -wal: with less room than this free and no -shm yet, the
# store first releases its reserve (see SQLiteStore._make_room_to_open).
_OPEN_ROOM = 128 << 10
_SHM_BYTES = 32 << 10

# SQLite's primary result codes (the low byte of an extended code).
_FULL = sqlite3.SQLITE_FULL
_CORRUPT = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
_DENIED = (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH)
# What SQLite reports when it cannot create or grow its -wal and -shm at open.
_OPEN_FAILURES = (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN)


def _code(error: sqlite3.Error) -> int:
    return (getattr(error, "sqlite_errorcode", None) or sqlite3.SQLITE_ERROR) & 0xFF


def _translate(what: str, path: str, error: sqlite3.Error) -> Exception:
    """The zstores error for an ``sqlite3`` exception raised while working on ``what``."""
    code = _code(error)
    if code == _FULL:
        return StoreFullError(f"{what}: the disk is full ({error})")
    if code in _CORRUPT:
        return CorruptValueError(f"{what}: {path} is damaged or not an SQLite database ({error})")
    if code in _BUSY:
        return StoreLockedError(f"{what}: the database stayed locked by another connection "
                                f"beyond the timeout ({error})")
    if code in _DENIED:
        return ReadOnlyError(f"{what}: {path} cannot be written ({error})")
    if code == sqlite3.SQLITE_CANTOPEN:
        return _cannot_open(what, path, error)
    if code == sqlite3.SQLITE_TOOBIG:
        return ValueTooLargeError(f"{what}: the value is larger than SQLite allows ({error})")
    return StoreIOError(f"{what}: SQLite failed on {path} ({error})")


def _cannot_open(what: str, path: str, error: sqlite3.Error) -> OSError:
    """Why SQLite could not open ``path`` (it only says 'unable to open database file')."""
    folder = os.path.dirname(path)
    if not os.path.exists(path):
        if not os.path.isdir(folder):
            return StoreNotFoundError(f"{what}: the folder {folder} does not exist ({error})")
        if not os.access(folder, os.W_OK):
            return ReadOnlyError(f"{what}: {path} does not exist and {folder} cannot be "
                                 f"written ({error})")
        return StoreNotFoundError(f"{what}: {path} does not exist ({error})")
    if not os.access(path, os.R_OK):
        return PermissionError(errno.EACCES, f"{what}: {path} cannot be read ({error})", path)
    if not os.access(folder, os.W_OK) or not os.access(path, os.W_OK):
        return ReadOnlyError(f"{what}: {path} (or its folder, for the -wal and -shm files) "
                             f"cannot be written; open it with mode='r' ({error})")
    return StoreIOError(f"{what}: SQLite cannot open {path} ({error})")


def _has_room_to_open(path: str) -> bool:
    """Whether SQLite can open the WAL database ``path``: its -shm exists, or there is room."""
    try:
        if os.path.getsize(path + "-shm") >= _SHM_BYTES:
            return True
    except OSError:
        pass  # no -shm yet: SQLite creates and allocates it
    try:
        return free_bytes(os.path.dirname(path)) >= _OPEN_ROOM
    except OSError:
        return True  # cannot tell: let SQLite try


# Connections a forked child inherited: never used again and never closed,
# since closing them could checkpoint or delete the parent's WAL.
_INHERITED: list[Any] = []


class _Connection:
    """A thread's connection; closing it when the thread's locals are dropped."""

    __slots__ = ("__weakref__", "db")

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __del__(self) -> None:
        self.db.close()


#: What each ``synchronous=`` setting promises, in WAL mode (see SQLiteStore).
SYNCHRONOUS = {
    "normal": "a commit is fsync-ed at checkpoints: never corrupt, but a power loss or OS "
              "crash may roll back the last commits",
    "full": "every commit is fsync-ed before it returns: it survives a power loss",
}


def _check_synchronous(synchronous: str) -> str:
    setting = synchronous.lower() if isinstance(synchronous, str) else synchronous
    if setting not in SYNCHRONOUS:
        known = "; ".join(f"{name!r}: {promise}" for name, promise in SYNCHRONOUS.items())
        raise ValueError(f"invalid synchronous={synchronous!r}; expected one of {known}")
    return setting


def _connect(path: str, mode: str, timeout: float, immutable: bool = False,
             synchronous: str = "normal") -> sqlite3.Connection:
    """A connection to ``path`` (or ``":memory:"``) for a store opened with ``mode``.

    ``immutable`` (mode ``"r"`` only) reads the file with no locks and no
    ``-wal``/``-shm`` files, trusting that nothing changes it.  ``synchronous``
    is SQLite's setting of that name for this connection's commits.
    """
    if path == MEMORY:
        target, uri = MEMORY, False
    else:
        access = {"r": "ro", "r+": "rw"}.get(mode, "rwc")
        if access == "rwc":
            os.makedirs(os.path.dirname(path), exist_ok=True)
        target, uri = f"{Path(path).as_uri()}?mode={access}", True
        if immutable:
            target += "&immutable=1"
    db = sqlite3.connect(
        target, timeout=timeout, isolation_level=None, check_same_thread=False, uri=uri
    )
    if path != MEMORY:
        db.execute(f"PRAGMA synchronous={synchronous.upper()}")
        if mode != "r":
            db.execute("PRAGMA wal_autocheckpoint=0")  # see _Checkpointer
    return db


class _Checkpointer:
    """Copies the WAL into the database file from a thread of its own.

    SQLite's automatic checkpoint runs inside the commit that crosses its
    threshold, which then waits for the copy and two fsyncs.  The store's
    connections turn it off (``wal_autocheckpoint=0``) and its writers report
    what they commit here; every ``_CHECKPOINT_BYTES`` this thread runs a
    PASSIVE checkpoint on its own connection while the writers go on, then a
    second one under the store's write lock for what they added meanwhile,
    so that the next write starts the WAL over.  A writer that gets
    ``_CHECKPOINT_LAG`` checkpoints ahead waits for the thread: the WAL stays
    bounded.  The last connection to close checkpoints what is left.
    """

    def __init__(self, connect: Any, write_lock: Any) -> None:
        self._connect = connect
        self._write_lock = write_lock
        self._written = 0
        self._requested = 0
        self._done = 0
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False

    def wrote(self, size: int) -> None:
        """Count ``size`` bytes committed (called after the write lock is released)."""
        with self._wake:
            self._written += size
            if self._written < _CHECKPOINT_BYTES:
                return
            self._written = 0
            self._requested += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="zstores-sqlite-checkpoint", daemon=True)
                self._thread.start()
            self._wake.notify_all()
            while self._requested - self._done > _CHECKPOINT_LAG and not self._closing:
                self._wake.wait()

    def _run(self) -> None:
        try:
            db = self._connect()
            try:
                self._serve(db)
            finally:
                db.close()
        finally:
            # Whatever ended the thread (an error is reported by threading's
            # excepthook), no writer may go on waiting for it.
            with self._wake:
                self._closing = True
                self._wake.notify_all()

    def _serve(self, db: sqlite3.Connection) -> None:
        while True:
            with self._wake:
                while self._done == self._requested and not self._closing:
                    self._wake.wait()
                if self._closing:
                    return
            _checkpoint(db)  # the bulk, while writers go on
            with self._write_lock:  # the rest: the next write then restarts the WAL
                with self._wake:
                    covered = self._requested
                _checkpoint(db)
            with self._wake:
                self._done = max(self._done, covered)
                self._wake.notify_all()

    def close(self, wait: bool = True) -> None:
        """Stop the thread (after the checkpoint it is running, if any)."""
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        thread = self._thread
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join()


def _checkpoint(db: sqlite3.Connection) -> None:
    try:
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
    except sqlite3.OperationalError:
        pass  # busy or locked: the next checkpoint (or the last close) does it


def remove_wal_files(path: str) -> None:
    """Let SQLite delete the ``-wal`` and ``-shm`` of ``path`` if no one else uses them.

    A connection that opens, reads nothing and closes: SQLite's own
    last-close cleanup, which leaves them alone while anyone else uses them.
    """
    if not os.path.exists(path + "-wal"):
        return
    try:
        db = sqlite3.connect(f"{Path(path).as_uri()}?mode=rw", uri=True, timeout=0)
        try:
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        pass  # in use, or gone: the connection that closes last cleans up
