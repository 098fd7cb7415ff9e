"""ObjectStoreSynchronizer: locks as lease objects in S3, and fenced writes to S3 data.

No Redis anywhere: the locks are JSON objects in the moto emulator's bucket,
changed only by conditional requests.  Real spawned processes; pauses placed
with SIGSTOP at points the writer reports through a pipe (as in
tests/test_fencing.py), a partition by a TCP relay that holds the bytes.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import fencing_workers
import object_lock_workers as workers
import pytest
from two_hosts import late_write, message, python_in, server_in, skip_without_namespaces
from two_hosts import two_hosts as hosts_of

import zstores
from zstores import (
    LeaseExpiredError,
    LockTimeoutError,
    ObjectStoreSynchronizer,
    UnsupportedOperationError,
)
from zstores.sync.objects import LOCK_PREFIX

from conftest import require_module
from object_urls import new_azure_container, new_gcs_bucket, new_s3_bucket, s3_options
from relays import CountingRelay, FreezingRelay
from test_fencing import stop, unique, wait_until

require_module("obstore")
zarr = require_module("zarr", minversion="3")
from zstores.adapters import zarr_store  # noqa: E402 - needs zarr

pytestmark = pytest.mark.timeout(600)

WAIT = 300  # seconds any single wait on another process may take at most (moto is slow)
#: The lease of a writer the test stops or cuts off: long enough that its
#: renewals keep it through its own read on a loaded machine (moto answers in
#: up to a few hundred ms then), short enough that the others take it over soon.
SHORT = 3
#: The lease of the writers that must not lose theirs (a waiter takes a lock
#: over after the lease its *holder* recorded, not its own).
LONG = 60
REGION = fencing_workers.REGION


@pytest.fixture
def bucket(s3_endpoint):
    """(location "bucket/prefix", S3Store options) of a fresh bucket on moto."""
    return f"{new_s3_bucket(s3_endpoint)}/{unique('run')}", s3_options(s3_endpoint)


def make_array(store):
    return zarr.create_array(zarr_store(store), name="data", shape=(20,), chunks=(3,),
                             dtype="i4", fill_value=0, overwrite=True)


def view(store):
    return zarr.open_array(zarr_store(store), path="data", mode="r+")


# -------------------------------------------------------------------- locks
def test_lock_excludes_spawned_processes_and_pickles(bucket):
    location, options = bucket
    store = zstores.S3Store(location, **options)
    sync = ObjectStoreSynchronizer(store, lease=30, timeout=WAIT, poll=0.02)
    assert pickle.loads(pickle.dumps(sync)).lock_name("k") == sync.lock_name("k")
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        done = pool.starmap_async(workers.count_under_lock,
                                  [(sync, location, options, 10)] * 3).get(WAIT)
    assert sum(done) == 30
    assert store["counter"] == b"30"  # every read-modify-write whole: none lost
    assert store.list_prefix(LOCK_PREFIX) == [LOCK_PREFIX + "counter.lock"]


def test_tokens_grow_with_every_grant_and_after_the_lease_object_is_deleted(bucket):
    location, options = bucket
    store = zstores.S3Store(location, **options)
    sync = ObjectStoreSynchronizer(store, lease=30)
    tokens = []
    for key in ["a", "a", "b", "a"]:
        with sync[key] as lock:
            tokens.append((key, lock.token))
    a_tokens = [token for key, token in tokens if key == "a"]
    assert a_tokens == sorted(set(a_tokens)) and a_tokens[1] == a_tokens[0] + 1
    del store[sync.lock_name("a")]  # an operator's clean-up: the counter is gone
    with sync["a"] as lock:
        assert lock.token > a_tokens[-1]


def test_a_stopped_holder_s_lease_expires_and_is_taken_over(bucket):
    """A holder stopped with SIGSTOP: its lock is taken after its lease, with a larger token;
    resumed, it finds its lease lost."""
    location, options = bucket
    store = zstores.S3Store(location, **options)
    sync = ObjectStoreSynchronizer(store, lease=SHORT, timeout=WAIT, poll=0.02)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    holder = context.Process(target=workers.hold_then_check, args=(sync, "k", theirs))
    holder.start()
    theirs.close()
    try:
        assert ours.poll(WAIT)
        first = ours.recv()
        stop(holder.pid)
        try:
            taker = ObjectStoreSynchronizer(store, lease=LONG, timeout=WAIT, poll=0.02)
            with taker["k"] as lock:  # waits until it has seen the lease unrenewed for SHORT s
                assert lock.token > first
        finally:
            os.kill(holder.pid, signal.SIGCONT)
        ours.send("check")
        assert ours.poll(WAIT)
        verdict = ours.recv()
    finally:
        holder.join(WAIT)
    assert verdict.startswith("lost:") and "lease" in verdict


def test_a_holder_working_for_five_leases_keeps_its_lock(bucket):
    location, options = bucket
    sync = ObjectStoreSynchronizer(zstores.S3Store(location, **options), lease=SHORT)
    lock = sync["k"]
    lock.acquire()
    other = ObjectStoreSynchronizer(zstores.S3Store(location, **options), lease=SHORT)
    with pytest.raises(LockTimeoutError, match="'k'"):
        other["k"].acquire(timeout=5 * sync.lease)  # renewed all along
    lock.check()
    token = lock.token
    lock.release()
    with other["k"] as again:
        assert again.token == token + 1  # no grant in between: the lease never lapsed


def test_a_wait_warns_and_a_timeout_raises_and_a_url_opens_the_store(bucket, s3_endpoint):
    import logging

    from object_urls import s3_store_url

    location, _ = bucket
    bucket_name, prefix = location.split("/", 1)
    sync = ObjectStoreSynchronizer(s3_store_url(s3_endpoint, bucket_name, prefix), lease=30,
                                   warn_after=0.05)
    assert pickle.loads(pickle.dumps(sync)).store == sync.store
    seen: list[str] = []

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Handler(logging.WARNING)
    logging.getLogger("zstores.sync").addHandler(handler)
    try:
        with sync["data/c/0"]:
            with pytest.raises(LockTimeoutError, match="'data/c/0'"):
                sync["data/c/0"].acquire(timeout=5)  # warned within it, many times
    finally:
        logging.getLogger("zstores.sync").removeHandler(handler)
    assert seen and "data/c/0" in seen[0] and "timeout 5" in seen[0]
    with sync["data/c/0"] as lock:  # the waiter that gave up left the line
        assert lock.token


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_a_holder_whose_renewals_are_blocked_is_refused_at_its_next_write(fenced, bucket,
                                                                          s3_endpoint):
    """The locks go through a relay that freezes (a partition): no renewal arrives."""
    location, options = bucket
    data = zstores.S3Store(location, **options)
    array = make_array(data)
    port = int(s3_endpoint.rsplit(":", 1)[1])
    relay = FreezingRelay(port)
    try:
        lock_store = zstores.S3Store(location, **{**options,
                                                  "endpoint_url": f"http://127.0.0.1:{relay.port}"})
        sync = ObjectStoreSynchronizer(lock_store, lease=1, timeout=WAIT)
        proxy = zstores.synchronized(array, sync, fenced=fenced)
        with pytest.raises(LeaseExpiredError, match="lease"):
            with proxy.locked(REGION):
                before = proxy[REGION]
                relay.freeze()  # no renewal reaches the service any more
                time.sleep(1.5 * sync.lease)  # past the lease as this process counts it
                proxy[REGION] = before + 1
        assert view(data)[:].tolist() == [0] * 20
    finally:
        relay.close()


# ------------------------------------------------------------ fenced writes
@pytest.mark.parametrize("pause_at", ["write", "read"])
@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_a_writer_paused_past_its_lease_never_lands_a_stale_write(fenced, pause_at, bucket):
    """A stops in its read-modify-write on S3, its lease runs out, B adds 1 ten times, A resumes.

    Fenced: A's conditional write of the first chunk is refused (B wrote it
    since A read it): nothing of A lands, 0 lost.  Unfenced, stopped at its
    write (past the lease check before it), A's stale chunks land over B's:
    10 lost.  Stopped after its read, A is refused before it writes.
    """
    location, options = bucket
    store = zstores.S3Store(location, **options)
    make_array(store)
    sync = ObjectStoreSynchronizer(zstores.S3Store(location, **options), lease=LONG,
                                   timeout=WAIT, poll=0.02)
    short = ObjectStoreSynchronizer(sync.store, lease=SHORT, timeout=WAIT)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    writer = context.Process(target=workers.paused_writer,
                             args=(location, options, short, fenced, pause_at, theirs))
    writer.start()
    theirs.close()
    try:
        assert ours.poll(WAIT) and ours.recv() == pause_at
        stop(writer.pid)
        try:
            proxy = zstores.synchronized(view(store), sync, fenced=fenced)
            for _ in range(10):  # the first waits until A's leases stood unrenewed (SHORT s)
                with proxy.locked(REGION):
                    proxy[REGION] = proxy[REGION] + 1
            ours.send("go")
        finally:
            os.kill(writer.pid, signal.SIGCONT)
        assert ours.poll(WAIT)
        outcome, detail = ours.recv()
    finally:
        writer.join(WAIT)
    values = view(store)[REGION].tolist()
    assert outcome == "refused", detail
    if pause_at == "read":
        assert "is lost" in detail
        assert values == [10] * 10
    elif fenced:
        assert "its commit was refused and nothing was written" in detail
        assert values == [10] * 10  # 0 lost
    else:
        assert "expired after" in detail
        assert values == [1] * 10  # the control: 10 lost


@pytest.mark.parametrize("timeouts", ["long", "short"])
@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_a_write_held_up_by_a_partition_never_lands_late(fenced, timeouts, bucket,
                                                         s3_endpoint):
    """A reaches S3 (data and locks) through a relay that freezes as A's write leaves.

    B (direct) takes A's expired locks and adds 1 ten times; then the link
    heals and A's held requests arrive.  Fenced, their If-Match no longer
    matches: refused, 0 lost.  Unfenced, the stale PUTs land: 10 lost.  With
    long timeouts A waits for its answer through the cut and is told
    "refused"; with short ones it gives up during the cut (an error), and its
    held requests still arrive after the heal: the test waits until the
    server has answered every one of them, then reads.
    """
    location, options = bucket
    store = zstores.S3Store(location, **options)
    make_array(store)
    port = int(s3_endpoint.rsplit(":", 1)[1])
    relay = CountingRelay(port)
    # Long: A waits for its answer as long as the cut lasts.  Short: it gives up
    # during the cut (which lasts at least A's 3 s lease), as a client would.
    seconds = WAIT if timeouts == "long" else SHORT
    relayed = {**options, "endpoint_url": f"http://127.0.0.1:{relay.port}",
               "request_timeout": seconds, "retry_timeout": seconds}
    sync = ObjectStoreSynchronizer(zstores.S3Store(location, **options), lease=LONG,
                                   timeout=WAIT, poll=0.02)
    relayed_sync = ObjectStoreSynchronizer(zstores.S3Store(location, **relayed), lease=SHORT,
                                           timeout=WAIT)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    writer = context.Process(target=workers.paused_writer,
                             args=(location, relayed, relayed_sync, fenced, "write", theirs))
    writer.start()
    theirs.close()
    try:
        assert ours.poll(WAIT) and ours.recv() == "write"
        relay.freeze()
        ours.send("go")  # A sends its write into the frozen link
        proxy = zstores.synchronized(view(store), sync, fenced=fenced)
        for _ in range(10):
            with proxy.locked(REGION):
                proxy[REGION] = proxy[REGION] + 1
        relay.heal()
        assert ours.poll(WAIT)
        outcome, detail = ours.recv()
        wait_until(relay.delivered, "every held request to be answered")
    finally:
        relay.heal()
        writer.join(WAIT)
        relay.close()
    values = view(store)[REGION].tolist()
    if timeouts == "long":
        assert outcome == "refused", detail
        assert values == ([10] * 10 if fenced else [1] * 10)
    else:  # it gave up, or its retry got through after the heal and was told
        assert outcome in ("refused", "error"), detail
        if fenced:
            assert values == [10] * 10
        else:
            # The request held at the cut lands; a chunk whose PUT A had not sent
            # yet when it gave up is never sent (zarr stops at the first error).
            assert 1 in values and set(values) <= {1, 10}, values


@pytest.mark.parametrize("locks", ["object", "redis"])
def test_fenced_writers_in_processes_count_exactly(locks, bucket, redis_url):
    location, options = bucket
    store = zstores.S3Store(location, **options)
    make_array(store)
    if locks == "redis":  # Redis locks, S3 data: fenced by the chunks' versions all the same
        sync = zstores.RedisSynchronizer(redis_url, prefix=unique("objfence") + ":", lease=30,
                                         timeout=WAIT)
    else:
        sync = ObjectStoreSynchronizer(store, lease=30, timeout=WAIT, poll=0.02)
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        done = pool.starmap_async(workers.add_fenced,
                                  [(location, options, sync, True, 5)] * 3).get(WAIT)
    assert sum(done) == 15
    assert view(store)[REGION].tolist() == [15] * 10
    assert not [key for key in store.list_prefix("") if key.startswith(".zstores/fence/")]


def test_fenced_refusals_are_typed(bucket, tmp_path):
    location, options = bucket
    store = zstores.S3Store(location, **options)
    array = make_array(store)
    sync = ObjectStoreSynchronizer(store, lease=30)
    with pytest.raises(UnsupportedOperationError, match="atomic=True"):
        zstores.synchronized(array, sync, fenced=True, atomic=True)
    proxy = zstores.synchronized(array, sync, fenced=True)
    assert proxy.fenced and not proxy.transactional
    proxy[0:4] = 0  # a chunk of fill values is written, not deleted (no conditional delete)
    assert "data/c/0" in store
    with pytest.raises(UnsupportedOperationError, match="conditional"):
        ObjectStoreSynchronizer(zstores.N5Store(str(tmp_path / "locks.n5"), mode="w"))


def test_a_chunk_changed_without_the_lock_is_never_overwritten(bucket):
    """Between the holder's read and its write, a writer without the lock changes a chunk:
    the holder's conditional write of it is refused (a plain write is retried, re-read)."""
    location, options = bucket
    store = zstores.S3Store(location, **options)
    array = make_array(store)
    sync = ObjectStoreSynchronizer(store, lease=30)
    proxy = zstores.synchronized(array, sync, fenced=True)
    with pytest.raises(zstores.TransactionConflictError, match="data/c/0"):
        with proxy.locked(slice(0, 3)):
            before = proxy[0:3]
            zarr.open_array(zarr_store(zstores.S3Store(location, **options)), path="data",
                            mode="r+")[0:3] = 5  # no lock: an intruder
            proxy[0:3] = before + 1
    assert array[0:3].tolist() == [5, 5, 5]


@pytest.mark.parametrize("service", ["gcs", "azure"])
def test_the_other_emulators_keep_leases_too(service, gcs_endpoint, azure_endpoint):
    """fake-gcs-server (generation preconditions) and Azurite (If-Match/If-None-Match)."""
    if service == "gcs":
        from object_urls import gcs_options

        store = zstores.GCSStore(new_gcs_bucket(gcs_endpoint) + "/p", **gcs_options(gcs_endpoint))
    else:
        from object_urls import AZURITE_ACCOUNT, AZURITE_KEY

        store = zstores.AzureStore(new_azure_container(azure_endpoint) + "/p",
                                   endpoint_url=azure_endpoint, account_name=AZURITE_ACCOUNT,
                                   account_key=AZURITE_KEY)
    array = make_array(store)
    sync = ObjectStoreSynchronizer(store, lease=30, timeout=WAIT)
    proxy = zstores.synchronized(array, sync, fenced=True)
    threads = [threading.Thread(target=_add, args=(proxy, 3)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert array[REGION].tolist() == [6] * 10
    with sync["k"] as lock:
        token = lock.token
    with sync["k"] as lock:
        assert lock.token == token + 1


def _add(proxy, rounds: int) -> None:
    for _ in range(rounds):
        with proxy.locked(REGION):
            proxy[REGION] = proxy[REGION] + 1


# -------------------------------------------------------- dask.distributed
def test_dask_cluster_with_object_locks_loses_nothing_and_the_control_loses(bucket):
    pytest.importorskip("distributed")
    from distributed import Client, Event, LocalCluster, Queue

    location, options = bucket
    store = zstores.S3Store(location, **options)
    make_array(store)
    sync = ObjectStoreSynchronizer(store, lease=30, timeout=WAIT, poll=0.02)
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        futures = client.map(workers.dask_add, [location] * 6, [options] * 6, [sync] * 6, [4] * 6,
                             pure=False)
        assert sum(client.gather(futures)) == 24
        assert view(store)[REGION].tolist() == [24] * 10  # 0 lost
        # The control: four tasks (one per worker thread) read, all of them, then write.
        futures = client.map(workers.dask_unlocked, [location] * 4, [options] * 4, [4] * 4,
                             pure=False)
        queue = Queue("read")
        for _ in range(4):
            queue.get(timeout=WAIT)
        Event("go").set()
        assert sum(client.gather(futures)) == 4
    assert view(store)[REGION].tolist() == [25] * 10  # 4 increments, 3 lost


# ------------------------------------------------- hosts as network namespaces
@pytest.fixture
def s3_on_two_hosts():
    """Hosts R (moto on 10.231.9.1) and A (10.231.9.2): see tests/two_hosts.py.

    Yields (the hosts, the bucket's location on R, S3Store options without
    the endpoint).
    """
    from servers import emulators_bin

    skip_without_namespaces()
    moto = emulators_bin("moto_server")
    bucket = unique("zxnet").replace("_", "-")
    # Inside R: moto answers once a bucket can be made (an unsigned PUT, as moto takes it).
    create = ("import sys, urllib.request; urllib.request.urlopen(urllib.request.Request("
              "sys.argv[1], method='PUT'), timeout=5).close()")

    def answers() -> bool:
        return not subprocess.run(["ip", "netns", "exec", hosts.r, sys.executable, "-c", create,
                                   f"http://127.0.0.1:5000/{bucket}"], check=False,
                                  capture_output=True).returncode

    with hosts_of("10.231.9") as hosts, server_in(
            hosts.r, [moto, "-H", "0.0.0.0", "-p", "5000"], answers, WAIT):
        options = {key: value for key, value in s3_options("http://x").items()
                   if key != "endpoint_url"}
        yield hosts, f"{bucket}/run", options


def _in_namespace(namespace: str, role: str, location: str, options: dict, fenced: bool,
                  lease: float = LONG):
    return python_in(namespace, "object_lock_workers", role, location,
                     json.dumps({**options, "wait": WAIT, "lease": lease}),
                     "1" if fenced else "0")


@pytest.mark.parametrize("cut", ["sigstop", "link-down"])
@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_s3_writers_on_two_hosts_never_land_a_late_write(fenced, cut, s3_on_two_hosts):
    """moto (data and lease objects) on host R; A on host A stops or loses its link as its
    first PUT leaves.  The other writer, on R, takes A's expired locks and adds 1 ten
    times; then A resumes (SIGCONT, or the link comes back and TCP delivers what it held).
    Fenced: A's late conditional PUT is refused, 0 lost.  Unfenced: 10 lost."""
    hosts, location, options = s3_on_two_hosts
    host_r, host_a = hosts.r, hosts.a
    local = {**options, "endpoint_url": "http://127.0.0.1:5000"}
    # A waits for its answers as long as the cut lasts, as TCP does.
    remote = {**options, "endpoint_url": f"http://{hosts.address_r}:5000", "request_timeout": WAIT,
              "retry_timeout": WAIT, "connect_timeout": WAIT}
    _in_namespace(host_r, "setup", location, local, fenced).communicate(timeout=WAIT)
    writer = _in_namespace(host_a, "paused", location, remote, fenced, SHORT)
    other = _in_namespace(host_r, "other", location, local, fenced)
    outcome, detail = late_write(hosts, writer, other, cut, stop, WAIT)
    assert outcome == "refused", detail
    assert ("its commit was refused" if fenced else "expired after") in detail
    check = _in_namespace(host_r, "values", location, local, fenced)
    values = message(check, WAIT)
    check.wait(WAIT)
    assert values == ([10] * 10 if fenced else [1] * 10)


# ---------------------------------------------------------------- benchmark
@pytest.mark.slow
def test_bench_sync_fencing_part_smoke(redis_url, s3_endpoint):
    from test_benchmarks_smoke import run_smoke

    out = run_smoke(sys.executable, "bench_sync.py", "--part", "fencing", "--redis-url",
                    redis_url, "--s3-endpoint", s3_endpoint)
    for row in ("| ObjectStoreSynchronizer |", "| s3 | ObjectStoreSynchronizer |",
                "| sqlite | RedisSynchronizer |", "| ObjectStoreSynchronizer | 2 |"):
        assert row in out, row


def test_a_region_write_retried_after_its_writer_was_killed_converges(bucket):
    """A writer is killed (SIGKILL) after the first of its four chunks landed: the region is
    half written and its locks stay held.  The task run again (as dask does) waits for their
    leases, writes the same region, and the array is as if the first attempt never ran."""
    location, options = bucket
    store = zstores.S3Store(location, **options)
    array = make_array(store)
    short = ObjectStoreSynchronizer(zstores.S3Store(location, **options), lease=SHORT,
                                    timeout=WAIT)
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    writer = context.Process(target=workers.killed_writer,
                             args=(location, options, short, theirs))
    writer.start()
    theirs.close()
    try:
        assert ours.poll(WAIT) and ours.recv() == "write"
        os.kill(writer.pid, signal.SIGKILL)
    finally:
        writer.join(WAIT)
    assert array[:].tolist() == [7] * 3 + [0] * 17  # chunk 0 landed, 1-3 did not
    held = [json.loads(store[short.lock_name(key)])["holder"] for key in
            zstores.synchronized(array, short).layout.keys(REGION)]
    assert all(held)  # the dead writer's leases stand until they run out
    retry = zstores.synchronized(array, ObjectStoreSynchronizer(store, lease=LONG,
                                                                timeout=WAIT), fenced=True)
    retry[REGION] = 7  # the same task again
    assert array[:].tolist() == [7] * 10 + [0] * 10
