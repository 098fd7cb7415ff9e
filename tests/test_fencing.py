"""Locks beside data, waits that say so, fair Redis locks, lease renewal and fenced writes.

Real processes and real Redis servers (the suite's, or a private one the
test kills); pauses are placed with SIGSTOP at points the writer reports
through a pipe, never left to timing.
"""

from __future__ import annotations

import itertools
import json
import logging
import multiprocessing
import os
import signal
import subprocess
import threading
import time
import uuid

import fencing_workers as workers
import pytest
from two_hosts import late_write, message, python_in, server_in, skip_without_namespaces
from two_hosts import two_hosts as hosts_of

import zstores
from zstores import (
    LeaseExpiredError,
    LockNamespaceError,
    LockTimeoutError,
    ProcessSynchronizer,
    RedisSynchronizer,
    ThreadSynchronizer,
    UnsupportedOperationError,
)
from zstores.keys import prefix_of
from zstores.sync import locks
from zstores.sync.fencing import FENCE_PREFIX

from relays import FreezingRelay

zarr = pytest.importorskip("zarr")
redis = pytest.importorskip("redis")
from zstores.adapters import zarr_store  # noqa: E402 - needs zarr
from zstores.stores.redis import RedisStore  # noqa: E402 - needs redis

pytestmark = pytest.mark.timeout(300)

WAIT = 120  # seconds any single wait on another process may take at most
#: The lease of the writer the tests stop (SIGSTOP, a frozen link): short, since each test
#: waits it out, yet long enough that its renewals keep it to its pause point on a loaded
#: machine (1 s ran out before the pause beside stress-ng at load 25).
PAUSED_LEASE = 4
#: The lease of the other writer, which is never stopped: nothing of it may run out.
OTHER_LEASE = 60
#: Store options of a writer whose link is cut: its write (or a reconnect) waits for the
#: answer as long as the cut lasts (the paused lease and the other writer's ten
#: increments), not redis-py's default 5 s.
HELD_UP = {"socket_timeout": WAIT, "socket_connect_timeout": WAIT}
REGION = workers.REGION


def unique(name: str) -> str:
    return f"{name}_{uuid.uuid4().hex[:12]}"


def make_array(store, path: str = "data"):
    return zarr.create_array(zarr_store(store), name=path or None, shape=(20,), chunks=(3,),
                             dtype="i4", fill_value=0, overwrite=True)


def stop(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until every thread of it has stopped.

    The signal takes effect asynchronously: a thread that a message wakes
    right after ``kill`` returns could otherwise run on for a moment.
    """
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                states.append(stat.read().rsplit(")", 1)[1].split()[0])
        return all(state in "tT" for state in states)

    wait_until(stopped, f"process {pid} to stop")


def wait_until(condition, what: str) -> None:
    """Poll ``condition()`` until true (bounded by WAIT: a hang is a failure, not a pass)."""
    end = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.01)


# ------------------------------------------------------------ locks beside data
STORE_PREFIXES = ["par", "zarr", "zstores", "zstores:lock", "a:b", ":", "x:"]
SYNC_PREFIXES = ["par:", "par", "", "zstores:lock:", "par::", ":", "zarr:", "data", "x::"]


def test_lock_keys_never_collide_with_store_keys_whatever_the_prefixes(private_redis):
    """Every pair of prefixes on one server: a clean run with no shared key, or a refusal."""
    server = private_redis()
    url = server.url()
    client = redis.Redis.from_url(url)
    refused = ran = 0
    for store_prefix, sync_prefix, path in itertools.product(
            STORE_PREFIXES, SYNC_PREFIXES, ["", "data"]):
        client.flushall()
        store = RedisStore(url, prefix=store_prefix, mode="w")
        array = make_array(store, path)
        sync = RedisSynchronizer(url, prefix=sync_prefix, lease=30, timeout=WAIT)
        # The store owns every Redis key starting with "prefix:"; lock keys
        # start with the synchronizer's prefix and the array's path.
        overlaps = (sync_prefix + prefix_of(path)).startswith(store_prefix + ":")
        try:
            proxy = zstores.synchronized(array, sync)
        except LockNamespaceError as error:
            assert overlaps, (store_prefix, sync_prefix, path)
            assert repr(store_prefix) in str(error) and repr(sync_prefix) in str(error)
            refused += 1
            continue
        assert not overlaps, (store_prefix, sync_prefix, path)
        ran += 1
        proxy[1:8] = 5  # chunks written whole and in part
        proxy[1:8] = 6  # an existing chunk written again under its lock
        with proxy.locked(REGION):
            proxy[REGION] = proxy[REGION] + 1
            data_keys = {f"{store_prefix}:{key}".encode() for key in store.list_prefix("")}
            lock_keys = set(client.keys()) - data_keys
            assert {sync.lock_name(key).encode() for key in proxy.layout.keys(REGION)} \
                <= lock_keys
            assert not lock_keys & data_keys
            assert all(b"//" not in key for key in data_keys)
        assert proxy[:].tolist() == [1, 7, 7, 7, 7, 7, 7, 7, 1, 1] + [0] * 10
        assert sorted(store.list_prefix("")) == sorted(
            key for key in store.list_prefix("") if "//" not in key)
        store.close()
    assert refused and ran
    with pytest.raises(ValueError, match="prefix"):  # a store's prefix is never empty
        RedisStore(url, prefix="")


def test_the_issue_prefixes_are_refused_naming_both(redis_url):
    """RedisStore(prefix="par") beside RedisSynchronizer(prefix="par:"): refused, not corrupted."""
    prefix = unique("par")
    store = RedisStore(redis_url, prefix=prefix, mode="w")
    array = make_array(store)
    sync = RedisSynchronizer(redis_url, prefix=prefix + ":")
    with pytest.raises(LockNamespaceError) as caught:
        zstores.synchronized(array, sync)
    assert f"{prefix!r}" in str(caught.value) and f"{prefix + ':'!r}" in str(caught.value)
    assert isinstance(caught.value, ValueError)
    # Another server (or database) holds the locks: no overlap, no refusal.
    other_db = redis_url.rsplit("/", 1)[0] + "/1"
    zstores.synchronized(array, RedisSynchronizer(other_db, prefix=prefix + ":"))
    store.rmdir("")


# ------------------------------------------------------------- waits and timeouts
class _Warnings(logging.Handler):
    """Sets ``seen`` when the zstores.sync logger warns."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = threading.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.seen.set()


@pytest.fixture
def sync_warnings():
    handler = _Warnings()
    logger = logging.getLogger("zstores.sync")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def _synchronizer(kind: str, tmp_path, redis_url: str, **options):
    if kind == "thread":
        return ThreadSynchronizer(**options)
    if kind == "process":
        return ProcessSynchronizer(tmp_path / "locks", **options)
    return RedisSynchronizer(redis_url, prefix=unique("wait") + ":", **options)


@pytest.mark.parametrize("kind", ["thread", "process", "redis"])
def test_a_wait_without_timeout_warns_and_a_timeout_raises(kind, tmp_path, redis_url,
                                                           sync_warnings):
    sync = _synchronizer(kind, tmp_path, redis_url, warn_after=0.05)
    holder = sync["data/0.0"]
    holder.acquire()
    waiter = sync["data/0.0"]
    got = threading.Event()

    def wait() -> None:
        waiter.acquire()  # timeout=None: waits as long as it takes, saying so
        got.set()
        waiter.release()

    thread = threading.Thread(target=wait)
    thread.start()
    assert sync_warnings.seen.wait(WAIT), "no warning while waiting for a held lock"
    assert not got.is_set()
    assert "data/0.0" in sync_warnings.messages[0] and "no timeout" in \
        sync_warnings.messages[0]
    holder.release()
    thread.join(WAIT)
    assert got.is_set()
    holder.acquire()
    with pytest.raises(LockTimeoutError, match="data/0.0"):
        sync["data/0.0"].acquire(timeout=0.2)
    holder.release()


def test_warn_after_is_checked_and_pickled(tmp_path, redis_url):
    import pickle

    with pytest.raises(ValueError, match="warn_after"):
        ThreadSynchronizer(warn_after=0)
    for sync in [ThreadSynchronizer(warn_after=7), ProcessSynchronizer(tmp_path, warn_after=7),
                 RedisSynchronizer(redis_url, warn_after=None)]:
        assert pickle.loads(pickle.dumps(sync)).warn_after == sync.warn_after


# --------------------------------------------------------------- fair Redis locks
def test_redis_waiters_are_served_in_order_and_a_releaser_queues_behind(redis_url,
                                                                         monkeypatch):
    # A released lock waits for the next in line this long (ms): longer than
    # any stall of a loaded machine, so the order is the queue's alone.
    monkeypatch.setattr(locks, "_RESERVED_MS", WAIT * 1000)
    sync = RedisSynchronizer(redis_url, prefix=unique("fair") + ":", lease=30, timeout=WAIT)
    client = redis.Redis.from_url(redis_url)
    queue = sync.prefix + "k//queue"
    first = sync["k"]
    first.acquire()
    order: list[str] = []

    def take(label: str) -> None:
        lock = sync["k"]
        lock.acquire()
        order.append(label)
        lock.release()

    threads = []
    for label, waiting in (("W", 1), ("G", 2)):
        threads.append(threading.Thread(target=take, args=(label,)))
        threads[-1].start()
        wait_until(lambda n=waiting: client.zcard(queue) == n, f"{label} to queue")
    first.release()
    take("H")  # the holder asks again at once: it gets in line behind W and G
    for thread in threads:
        thread.join(WAIT)
    assert order == ["W", "G", "H"]


def test_a_waiter_that_misses_its_turn_lets_the_others_in(redis_url):
    """The next in line is stopped (SIGSTOP): the lock goes to another asker, not to nobody."""
    sync = RedisSynchronizer(redis_url, prefix=unique("missed") + ":", lease=30, timeout=WAIT)
    client = redis.Redis.from_url(redis_url)
    first = sync["k"]
    first.acquire()
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    waiter = context.Process(target=workers.take_lock, args=(sync, "k", theirs))
    waiter.start()
    theirs.close()
    try:
        wait_until(lambda: client.zcard(sync.prefix + "k//queue") == 1, "the waiter to queue")
        stop(waiter.pid)
        first.release()  # kept for the stopped waiter, then free for anyone
        with sync["k"] as lock:
            assert lock.token
    finally:
        os.kill(waiter.pid, signal.SIGCONT)
        assert ours.poll(WAIT) and ours.recv() == "held"
        waiter.join(WAIT)


def test_tokens_grow_with_every_grant_and_across_a_lost_counter(redis_url):
    sync = RedisSynchronizer(redis_url, prefix=unique("tokens") + ":", lease=30)
    tokens = []
    for key in ["a", "b", "a", "a"]:
        with sync[key] as lock:
            tokens.append(lock.token)
    redis.Redis.from_url(redis_url).delete(sync.prefix + "//tokens")  # a restart, a flush
    with sync["a"] as lock:
        tokens.append(lock.token)
    assert tokens == sorted(set(tokens))


# ------------------------------------------------------------------ lease renewal
def test_a_holder_working_for_five_leases_keeps_its_lock(redis_url):
    prefix = unique("renew") + ":"
    sync = RedisSynchronizer(redis_url, prefix=prefix, lease=2)
    lock = sync["k"]
    lock.acquire()
    other = RedisSynchronizer(redis_url, prefix=prefix, lease=2)
    with pytest.raises(LockTimeoutError):
        other["k"].acquire(timeout=5 * sync.lease)  # renewed all along
    lock.check()
    lock.release()
    with other["k"]:
        pass


@pytest.mark.parametrize("fenced", [False, True])
def test_a_holder_cut_off_from_redis_is_refused_at_its_next_write(fenced, private_redis,
                                                                  tmp_path):
    from zstores.stores.sqlite import SQLiteStore

    server = private_redis()
    store = SQLiteStore(tmp_path / "data.sqlite", mode="w")
    array = make_array(store)
    sync = RedisSynchronizer(server.url(), lease=1, timeout=WAIT)
    proxy = zstores.synchronized(array, sync, fenced=fenced)
    with pytest.raises(LeaseExpiredError, match="lease"):
        with proxy.locked(REGION):
            before = proxy[REGION]
            server.kill()  # no renewal reaches it any more
            time.sleep(1.5 * sync.lease)  # past the lease as this process counts it
            proxy[REGION] = before + 1
    assert array[:].tolist() == [0] * 20


# ------------------------------------------------------------------- fenced writes
def _data_store(kind: str, tmp_path, redis_url: str):
    if kind == "redis":
        where = (redis_url, unique("fenced-data"))
    else:
        where = str(tmp_path / f"data.{kind}")
    store = workers.open_store(kind, where)
    return store, where


@pytest.mark.parametrize("pause_at", ["write", "read"])
@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
@pytest.mark.parametrize("kind", ["redis", "sqlite", "lmdb"])
def test_a_writer_paused_past_its_lease_never_lands_a_stale_write(kind, fenced, pause_at,
                                                                   tmp_path, redis_url):
    """A stops in its read-modify-write, its lease runs out, B adds 1 ten times, A resumes.

    Fenced: A's write is refused and all of B's increments stay.  Unfenced,
    stopped at its write (past the lease check before it), A's stale chunks
    land over B's: the control loses 10 increments every time.  Stopped
    after its read, A is refused before it writes, fenced or not.
    """
    store, where = _data_store(kind, tmp_path, redis_url)
    make_array(store)
    sync = RedisSynchronizer(redis_url, prefix=unique("paused") + ":", lease=PAUSED_LEASE,
                             timeout=WAIT)
    other = RedisSynchronizer(redis_url, prefix=sync.prefix, lease=OTHER_LEASE, timeout=WAIT)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    writer = context.Process(target=workers.paused_writer,
                             args=(kind, where, sync, fenced, pause_at, theirs))
    writer.start()
    theirs.close()
    try:
        assert ours.poll(WAIT) and ours.recv() == pause_at
        stop(writer.pid)
        try:
            client = redis.Redis.from_url(redis_url)
            proxy = zstores.synchronized(make_array_view(store), other, fenced=fenced)
            names = [sync.lock_name(key) for key in proxy.layout.keys(REGION)]
            wait_until(lambda: not client.exists(*names), "the stopped writer's lease to end")
            for _ in range(10):
                with proxy.locked(REGION):
                    proxy[REGION] = proxy[REGION] + 1
            ours.send("go")
        finally:
            os.kill(writer.pid, signal.SIGCONT)
        assert ours.poll(WAIT)
        outcome, detail = ours.recv()
    finally:
        writer.join(WAIT)
    values = make_array_view(store)[REGION].tolist()
    assert outcome == "refused", detail  # told, in every case
    if pause_at == "read":
        assert "is lost" in detail  # the lease check before the write
        assert values == [10] * 10  # 0 lost
    elif fenced:
        assert "its commit was refused" in detail  # the store's check of the fence
        assert values == [10] * 10  # 0 lost
    else:
        assert "expired after" in detail  # told at release, after the write landed
        assert values == [1] * 10  # the control: A's stale write landed, 10 lost
    store.close()


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_a_write_held_up_by_a_partition_never_lands_late(fenced, redis_url):
    """Redis data and locks; A's link to Redis freezes as its write leaves, past its lease.

    B (connected directly) adds 1 ten times; then the link heals and A's held
    commands arrive.  Fenced, the commit's check of the fence record refuses
    them: 0 lost.  Unfenced, the stale SET lands: 10 lost.  A reports only
    once its commit (or SET) was answered, so the outcome is known then.
    """
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    relay = FreezingRelay(port)
    relayed = redis_url.replace(f":{port}/", f":{relay.port}/")
    prefix = unique("partitioned")
    store = RedisStore(redis_url, prefix=prefix, mode="w")
    make_array(store)
    sync = RedisSynchronizer(redis_url, prefix=unique("cut") + ":", lease=OTHER_LEASE,
                             timeout=WAIT)
    relayed_sync = RedisSynchronizer(relayed, prefix=sync.prefix, lease=PAUSED_LEASE,
                                     timeout=WAIT)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    writer = context.Process(target=workers.paused_writer,
                             args=("redis", (relayed, prefix, HELD_UP), relayed_sync, fenced,
                                   "write", theirs))
    writer.start()
    theirs.close()
    try:
        assert ours.poll(WAIT) and ours.recv() == "write"
        relay.freeze()
        ours.send("go")  # A sends its write into the frozen link
        client = redis.Redis.from_url(redis_url)
        proxy = zstores.synchronized(make_array_view(store), sync, fenced=fenced)
        names = [sync.lock_name(key) for key in proxy.layout.keys(REGION)]
        wait_until(lambda: not client.exists(*names), "A's lease to end")
        for _ in range(10):
            with proxy.locked(REGION):
                proxy[REGION] = proxy[REGION] + 1
        relay.heal()
        assert ours.poll(WAIT)
        outcome, detail = ours.recv()
    finally:
        relay.heal()
        writer.join(WAIT)
        relay.close()
    assert outcome == "refused", detail
    values = make_array_view(store)[REGION].tolist()
    assert values == ([10] * 10 if fenced else [1] * 10)
    store.rmdir("")


def make_array_view(store):
    return zarr.open_array(zarr_store(store), path="data", mode="r+")


@pytest.mark.parametrize("kind", ["redis", "sqlite", "lmdb"])
def test_fenced_writers_in_processes_count_exactly(kind, tmp_path, redis_url):
    store, where = _data_store(kind, tmp_path, redis_url)
    make_array(store)
    sync = RedisSynchronizer(redis_url, prefix=unique("count") + ":", lease=30, timeout=WAIT)
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        done = pool.starmap_async(_add_fenced, [(kind, where, sync, 15)] * 3).get(WAIT)
    assert sum(done) == 45
    assert make_array_view(store)[REGION].tolist() == [45] * 10
    fences = [key for key in store.list_prefix("") if key.startswith(FENCE_PREFIX)]
    assert fences and all(key[len(FENCE_PREFIX):].startswith("data/c/") for key in fences)
    store.close()


def _add_fenced(kind, where, sync, rounds: int) -> int:
    store = workers.open_store(kind, where)
    proxy = zstores.synchronized(make_array_view(store), sync, fenced=True)
    for _ in range(rounds):
        with proxy.locked(REGION):
            proxy[REGION] = proxy[REGION] + 1
    store.close()
    return rounds


def test_fenced_needs_a_store_with_transactions(tmp_path, redis_url):
    sync = RedisSynchronizer(redis_url, prefix=unique("nofence") + ":")
    folder = zstores.DirectoryStore(tmp_path / "dir", mode="w")
    with pytest.raises(UnsupportedOperationError, match="DirectoryStore"):
        zstores.synchronized(make_array(folder), sync, fenced=True)
    local = zarr.create_array(zarr.storage.LocalStore(tmp_path / "local"), shape=(4,),
                              chunks=(2,), dtype="i4")
    with pytest.raises(UnsupportedOperationError, match="LocalStore"):
        zstores.synchronized(local, sync, fenced=True)


def test_fence_records_stay_out_of_zarr_and_verify(tmp_path, redis_url, recwarn):
    from zstores.cli import main

    path = tmp_path / "data.sqlite"
    store = zstores.SQLiteStore(path, mode="w")
    group = zarr.open_group(zarr_store(store), mode="w")
    array = group.create_array("data", shape=(20,), chunks=(3,), dtype="i4", fill_value=0)
    sync = RedisSynchronizer(redis_url, prefix=unique("hidden") + ":")
    proxy = zstores.synchronized(array, sync, fenced=True)
    proxy[0:10] = 3
    assert any(key.startswith(FENCE_PREFIX) for key in store)
    assert [name for name, _ in group.members()] == ["data"]
    assert not [w for w in recwarn if ".zstores" in str(w.message)]
    store.close()
    assert main(["verify", str(path)]) == 0


# ------------------------------------------------- hosts as network namespaces
@pytest.fixture
def two_hosts(tmp_path):
    """Hosts R (a Redis server on 10.231.7.1) and A (10.231.7.2): see tests/two_hosts.py.

    Yields (the hosts, the Redis port).
    """
    skip_without_namespaces("redis-server")
    port = 6379

    def answers() -> bool:
        return subprocess.run(["ip", "netns", "exec", hosts.r, "redis-cli", "-p", str(port),
                               "ping"], check=False, capture_output=True,
                              text=True).stdout.strip() == "PONG"

    with hosts_of("10.231.7") as hosts, server_in(
            hosts.r, ["redis-server", "--bind", f"127.0.0.1 {hosts.address_r}", "--port",
                      str(port), "--save", "", "--appendonly", "no", "--protected-mode", "no",
                      "--dir", str(tmp_path)], answers, WAIT):
        yield hosts, port


def _in_namespace(namespace: str, role: str, url: str, prefix: str, sync: dict,
                  fenced: bool, **options: object) -> subprocess.Popen:
    return python_in(namespace, "fencing_workers", role, json.dumps([url, prefix, options]),
                     json.dumps(sync), "1" if fenced else "0")


# A cut link delays a write only when the data are behind it (Redis); a writer
# of a file both hosts see writes at once, within its lease, whatever its link
# to the locks: for files only a pause can make a write late.
@pytest.mark.parametrize(("kind", "cut"), [("redis", "sigstop"), ("redis", "link-down"),
                                           ("sqlite", "sigstop"), ("lmdb", "sigstop")])
@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_writers_on_two_hosts_never_land_a_late_write(kind, fenced, cut, two_hosts, tmp_path):
    """Locks in Redis on host R; A on host A stops or loses its link as its write leaves.

    The data: in the same Redis, or an SQLite or LMDB file both hosts see
    (a shared file system; for LMDB, one machine's processes in different
    network namespaces, as LMDB needs).  The other writer, on R, takes A's
    expired locks and adds 1 ten times; then A resumes (SIGCONT, or the link
    comes back up and TCP delivers what it held: R's end goes down, so A's
    packets are dropped, not refused).  Fenced: A's late commit is refused
    (the fence records are read in its write transaction), 0 lost.
    Unfenced: A's stale write lands, 10 lost.
    """
    hosts, port = two_hosts
    host_r, host_a = hosts.r, hosts.a
    prefix = unique("hosts")
    sync = {"url": f"redis://{hosts.address_r}:{port}/0", "prefix": unique("locks") + ":",
            "lease": PAUSED_LEASE, "timeout": WAIT}
    local = f"redis://127.0.0.1:{port}/0"
    data_local = local if kind == "redis" else f"{kind}:{tmp_path / f'data.{kind}'}"
    data_remote = sync["url"] if kind == "redis" else data_local
    setup = _in_namespace(host_r, "setup", data_local, prefix, {**sync, "url": local}, fenced)
    setup.communicate(timeout=WAIT)
    # A waits for a connection as long as the cut lasts, as TCP does.
    writer = _in_namespace(host_a, "paused", data_remote, prefix, sync, fenced,
                           connect_timeout=WAIT, **HELD_UP)
    other = _in_namespace(host_r, "other", data_local, prefix,
                          {**sync, "url": local, "lease": OTHER_LEASE}, fenced)
    outcome, detail = late_write(hosts, writer, other, cut, stop, WAIT)
    assert outcome == "refused", detail
    # Fenced: by the store's check at commit; unfenced: at release, after the write landed.
    assert ("its commit was refused" if fenced else "expired after") in detail
    check = _in_namespace(host_r, "values", data_local, prefix, {**sync, "url": local}, fenced)
    values = message(check, WAIT)
    check.wait(WAIT)
    assert values == ([10] * 10 if fenced else [1] * 10)
