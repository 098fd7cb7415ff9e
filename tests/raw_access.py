"""Each backend's stored bytes, read and written around the store: the raw hooks of StoreTests.

``StoreTests.raw_get``/``raw_set`` must not go through the store under test,
or a store that agrees with itself but stores the wrong bytes would pass.
These functions reach each backend with its own library (``sqlite3``,
``zipfile``, ``dbm``, ``lmdb``) and its documented layout, using only the
store's public attributes (``path``, ``table``, ``store`` of a wrapper) and
public methods (``flush``, ``close``).  The one exception is MemoryStore,
whose backend *is* its dict ``_data``.

Examples
--------
>>> from zstores import MemoryStore
>>> store = MemoryStore()
>>> memory_set(store, "a/b", b"xyz")
>>> store["a/b"], memory_get(store, "a/b"), memory_get(store, "nope")
(b'xyz', b'xyz', None)
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from zstores import Store

# ------------------------------------------------------------------ memory


def memory_get(store: Store, key: str) -> bytes | None:
    """The value in a MemoryStore's dict (its whole backend)."""
    return store._data.get(key)  # type: ignore[attr-defined]


def memory_set(store: Store, key: str, value: bytes) -> None:
    store._data[key] = bytes(value)  # type: ignore[attr-defined]


def memory_delete(store: Store, key: str) -> None:
    del store._data[key]  # type: ignore[attr-defined]


# ------------------------------------------------------------------ sqlite
def _sqlite_table(store: Store) -> str:
    if store.path == ":memory:":  # type: ignore[attr-defined]
        pytest.skip("SQLiteStore(':memory:') keeps its database inside its own connection: "
                    "no second connection can reach it out of band")
    return '"' + store.table.replace('"', '""') + '"'  # type: ignore[attr-defined]


def sqlite_get(store: Store, key: str) -> bytes | None:
    """The ``v`` column of the row whose ``k`` is ``key``, by a second connection."""
    table = _sqlite_table(store)
    with closing(sqlite3.connect(store.path, timeout=30)) as db:  # type: ignore[attr-defined]
        row = db.execute(f"SELECT v FROM {table} WHERE k = ?", (key,)).fetchone()
    return None if row is None else bytes(row[0])


def sqlite_set(store: Store, key: str, value: bytes) -> None:
    table = _sqlite_table(store)
    with closing(sqlite3.connect(store.path, timeout=30)) as db:  # type: ignore[attr-defined]
        with db:
            db.execute(f"INSERT OR REPLACE INTO {table}(k, v) VALUES (?, ?)", (key, value))


# --------------------------------------------------------------------- zip
def zip_get(store: Store, key: str) -> bytes | None:
    """The member named ``key`` in the archive's central directory, read by ``zipfile``.

    A value is in the archive's directory only after ``flush()``.
    """
    if not store.closed:
        store.flush()  # type: ignore[attr-defined]
    with zipfile.ZipFile(store.path) as archive:  # type: ignore[attr-defined]
        try:
            return archive.read(key)
        except KeyError:
            return None


def zip_set(store: Store, key: str, value: bytes, compression: int) -> None:
    """Append a member with ``zipfile``; the store is closed first, as it owns the file's end."""
    store.close()
    with zipfile.ZipFile(store.path, "a", compression=compression) as archive:  # type: ignore[attr-defined]
        archive.writestr(key, value)


# --------------------------------------------------------------------- dbm
# The store keeps its dbm open (dbm.gnu locks it; dbm.dumb writes its index
# at sync), so the raw hooks close it and open the files with the dbm module.
def dbm_get(store: Store, key: str, open_function: Callable) -> bytes | None:
    """The value under the UTF-8 key, read with the flavour's own ``open``."""
    store.close()
    with closing(open_function(str(store.path), "r")) as db:  # type: ignore[attr-defined]
        encoded = key.encode("utf-8")
        return bytes(db[encoded]) if encoded in db else None


def dbm_set(store: Store, key: str, value: bytes, open_function: Callable) -> None:
    store.close()
    with closing(open_function(str(store.path), "w")) as db:  # type: ignore[attr-defined]
        db[key.encode("utf-8")] = value


# -------------------------------------------------------------------- lmdb
# py-lmdb forbids opening one environment twice in a process (closing either
# handle drops the other's locks, and the store keeps its own open), so a
# child process opens it: that is also exactly what another program does.
_LMDB_CHILD = r"""
import os, sys, lmdb
path, operation, key = sys.argv[1], sys.argv[2], sys.argv[3].encode("utf-8")
subdir = os.path.isdir(path)
data = os.path.join(path, "data.mdb") if subdir else path
if operation == "get":
    env = lmdb.open(path, subdir=subdir, readonly=True)
    with env.begin() as txn:
        value = txn.get(key)
    sys.stdout.buffer.write(b"0" if value is None else b"1" + bytes(value))
else:
    value = sys.stdin.buffer.read()
    map_size = os.path.getsize(data) + 2 * len(value) + (1 << 20)
    env = lmdb.open(path, subdir=subdir, map_size=map_size)
    with env.begin(write=True) as txn:
        txn.put(key, value)
env.close()
"""


def _lmdb_child(store: Store, operation: str, key: str, value: bytes = b"") -> bytes:
    done = subprocess.run(
        [sys.executable, "-c", _LMDB_CHILD, store.path, operation, key],  # type: ignore[attr-defined]
        input=value, capture_output=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def lmdb_get(store: Store, key: str) -> bytes | None:
    """The value under the UTF-8 key in the environment's main database, read by a child process."""
    out = _lmdb_child(store, "get", key)
    return None if out == b"0" else out[1:]


def lmdb_set(store: Store, key: str, value: bytes) -> None:
    _lmdb_child(store, "set", key, value)


# -------------------------------------------------------------- file trees
def file_get(path: Path) -> bytes | None:
    """The bytes of a regular file, or None if there is none at ``path``."""
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def file_set(path: Path, value: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(value)


def under(root: str | os.PathLike, relative: str) -> Path:
    """``relative`` (a key, ``/``-separated) as a path under ``root``."""
    return Path(root, *relative.split("/"))


def directory_get(store: Store, key: str) -> bytes | None:
    """The file at the key's path under a DirectoryStore's folder."""
    return file_get(under(store.path, key))  # type: ignore[attr-defined]


def directory_set(store: Store, key: str, value: bytes) -> None:
    file_set(under(store.path, key), value)  # type: ignore[attr-defined]


# ------------------------------------------------- hooks for test classes
def backend_of(store: Store) -> Store:
    """The innermost store under wrappers (LRUStoreCache, ConsolidatedStore).

    Its backend holds the bytes.
    """
    while isinstance(getattr(store, "store", None), Store):
        store = store.store  # type: ignore[attr-defined]
    return store


class MemoryRawHooks:
    """StoreTests raw hooks for a MemoryStore, bare or wrapped."""

    def raw_get(self, store: Store, key: str) -> bytes | None:
        return memory_get(backend_of(store), key)

    def raw_set(self, store: Store, key: str, value: bytes) -> None:
        memory_set(backend_of(store), key, value)


class SQLiteRawHooks:
    """StoreTests raw hooks for an SQLiteStore, bare or wrapped."""

    def raw_get(self, store: Store, key: str) -> bytes | None:
        return sqlite_get(backend_of(store), key)

    def raw_set(self, store: Store, key: str, value: bytes) -> None:
        sqlite_set(backend_of(store), key, value)


class DirectoryRawHooks:
    """StoreTests raw hooks for a (flat) DirectoryStore, bare or wrapped."""

    def raw_get(self, store: Store, key: str) -> bytes | None:
        return directory_get(backend_of(store), key)

    def raw_set(self, store: Store, key: str, value: bytes) -> None:
        directory_set(backend_of(store), key, value)


# ------------------------------------------------------------------- redis
# A client of the test's own, from the server's URL: not the store's client.
def redis_get(url: str, store: Store, key: str) -> bytes | None:
    """The Redis string ``<prefix>:<key>``."""
    import redis

    with closing(redis.Redis.from_url(url)) as client:
        return client.get(f"{store.prefix}:{key}")  # type: ignore[attr-defined]


def redis_set(url: str, store: Store, key: str, value: bytes) -> None:
    import redis

    with closing(redis.Redis.from_url(url)) as client:
        client.set(f"{store.prefix}:{key}", value)  # type: ignore[attr-defined]


# ----------------------------------------------------------------- mongodb
# The layout of MongoDBStore's docstring: {"key": key, "value": <binary>} (what
# zarr-python 2 writes; the store adds "size"), or, for a value too large for
# one document, {"key": key, "parts": version, "size": n} and the documents
# {"version": version, "n": i, "data": <part i>} of the collection "<name>_parts".
_MONGO_INLINE_MAX = (16 << 20) - (16 << 10)
_MONGO_PART_SIZE = 8 << 20


def _mongo_collections(url: str, store: Store):
    import pymongo

    client = pymongo.MongoClient(url, serverSelectionTimeoutMS=10_000)
    own = store.collection  # type: ignore[attr-defined]
    database = client[own.database.name]
    return client, database[own.name], database[own.name + "_parts"]


def mongodb_get(url: str, store: Store, key: str) -> bytes | None:
    """The key's document's value, its parts joined in order when it was split."""
    client, docs, parts = _mongo_collections(url, store)
    with client:
        doc = docs.find_one({"key": key})
        if doc is None:
            return None
        if "parts" not in doc:
            return bytes(doc["value"])
        found = sorted((part["n"], bytes(part["data"]))
                       for part in parts.find({"version": doc["parts"]}))
        numbers = [n for n, _ in found]
        assert numbers == list(range(len(found))), f"parts of {key!r} missing: {found}"
        value = b"".join(data for _, data in found)
        assert len(value) == doc["size"], (
            f"{key!r}: size {doc['size']} but parts of {len(value)} bytes")
        return value


def mongodb_set(url: str, store: Store, key: str, value: bytes) -> None:
    """Write as zarr-python 2 does ({"key", "value"}), or as parts when over one document."""
    from bson import Binary

    client, docs, parts = _mongo_collections(url, store)
    with client:
        if len(value) + 4 * len(key) <= _MONGO_INLINE_MAX:
            docs.replace_one({"key": key}, {"key": key, "value": Binary(value)}, upsert=True)
            return
        version = "raw-" + uuid.uuid4().hex
        starts = range(0, len(value), _MONGO_PART_SIZE)
        parts.insert_many(
            {"version": version, "n": n, "data": Binary(value[start:start + _MONGO_PART_SIZE])}
            for n, start in enumerate(starts))
        document = {"key": key, "parts": version, "size": len(value)}
        docs.replace_one({"key": key}, document, upsert=True)
