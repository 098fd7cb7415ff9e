"""DBMStore: keys and values in a dbm-style database (dbm.dumb, gnu, ndbm, sqlite3)."""

from __future__ import annotations

import dbm
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..base import Buffer, Mode, Store
from ..sync.writer import writer_lock

__all__ = ["DBMStore"]

# The dbm flag for each store mode; "w-" has checked that nothing exists.
_FLAGS = {"r": "r", "r+": "w", "a": "c", "w": "n", "w-": "c"}


class DBMStore(Store):
    """Keys and values in a database opened by any dbm-style ``open`` function.

    Keys are stored as their UTF-8 bytes and values as bytes, the layout of
    zarr-python 2.18's ``DBMStore`` (which encodes keys as ASCII, a subset), so
    either library reads the other's databases when both use the same dbm
    flavour.  The file format is the flavour's: ``dbm.open`` creates the first
    of ``dbm.sqlite3`` (Python 3.13+), ``dbm.gnu``, ``dbm.ndbm``, ``dbm.dumb``
    that is installed and reopens whichever flavour ``dbm.whichdb`` recognizes.

    No dbm module is thread-safe, so one lock guards every operation;
    ``dbm.sqlite3`` databases, usable only from the thread that opened them,
    get a thread of their own that runs every operation.  Writes reach the
    file as the flavour makes them; ``setitems`` and ``delitems`` sync once per
    batch (one transaction with ``dbm.sqlite3``) and ``close()`` syncs and
    closes.  Crash safety is the flavour's: ``dbm.sqlite3`` is transactional,
    ``dbm.dumb`` is not (it may overwrite a value in place and keeps part of
    its index in memory until it syncs).  For ``dbm.dumb`` the store reads and
    writes values through a descriptor it keeps on the data file, where and
    in the order dbm.dumb itself would (dbm.dumb opens the file on every
    call); the files stay dbm.dumb's own.

    Parameters
    ----------
    path : str or os.PathLike
        The database path as given to ``open`` (``dbm.dumb`` adds ``.dat``,
        ``.dir`` and ``.bak``; ``dbm.ndbm`` may add ``.db``).
    open : callable
        A dbm-style ``open(path, flag, mode)``: ``dbm.open`` (default),
        ``dbm.dumb.open``, ``dbm.gnu.open``, ``dbm.ndbm.open``,
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
    False.  ``dbm.dumb`` never reclaims the space of deleted or grown values.

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
        open: Callable[..., Any] = dbm.open,
        mode: Mode = "a",
        **open_kwargs: Any,
    ) -> None:
        super().__init__(mode=mode)
        self._path = os.path.abspath(os.fspath(path))
        self._open = open
        self._open_kwargs = open_kwargs
        self._lock = threading.RLock()
        self._owner: ThreadPoolExecutor | None = None
        self._values_fd: int | None = None
        self._check_existence(dbm.whichdb(self._path) is not None)
        # No flavour coordinates writer processes: a second one must fail
        # before flag "n" empties the database under the first.
        self._writer = writer_lock(self._path + ".lock", self, self._mode)
        try:
            self._open_db(_FLAGS[self._mode])
        except BaseException:
            self._release_writer()
            raise

    def _open_db(self, flag: str) -> None:
        self._db = self._open(self._path, flag, **self._open_kwargs)
        self._values_fd = _dumb_values_fd(self._db, writable=flag != "r")
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

    # ------------------------------------------------------------ primitives
    def _get(self, key: str) -> bytes:
        raw = key.encode("utf-8")
        with self._lock:
            try:
                if self._values_fd is not None:
                    return _dumb_read(self._db, self._values_fd, raw)
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
        raw = key.encode("utf-8")
        with self._lock:
            if self._values_fd is not None:
                _dumb_write(self._db, self._values_fd, raw, value)
            elif self._owner is None:  # the hot path: one plain assignment
                self._db[raw] = value
            else:
                self._run(_store, self._db, [(raw, value)], sync=False)

    def _delete(self, key: str) -> None:
        with self._lock:
            if not self._run(_remove, self._db, [key.encode("utf-8")], sync=False):
                raise KeyError(key)

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        with self._lock:
            raw_keys = self._run(_raw_keys, self._db)
        keys = (raw.decode("utf-8") for raw in raw_keys)
        if not prefix:
            return list(keys)
        return [key for key in keys if key.startswith(prefix)]

    # ------------------------------------------------------------ fast paths
    def _contains(self, key: str) -> bool:
        with self._lock:
            return self._run(_has, self._db, key.encode("utf-8"))

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        with self._lock:
            found = self._run(_lookup_many, self._db, [key.encode("utf-8") for key in keys])
        return {raw.decode("utf-8"): value for raw, value in found.items()}

    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        encoded = [(key.encode("utf-8"), bytes(value)) for key, value in items]
        with self._lock:
            if self._values_fd is None:
                self._run(_store, self._db, encoded, sync=True)
                return
            for raw, value in encoded:
                _dumb_write(self._db, self._values_fd, raw, value)
            _sync(self._db)

    def _delete_many(self, keys: list[str]) -> None:
        with self._lock:
            self._run(_remove, self._db, [key.encode("utf-8") for key in keys], sync=True)

    def _getsize_key(self, key: str) -> int:
        if self._values_fd is not None:
            with self._lock:
                try:
                    return int(self._db._index[key.encode("utf-8")][1])
                except KeyError:
                    raise KeyError(key) from None
        return len(self._get(key))

    def _getsize_prefix(self, prefix: str) -> int:
        with self._lock:
            keys = [key.encode("utf-8") for key in self._list_prefix(prefix)]
            return self._run(_total_size, self._db, keys)

    def _len(self) -> int:
        with self._lock:
            return self._run(len, self._db)

    def _clear(self) -> None:
        with self._lock:
            self._run(_remove, self._db, self._run(_raw_keys, self._db), sync=True)

    # ------------------------------------------------------------- lifecycle
    def _close(self) -> None:
        with self._lock:
            if self._values_fd is not None:
                os.close(self._values_fd)
                self._values_fd = None
            try:
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
    if _is_dumb(db):
        return _dumb_remove(db, raw_keys)
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
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _is_dumb(db: Any) -> bool:
    return (
        type(db).__module__ == "dbm.dumb"
        and isinstance(getattr(db, "_index", None), dict)
        and callable(getattr(db, "_commit", None))
    )


def _dumb_values_fd(db: Any, *, writable: bool) -> int | None:
    """A descriptor on a ``dbm.dumb`` database's data file, or None for other flavours.

    ``dbm.dumb`` opens and closes its data file for every read and write.
    Doing what it does through a descriptor kept open (``pread`` at the
    position its index ``_index`` gives; ``pwrite`` where it would write,
    then its own ``_addkey``) makes gets of 64 KiB values about three times
    and sets about a quarter faster.  The data file is never replaced while
    the database is open, only written in place or appended to.
    """
    path = getattr(db, "_datfile", None)
    if not (_is_dumb(db) and isinstance(path, (str, bytes))
            and callable(getattr(db, "_addkey", None))):
        return None
    try:
        return os.open(path, (os.O_RDWR if writable else os.O_RDONLY)
                       | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


def _dumb_read(db: Any, fd: int, raw: bytes) -> bytes:
    position, size = db._index[raw]  # KeyError: not a key
    value = os.pread(fd, size, position)
    if len(value) != size:  # not what dbm.dumb itself would read: let it say why
        return bytes(db[raw])
    return value


# dbm.dumb aligns every value it appends to this many bytes.
_DUMB_BLOCK = 512


def _dumb_write(db: Any, fd: int, raw: bytes, value: bytes) -> None:
    """``db[raw] = value`` for ``dbm.dumb``, as its ``__setitem__`` does it.

    A value that fits the blocks of the old one is written in place, any
    other is appended at the next block boundary; a new key's index line is
    appended by ``_addkey`` after its data are written (dbm.dumb's order).
    """
    index = db._index
    old = index.get(raw)
    size = len(value)
    if old is not None and -(-size // _DUMB_BLOCK) <= -(-old[1] // _DUMB_BLOCK):
        position = old[0]
    else:
        end = os.lseek(fd, 0, os.SEEK_END)
        position = -(-end // _DUMB_BLOCK) * _DUMB_BLOCK
        if position > end:
            _pwrite_all(fd, bytes(position - end), end)
    _pwrite_all(fd, value, position)
    db._modified = True
    if old is None:
        db._addkey(raw, (position, size))
    else:
        index[raw] = (position, size)


def _pwrite_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view, position = view[written:], position + written


def _dumb_remove(db: Any, raw_keys: list[bytes]) -> int:
    """Delete keys from a ``dbm.dumb`` database, rewriting its index once.

    ``dbm.dumb`` rewrites its whole index file on every single delete, which
    makes deleting n of n keys O(n**2) (hours for 100,000 keys).  It keeps
    the index in ``_index`` and writes it with ``_commit()``; doing what its
    ``__delitem__`` does for all keys and committing once is O(n).
    """
    removed = 0
    for raw in raw_keys:
        if db._index.pop(raw, None) is not None:
            removed += 1
    if removed:
        db._modified = True
        db._commit()
    return removed
