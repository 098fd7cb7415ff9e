"""DBMStore: keys and values in a dbm-style database (dbm.dumb, gnu, ndbm, sqlite3)."""

from __future__ import annotations

import dbm
import dbm.dumb
import errno
import importlib
import os
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..base import Buffer, Mode, Store
from ..errors import (
    CorruptValueError,
    StaleStoreError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
    UnsupportedOperationError,
    ZStoresError,
)
from ._dumb import DumbFiles, ShortValue, Stale, is_dumb
from ._single_writer import LockedConditionalWrites, reader_lock, writer_lock

__all__ = ["DBMStore", "open_existing_or_dumb"]

# The dbm flag for each store mode; "w-" has checked that nothing exists.
_FLAGS = {"r": "r", "r+": "w", "a": "c", "w": "n", "w-": "c"}
# Flavours whose readers are served beside a writer: dbm.dumb (DumbFiles reads
# the index again when it changes) and dbm.sqlite3 (SQLite's own locking).
# Readers of any other flavour (gdbm, Berkeley DB's ndbm) and its writer
# exclude each other: a shared lock on the writer's lock file.
_READ_BESIDE_WRITER = {"dbm.dumb", "dbm.sqlite3"}


def open_existing_or_dumb(path: str, flag: str = "r", mode: int = 0o666) -> Any:
    """Open an existing dbm database with its own flavour; create a new one as ``dbm.dumb``.

    ``dbm.open`` creates a new database with the first flavour installed
    (``dbm.sqlite3``, ``dbm.gnu``, ``dbm.ndbm``, then ``dbm.dumb``), so the
    same code makes different files on different Pythons, and gdbm and
    Berkeley DB's ndbm can lose values when a write meets a full disk.
    ``dbm.dumb`` is in every Python, and DBMStore writes its files itself,
    crash-safely and reusing freed space.  Flag ``"n"`` on an existing
    database empties it in its own flavour.

    Examples
    --------
    >>> import dbm, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "new")
    >>> open_existing_or_dumb(path, "c").close()
    >>> dbm.whichdb(path)
    'dbm.dumb'
    """
    flavour = dbm.whichdb(path)
    if flavour is None:  # nothing there yet
        return dbm.dumb.open(path, flag, mode)
    if not flavour:  # a file no flavour recognizes: let dbm.open say so
        return dbm.open(path, flag, mode)
    return importlib.import_module(flavour).open(path, flag, mode)


class DBMStore(LockedConditionalWrites, Store):
    """Keys and values in a database opened by any dbm-style ``open`` function.

    Keys are stored as their UTF-8 bytes and values as bytes, the layout of
    zarr-python 2.18's ``DBMStore`` (which encodes keys as ASCII, a subset), so
    either library reads the other's databases when both use the same dbm
    flavour.  The file format is the flavour's.  By default
    (``open=open_existing_or_dumb``) an existing database is reopened with
    whichever flavour ``dbm.whichdb`` recognizes, and a new one is created as
    ``dbm.dumb``, which every Python reads and which zstores writes
    crash-safely; ``dbm.open`` would create the first of ``dbm.sqlite3``,
    ``dbm.gnu``, ``dbm.ndbm`` that is installed, and gdbm and Berkeley DB's
    ndbm can lose values when the disk fills (below).  Pass ``open=dbm.open``
    for zarr-python 2's choice.

    No dbm module is thread-safe, so one lock guards every operation;
    ``dbm.sqlite3`` databases, usable only from the thread that opened them,
    get a thread of their own that runs every operation.  Writes reach the
    file as the flavour makes them; ``setitems`` and ``delitems`` sync once per
    batch (one transaction with ``dbm.sqlite3``) and ``close()`` syncs and
    closes.  ``dbm.sqlite3`` is transactional.

    ``dbm.dumb`` databases are written by the store itself, in dbm.dumb's own
    file format but never as dbm.dumb would (see ``zstores.stores._dumb``): a
    value goes to space no index line refers to, then its index line is
    appended; deletes write a new index file and move it into place; and the
    data file keeps a reserve of free bytes (at least the index's size) at
    its end.  So a failed write changes nothing, a crash at any moment leaves
    files ``dbm.dumb`` opens with the state before or after the operation,
    and on a full disk deleting keys still works and frees their space for
    new values.  A write is durable after ``setitems``, ``delitems`` or
    ``close()`` (which sync); a single ``store[key] = value`` survives the
    process crashing, not the machine.

    ``dbm.gnu`` and ``dbm.ndbm`` write their own files: on a full disk their
    errors are typed, but gdbm can lose the key whose write failed and
    Berkeley DB's ndbm values still in its cache; ``dbm.sqlite3`` keeps every
    committed value, though a delete needs room for SQLite's log.  Where a
    disk may fill up, prefer ``dbm.dumb`` (or ``SQLiteStore``).

    **Readers beside a writer.**  A ``dbm.dumb`` reader (mode ``"r"``, in
    another process or handle) sees every write when it returns: it compares
    the index file's stat after each read and, if the writer changed it, reads
    the new index lines (or the whole index after a delete) and the value
    again, so it never returns bytes the writer has since given to another
    value; ``StaleStoreError`` if the index changed during each of four
    attempts.  ``dbm.gnu`` and ``dbm.ndbm`` files cannot be read while a
    writer changes them (Berkeley DB's readers saw stale values and no keys),
    so their readers hold a shared lock on ``path + ".lock"``: a writer is
    refused while readers are open and a reader while a writer is
    (``StoreLockedError``; several readers may share).  ``dbm.sqlite3``
    readers rely on SQLite's own locking.

    Every failure of the backend is typed: a full disk raises
    ``StoreFullError`` (``errno`` ``ENOSPC``; for ``dbm.ndbm``, which reports
    no errno, when the disk has less than 1 MiB free), a damaged file
    ``CorruptValueError``, any other failure ``StoreIOError``, each naming the
    store (and key) with the backend's exception chained.

    Parameters
    ----------
    path : str or os.PathLike
        The database path as given to ``open`` (``dbm.dumb`` adds ``.dat``,
        ``.dir`` and ``.bak``; ``dbm.ndbm`` may add ``.db``).
    open : callable
        A dbm-style ``open(path, flag, mode)``: ``open_existing_or_dumb``
        (default), ``dbm.open``, ``dbm.dumb.open``, ``dbm.gnu.open``, ``dbm.ndbm.open``,
        ``dbm.sqlite3.open`` or another with the same signature.  It must be
        picklable (a module-level function) for the store to pickle.
    mode : {"a", "r", "r+", "w", "w-"}
        Becomes the dbm flag ``"r"``, ``"w"``, ``"c"``, ``"n"`` and (after
        checking that no database exists) ``"c"``.
    **open_kwargs
        Passed on to ``open`` as keywords.  (``mode`` is the store's mode, so
        new files get ``open``'s default permissions, ``0o666`` less the umask.)

    Notes
    -----
    Capability flags: ``supports_process_writers`` is False (no flavour
    coordinates writers across processes: a writable store holds an
    exclusive lock on ``path + ".lock"`` while open, so a second writer
    process gets ``StoreLockedError``); ``supports_range_reads`` is False
    (values are read whole); ``supports_deletes`` is True; ``hierarchical`` is
    False.  ``dbm.dumb``: the space of deleted and replaced values is reused
    by later values (once synced); the data file does not shrink.

    Examples
    --------
    >>> import dbm.dumb, os, tempfile
    >>> from zstores.stores.dbm import DBMStore
    >>> path = os.path.join(tempfile.mkdtemp(), "data")
    >>> with DBMStore(path, open=dbm.dumb.open, mode="w") as store:
    ...     store["foo/.zgroup"] = b'{"zarr_format": 2}'
    ...     store.listdir("foo")
    ['.zgroup']
    """

    supports_process_writers = False
    supports_range_reads = False
    supports_deletes = True
    hierarchical = False

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        open: Callable[..., Any] = open_existing_or_dumb,
        mode: Mode = "a",
        **open_kwargs: Any,
    ) -> None:
        super().__init__(mode=mode)
        self._path = os.path.abspath(os.fspath(path))
        self._open = open
        self._open_kwargs = open_kwargs
        self._lock = threading.RLock()
        self._owner: ThreadPoolExecutor | None = None
        self._files: DumbFiles | None = None
        flavour = dbm.whichdb(self._path)
        self._check_existence(flavour is not None)
        # No flavour coordinates writer processes: a second one must fail
        # before flag "n" empties the database under the first.
        self._writer = writer_lock(self._path + ".lock", self, self._mode, busy=_BUSY)
        if self._mode == "r" and flavour not in _READ_BESIDE_WRITER:
            self._writer = reader_lock(self._path + ".lock", self, busy=_BUSY_READER)
        try:
            with self._backend_errors("opening the database"):
                self._open_db(_FLAGS[self._mode])
        except BaseException:
            self._release_writer()
            raise

    def _open_db(self, flag: str) -> None:
        try:
            self._db = self._open(self._path, flag, **self._open_kwargs)
        except (SyntaxError, ValueError) as error:  # dbm.dumb: a line of .dir is damaged
            raise CorruptValueError(
                f"{self!r}: the database's index is damaged ({error})"
            ) from error
        self.supports_empty_values = not _loses_empty_values(self._db)
        if is_dumb(self._db):
            self._files = DumbFiles(self._db, writable=flag != "r")
        if _is_thread_bound(self._db):
            # dbm.sqlite3's connection works only in the thread that opened it:
            # reopen it in a thread of its own that runs every operation.
            self._db.close()
            self._owner = ThreadPoolExecutor(1, thread_name_prefix="zstores-dbm")
            reopen_flag = "c" if flag == "n" else flag  # already emptied
            self._db = self._run(self._open, self._path, reopen_flag, **self._open_kwargs)

    def _run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``function`` in the thread that owns the database."""
        if self._owner is None:
            return function(*args, **kwargs)
        return self._owner.submit(function, *args, **kwargs).result()

    @contextmanager
    def _backend_errors(self, action: str, key: str | None = None) -> Iterator[None]:
        """Turn the backend's exceptions into typed ones naming the store (and key)."""
        try:
            yield
        except (KeyError, ZStoresError):
            raise
        except Stale as error:
            what = action if key is None else f"{action} {key!r}"
            raise StaleStoreError(
                f"{self!r}: {what} failed: another process kept changing the database "
                f"({error}). Nothing wrong was returned; read it again, or open the store "
                f"once the writer has closed it"
            ) from error
        except ShortValue as error:
            raise CorruptValueError(
                f"{self!r}: the value of {key!r} is damaged: {error}"
            ) from error
        except (OSError, sqlite3.Error) as error:
            if isinstance(error, OSError) and error.errno in (errno.EAGAIN, errno.EACCES) \
                    and key is None and action == "opening the database" \
                    and "unavailable" in str(error).lower():
                # gdbm's own lock: a writer beside readers, or a reader beside one.
                raise StoreLockedError(
                    f"{self!r}: the database is locked by another handle ({error}): "
                    f"DBMStore {_BUSY_READER}"
                ) from error
            raise _typed_error(self, action if key is None else f"{action} {key!r}",
                               error) from error

    def _fresh(self) -> None:
        """A dbm.dumb reader's index brought up to the files (a writer may change them)."""
        if self._files is not None and self._mode == "r":
            self._files.refresh()

    # ------------------------------------------------------------ primitives
    def _get(self, key: str) -> bytes:
        raw = key.encode("utf-8")
        with self._lock, self._backend_errors("reading", key):
            try:
                if self._files is not None:
                    return self._files.read(raw)
                if self._owner is None:
                    value = self._db[raw]
                else:
                    value = self._run(_lookup, self._db, raw)
            except KeyError:
                raise KeyError(key) from None
        return value if value.__class__ is bytes else bytes(value)

    def _set(self, key: str, value: Buffer) -> None:
        if value.__class__ is not bytes:
            value = bytes(value)  # dbm.dumb takes only bytes and str
        if not value and not self.supports_empty_values:
            raise self._empty_value_error(key)
        raw = key.encode("utf-8")
        with self._lock, self._backend_errors("writing", key):
            if self._files is not None:
                self._files.write(raw, value)
            elif self._owner is None:  # the hot path: one plain assignment
                self._db[raw] = value
            else:
                self._run(_store, self._db, [(raw, value)], sync=False)

    def _empty_value_error(self, key: str) -> UnsupportedOperationError:
        return UnsupportedOperationError(
            f"{self!r} cannot store an empty value for {key!r}: Berkeley DB's dbm.ndbm "
            "reads an empty value back as a missing key (use dbm.dumb, dbm.gnu or SQLiteStore)"
        )

    def _delete(self, key: str) -> None:
        raw = key.encode("utf-8")
        with self._lock, self._backend_errors("deleting", key):
            if self._files is not None:
                removed = self._files.delete([raw])
            else:
                removed = self._run(_remove, self._db, [raw], sync=False)
        if not removed:
            raise KeyError(key)

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        with self._lock, self._backend_errors("listing keys"):
            self._fresh()
            raw_keys = self._run(_raw_keys, self._db)
        keys = (raw.decode("utf-8") for raw in raw_keys)
        if not prefix:
            return list(keys)
        return [key for key in keys if key.startswith(prefix)]

    # ------------------------------------------------------------ fast paths
    def _contains(self, key: str) -> bool:
        with self._lock, self._backend_errors("looking up", key):
            self._fresh()
            return self._run(_has, self._db, key.encode("utf-8"))

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        if self._files is not None:
            return super()._get_many(keys)  # each read typed with its key
        with self._lock, self._backend_errors("reading keys"):
            found = self._run(_lookup_many, self._db, [key.encode("utf-8") for key in keys])
        return {raw.decode("utf-8"): value for raw, value in found.items()}

    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        encoded = [(key.encode("utf-8"), bytes(value)) for key, value in items]
        if not self.supports_empty_values:
            for key, value in items:
                if not value:
                    raise self._empty_value_error(key)  # before anything is written
        with self._lock:
            if self._files is None:
                with self._backend_errors("writing keys"):
                    self._run(_store, self._db, encoded, sync=True)
                return
            for raw, value in encoded:
                with self._backend_errors("writing", raw.decode("utf-8")):
                    self._files.write(raw, value)
            with self._backend_errors("syncing"):
                self._files.sync()

    def _delete_many(self, keys: list[str]) -> None:
        raw_keys = [key.encode("utf-8") for key in keys]
        with self._lock, self._backend_errors("deleting keys"):
            if self._files is not None:
                self._files.delete(raw_keys)
            else:
                self._run(_remove, self._db, raw_keys, sync=True)

    def _getsize_key(self, key: str) -> int:
        if self._files is not None:
            with self._lock, self._backend_errors("reading the size of", key):
                self._fresh()
                try:
                    return int(self._files.index[key.encode("utf-8")][1])
                except KeyError:
                    raise KeyError(key) from None
        return len(self._get(key))

    def _getsize_prefix(self, prefix: str) -> int:
        with self._lock, self._backend_errors("reading sizes"):
            keys = [key.encode("utf-8") for key in self._list_prefix(prefix)]
            if self._files is not None:  # the index knows every size
                return sum(self._files.index[raw][1] for raw in keys)
            return self._run(_total_size, self._db, keys)

    def _len(self) -> int:
        with self._lock, self._backend_errors("counting keys"):
            self._fresh()
            return self._run(len, self._db)

    def _clear(self) -> None:
        with self._lock, self._backend_errors("deleting every key"):
            raw_keys = self._run(_raw_keys, self._db)
            if self._files is not None:
                self._files.delete(raw_keys)
            else:
                self._run(_remove, self._db, raw_keys, sync=True)

    # ------------------------------------------------------------- lifecycle
    def _close(self) -> None:
        with self._lock:
            try:
                with self._backend_errors("closing the database"):
                    if self._files is not None:
                        self._files.close()
                    else:
                        self._run(_close_db, self._db, sync=self._mode != "r")
            finally:
                if self._owner is not None:
                    self._owner.shutdown()
                self._release_writer()

    def _release_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.release()

    def _location(self) -> Any:
        return self._path

    def _describe(self) -> str:
        return self._path

    def _params(self) -> dict[str, Any]:
        return {"path": self._path, "open": self._open, **self._open_kwargs}

    @property
    def path(self) -> Path:
        """The database path as given to ``open``."""
        return Path(self._path)


# Operations on the dbm object, run in the thread that owns it.
# What a refused open says, for the flavours whose readers and writer exclude each other.
_BUSY = (
    "allows one writer process at a time, and for dbm.gnu and dbm.ndbm no readers beside "
    "it (close them there first; readers of dbm.dumb may stay open)"
)
_BUSY_READER = (
    "reads dbm.gnu and dbm.ndbm files only while no writer has them open, as they cannot "
    "be read while a writer changes them (close the writer first, or use dbm.dumb, whose "
    "readers are served beside a writer)"
)


def _lookup(db: Any, raw: bytes) -> bytes:
    return bytes(db[raw])


def _lookup_many(db: Any, raw_keys: list[bytes]) -> dict[bytes, bytes]:
    found = {}
    for raw in raw_keys:
        try:
            found[raw] = bytes(db[raw])
        except KeyError:
            pass
    return found


def _has(db: Any, raw: bytes) -> bool:
    return raw in db


def _raw_keys(db: Any) -> list[bytes]:
    return list(db.keys())


def _total_size(db: Any, raw_keys: list[bytes]) -> int:
    return sum(len(db[raw]) for raw in raw_keys)


def _store(db: Any, items: list[tuple[bytes, bytes]], *, sync: bool) -> None:
    with _transaction(db):
        for raw, value in items:
            db[raw] = value
    if sync:
        _sync(db)


def _remove(db: Any, raw_keys: list[bytes], *, sync: bool) -> int:
    """Delete the keys that exist; return how many did."""
    removed = 0
    with _transaction(db):
        for raw in raw_keys:
            try:
                del db[raw]
            except KeyError:
                continue
            removed += 1
    if sync and removed:
        _sync(db)
    return removed


def _sync(db: Any) -> None:
    sync = getattr(db, "sync", None)  # dbm.ndbm and dbm.sqlite3 have none
    if sync is not None:
        sync()


def _close_db(db: Any, *, sync: bool) -> None:
    try:
        if sync:
            _sync(db)
    finally:
        db.close()


def _is_thread_bound(db: Any) -> bool:
    return type(db).__module__ == "dbm.sqlite3"


@contextmanager
def _transaction(db: Any) -> Iterator[None]:
    """Make a batch one SQLite transaction for ``dbm.sqlite3``, a no-op otherwise.

    ``dbm.sqlite3`` commits every single write (its connection is in autocommit
    mode), which costs a journal sync each: 100,000 keys took two minutes.  Its
    connection is ``_cx``; an explicit BEGIN/COMMIT around the batch makes it one
    commit, and the batch all-or-nothing.
    """
    connection = getattr(db, "_cx", None) if _is_thread_bound(db) else None
    if not isinstance(connection, sqlite3.Connection) or connection.in_transaction:
        yield
        return
    connection.execute("BEGIN")
    try:
        yield
    except BaseException:
        if connection.in_transaction:  # SQLite rolls back by itself on SQLITE_FULL
            connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


# SQLite's primary result codes (the low byte of an extended code).
_SQLITE_FULL, _SQLITE_CORRUPT, _SQLITE_NOTADB = 13, 11, 26
# Below this much free space, a failed write that gave no reason is a full disk.
_NEARLY_FULL = 1 << 20


def _typed_error(store: DBMStore, action: str, error: BaseException) -> StoreIOError:
    """The zstores error for a backend's failure: full disk, damaged file, or other I/O.

    dbm.sqlite3 wraps SQLite's errors in its own (the original in
    ``__context__``); dbm.ndbm says only "cannot add item" with no errno, so a
    failure with less than 1 MiB free on the disk counts as a full disk.
    """
    codes, errnos, text = set(), set(), []
    seen: BaseException | None = error
    while seen is not None and len(text) < 5:
        code = getattr(seen, "sqlite_errorcode", None)
        if isinstance(code, int):
            codes.add(code & 0xFF)
        if isinstance(seen, OSError) and isinstance(seen.errno, int):
            errnos.add(seen.errno)
        text.append(str(seen).lower())
        seen = seen.__cause__ or seen.__context__
    message = " ".join(text)
    where = f"{store!r}: {action} failed: {error}"
    if (_SQLITE_FULL in codes or errnos & {errno.ENOSPC, errno.EDQUOT}
            or "disk is full" in message or "no space left" in message):
        return StoreFullError(f"{where} (the disk is full: delete keys or free space)")
    if codes & {_SQLITE_CORRUPT, _SQLITE_NOTADB} or "malformed" in message \
            or "not a database" in message:
        return CorruptValueError(f"{where} (the database file is damaged)")
    if not errnos and _nearly_full(store._path):
        return StoreFullError(f"{where} (the disk has less than 1 MiB free)")
    return StoreIOError(next(iter(errnos), errno.EIO), where)


def _nearly_full(path: str) -> bool:
    try:
        info = os.statvfs(os.path.dirname(path) or ".")
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < _NEARLY_FULL


def _loses_empty_values(db: Any) -> bool:
    """True for Berkeley DB's ndbm emulation, which stores ``b""`` but reads it as missing.

    Refusing the write is better than a value that silently disappears.
    """
    module = sys.modules.get(type(db).__module__)
    return type(db).__module__ == "_dbm" and "Berkeley" in str(getattr(module, "library", ""))
