"""Synchronizers and synchronized arrays, against real processes, stores and servers.

Writers run in spawned processes (one module-wide pool, reused) and write
chunk-unaligned regions that share chunks, as zarr-python 2's own test did
(1,000-element slices over chunks of 999).  Every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import pickle
import random
import signal
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from zstores.errors import StoreConnectionError, StoreIOError
from zstores.stores.dbm import DBMStore
from zstores.stores.directory import DirectoryStore, NestedDirectoryStore
from zstores.stores.lmdb import LMDBStore
from zstores.stores.sqlite import SQLiteStore
from zstores.stores.zip import ZipStore
from zstores.sync import (
    ChunkLayout,
    LeaseExpiredError,
    LockOrderError,
    LockTimeoutError,
    ProcessSynchronizer,
    RedisSynchronizer,
    StoreLockedError,
    ThreadSynchronizer,
    lock_file_name,
    synchronized,
)
from zstores.sync import arrays as sync_arrays
from zstores.sync.chunks import boxes, normalize_selection, split

import sync_workers as workers

zarr = pytest.importorskip("zarr")
from zstores.adapters import zarr_store  # noqa: E402 - needs zarr

pytestmark = pytest.mark.timeout(240)

TESTS = Path(__file__).resolve().parent
WAIT = 120  # seconds any single wait on another process may take at most
WRITERS = 3
WIDTH, CHUNK = 1000, 999  # zarr-python 2's test: 1,000-element stripes, chunks of 999


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def pool():
    """Spawned worker processes shared by the module (spawning costs a zarr import each)."""
    with multiprocessing.get_context("spawn").Pool(WRITERS) as workers_pool:
        yield workers_pool
        workers_pool.close()
        workers_pool.join()


def run_all(pool, function, arguments: list[tuple]) -> list:
    return pool.starmap_async(function, arguments).get(WAIT)


def unique(name: str) -> str:
    return f"{name}_{uuid.uuid4().hex[:12]}"  # also a valid MongoDB name


PROCESS_SAFE = ["directory", "nested", "lmdb", "sqlite", "redis", "mongodb"]


def open_backend(name: str, tmp_path: Path, request: pytest.FixtureRequest):
    """A fresh, empty store of a process-safe backend."""
    if name == "directory":
        return DirectoryStore(tmp_path / "data", mode="w")
    if name == "nested":
        return NestedDirectoryStore(tmp_path / "data", mode="w")
    if name == "lmdb":
        return LMDBStore(tmp_path / "data.lmdb", mode="w")
    if name == "sqlite":
        return SQLiteStore(tmp_path / "data.sqlite", mode="w")
    if name == "redis":
        from zstores.stores.redis import RedisStore

        return RedisStore(request.getfixturevalue("redis_url"), prefix=unique("sync"), mode="w")
    if name == "mongodb":
        return open_mongodb(request.getfixturevalue("mongodb_url"))
    raise AssertionError(name)


def open_mongodb(url: str):
    from zstores.stores.mongodb import MongoDBStore

    return MongoDBStore(url, mode="w", database=unique("sync"), collection=unique("sync"))


def make_array(store, shape, chunks, fill_value=-1, **kwargs):
    """A zarr-python 3 array of int64 on a zstores store."""
    return zarr.create_array(
        zarr_store(store), shape=shape, chunks=chunks, dtype="i8", fill_value=fill_value, **kwargs
    )


# ------------------------------------------------------------- lock names
def test_lock_file_names_stay_in_the_folder_and_never_collide(tmp_path):
    keys = ["a/b", "a%2Fb", "a%2fb", "../x", "..", ".", ".zarray", "A", "a", "ü/0.0",
            "x" * 400, "x" * 400 + "y", "c/0/0", "c.0.0"]
    sync = ProcessSynchronizer(tmp_path / "locks", timeout=10)
    names = [sync.lock_name(key) for key in keys]
    assert len(set(names)) == len(keys)
    assert len({name.lower() for name in names}) == len(keys)  # case-insensitive file systems
    for key, name in zip(keys, names, strict=True):
        assert os.path.dirname(name) == str(tmp_path / "locks"), key
        assert len(os.path.basename(name).encode()) < 255
        with sync[key]:
            assert os.path.isfile(name)
    assert sorted(os.listdir(tmp_path / "locks")) == sorted(
        [os.path.basename(name) for name in names] + [".zstores-probe.lock"]
    )
    assert list(tmp_path.iterdir()) == [tmp_path / "locks"]


def test_stripes_bound_the_number_of_lock_files(tmp_path):
    sync = ProcessSynchronizer(tmp_path, stripes=8, timeout=10)
    for index in range(300):
        with sync[f"array/{index}.0"]:
            pass
    files = set(os.listdir(tmp_path)) - {".zstores-probe.lock"}
    assert 1 < len(files) <= 8
    assert {lock_file_name(f"array/{i}.0", 8) for i in range(300)} == files


def test_bad_arguments_raise_typed_errors(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="not a folder"):
        ProcessSynchronizer(tmp_path / "file")
    with pytest.raises(ValueError, match="stripes"):
        ProcessSynchronizer(tmp_path, stripes=0)
    with pytest.raises(ValueError, match="timeout"):
        ProcessSynchronizer(tmp_path, timeout=-1)
    with pytest.raises(ValueError, match="lease"):
        RedisSynchronizer("redis://127.0.0.1:1/0", lease=0)
    with pytest.raises(TypeError, match="lock key"):
        ThreadSynchronizer()[""]


# ------------------------------------------------------------ lock behaviour
def hold_in_thread(lock):
    """Take ``lock`` in another thread; return (thread, release event)."""
    held, release = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            release.wait(WAIT)

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(WAIT)
    return thread, release


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_threads_exclude_each_other(kind, tmp_path):
    if kind == "thread":
        first = second = ThreadSynchronizer()
    else:  # two synchronizers on one folder still exclude threads of one process
        first, second = ProcessSynchronizer(tmp_path), ProcessSynchronizer(tmp_path)
    thread, release = hold_in_thread(first["g/0.0"])
    with pytest.raises(LockTimeoutError, match=r"'g/0\.0'.*another thread") as caught:
        second["g/0.0"].acquire(timeout=0.05)
    assert isinstance(caught.value, TimeoutError)
    with second["g/1.0"]:  # other keys are free
        pass
    release.set()
    thread.join(WAIT)
    second["g/0.0"].acquire(timeout=WAIT)
    second["g/0.0"].release()


def test_threads_adding_under_a_thread_synchronizer_count_exactly():
    sync, counts = ThreadSynchronizer(), {"n": 0}

    def add(times):
        for _ in range(times):
            with sync["counter"]:
                value = counts["n"]
                threading.Event().wait(0)  # let another thread run mid-update
                counts["n"] = value + 1

    threads = [threading.Thread(target=add, args=(300,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert counts["n"] == 1200


def test_synchronizers_pickle(tmp_path, redis_url):
    for sync in [ThreadSynchronizer(timeout=3), ProcessSynchronizer(tmp_path, timeout=3, stripes=4),
                 RedisSynchronizer(redis_url, prefix="p:", lease=5, timeout=3)]:
        clone = pickle.loads(pickle.dumps(sync))
        assert type(clone) is type(sync) and clone.timeout == 3
        assert clone.lock_name("a/0") == sync.lock_name("a/0")
        with clone["a/0"]:
            pass


def start_holder(sync, key):
    """A spawned process holding ``sync[key]`` until told or killed, and our end of its pipe."""
    ours, theirs = multiprocessing.Pipe()
    holder = multiprocessing.get_context("spawn").Process(
        target=workers.hold_lock, args=(sync, key, theirs)
    )
    holder.start()
    theirs.close()
    assert ours.poll(WAIT) and ours.recv() == "held", "the holder never took the lock"
    return holder, ours


def stop_holder(holder, connection):
    try:
        connection.send("release")
    except OSError:
        pass  # it was killed
    connection.close()
    holder.join(WAIT)


def test_process_lock_excludes_other_processes_and_dies_with_its_holder(tmp_path):
    sync = ProcessSynchronizer(tmp_path / "locks", timeout=WAIT)
    holder, connection = start_holder(sync, "data/0.0")
    try:
        message = workers.try_lock(sync, "data/0.0", 0.05)
        assert message.startswith("LockTimeoutError")
        assert "'data/0.0'" in message and sync.lock_name("data/0.0") in message
        assert "another process" in message
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(WAIT)
        assert holder.exitcode == -signal.SIGKILL
        assert workers.try_lock(sync, "data/0.0", WAIT) == "acquired"
    finally:
        stop_holder(holder, connection)


def test_redis_lock_excludes_other_processes_and_its_lease_frees_a_killed_holder(redis_url):
    sync = RedisSynchronizer(redis_url, prefix=unique("lease") + ":", lease=5, timeout=WAIT)
    holder, connection = start_holder(sync, "data/0.0")
    try:
        message = workers.try_lock(sync, "data/0.0", 0.05)
        assert message.startswith("LockTimeoutError") and sync.lock_name("data/0.0") in message
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(WAIT)
        assert workers.try_lock(sync, "data/0.0", WAIT) == "acquired"  # once the lease ran out
    finally:
        stop_holder(holder, connection)


def test_redis_release_after_the_lease_was_lost_raises(redis_url):
    import redis

    sync = RedisSynchronizer(redis_url, prefix=unique("lost") + ":", lease=30)
    lock = sync["data/0.0"]
    lock.acquire()
    redis.Redis.from_url(redis_url).delete(sync.lock_name("data/0.0"))  # as if it expired
    with pytest.raises(LeaseExpiredError, match="lease=") as caught:
        lock.release()
    assert "data/0.0" in str(caught.value)


def test_redis_synchronizer_names_an_unreachable_server():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sync = RedisSynchronizer(f"redis://:secret@127.0.0.1:{port}/0", timeout=1)
    with pytest.raises(StoreConnectionError, match=f"127.0.0.1:{port}") as caught:
        sync["k"].acquire()
    assert "secret" not in str(caught.value)


def _shows(error: BaseException, secret: str) -> list[str]:
    """Where ``secret`` shows in ``error``: its text, repr, chained errors or traceback."""
    import traceback

    found, seen, pending = [], set(), [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if secret in f"{current!s} {current!r}":
            found.append(f"{type(current).__name__}: {current}")
        pending += [current.__cause__, current.__context__]
    if secret in "".join(traceback.format_exception(error)):
        found.append("the formatted traceback")
    return found


@contextlib.contextmanager
def _echoing_server() -> Iterator[int]:
    """A port whose server answers every command as Redis 5 answers one it does not
    know (``HELLO`` before Redis 6), echoing its arguments: a password among them."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)

        def serve() -> None:
            with contextlib.suppress(OSError):
                while True:
                    connection, _ = listener.accept()
                    with connection:
                        words = connection.recv(65536).split(b"\r\n")[2::2]  # RESP bulk strings
                        shown = b", ".join(b"'" + word + b"'" for word in words[1:])
                        connection.sendall(b"-ERR unknown command '" + words[0]
                                           + b"', with args beginning with: " + shown + b"\r\n")

        threading.Thread(target=serve, daemon=True).start()
        yield listener.getsockname()[1]


def _password_url(port: int, password: str) -> str:
    return "redis://:" + password + f"@127.0.0.1:{port}/0"


@pytest.mark.parametrize("server", ["dead port", "wrong password", "echoes the password"])
def test_redis_synchronizer_errors_never_show_the_password(server, private_redis):
    password = "pw-" + uuid.uuid4().hex  # not written in any source line a traceback shows
    with contextlib.ExitStack() as stack:
        if server == "dead port":
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
        elif server == "wrong password":
            port = private_redis(password="right-" + uuid.uuid4().hex).port
        else:
            port = stack.enter_context(_echoing_server())
        sync = RedisSynchronizer(_password_url(port, password), timeout=1)
        with pytest.raises(StoreConnectionError if server != "echoes the password"
                           else StoreIOError) as caught:
            sync["k"].acquire()
    error = caught.value
    assert f"127.0.0.1:{port}" in str(error) and "RedisSynchronizer" in str(error)
    assert _shows(error, password) == []
    if server == "echoes the password":
        assert "***" in str(error)  # the server's words are kept, the password scrubbed


# -------------------------------------------------------------- chunk keys
ZARR3_LAYOUTS = [
    {"zarr_format": 2},
    {"zarr_format": 2, "chunk_key_encoding": {"name": "v2", "separator": "/"}},
    {"zarr_format": 3},
    {"zarr_format": 3, "chunk_key_encoding": {"name": "default", "separator": "."}},
    {"zarr_format": 3, "chunk_key_encoding": {"name": "v2", "separator": "."}},
    {"zarr_format": 3, "chunk_key_encoding": {"name": "v2", "separator": "/"}},
    {"zarr_format": 3, "shards": (6, 4)},
]


@pytest.mark.parametrize("options", ZARR3_LAYOUTS, ids=lambda o: json.dumps(o))
@pytest.mark.parametrize("path", ["", "group/array"])
def test_lock_keys_are_the_keys_zarr3_writes(options, path, tmp_path):
    store = DirectoryStore(tmp_path / "data", mode="w")
    chunks = (3, 2) if "shards" in options else (3, 4)
    array = zarr.create_array(zarr_store(store), name=path or None, shape=(12, 8), chunks=chunks,
                              dtype="i8", fill_value=-1, **options)
    proxy = synchronized(array, ThreadSynchronizer())
    layout = proxy.layout
    grid = options.get("shards", chunks)
    assert layout.grid == grid
    for coords in [(0, 0), (1, 1), (3, 1)]:
        expected = (path + "/" if path else "") + array.metadata.encode_chunk_key(coords)
        assert layout.chunk_key(coords) == expected
    before = set(store)
    selection = (slice(2, 7), slice(1, 6))
    proxy[selection] = 5
    assert set(store) - before == set(layout.keys(selection))
    assert layout.metadata_path in store


def test_lock_keys_of_a_0d_array(tmp_path):
    for zarr_format, key in [(2, "0"), (3, "c")]:
        store = DirectoryStore(tmp_path / f"v{zarr_format}", mode="w")
        array = zarr.create_array(zarr_store(store), shape=(), dtype="i8", zarr_format=zarr_format)
        proxy = synchronized(array, ThreadSynchronizer())
        proxy[...] = 7
        assert proxy.layout.keys(...) == [key] and key in store
        assert proxy[...] == 7


def random_selections(rng: random.Random, count: int) -> Iterator[tuple]:
    """(shape, grid, selection): basic selections of every kind on small arrays."""
    for _ in range(count):
        ndim = rng.randint(1, 3)
        shape = tuple(rng.randint(1, 12) for _ in range(ndim))
        grid = tuple(rng.randint(1, 5) for _ in range(ndim))
        selection = tuple(
            rng.randrange(-size, size) if rng.random() < 0.25
            else slice(rng.choice([None, rng.randint(-size, size)]),
                       rng.choice([None, rng.randint(-size, size)]), rng.choice([None, 1, 2, 3, 7]))
            for size in shape
        )
        yield shape, grid, selection


def test_split_covers_each_selection_once_chunk_by_chunk():
    for shape, grid, selection in random_selections(random.Random(1234), 300):
        index = np.arange(int(np.prod(shape))).reshape(shape)
        expected = index[selection]
        seen = np.zeros(expected.shape, dtype=int)
        for part in split(normalize_selection(selection, shape), grid):
            piece = index[part.selection]
            np.testing.assert_array_equal(piece, expected[part.value_selection])
            cells = np.stack(np.unravel_index(np.ravel(piece), shape), axis=-1) // grid
            assert (cells == part.coords).all(), (shape, grid, selection, part)
            seen[part.value_selection] += 1
        assert (seen == 1).all(), (shape, grid, selection)


def test_boxes_cover_each_selection_once_in_blocks_of_neighbouring_chunks():
    rng = random.Random(4321)
    for shape, grid, selection in random_selections(rng, 300):
        limit = rng.choice([1, 2, 3, 16])
        axes = normalize_selection(selection, shape)
        index = np.arange(int(np.prod(shape))).reshape(shape)
        expected = index[selection]
        seen = np.zeros(expected.shape, dtype=int)
        chunks = []
        for box in boxes(axes, grid, limit):
            assert 1 <= len(box.coords) <= limit, (shape, grid, selection, box)
            piece = index[box.selection]
            np.testing.assert_array_equal(piece, expected[box.value_selection])
            cells = np.stack(np.unravel_index(np.ravel(piece), shape), axis=-1) // grid
            assert {tuple(cell) for cell in cells} == set(box.coords), (shape, grid, selection)
            seen[box.value_selection] += 1
            chunks.extend(box.coords)
        assert (seen == 1).all(), (shape, grid, selection)
        assert chunks == [part.coords for part in split(axes, grid)]  # each once, grid order


def test_bad_selections_raise_typed_errors(tmp_path):
    array = make_array(DirectoryStore(tmp_path, mode="w"), (10, 10), (3, 3))
    proxy = synchronized(array, ThreadSynchronizer())
    with pytest.raises(TypeError, match="basic selections"):
        proxy[[1, 2]] = 1
    with pytest.raises(TypeError, match="positive steps"):
        proxy[::-1] = 1
    with pytest.raises(IndexError, match="out of bounds"):
        proxy[10] = 1
    with pytest.raises(IndexError, match="too many indices"):
        proxy[1, 2, 3] = 1
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        proxy[0:2, 0:2] = np.arange(3)
    with pytest.raises(TypeError, match="read-only"):
        proxy.oindex[[1, 2], :] = 1
    with pytest.raises(AttributeError, match="does not synchronize"):
        proxy.set_orthogonal_selection((0, 0), 1)
    assert proxy.oindex[[1, 2], 0].tolist() == [-1, -1]
    with pytest.raises(TypeError, match="zarr-python 2 or 3 array"):
        synchronized(np.zeros(3), ThreadSynchronizer())
    with pytest.raises(ValueError, match="encoding"):
        ChunkLayout((4,), (2,), "", "/", "custom", "zarr.json")


def test_writes_inside_locked_must_stay_in_its_region(tmp_path):
    array = make_array(DirectoryStore(tmp_path, mode="w"), (40,), (10,))
    proxy = synchronized(array, ThreadSynchronizer(timeout=5))
    with proxy.locked(slice(5, 25)):
        proxy[5:25] = proxy[5:25] + 2  # chunks 0-2, already held: no second acquire
        proxy[12:18] = 3
        with proxy.locked(slice(10, 12)):
            proxy[10:12] = 4
        with pytest.raises(LockOrderError, match="outside that selection"):
            proxy[30:32] = 1
        with pytest.raises(LockOrderError, match="outside proxy.locked"):
            proxy.append(np.zeros(3))
    assert proxy[:].tolist() == [-1] * 5 + [1] * 5 + [4] * 2 + [3] * 6 + [1] * 7 + [-1] * 15
    with proxy.locked(slice(30, 32)):  # every lock was released
        pass


def test_chunks_sharing_a_stripe_take_its_lock_once(tmp_path):
    sync = ProcessSynchronizer(tmp_path / "locks", stripes=1, timeout=5)  # one lock for all
    proxy = synchronized(make_array(DirectoryStore(tmp_path / "data", mode="w"), (30,), (10,)),
                         sync, atomic=True)
    proxy[5:25] = 1  # three chunks, one lock: taking it twice would time out
    with proxy.locked(slice(0, 30)):
        proxy[0:30] = proxy[0:30] + 1
    assert proxy[:].tolist() == [0] * 5 + [2] * 20 + [0] * 5


def test_proxy_pickles_and_reopens_with_fresh_metadata(tmp_path):
    sync = ProcessSynchronizer(tmp_path / "locks", timeout=10)
    array = make_array(LMDBStore(tmp_path / "data.lmdb", mode="w"), (10,), (4,))
    proxy = synchronized(array, sync, atomic=True)
    proxy[:] = np.arange(10)
    clone = pickle.loads(pickle.dumps(proxy))
    assert clone.atomic and clone.synchronizer.path == sync.path
    clone.append(np.arange(3))  # grows the array behind the original's back
    assert clone.shape == (13,) and proxy.shape == (10,)
    proxy.refresh()
    assert proxy[:].tolist() == list(range(10)) + [0, 1, 2]


@pytest.mark.parametrize("atomic", [False, True])
def test_a_write_waits_for_the_lock_of_each_chunk_it_touches(atomic, tmp_path, monkeypatch):
    monkeypatch.setattr(sync_arrays, "CHUNKS_PER_WRITE", 1)  # one chunk per zarr call
    sync = ProcessSynchronizer(tmp_path / "locks", timeout=0.05)
    array = make_array(DirectoryStore(tmp_path / "data", mode="w"), (30,), (10,))
    proxy = synchronized(array, sync, atomic=atomic)
    key = proxy.layout.chunk_key((1,))
    holder, connection = start_holder(sync, key)
    try:
        with pytest.raises(LockTimeoutError, match=key):
            proxy[5:15] = 1
        proxy[20:30] = 2  # chunk 2 is free
    finally:
        stop_holder(holder, connection)
    # one chunk at a time: chunk 0's part was written before chunk 1's lock
    # timed out; atomic: no lock, no write
    assert proxy[5:15].tolist() == ([-1] * 5 if atomic else [1] * 5) + [-1] * 5
    assert proxy[20:30].tolist() == [2] * 10


def test_a_plain_write_takes_the_locks_of_a_block_of_chunks_before_writing_it(tmp_path):
    sync = ProcessSynchronizer(tmp_path / "locks", timeout=0.05)
    array = make_array(DirectoryStore(tmp_path / "data", mode="w"), (200,), (10,))
    proxy = synchronized(array, sync)
    holder, connection = start_holder(sync, proxy.layout.chunk_key((17,)))
    try:
        with pytest.raises(LockTimeoutError):
            proxy[5:195] = 1  # chunks 0-15, then 16-19: chunk 17 is held
    finally:
        stop_holder(holder, connection)
    # the first block of CHUNKS_PER_WRITE chunks was written; none of the second
    assert proxy[:].tolist() == [-1] * 5 + [1] * 155 + [-1] * 40


@pytest.mark.parametrize("backend,blocked_first", [("directory", True), ("lmdb", False)])
def test_blocks_of_large_chunks_stay_within_a_mib_on_threaded_stores(backend, blocked_first,
                                                                     tmp_path, request):
    # 1 MiB chunks: a Directory store (zarr calls it in worker threads) gets
    # one per zarr call, so chunk 0 is written before chunk 1's lock times
    # out; LMDB (called in zarr's loop) gets both in one block, so neither is.
    sync = ProcessSynchronizer(tmp_path / "locks", timeout=0.05)
    store = open_backend(backend, tmp_path, request)
    try:
        chunk = (1 << 20) // 8
        proxy = synchronized(make_array(store, (4 * chunk,), (chunk,)), sync)
        holder, connection = start_holder(sync, proxy.layout.chunk_key((1,)))
        try:
            with pytest.raises(LockTimeoutError):
                proxy[0:2 * chunk] = 1
        finally:
            stop_holder(holder, connection)
        assert int(proxy[0]) == (1 if blocked_first else -1)
        assert int(proxy[chunk]) == -1
    finally:
        store.close()


# ------------------------------------------------- processes writing stripes
def stripe_arguments(target, stripes: int, rounds: int) -> list[tuple]:
    return [(target, workers.stripes_of(w, WRITERS, stripes), WIDTH, rounds)
            for w in range(WRITERS)]


@pytest.mark.parametrize("backend", PROCESS_SAFE)
def test_zarr3_writers_of_shared_chunks_lose_nothing(pool, backend, tmp_path, request):
    stripes, rounds = 30, 1
    store = open_backend(backend, tmp_path, request)
    try:
        array = make_array(store, (stripes * WIDTH,), (CHUNK,))
        proxy = synchronized(array, ProcessSynchronizer(tmp_path / "locks", timeout=WAIT))
        done = run_all(pool, workers.write_stripes, stripe_arguments(proxy, stripes, rounds))
        assert sum(done) == stripes * rounds
        np.testing.assert_array_equal(array[:], np.arange(stripes * WIDTH))
    finally:
        store.close()


@pytest.mark.parametrize("backend,kind", [("lmdb", "process"), ("directory", "striped"),
                                          ("redis", "redis")])
def test_locked_read_modify_writes_count_exactly(pool, backend, kind, tmp_path, request):
    rounds = 12
    store = open_backend(backend, tmp_path, request)
    if kind == "redis":
        sync = RedisSynchronizer(request.getfixturevalue("redis_url"), prefix=unique("add") + ":",
                                 lease=60, timeout=WAIT)
    else:
        sync = ProcessSynchronizer(tmp_path / "locks", timeout=WAIT,
                                   stripes=3 if kind == "striped" else None)
    try:
        array = make_array(store, (3000,), (CHUNK,), fill_value=0)
        proxy = synchronized(array, sync)
        regions = [[(w * 600, w * 600 + 1500)] for w in range(WRITERS)]  # overlapping
        run_all(pool, workers.add_ones, [(proxy, own, rounds) for own in regions])
        expected = np.zeros(3000, dtype="i8")
        for own in regions:
            for start, stop in own:
                expected[start:stop] += rounds
        np.testing.assert_array_equal(array[:], expected)
    finally:
        store.close()


def test_parallel_appends_keep_every_block_once(pool, tmp_path):
    blocks, size = 6, 7
    store = SQLiteStore(tmp_path / "data.sqlite", mode="w")
    try:
        array = make_array(store, (0,), (5,))
        proxy = synchronized(array, ProcessSynchronizer(tmp_path / "locks", timeout=WAIT))
        labels = run_all(pool, workers.append_blocks,
                         [(proxy, w, blocks, size) for w in range(WRITERS)])
        proxy.refresh()
        data = proxy[:]
        assert data.shape == (WRITERS * blocks * size,)
        found = data.reshape(-1, size)
        assert (found == found[:, :1]).all(), "a block was torn"
        assert sorted(found[:, 0].tolist()) == sorted(label for own in labels for label in own)
    finally:
        store.close()


def test_atomic_region_writes_are_never_seen_half_done(pool, tmp_path):
    store = LMDBStore(tmp_path / "data.lmdb", mode="w")
    try:
        array = make_array(store, (40,), (10,))
        synchronizer = ProcessSynchronizer(tmp_path / "locks", timeout=WAIT)
        proxy = synchronized(array, synchronizer, atomic=True)
        proxy[:] = 0
        writing = pool.apply_async(workers.write_whole_regions, (proxy, 5, 35, 40))
        reads, seen = 0, set()
        # One read at least, even if the writer finished before this process got a core.
        while reads == 0 or (not writing.ready() and reads < 100_000):
            with proxy.locked(slice(5, 35)):
                values = proxy[5:35]
            assert len(set(values.tolist())) == 1, f"a torn region: {values}"
            seen.add(int(values[0]))
            reads += 1
        assert writing.get(WAIT) == 40
        assert proxy[5:35].tolist() == [40] * 30 and proxy[:5].tolist() == [0] * 5
        assert reads > 0
    finally:
        store.close()


# -------------------------------------------------------------- zarr-python 2
ZARR2_RUN = """
import multiprocessing, os, sys
import numpy as np, zarr
sys.path.insert(0, tests)
import sync_workers as workers
from zstores.sync import ProcessSynchronizer, synchronized
from zstores.sync.arrays import _Zarr2
from zstores.urls import open_store

result = {"exact": {}, "keys": [], "appends": None}
context = multiprocessing.get_context("spawn")
with context.Pool(writers) as pool:
    for name, url in urls.items():
        store = open_store(url, mode="w")
        sync = ProcessSynchronizer(os.path.join(locks, name), timeout=120)
        z = zarr.open_array(store, mode="w", shape=(stripes * width,), chunks=(chunk,),
                            dtype="i8", fill_value=-1, synchronizer=sync)
        arguments = [(z, workers.stripes_of(w, writers, stripes), width, rounds)
                     for w in range(writers)]
        pool.starmap_async(workers.write_stripes, arguments).get(120)
        result["exact"][name] = bool((z[:] == np.arange(stripes * width)).all())
        store.close()

    # synchronized() over a zarr-python 2 array: parallel appends keep every block
    store = open_store(urls["lmdb"], mode="w")
    z = zarr.open_array(store, mode="w", shape=(0,), chunks=(5,), dtype="i8", path="g/a")
    proxy = synchronized(z, ProcessSynchronizer(os.path.join(locks, "append"), timeout=120))
    labels = pool.starmap_async(workers.append_blocks,
                                [(proxy, w, 5, 7) for w in range(writers)]).get(120)
    proxy.refresh()
    found = proxy[:].reshape(-1, 7)
    result["appends"] = [bool((found == found[:, :1]).all()),
                         sorted(found[:, 0].tolist()) == sorted(l for own in labels for l in own)]
    store.close()

# our keys are the keys zarr-python 2 locks and writes
for path, separator, shape, chunks in [("", ".", (7, 5), (2, 2)), ("a/b", "/", (7, 5), (3, 2)),
                                       ("x", ".", (), ())]:
    z = zarr.zeros(shape, chunks=chunks or True, store={}, path=path,
                   dimension_separator=separator, dtype="i4")
    layout = _Zarr2(z).layout()
    cells = [(0, 0), (2, 1), (3, 2)] if shape else [()]
    result["keys"].append([layout.chunk_key(c) == z._chunk_key(c or (0,)) for c in cells])
"""


def test_zarr2_synchronizer_argument_loses_nothing(zarr2, tmp_path, request):
    urls = {
        "directory": f"file://{tmp_path / 'dir'}",
        "nested": f"nested://{tmp_path / 'nested'}",
        "lmdb": f"lmdb://{tmp_path / 'data.lmdb'}",
        "sqlite": f"sqlite://{tmp_path / 'data.sqlite'}",
        "redis": f"{request.getfixturevalue('redis_url')}?prefix={unique('z2')}",
    }
    mongodb_url = os.environ.get("ZSTORES_TEST_MONGODB_URL")
    if mongodb_url:
        name = unique("z2")
        urls["mongodb"] = f"{mongodb_url.rstrip('/')}/?database={name}&collection={name}"
    out = zarr2.run(ZARR2_RUN, tests=str(TESTS), locks=str(tmp_path / "locks"), urls=urls,
                    writers=WRITERS, stripes=30, width=WIDTH, chunk=CHUNK, rounds=1)
    assert out["exact"] == {name: True for name in urls}
    assert out["appends"] == [True, True]
    assert all(all(row) for row in out["keys"]), out["keys"]


# ------------------------------------------------------------------- dask
def test_dask_multiprocessing_store_into_a_synchronized_target(tmp_path):
    dask = pytest.importorskip("dask")
    import dask.array as da

    store = DirectoryStore(tmp_path / "data", mode="w")
    length = 8 * WIDTH
    array = make_array(store, (length,), (CHUNK,))
    target = synchronized(array, ProcessSynchronizer(tmp_path / "locks", timeout=WAIT))
    source = da.arange(length, chunks=WIDTH, dtype="i8")
    with dask.config.set(scheduler="processes", num_workers=2):
        da.store(source, target, lock=False)
    np.testing.assert_array_equal(array[:], np.arange(length))


@pytest.mark.parametrize("fenced", [False, True], ids=["locks", "fenced"])
def test_dask_distributed_cluster_with_redis_synchronizer_into_redis(fenced, tmp_path,
                                                                     redis_url):
    pytest.importorskip("distributed")
    import dask.array as da
    from distributed import Client, LocalCluster

    from zstores.stores.redis import RedisStore

    store = RedisStore(redis_url, prefix=unique("dask"), mode="w")
    length = 8 * WIDTH
    array = make_array(store, (length,), (CHUNK,))
    sync = RedisSynchronizer(redis_url, prefix=unique("dask-locks") + ":", lease=60, timeout=WAIT)
    target = synchronized(array, sync, fenced=fenced)
    source = da.arange(length, chunks=WIDTH, dtype="i8")
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                      dashboard_address=None) as cluster, Client(cluster):
        da.store(source, target, lock=False)
    np.testing.assert_array_equal(array[:], np.arange(length))
    store.close()


# ------------------------------------------------- single-writer stores
SINGLE_WRITER = [
    ("zip", ZipStore, "data.zip", {}),
    ("dbm.dumb", DBMStore, "data", {"open": __import__("dbm.dumb").dumb.open}),
]


@pytest.mark.parametrize("name,cls,filename,kwargs", SINGLE_WRITER,
                         ids=[s[0] for s in SINGLE_WRITER])
def test_second_writer_process_is_refused_at_open(pool, name, cls, filename, kwargs, tmp_path):
    path = str(tmp_path / filename)
    store = cls(path, mode="w", **kwargs)
    store["a/.zgroup"] = b"{}"
    assert not cls.supports_process_writers
    if cls is DBMStore:  # handles of one process share the lock (an open zip is unreadable)
        with cls(path, mode="a", **kwargs) as again:
            assert again["a/.zgroup"] == b"{}"
    message = pool.apply_async(workers.open_for_writing, (cls, path, kwargs)).get(WAIT)
    assert message.startswith(StoreLockedError.__name__), message
    assert path in message and "another process" in message
    assert store["a/.zgroup"] == b"{}"
    store.close()
    assert pool.apply_async(workers.open_for_writing, (cls, path, kwargs)).get(WAIT) == "opened"
    with cls(path, mode="r", **kwargs) as reader:
        assert reader["a/.zgroup"] == b"{}"


def test_mode_w_minus_still_refuses_an_existing_zip(tmp_path):
    from zstores.errors import StoreExistsError

    path = tmp_path / "data.zip"
    with ZipStore(path, mode="w-") as store:
        store["k"] = b"v"
    with pytest.raises(StoreExistsError):
        ZipStore(path, mode="w-")
    with ZipStore(path, mode="r") as store:
        assert store["k"] == b"v"
