"""One benchmark run in one process: time each operation on one fresh store.

Run by ``bench_stores.py`` (never by hand, though it works by hand)::

    python bench_worker.py IMPL BACKEND WORKDIR VALUE_SIZE COUNT [array]

IMPL is ``zstores`` (our store), ``zarr2`` (zarr-python 2.18's store of the
same backend; run it with the zarr 2 environment's interpreter), ``zarr2-copy``
(the same with ``LMDBStore(buffers=False)``, which copies values out of the
transaction as zstores does, instead of handing out views of the map that the
next write may overwrite) or ``raw``
(the backend's own library used directly: the anchor).  Prints one JSON object
``{operation: seconds}`` on stdout.  Operations: ``set`` and ``get`` (COUNT
single-key calls), ``setitems`` and ``getitems`` (one batch call of COUNT
keys).  VALUE_SIZE 1 selects the
many-tiny-keys figure: only ``listdir``, on COUNT keys written beforehand
(once per WORKDIR; on a server they stay until ``remove_listing_data``);
VALUE_SIZE 2 the nested array folder: only ``listdir`` of COUNT folders of 10
chunk keys each (``m/i/j``, as zarr writes a 2-d array with "/" as the
dimension separator); on ``memory`` also ``set + listdir`` (a new key
written in the folder before each listing).  The
network backends ``redis`` and ``mongodb`` talk to the servers named by
``ZSTORES_TEST_REDIS_URL`` / ``ZSTORES_TEST_MONGODB_URL`` (``bench_stores.py``
starts them with ``scripts/services`` when unset), each run under its own prefix
or database, removed afterwards.

Each run makes passes, each on a fresh store of its own that is deleted
afterwards (untimed, with the disk synced before the next): ``set``, ``get``,
``setitems``, ``getitems`` in that order, the writes once and
each read again while its timings add up to less than ``READ_SECONDS`` (at
most ``MAX_READ_REPEATS`` times).  It makes passes while they add up to less
than ``PASS_SECONDS`` (at most ``MAX_PASSES``) and reports each operation's
median, so that one timing of a few milliseconds does not decide a ratio
alone, while an operation that takes long anyway runs once, as before.

IMPL ``floor`` (``directory`` and ``nested``, after another run filled the
folder) is the listing floor instead: CPU time per listing of that folder by
zarr-python 2.18's call, by the cheapest listing that leaves links out, and
by zstores, in turn in one process (``listing_floor``).

With ``array`` last, the run is instead the end-to-end figure users feel: zarr
reading a whole array of COUNT uncompressed uint8 chunks of VALUE_SIZE bytes
(zarr v2 metadata, written once per WORKDIR through zstores, untimed) into an
existing output array, repeated as a read is.  IMPL ``zstores`` is zarr-python 3
through ``ZarrStore``, ``zstores-zarr2`` zarr-python 2.18 through
``Zarr2Store`` (run it with the zarr 2 interpreter), ``zarr2``/``zarr2-copy``
zarr-python 2.18 with its own store, ``zarr3-memory`` zarr-python 3 reading the
same chunks from its own ``MemoryStore``: the fastest any store lets zarr 3 read
(no I/O, no copy), so the floor under the ``zstores`` figure.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import sqlite3
import statistics
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

# Fresh-store passes per run, made while the passes so far took under
# PASS_SECONDS; a read repeats within a pass while its timings add up to less
# than READ_SECONDS.
PASS_SECONDS, MAX_PASSES = 0.5, 5
READ_SECONDS, MAX_READ_REPEATS = 0.3, 15
WRITES = ("set", "setitems")
#: VALUE_SIZE selecting the nested-array-folder listing: COUNT folders of
#: NESTED_COLUMNS chunk keys each (``m/i/j``), listed as COUNT names.
NESTED_FOLDER, NESTED_COLUMNS = 2, 10
ORDER = ("set", "get", "setitems", "getitems")


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


class Operations(NamedTuple):
    """What one implementation does for each operation, on COUNT keys of one store."""

    set: Callable[[], object]
    get: Callable[[], object]
    setitems: Callable[[], object]
    getitems: Callable[[], object]


def repeated(function) -> list[float]:
    """Timings of a read, repeated while they add up to less than READ_SECONDS."""
    times = [timed(function)]
    while len(times) < MAX_READ_REPEATS and sum(times) < READ_SECONDS:
        times.append(timed(function))
    return times


def median_read(function) -> float:
    return statistics.median(repeated(function))


def measure(opened, workdir: str, name: str) -> dict[str, float]:
    """Median seconds per operation over passes on fresh stores.

    ``opened(path)`` is a context manager giving the ``Operations`` of a new
    store at ``path`` (closing it on exit); each pass gets its own folder.
    """
    samples: dict[str, list[float]] = {op: [] for op in ORDER}
    spent = 0.0
    for number in range(MAX_PASSES):
        if spent >= PASS_SECONDS:
            break
        folder = Path(workdir) / f"pass-{number}"
        folder.mkdir()
        os.sync()  # each pass starts with the disk's dirty pages written out
        start = time.perf_counter()
        with opened(str(folder / name)) as operations:
            for op in ORDER:
                function = getattr(operations, op)
                samples[op] += [timed(function)] if op in WRITES else repeated(function)
        spent += time.perf_counter() - start
        shutil.rmtree(folder)
    return {op: statistics.median(times) for op, times in samples.items()}


# ------------------------------------------------------------------ the stores
def open_zstores(backend: str, path: str, mode: str = "w"):
    import dbm.dumb

    import zstores

    classes = {
        "memory": lambda: zstores.MemoryStore(),
        "directory": lambda: zstores.DirectoryStore(path, mode=mode),
        "nested": lambda: zstores.NestedDirectoryStore(path, mode=mode),
        "zip": lambda: zstores.ZipStore(path + ".zip", mode=mode),
        "dbm": lambda: zstores.DBMStore(path + ".dbm", open=dbm.dumb.open, mode=mode),
        "lmdb": lambda: zstores.LMDBStore(path + ".lmdb", mode=mode),
        "sqlite": lambda: zstores.SQLiteStore(path + ".sqlite", mode=mode),
        "redis": lambda: open_zstores_network(backend, path, mode),
        "mongodb": lambda: open_zstores_network(backend, path, mode),
    }
    return classes[backend]()


def open_zarr2(backend: str, path: str, mode: str = "w", *, copy: bool = False):
    """zarr 2.18's store; ``copy`` makes its LMDBStore copy values (``buffers=False``)."""
    import dbm.dumb

    import zarr.storage as zs

    classes = {
        "memory": lambda: zs.MemoryStore(),
        "directory": lambda: zs.DirectoryStore(path),
        "nested": lambda: zs.NestedDirectoryStore(path),
        "zip": lambda: zs.ZipStore(path + ".zip", mode=mode),
        "dbm": lambda: zs.DBMStore(path + ".dbm", flag="n" if mode == "w" else "r",
                                   open=dbm.dumb.open),
        "lmdb": lambda: zs.LMDBStore(path + ".lmdb", readonly=mode == "r", buffers=not copy),
        "sqlite": lambda: zs.SQLiteStore(path + ".sqlite"),
        "redis": lambda: open_zarr2_network(backend, path),
        "mongodb": lambda: open_zarr2_network(backend, path),
    }
    return classes[backend]()


# ------------------------------------------------------ the network backends
NETWORK = {"redis": "ZSTORES_TEST_REDIS_URL", "mongodb": "ZSTORES_TEST_MONGODB_URL"}


def server_url(backend: str) -> str:
    url = os.environ.get(NETWORK[backend])
    if not url:
        raise SystemExit(f"{NETWORK[backend]} is not set (bench_stores.py starts scripts/services)")
    return url


def namespace(path: str) -> str:
    """A prefix / database name unique to this run (its work folder)."""
    import hashlib

    return "bench_" + hashlib.sha1(path.encode()).hexdigest()[:16]


def open_zstores_network(backend: str, path: str, mode: str):
    if backend == "redis":
        from zstores.stores.redis import RedisStore

        return RedisStore(server_url(backend), prefix=namespace(path), mode=mode)
    from zstores.stores.mongodb import MongoDBStore

    return MongoDBStore(server_url(backend), database=namespace(path), mode=mode)


def open_zarr2_network(backend: str, path: str):
    import warnings

    import zarr.storage as zs

    warnings.simplefilter("ignore", FutureWarning)  # both are deprecated in 2.18
    if backend == "redis":
        import redis

        options = redis.connection.parse_url(server_url(backend))
        return zs.RedisStore(prefix=namespace(path), **options)
    return zs.MongoDBStore(database=namespace(path), collection="zarr", host=server_url(backend))


def remove_network_data(backend: str, path: str) -> None:
    if backend == "redis":
        import redis

        client = redis.Redis.from_url(server_url(backend))
        for name in list(client.scan_iter(match=namespace(path) + ":*", count=1000)):
            client.unlink(name)
        client.close()
    else:
        import pymongo

        client = pymongo.MongoClient(server_url(backend))
        client.drop_database(namespace(path))
        client.close()


def listing_of_tiny_keys(impl: str, backend: str, path: str, keys: list[str]) -> dict[str, float]:
    """Fill a store with tiny values through zstores, then time ``listdir("m")`` in ``impl``.

    The layouts are shared, so zarr 2 and the raw library list the same data;
    zarr 2's own writers would take minutes to make 100,000 keys (SQLite
    commits each one).  A memory store cannot be shared between processes:
    each implementation fills its own, untimed.  Keys with a ``/`` (the nested
    array folder, ``i/j``) list as their first parts, once each.
    """
    if backend == "memory":
        return listing_in_memory(impl, keys)
    populated = Path(path + ".populated")
    # bench_stores.py shares one filled store across runs, a server's data
    # too (filling a server with 100,000 keys takes longer than the listings):
    # it removes that data after the last run (remove_listing_data)
    if not populated.exists():
        with open_zstores(backend, path) as store:
            for start in range(0, len(keys), 10_000):
                batch = keys[start:start + 10_000]
                if backend == "mongodb":
                    # The store's own documents, inserted at once: the test server
                    # takes minutes to upsert 100,000 keys one by one, as setitems does.
                    store.collection.insert_many(
                        [{"key": f"m/{key}", "value": b"x", "size": 1} for key in batch])
                else:
                    store.setitems({f"m/{key}": b"x" for key in batch})
        populated.touch()
    names = len({key.split("/", 1)[0] for key in keys})
    if impl == "raw":
        lister = RAW_LISTING[backend](path)
        assert len(children(lister())) == names
        return {"listdir": median_read(lambda: children(lister()))}
    open_impl = open_zstores if impl == "zstores" else open_zarr2
    store = open_impl(backend, path, "r")
    seconds = median_read(lambda: store.listdir("m"))
    assert len(store.listdir("m")) == names
    with contextlib.suppress(AttributeError):
        store.close()
    return {"listdir": seconds}


#: The listing floor's rows: zarr 2.18's call, the cheapest listing that leaves
#: links out, and zstores' ``listdir`` (CPU seconds per listing, one process).
FLOOR_ROWS = ("sorted(os.listdir)", "scandir, links out, sorted", "zstores listdir")
#: Rounds of the floor, each timing every row in turn for about FLOOR_SECONDS of CPU.
FLOOR_ROUNDS, FLOOR_SECONDS = 9, 0.05


def listing_floor(backend: str, path: str) -> dict[str, float]:
    """CPU seconds per listing of the folder ``m`` the other runs list, three ways.

    ``sorted(os.listdir)`` is what zarr-python 2.18's ``DirectoryStore.listdir``
    does (after an ``os.path.isdir``); ``scandir, links out, sorted`` the
    cheapest listing that leaves links out without a system call per entry
    (``os.scandir`` on a descriptor opened below the store's root, the names
    of the entries that are not links, sorted), the floor under any listing
    that keeps the rule; ``zstores listdir`` the store's, which also leaves
    out FIFOs and other kinds, temporary files and names that are not UTF-8.
    The three run in turn in each of FLOOR_ROUNDS rounds, each for about
    FLOOR_SECONDS of CPU, and each row reports the median of its rounds.
    CPU time (``time.process_time``), not wall-clock time: the machine's load
    makes the waits swing, not the work.
    """
    import zstores

    folder = Path(path) / "m"
    store = (zstores.NestedDirectoryStore if backend == "nested" else zstores.DirectoryStore)(
        path, mode="r")
    root = os.open(path, os.O_RDONLY | os.O_DIRECTORY)

    def zarr2_call() -> list[str]:
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []

    def links_out() -> list[str]:
        fd = os.open("m", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
        try:
            with os.scandir(fd) as entries:
                return sorted([entry.name for entry in entries if not entry.is_symlink()])
        finally:
            os.close(fd)

    listings = dict(
        zip(FLOOR_ROWS, (zarr2_call, links_out, lambda: store.listdir("m")), strict=True))
    assert zarr2_call() == links_out() == store.listdir("m")
    start = time.process_time()
    zarr2_call()
    repeats = max(1, int(FLOOR_SECONDS / max(time.process_time() - start, 1e-6)))
    samples: dict[str, list[float]] = {row: [] for row in FLOOR_ROWS}
    try:
        for _ in range(FLOOR_ROUNDS):
            for row, listing in listings.items():
                start = time.process_time()
                for _ in range(repeats):
                    listing()
                samples[row].append((time.process_time() - start) / repeats)
    finally:
        os.close(root)
        store.close()
    return {row: statistics.median(times) for row, times in samples.items()}


def listing_path(workdir: str, backend: str) -> str:
    """Where the listings' store of ``backend`` lives (a server's: its namespace's name)."""
    return str(Path(workdir) / f"tiny-{backend}")


def remove_listing_data(workdir: str, backend: str) -> None:
    """Remove the listings' data of a network ``backend`` (a file store goes with ``workdir``)."""
    if backend in NETWORK:
        remove_network_data(backend, listing_path(workdir, backend))


def children(found: list) -> list:
    """The distinct first parts of the names a raw listing found (``m/`` stripped), sorted.

    A folder's listing (Directory) has them already; a flat key space has one key
    per chunk, as ``m/3/1``, which a listing of ``m`` shows as ``3``.
    """
    names = {}
    for name in found:
        text = name.decode() if isinstance(name, bytes) else name
        names[text.removeprefix("m/").split("/", 1)[0]] = None
    return sorted(names)


def listing_in_memory(impl: str, keys: list[str]) -> dict[str, float]:
    """Seconds listing ``m`` of an in-memory store this process fills, untimed.

    ``listdir`` lists the same folder again and again; ``set + listdir``
    writes a new key in it first each time, so that a listing remembered
    from the time before cannot serve (zarr-python 2 keeps nested dicts
    up to date at each write; zstores notes the key and lists from an index).
    """
    if impl == "raw":
        data = {f"m/{key}": b"x" for key in keys}
        return {"listdir": median_read(lambda: children(k for k in data if k.startswith("m/")))}
    store = open_zstores("memory", "") if impl == "zstores" else open_zarr2("memory", "")
    if hasattr(store, "setitems"):
        store.setitems({f"m/{key}": b"x" for key in keys})
    else:
        for key in keys:
            store[f"m/{key}"] = b"x"
    listing = median_read(lambda: store.listdir("m"))
    new_keys = (f"m/new-{number}" for number in itertools.count())

    def set_and_list():
        store[next(new_keys)] = b"x"
        return store.listdir("m")

    return {"listdir": listing, "set + listdir": median_read(set_and_list)}


@contextlib.contextmanager
def store_operations(store, keys: list[str], value: bytes, impl: str):
    batch = {f"m/{key}": value for key in keys}
    single = [f"s/{key}" for key in keys]

    def set_each():
        for key in single:
            store[key] = value

    def get_each():
        for key in single:
            store[key]

    def setitems():
        if hasattr(store, "setitems"):
            store.setitems(batch)
        else:  # zarr 2's stores have no batch write: one call per key
            for key, item in batch.items():
                store[key] = item

    def getitems():
        if impl.startswith("zarr2"):  # zarr 2.18's getitems wants per-key contexts
            store.getitems(list(batch), contexts={})
        elif hasattr(store, "getitems"):
            store.getitems(list(batch))
        else:
            for key in batch:
                store[key]

    yield Operations(set_each, get_each, setitems, getitems)
    with contextlib.suppress(AttributeError):
        store.close()


# --------------------------------------------------------- the raw libraries
@contextlib.contextmanager
def raw_directory(path: str, keys: list[str], value: bytes) -> Iterator[Operations]:
    root = Path(path)
    for folder in ("s", "m"):
        (root / folder).mkdir(parents=True, exist_ok=True)

    def write(folder):
        for key in keys:
            target = root / folder / key
            if "/" in key:  # a nested chunk key: its folder first
                target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as file:
                file.write(value)

    def read(folder, found=None):
        for key in keys:
            with open(root / folder / key, "rb") as file:
                value = file.read()
            if found is not None:
                found[key] = value

    yield Operations(
        set=lambda: write("s"),
        get=lambda: read("s"),
        setitems=lambda: write("m"),
        getitems=lambda: read("m", {}),  # keeps every value, as getitems does
    )


@contextlib.contextmanager
def raw_lmdb(path: str, keys: list[str], value: bytes) -> Iterator[Operations]:
    import lmdb

    env = lmdb.open(path + ".lmdb", map_size=1 << 36, sync=False, metasync=False)
    single = [f"s/{k}".encode() for k in keys]
    batch = [f"m/{k}".encode() for k in keys]

    def put_each(names):
        for name in names:
            with env.begin(write=True) as txn:
                txn.put(name, value)

    def get_each(names):
        for name in names:
            with env.begin() as txn:
                txn.get(name)

    def put_all(names):
        with env.begin(write=True) as txn:
            for name in names:
                txn.put(name, value)

    def get_all(names):
        with env.begin() as txn:
            return {name: txn.get(name) for name in names}

    yield Operations(
        set=lambda: put_each(single),
        get=lambda: get_each(single),
        setitems=lambda: put_all(batch),
        getitems=lambda: get_all(batch),
    )
    env.close()


@contextlib.contextmanager
def raw_sqlite(path: str, keys: list[str], value: bytes) -> Iterator[Operations]:
    db = sqlite3.connect(path + ".sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS zarr(k TEXT PRIMARY KEY, v BLOB)")
    put = "INSERT OR REPLACE INTO zarr(k, v) VALUES (?, ?)"
    get = "SELECT v FROM zarr WHERE k = ?"

    def put_each():
        for key in keys:
            db.execute(put, (f"s/{key}", value))

    def get_each():
        for key in keys:
            db.execute(get, (f"s/{key}",)).fetchone()

    def put_all():
        db.execute("BEGIN")
        db.executemany(put, ((f"m/{key}", value) for key in keys))
        db.execute("COMMIT")

    def get_all():
        return {key: db.execute(get, (f"m/{key}",)).fetchone()[0] for key in keys}

    yield Operations(
        set=put_each,
        get=get_each,
        setitems=put_all,
        getitems=get_all,
    )
    db.close()


@contextlib.contextmanager
def raw_zip(path: str, keys: list[str], value: bytes) -> Iterator[Operations]:
    archive = zipfile.ZipFile(path + ".zip", mode="w")

    def write(folder):
        for key in keys:
            archive.writestr(f"{folder}/{key}", value)

    def read(folder, found=None):
        for key in keys:
            value = archive.read(f"{folder}/{key}")
            if found is not None:
                found[key] = value

    yield Operations(
        set=lambda: write("s"),
        get=lambda: read("s"),
        setitems=lambda: write("m"),
        getitems=lambda: read("m", {}),  # keeps every value, as getitems does
    )
    archive.close()


@contextlib.contextmanager
def raw_dbm(path: str, keys: list[str], value: bytes) -> Iterator[Operations]:
    import dbm.dumb

    with dbm.dumb.open(path + ".dbm", "n") as db:

        def write(folder):
            for key in keys:
                db[f"{folder}/{key}"] = value

        def read(folder, found=None):
            for key in keys:
                value = db[f"{folder}/{key}"]
                if found is not None:
                    found[key] = value

        yield Operations(
            set=lambda: write("s"),
            get=lambda: read("s"),
            setitems=lambda: write("m"),
            getitems=lambda: read("m", {}),  # keeps every value, as getitems does
        )


@contextlib.contextmanager
def raw_memory(path: str, keys: list[str], value: bytes) -> Iterator[Operations]:
    data: dict[str, bytes] = {}

    def write(folder):
        for key in keys:
            data[f"{folder}/{key}"] = bytes(value)

    def read(folder, found=None):
        for key in keys:
            value = data[f"{folder}/{key}"]
            if found is not None:
                found[key] = value

    yield Operations(
        set=lambda: write("s"),
        get=lambda: read("s"),
        setitems=lambda: write("m"),
        getitems=lambda: read("m", {}),  # keeps every value, as getitems does
    )


@contextlib.contextmanager
def raw_redis(path: str, keys: list[str], value: bytes) -> Iterator[Operations]:
    import redis

    client = redis.Redis.from_url(server_url("redis"))
    base = namespace(path) + ":"
    single = [f"{base}s/{k}" for k in keys]
    batch = [f"{base}m/{k}" for k in keys]

    def set_each():
        for name in single:
            client.set(name, value)

    def get_each():
        for name in single:
            client.get(name)

    yield Operations(
        set=set_each,
        get=get_each,
        setitems=lambda: client.mset(dict.fromkeys(batch, value)),
        getitems=lambda: client.mget(batch),
    )
    client.close()


@contextlib.contextmanager
def raw_mongodb(path: str, keys: list[str], value: bytes) -> Iterator[Operations]:
    import pymongo

    client = pymongo.MongoClient(server_url("mongodb"))
    collection = client[namespace(path)]["zarr"]
    collection.create_index("key", unique=True)
    single = [f"s/{k}" for k in keys]
    batch = [f"m/{k}" for k in keys]

    def set_each():
        for key in single:
            collection.update_one({"key": key}, {"$set": {"value": value}}, upsert=True)

    def get_each():
        for key in single:
            collection.find_one({"key": key}, {"_id": 0, "value": 1})

    def set_all():
        collection.bulk_write(
            [pymongo.UpdateOne({"key": key}, {"$set": {"value": value}}, upsert=True)
             for key in batch], ordered=False)

    def get_all():
        list(collection.find({"key": {"$in": batch}}, {"_id": 0, "key": 1, "value": 1},
                             batch_size=len(batch)))

    yield Operations(
        set=set_each,
        get=get_each,
        setitems=set_all,
        getitems=get_all,
    )
    client.close()


def raw_listing_directory(path: str):
    return lambda: os.listdir(Path(path) / "m")


def raw_listing_lmdb(path: str):
    import lmdb

    env = lmdb.open(path + ".lmdb", readonly=True, lock=False)

    def listdir():
        with env.begin() as txn, txn.cursor() as cursor:
            cursor.set_range(b"m/")
            return [k for k in cursor.iternext(values=False) if k.startswith(b"m/")]

    return listdir


def raw_listing_sqlite(path: str):
    db = sqlite3.connect(path + ".sqlite")
    query = "SELECT k FROM zarr WHERE k >= 'm/' AND k < 'm0' ORDER BY k"
    return lambda: [row[0] for row in db.execute(query)]


def raw_listing_zip(path: str):
    def listdir():
        with zipfile.ZipFile(path + ".zip") as archive:
            return [n for n in archive.namelist() if n.startswith("m/")]

    return listdir


def raw_listing_dbm(path: str):
    import dbm.dumb

    db = dbm.dumb.open(path + ".dbm", "r")  # noqa: SIM115 -- open until the process ends
    return lambda: [k for k in db.keys() if k.startswith(b"m/")]


def raw_listing_redis(path: str):
    import redis

    client = redis.Redis.from_url(server_url("redis"))
    base = namespace(path) + ":"
    return lambda: [name[len(base):] for name in client.scan_iter(match=f"{base}m/*",
                                                                   count=1000)]


def raw_listing_mongodb(path: str):
    import pymongo

    collection = pymongo.MongoClient(server_url("mongodb"))[namespace(path)]["zarr"]
    return lambda: [doc["key"] for doc in collection.find({"key": {"$regex": "^m/"}},
                                                          {"_id": 0, "key": 1})]


RAW_LISTING = {
    "directory": raw_listing_directory,
    "nested": raw_listing_directory,
    "lmdb": raw_listing_lmdb,
    "sqlite": raw_listing_sqlite,
    "zip": raw_listing_zip,
    "dbm": raw_listing_dbm,
    "redis": raw_listing_redis,
    "mongodb": raw_listing_mongodb,
}

RAW = {
    "directory": raw_directory,
    "nested": raw_directory,
    "lmdb": raw_lmdb,
    "sqlite": raw_sqlite,
    "zip": raw_zip,
    "dbm": raw_dbm,
    "memory": raw_memory,
    "redis": raw_redis,
    "mongodb": raw_mongodb,
}


def opener(impl: str, backend: str, keys: list[str], value: bytes):
    """``opened(path)`` for ``measure``: the operations of a fresh store of ``impl``."""

    @contextlib.contextmanager
    def opened(path: str) -> Iterator[Operations]:
        try:
            if impl == "raw":
                with RAW[backend](path, keys, value) as operations:
                    yield operations
                return
            if impl == "zstores":
                store = open_zstores(backend, path)
            else:
                store = open_zarr2(backend, path, copy=impl == "zarr2-copy")
            with store_operations(store, keys, value, impl) as operations:
                yield operations
        finally:
            if backend in NETWORK:
                remove_network_data(backend, path)

    return opened


# ------------------------------------------------------ whole-array reads
#: The op names of the end-to-end array reads, by the zarr-python that reads.
ARRAY_OPS = {"zarr3": "zarr 3 reads the array", "zarr2": "zarr 2.18 reads the array"}


def write_array(backend: str, path: str, chunk: int, count: int) -> None:
    """An uncompressed uint8 array of ``count`` chunks (zarr v2 layout), written once."""
    written = Path(path + ".populated")
    if written.exists():
        return
    metadata = {"zarr_format": 2, "shape": [chunk * count], "chunks": [chunk], "dtype": "|u1",
                "compressor": None, "fill_value": 0, "filters": None, "order": "C"}
    ramp = bytes(range(1, 252)) * (chunk // 251 + 2)
    with open_zstores(backend, path) as store:
        store[".zarray"] = json.dumps(metadata).encode()
        for index in range(count):
            store[str(index)] = ramp[index % 251:index % 251 + chunk]
    written.touch()


def open_array_store(impl: str, backend: str, path: str):
    """The store ``impl`` reads the array through (opened read-only where it can be)."""
    if impl == "zstores":
        from zstores.adapters.zarr3 import ZarrStore

        return ZarrStore(open_zstores(backend, path, "r"))
    if impl == "zstores-zarr2":
        from zstores.adapters.zarr2 import Zarr2Store

        return Zarr2Store(open_zstores(backend, path, "r"))
    if impl == "zarr3-memory":
        from zarr.core.buffer import cpu
        from zarr.storage import MemoryStore

        with open_zstores(backend, path, "r") as store:
            chunks = {key: cpu.Buffer.from_bytes(store[key]) for key in store}
        return MemoryStore(chunks, read_only=True)
    import warnings

    warnings.simplefilter("ignore", FutureWarning)  # zarr 2.18 deprecates LMDBStore
    return open_zarr2(backend, path, "r", copy=impl == "zarr2-copy")


def array_reads(impl: str, backend: str, path: str, chunk: int, count: int) -> dict[str, float]:
    """Seconds zarr takes to read the whole array into an existing, touched output array.

    The output's pages are touched first: allocating them costs a page fault
    each, alike for every store, on this VM often more than the read itself.
    """
    import numpy as np
    import zarr

    write_array(backend, path, chunk, count)
    store = open_array_store(impl, backend, path)
    array = zarr.open_array(store, mode="r")
    out = np.ones(chunk * count, dtype=np.uint8)
    if zarr.__version__.startswith("2."):
        def read() -> None:
            array.get_basic_selection(slice(None), out=out)
    else:
        from zarr.core.buffer import cpu

        target = cpu.NDBuffer.from_numpy_array(out)

        def read() -> None:
            array.get_basic_selection(slice(None), out=target)

    read()
    if not (out[:251] == np.arange(1, 252, dtype=np.uint8)).all():
        raise AssertionError(f"{impl}: read back other data than written")
    seconds = median_read(read)
    with contextlib.suppress(AttributeError):
        store.close()
    return {ARRAY_OPS["zarr2" if zarr.__version__.startswith("2.") else "zarr3"]: seconds}


def main(argv: list[str]) -> None:
    if argv[-1:] == ["array"]:
        impl, backend, workdir, size, count, _ = argv
        path = str(Path(workdir) / f"array-{backend}")
        print(json.dumps(array_reads(impl, backend, path, int(size), int(count))))
        return
    impl, backend, workdir, size, count = argv
    # Chunk-like keys; the tiny-keys listing uses 1-d ones, which a nested
    # store keeps flat (2-d ones would make it 100,000 folders).
    # A nested store gets the keys zarr (2.18 and 3) writes for a nested array,
    # "i/0", not "i.0": zarr 2.18's NestedDirectoryStore stores the latter flat.
    chunk = "{}/0" if backend == "nested" else "{}.0"
    if int(size) == NESTED_FOLDER:  # COUNT chunk rows of NESTED_COLUMNS chunks: "i/j"
        keys = [f"{i}/{j}" for i in range(int(count)) for j in range(NESTED_COLUMNS)]
    elif int(size) == 1:
        keys = [f"{i}" for i in range(int(count))]
    else:
        keys = [chunk.format(i) for i in range(int(count))]
    value = os.urandom(int(size))
    if impl == "floor":
        results = listing_floor(backend, listing_path(workdir, backend))
    elif int(size) in (1, NESTED_FOLDER):
        results = listing_of_tiny_keys(impl, backend, listing_path(workdir, backend), keys)
    else:
        results = measure(opener(impl, backend, keys, value), workdir, f"{impl}-{backend}")
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
