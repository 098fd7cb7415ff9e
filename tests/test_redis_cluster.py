"""RedisStore on a real 3-master Redis Cluster (scripts/services' ZSTORES_TEST_REDIS_CLUSTER_URL):
the conformance harness with spread and hash-tagged prefixes, zarr-python's own store
suite through the adapter, zarr 3 arrays, and the refusals at open."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import threading
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest

from zstores.errors import (
    StoreConnectionError,
    StoreIOError,
    StoreURLError,
    UnsupportedOperationError,
)
from zstores.stores.redis import RedisClusterStore, RedisStore, glob_escape
from zstores.stores.redis_cluster import split_cluster_url
from zstores.testing import StoreTests
from zstores.urls import open_store

from conftest import missing_peer
from test_adapter_zarr3 import AdapterSuite
from zarr3_suite import run_async_tests

redis = pytest.importorskip("redis")


@pytest.fixture(scope="session")
def cluster_url() -> str:
    """The test command's Redis Cluster (ZSTORES_TEST_REDIS_CLUSTER_URL), checked to be ok."""
    url = os.environ.get("ZSTORES_TEST_REDIS_CLUSTER_URL")
    if not url:
        missing_peer("ZSTORES_TEST_REDIS_CLUSTER_URL is not set: no Redis Cluster "
                     "(see scripts/services)")
    for node_url, _, _ in split_cluster_url(url):
        try:
            with closing(redis.Redis.from_url(node_url)) as node:
                state = node.cluster("info")
        except redis.exceptions.RedisError as error:
            missing_peer(f"the Redis Cluster node {node_url} does not answer: {error}")
        if b"cluster_state:ok" not in state if isinstance(state, bytes) \
                else state.get("cluster_state") != "ok":
            missing_peer(f"the Redis Cluster at {url} is not ok: {state}")
    return url


def raw_client(url: str):
    """A cluster client of the test's own (not the store's)."""
    node_url = split_cluster_url(url)[0][0]
    return redis.RedisCluster.from_url(node_url)


def primary_clients(url: str) -> list:
    """A plain client on each primary: what a node itself holds, no routing."""
    with closing(raw_client(url)) as cluster:
        addresses = [(node.host, node.port) for node in cluster.get_primaries()]
    return [redis.Redis(host=host, port=port) for host, port in addresses]


def delete_prefix(url: str, prefix: str) -> None:
    pattern = glob_escape(prefix.encode() + b":") + b"*"
    for node in primary_clients(url):
        with closing(node):
            for name in list(node.scan_iter(match=pattern, count=1000)):
                node.delete(name)


def prefix_for(location: Path, tagged: bool) -> str:
    digest = hashlib.sha1(str(location).encode()).hexdigest()[:12]
    # Glob characters check that SCAN's MATCH is escaped on every node.
    return f"{{zc{digest}}}*?" if tagged else f"zc[{digest}]*?"


def url_with_prefix(url: str, prefix: str) -> str:
    return f"{url}?prefix={quote(prefix, safe='')}"


# ---------------------------------------------------------------- harness
class ClusterHarness(StoreTests):
    tagged = False

    @pytest.fixture(autouse=True)
    def _cluster(self, cluster_url):
        self.url = cluster_url
        self.prefixes: set[str] = set()
        yield
        for prefix in self.prefixes:
            delete_prefix(cluster_url, prefix)

    def open_store(self, location, mode="a"):
        prefix = prefix_for(location, self.tagged)
        self.prefixes.add(prefix)
        return RedisStore(self.url, prefix=prefix, mode=mode)

    def raw_get(self, store, key):
        with closing(raw_client(self.url)) as client:
            return client.get(f"{store.prefix}:{key}")

    def raw_set(self, store, key, value):
        with closing(raw_client(self.url)) as client:
            client.set(f"{store.prefix}:{key}", value)


class TestRedisClusterSpread(ClusterHarness):
    """A plain prefix: keys over every primary, no transactions."""


class TestRedisClusterTagged(ClusterHarness):
    """A hash-tagged prefix: one slot, transactions as on one server."""

    tagged = True


@pytest.fixture(params=[False, True], ids=["spread", "tagged"])
def store(cluster_url, request):
    prefix = prefix_for(Path(request.node.nodeid), request.param)
    delete_prefix(cluster_url, prefix)
    with RedisStore(cluster_url, prefix=prefix) as opened:
        yield opened
    delete_prefix(cluster_url, prefix)


def keys_per_primary(url: str, prefix: str) -> list[int]:
    pattern = glob_escape(prefix.encode() + b":") + b"*"
    counts = []
    for node in primary_clients(url):
        with closing(node):
            counts.append(len(set(node.scan_iter(match=pattern, count=1000))))
    return counts


# ----------------------------------------------------------------- placement
def test_open_store_url_makes_a_cluster_store(cluster_url):
    with open_store(url_with_prefix(cluster_url, "zc-url"), mode="w") as store:
        assert type(store) is RedisClusterStore and isinstance(store, RedisStore)
        assert store.supports_transactions is False
        assert "redis+cluster://" in repr(store)
        store.clear()
    with open_store(url_with_prefix(cluster_url, "{zc-url}"), mode="w") as store:
        assert store.supports_transactions is True
    # A plain scheme with cluster=true is the same store (for tools refusing '+' in a scheme).
    plain = cluster_url.replace("redis+cluster://", "redis://") + "?prefix=zc-url&cluster=true"
    with open_store(plain) as store, open_store(url_with_prefix(cluster_url, "zc-url")) as same:
        assert type(store) is RedisClusterStore and store == same
        assert pickle.loads(pickle.dumps(store)) == same


def test_spread_keys_reach_every_primary_and_every_listing_sees_them(store, cluster_url):
    """The issue's silent failures on a plain URL: every listing, len and mode over all nodes."""
    store.setitems({f"a/{i}": b"%d" % i for i in range(24)})
    counts = keys_per_primary(cluster_url, store.prefix)
    assert sum(counts) == 24
    if store.supports_transactions:  # tagged: one slot, one primary
        assert sorted(counts) == [0, 0, 24]
    else:
        assert all(count > 0 for count in counts), counts
    assert len(store) == 24
    assert sorted(store.listdir("a"), key=int) == [str(i) for i in range(24)]
    assert store.getitems([f"a/{i}" for i in range(24)] + ["nope"]) == {
        f"a/{i}": b"%d" % i for i in range(24)}
    store.delitems([f"a/{i}" for i in range(0, 24, 2)])
    assert sorted(store, key=lambda k: int(k[2:])) == [f"a/{i}" for i in range(1, 24, 2)]
    assert store.getsize("a") == sum(len(b"%d" % i) for i in range(1, 24, 2))
    with RedisStore(cluster_url, prefix=store.prefix, mode="r") as reader:
        assert len(reader) == 12
    with RedisStore(cluster_url, prefix=store.prefix, mode="w") as writer:
        assert len(writer) == 0
    assert keys_per_primary(cluster_url, store.prefix) == [0, 0, 0]


def test_mode_r_finds_stores_on_every_node(cluster_url):
    prefixes = [f"zc-r{i}" for i in range(6)]
    for prefix in prefixes:
        with RedisStore(cluster_url, prefix=prefix, mode="w") as store:
            store["k"] = b"1"
    try:
        for prefix in prefixes:
            with RedisStore(cluster_url, prefix=prefix, mode="r") as store:
                assert store["k"] == b"1"
    finally:
        for prefix in prefixes:
            delete_prefix(cluster_url, prefix)


def test_rename_across_slots(store, cluster_url):
    with closing(raw_client(cluster_url)) as client:
        slots = {client.keyslot(f"{store.prefix}:{key}") for key in ("x/a", "y/a")}
    store.setitems({"x/a": b"1", "x/b/c": b"2", "k": b"3"})
    store.rename("x", "y")
    store.rename("k", "z/k")
    assert sorted(store.items()) == [("y/a", b"1"), ("y/b/c", b"2"), ("z/k", b"3")]
    assert len(slots) == (1 if store.supports_transactions else 2)


def test_compare_and_swap_on_every_placement(store):
    assert store.set_if_not_exists("lock", b"me")
    assert not store.set_if_not_exists("lock", b"you")
    value, version = store.get_with_version("lock")
    assert not store.replace_if("lock", b"you", b"x")
    assert store.replace_if("lock", version, b"next")
    assert store["lock"] == b"next"


def test_transactions_only_where_the_keys_share_a_slot(store):
    if not store.supports_transactions:
        with pytest.raises(UnsupportedOperationError, match=r"hash tag.*\{"):
            store.transaction()
        return
    store.setitems({"old/x": b"1", "old/y/z": b"1", "k": b"0"})
    with store.transaction():
        assert store["k"] == b"0"
        store["new/a"] = b"2"
        store.rmdir("old")
        del store["k"]
    assert sorted(store.items()) == [("new/a", b"2")]


def test_large_setitems_in_one_slot_is_one_transaction(cluster_url):
    prefix = "{zc-big}"
    with RedisStore(cluster_url, prefix=prefix, mode="w") as store:
        try:
            big = b"x" * (40 << 20)
            store.setitems({"a": big, "b": big})  # two MSETs (64 MiB each at most)
            assert store.getsize() == 80 << 20
        finally:
            store.clear()


def _misroute(store, keys) -> None:
    """Point the store's client's slot map, for the slots of ``keys``, at a wrong primary
    (what the map holds after slots moved, until a MOVED answer corrects it)."""
    client = store.client
    cache = client.nodes_manager.slots_cache
    primaries = client.get_primaries()
    for key in keys:
        slot = client.keyslot(f"{store.prefix}:{key}")
        owner = cache[slot][0]
        cache[slot] = [next(node for node in primaries if node.name != owner.name)]


def test_a_wrong_slot_map_is_corrected_not_trusted(cluster_url):
    """Single-key commands and getitems go straight to the primary the client's slot map
    names; where the map is wrong the server answers MOVED and the call takes redis-py's
    full route, which follows it: the right values, written where they belong."""
    values = {f"k{i}": b"%d" % i for i in range(30)}
    with RedisStore(cluster_url, prefix="zc-moved", mode="w") as store:
        store.setitems(values)
        _misroute(store, values)
        assert store.getitems(list(values)) == values
        _misroute(store, values)
        assert store["k3"] == b"3" and "k4" in store and store.get_range("k12", 1) == b"2"
        _misroute(store, values)
        store["k5"] = b"new"
        del store["k6"]
        assert store.getsize("k7") == 1
        with closing(raw_client(cluster_url)) as client:
            assert client.get("zc-moved:k5") == b"new" and client.get("zc-moved:k6") is None
        assert len(store) == 29
        store.clear()


# ----------------------------------------------------------------- opening
def test_plain_url_on_a_cluster_node_is_refused_in_one_line(cluster_url):
    node_url = split_cluster_url(cluster_url)[0][0]
    host_port = node_url.split("//")[1].split("/")[0]
    with pytest.raises(StoreURLError) as raised:
        open_store(f"{node_url}?prefix=%7Bz%7D")
    message = str(raised.value)
    assert "\n" not in message
    assert "cluster_enabled:1" in message
    assert f"redis+cluster://{host_port}/?prefix=%7Bz%7D" in message
    with closing(redis.Redis.from_url(node_url)) as client, pytest.raises(StoreURLError):
        RedisStore(client, prefix="z")


def test_cluster_url_on_a_plain_server_is_refused(redis_url):
    host_port = redis_url.split("//")[1].split("/")[0]
    with pytest.raises(StoreURLError, match=r"not a Redis Cluster node.*redis://"):
        open_store(f"redis+cluster://{host_port}/?prefix=z")


def test_cluster_url_checks(cluster_url):
    with pytest.raises(StoreURLError, match="only database 0"):
        open_store(cluster_url.rstrip("/") + "/3")
    with pytest.raises(StoreURLError, match="host:port"):
        open_store("redis+cluster://127.0.0.1/")
    with pytest.raises(StoreURLError, match="bogus"):
        open_store(cluster_url + "?bogus=1")


def test_one_dead_seed_is_no_failure(cluster_url):
    from servers import free_port

    nodes = cluster_url.split("//")[1].rstrip("/")
    with open_store(f"redis+cluster://127.0.0.1:{free_port()},{nodes}/?prefix=zc-seed",
                    mode="w", connect_timeout=2) as store:
        store["a"] = b"1"
        assert store["a"] == b"1"
        store.clear()


def test_ready_cluster_client(cluster_url):
    with closing(raw_client(cluster_url)) as client:
        with RedisStore(client, prefix="zc-client", mode="w") as store:
            assert type(store) is RedisClusterStore
            store.setitems({f"k{i}": b"v" for i in range(10)})
            assert len(store) == 10
            with pytest.raises(TypeError, match="ready"):
                pickle.dumps(store)
            store.clear()
        assert client.ping()  # the caller's client is left open


def test_pickled_store_reopens_on_the_cluster(store):
    store["a/b"] = b"1"
    copy = pickle.loads(pickle.dumps(store))
    try:
        assert type(copy) is RedisClusterStore and copy == store and copy["a/b"] == b"1"
    finally:
        copy.close()


# ----------------------------------------------------------------- zarr
def test_zarr3_array_round_trip(store):
    zarr = pytest.importorskip("zarr")
    from zstores.adapters import zarr_store

    data = np.arange(10_000, dtype="int32").reshape(100, 100)
    root = zarr.open_group(zarr_store(store), mode="w", zarr_format=3)
    array = root.create_array("a", shape=data.shape, chunks=(10, 10), dtype="int32")
    array[:] = data
    assert len(store.listdir("a/c")) == 10
    again = zarr.open_array(zarr_store(store.reopen("r")), path="a", mode="r")
    np.testing.assert_array_equal(again[:], data)


class ClusterSuite(AdapterSuite):
    """zarr-python's own store tests through the adapter, on the cluster."""

    backend = "redis-cluster"
    tagged = False

    @pytest.fixture
    def store_kwargs(self, request):
        url = request.getfixturevalue("cluster_url")
        prefix = prefix_for(Path(request.node.nodeid), self.tagged)
        backend = open_store(url_with_prefix(url, prefix), mode="w")
        yield {"store": backend}
        backend.clear()
        backend.close()


TestZarr3SuiteClusterSpread = run_async_tests(
    type("TestZarr3SuiteClusterSpread", (ClusterSuite,), {}))
TestZarr3SuiteClusterTagged = run_async_tests(
    type("TestZarr3SuiteClusterTagged", (ClusterSuite,), {"tagged": True}))


# ----------------------------------------------------------------- a primary down
def test_a_dead_primary_is_a_typed_error_and_the_store_answers_again(private_redis_cluster):
    """A primary killed (no replicas): its keys and every listing raise StoreConnectionError,
    never a partial answer; once it is back the same store handle works again."""
    cluster = private_redis_cluster()
    values = {f"k{i}": b"%d" % i for i in range(60)}
    store = open_store(f"{cluster.url}?prefix=zc-kill", mode="w", connect_timeout=2)
    try:
        store.setitems(values)
        victim = cluster.nodes[0]
        with closing(raw_client(cluster.url)) as client:
            owned = [key for key in values
                     if client.get_node_from_key(f"zc-kill:{key}").port == victim.port]
        others = sorted(set(values) - set(owned))
        assert owned and others
        victim.kill()
        with pytest.raises(StoreConnectionError, match="RedisClusterStore"):
            store[owned[0]]
        with pytest.raises(StoreConnectionError):
            store.getitems(list(values))
        with pytest.raises(StoreConnectionError):
            len(store)  # a listing needs every primary: no count of two thirds
        victim.start()  # no persistence: its keys are gone, its slots are back
        cluster.wait_ok()
        store["after"] = b"1"
        assert store["after"] == b"1"
        assert store.getitems(others) == {key: values[key] for key in others}
        assert len(store) == len(others) + 1
    finally:
        store.close()


# ------------------------------------------------ connections per process, not per store
def connected_clients(ports: list[int]) -> int:
    """Clients connected to these servers, less the one asking each."""
    total = 0
    for port in ports:
        with closing(redis.Redis(port=port)) as admin:
            total += admin.info("clients")["connected_clients"] - 1
    return total


@pytest.mark.parametrize("kind", ["server", "cluster"])
def test_unpickled_stores_share_one_client_and_connect_on_first_use(
        kind, private_redis, private_redis_cluster):
    """50 stores unpickled in one process (a dask worker's tasks): no connection until
    used, then one pool among them; before, each opened its own."""
    if kind == "server":
        server = private_redis()
        url, ports = f"{server.url()}?prefix=zc-share", [server.port]
    else:
        cluster = private_redis_cluster()
        url, ports = f"{cluster.url}?prefix=zc-share", [node.port for node in cluster.nodes]
    store = open_store(url, mode="w")
    store.setitems({f"k{i}": b"v" for i in range(30)})
    blob = pickle.dumps(store)
    store.close()
    assert connected_clients(ports) == 0
    copies = [pickle.loads(blob) for _ in range(50)]
    assert connected_clients(ports) == 0  # unpickling never connects
    for copy in copies:
        assert copy.getitems(["k1", "k7", "k20"]) == {"k1": b"v", "k7": b"v", "k20": b"v"}
    # One connection per server, used in turn by the 50 (a cluster client also
    # keeps the connection it learnt the layout through).
    assert connected_clients(ports) <= 2 * len(ports)
    assert len({id(copy.client) for copy in copies}) == 1
    for copy in copies:
        copy.close()
    assert connected_clients(ports) == 0  # the last store closed closes the client


@pytest.mark.parametrize("placement", ["spread", "{tagged}"])
def test_max_connections_below_the_adapter_threads_is_refused(cluster_url, placement):
    from zstores._concurrency import ADAPTER_THREADS

    url = url_with_prefix(cluster_url, f"zc-pool-{placement}")
    with pytest.raises(StoreURLError, match=rf"max_connections=2 is below {ADAPTER_THREADS}\b"):
        open_store(f"{url}&max_connections=2")
    zarr = pytest.importorskip("zarr")
    from zstores.adapters import zarr_store

    # At the minimum a zarr write of many chunks goes through (below it, it failed
    # part-way with "Too many connections").
    with open_store(f"{url}&max_connections={ADAPTER_THREADS}", mode="w") as store:
        array = zarr.create_array(zarr_store(store), shape=(200, 200), chunks=(10, 10),
                                  dtype="f8", zarr_format=3)
        array[:] = np.ones((200, 200))
        assert float(array[:].sum()) == 40_000.0
        store.clear()


# ----------------------------------------------------------------- the command line
def test_zstores_cp_to_and_from_the_cluster(cluster_url, tmp_path):
    from cli_helpers import zstores_cmd

    values = {f"g/a/{i}": bytes([i]) * (i + 1) for i in range(40)} | {"g/.zgroup": b"{}"}
    source = f"sqlite://{tmp_path}/src.sqlite"
    with open_store(source, mode="w") as store:
        store.setitems(values)
    cluster = url_with_prefix(cluster_url, "zc-cli")
    back = f"sqlite://{tmp_path}/back.sqlite"
    try:
        there = zstores_cmd("cp", source, cluster, "--verify")  # every key read back
        assert (there.code, there.err) == (0, ""), there
        assert "41 of 41 keys verified" in there.out
        with open_store(cluster, mode="r") as store:
            assert dict(store.items()) == values
        assert zstores_cmd("cp", cluster, back, "--jobs", "3").code == 0
        with open_store(back, mode="r") as store:
            assert dict(store.items()) == values
    finally:
        delete_prefix(cluster_url, "zc-cli")


# ----------------------------------------------------------------- failover
def test_failover_during_setitems_typed_errors_then_the_same_handle_works(
        private_redis_cluster):
    """3 primaries + 3 replicas; a primary killed between batches of setitems: each batch
    meanwhile is acknowledged or raises StoreConnectionError; once its replica took over,
    the same store handle writes, lists and reads again; no key ever reads a wrong value
    (an acknowledged write may be lost: replication is asynchronous)."""
    cluster = private_redis_cluster(masters=3, replicas=1)
    store = open_store(f"{cluster.url}?prefix=zc-failover", mode="w", connect_timeout=2)
    acknowledged: dict[str, bytes] = {}
    batch_number = 0

    def write_batch() -> None:
        nonlocal batch_number
        batch = {f"b{batch_number}/{i}": b"%d-%d" % (batch_number, i) for i in range(50)}
        batch_number += 1
        store.setitems(batch)
        acknowledged.update(batch)

    try:
        for _ in range(5):
            write_batch()
        before = dict(acknowledged)
        victim = cluster.primaries()[0]
        (replica,) = cluster.replicas_of(victim)
        victim.kill()
        try:
            write_batch()  # the victim's slots have no primary now
        except StoreConnectionError as error:
            assert "RedisClusterStore" in str(error)
        cluster.wait_promoted(replica)
        write_batch()  # the same handle, at once
        after = {key: value for key, value in acknowledged.items() if key not in before}
        found = store.getitems(list(acknowledged))
        wrong = {key for key, value in found.items() if value != acknowledged[key]}
        assert not wrong
        assert all(key in found for key in after if key.startswith(f"b{batch_number - 1}/"))
        assert len(store) == len(found)
        assert sorted(store.listdir(), key=lambda name: int(name[1:])) == [
            f"b{i}" for i in range(batch_number) if any(k.startswith(f"b{i}/") for k in found)]
        lost = [key for key in before if key not in found]
        print(f"acknowledged before the kill: {len(before)}, lost in the failover: {len(lost)}")
    finally:
        store.close()


class _Writer(threading.Thread):
    """setitems of 50 keys, batch after batch, until stopped: what each call acknowledged,
    and the errors of those that raised."""

    def __init__(self, store) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.acknowledged: dict[str, bytes] = {}
        self.errors: list[str] = []
        self.messages: list[str] = []  # the last few, for a failure's report
        self.batches = 0
        self.stop = threading.Event()
        self.progress = threading.Condition()

    def run(self) -> None:
        number = 0
        while not self.stop.is_set():
            batch = {f"b{number}/{i}": b"%d-%d" % (number, i) for i in range(50)}
            number += 1
            try:
                self.store.setitems(batch)
            except (StoreConnectionError, StoreIOError) as error:
                self.errors.append(type(error).__name__)
                self.messages = [*self.messages[-4:], str(error)[:300]]
                continue
            with self.progress:
                self.acknowledged.update(batch)
                self.batches += 1
                self.progress.notify_all()

    def wait_for(self, batches: int) -> None:
        """Until ``batches`` more batches were acknowledged (a stuck store fails here)."""
        with self.progress:
            goal = self.batches + batches
            assert self.progress.wait_for(lambda: self.batches >= goal, timeout=120), (
                f"no {batches} acknowledged batches in 120 s; last errors: {self.messages}")


@pytest.mark.parametrize("wait_replicas", [1, 0], ids=["wait_replicas=1", "async"])
def test_kill_a_primary_during_setitems_acknowledged_writes_survive_with_wait_replicas(
        private_redis_cluster, wait_replicas):
    """3 primaries + 3 replicas; a writer thread runs setitems without pause and a primary is
    killed (SIGKILL) while it does; its replica takes over, the old primary restarts and
    rejoins as the new one's replica, the writer goes on.  With wait_replicas=1 every batch
    acknowledged is there afterwards (the replica confirmed each before the call returned);
    without it Redis' asynchronous replication may lose the last ones (measured, printed:
    whether any is lost depends on timing).  No key ever reads a wrong value."""
    cluster = private_redis_cluster(masters=3, replicas=1)
    options = f"&wait_replicas={wait_replicas}&wait_timeout=2" if wait_replicas else ""
    store = open_store(f"{cluster.url}?prefix=zc-durable{options}", mode="w", connect_timeout=2)
    writer = _Writer(store)
    writer.start()
    try:
        writer.wait_for(5)
        victim = cluster.primaries()[0]
        (replica,) = cluster.replicas_of(victim)
        victim.kill()  # while the writer is in a setitems (it writes without pause)
        cluster.wait_promoted(replica)
        victim.start()  # no data of its own: it rejoins as the replica of its successor
        cluster.wait_ok()
        writer.wait_for(5)  # the same store handle writes again
    finally:
        writer.stop.set()
        writer.join()
    acknowledged = writer.acknowledged
    found = store.getitems(list(acknowledged))
    store.close()
    wrong = [key for key, value in found.items() if value != acknowledged[key]]
    lost = sorted(set(acknowledged) - set(found))
    print(f"wait_replicas={wait_replicas}: {len(acknowledged)} keys acknowledged, "
          f"{len(lost)} lost in the failover; {len(writer.errors)} batches refused "
          f"({', '.join(sorted(set(writer.errors)))})")
    assert not wrong
    if wait_replicas:
        assert not lost, lost[:10]


def _write_one(store, i: int) -> int:
    """A dask task: one value written through a store that arrived pickled."""
    store[f"t/{i}"] = b"%d" % i
    return len(store[f"t/{i}"])


def test_dask_tasks_hold_connections_per_worker_thread_not_per_task(private_redis):
    """400 tasks, each with its own unpickled store, on 2 workers x 2 threads: the server
    never holds more than workers x threads + 2 connections (its --maxclients is set just
    above that, so one more would fail a task), and none comes from the scheduler or client."""
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    workers, threads = 2, 2
    bound = workers * threads + 2  # + the test's own store and admin connection
    server = private_redis("--maxclients", str(bound + 1))
    store = RedisStore(server.url(), prefix="zc-dask", mode="w")
    with closing(redis.Redis(port=server.port)) as admin, \
            LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True,
                         dashboard_address=None) as cluster, Client(cluster) as client:
        futures = [client.submit(_write_one, store, i, pure=False) for i in range(400)]
        assert sum(client.gather(futures)) == sum(len(b"%d" % i) for i in range(400))
        peak = admin.info("clients")["connected_clients"]  # the futures still alive
        names = {entry["laddr"] for entry in admin.client_list()}
    assert len(store) == 400
    print(f"400 tasks on {workers} workers x {threads} threads: {peak} connections at most")
    assert peak <= bound, (peak, names)
    store.close()


# ----------------------------------------------------------------- locks on the cluster
def _add_under_locks(url: str, prefix: str, sync, rounds: int, fenced: bool) -> int:
    """A writer process: ``rounds`` read-modify-writes of one region under ``sync``'s locks."""
    import zarr

    from zstores import synchronized
    from zstores.adapters import zarr_store

    store = RedisStore(url, prefix=prefix)
    array = zarr.open_array(zarr_store(store), path="data", mode="r+")
    proxy = synchronized(array, sync, fenced=fenced)
    for _ in range(rounds):
        with proxy.locked(slice(2, 12)):
            proxy[2:12] = proxy[2:12] + 1
    store.close()
    return rounds


def _cluster_array(url: str, prefix: str):
    zarr = pytest.importorskip("zarr")
    from zstores.adapters import zarr_store

    store = RedisStore(url, prefix=prefix, mode="w")
    zarr.create_array(zarr_store(store), name="data", shape=(20,), chunks=(3,), dtype="i4",
                      fill_value=0)
    return store


@pytest.mark.parametrize("fenced", [False, True], ids=["locked", "fenced"])
def test_synchronizer_on_the_cluster_counts_exactly_across_processes(cluster_url, fenced):
    """3 spawned processes x 10 read-modify-writes of overlapping chunks, locked by a
    RedisSynchronizer on the cluster (locks spread over the primaries), data in a
    hash-tagged cluster store (fence records in the chunks' slot): exactly 30 each."""
    from zstores import RedisSynchronizer
    from zstores.sync.fencing import FENCE_PREFIX

    prefix = "{zc-sync-%s}" % ("fenced" if fenced else "locked")
    store = _cluster_array(cluster_url, prefix)
    sync = RedisSynchronizer(cluster_url, prefix=f"zc-locks-{fenced}:", lease=30, timeout=120)
    context = multiprocessing.get_context("spawn")
    try:
        with context.Pool(3) as pool:
            done = pool.starmap_async(_add_under_locks,
                                      [(cluster_url, prefix, sync, 10, fenced)] * 3).get(300)
        assert sum(done) == 30
        import zarr

        from zstores.adapters import zarr_store

        array = zarr.open_array(zarr_store(store), path="data", mode="r")
        assert array[:].tolist() == [0, 0] + [30] * 10 + [0] * 8
        fences = [key for key in store.list_prefix(FENCE_PREFIX)]
        assert bool(fences) is fenced
        # The chunks' locks: each one's keys in one slot, the locks on several primaries.
        with closing(raw_client(cluster_url)) as client:
            names = [sync.lock_name(f"data/c/{i}") for i in range(7)]
            nodes = {client.get_node_from_key(name).name for name in names}
            for name in names:
                base = name[:-len("//lock")]
                assert len({client.keyslot(base + suffix) for suffix in
                            ("//lock", "//queue", "//waiting", "//tokens")}) == 1
        assert len(nodes) > 1
    finally:
        store.clear()
        store.close()


def test_synchronizer_on_the_cluster_tokens_grow_and_its_refusals(cluster_url):
    from zstores import RedisSynchronizer, synchronized

    sync = RedisSynchronizer(cluster_url, prefix="zc-tokens:", lease=30, timeout=30)
    tokens = []
    for _ in range(3):
        with sync["data/c/0"] as lock:
            tokens.append(lock.token)
    assert tokens == sorted(tokens) and len(set(tokens)) == 3
    assert pickle.loads(pickle.dumps(sync)).lock_name("x") == sync.lock_name("x")
    tagged = RedisSynchronizer(cluster_url, prefix="{zc-one}:")
    assert tagged.lock_name("data/c/0") == "{zc-one}:data/c/0//lock"
    with tagged["a"] as first, tagged["b"] as second:  # one counter for the whole prefix
        assert first.token != second.token
    with closing(raw_client(cluster_url)) as client:  # a ready RedisCluster client
        given = RedisSynchronizer(client, prefix="zc-given:")
        with given["k"] as lock:
            assert lock.token
        with pytest.raises(TypeError, match="ready client"):
            pickle.dumps(given)
    node_url = split_cluster_url(cluster_url)[0][0]
    with pytest.raises(StoreURLError, match=r"cluster_enabled:1.*redis\+cluster://"):
        with RedisSynchronizer(node_url)["k"]:
            pass
    # A spread store has no transactions for fence records, but each key's
    # compare-and-swap (one slot): fenced writes are conditional chunk writes there,
    # as on object stores; atomic regions need one slot, and are refused, naming it.
    store = _cluster_array(cluster_url, "zc-spread-fence")
    try:
        zarr = pytest.importorskip("zarr")
        from zstores.adapters import zarr_store

        array = zarr.open_array(zarr_store(store), path="data", mode="r+")
        with pytest.raises(UnsupportedOperationError, match="RedisClusterStore"):
            synchronized(array, sync, fenced=True, atomic=True)
        synchronized(array, sync, fenced=True)[0:3] = 2
        assert array[0:4].tolist() == [2, 2, 2, 0]
        synchronized(array, sync)[0:3] = 1  # unfenced locking works on any placement
        assert array[0:4].tolist() == [1, 1, 1, 0]
    finally:
        store.clear()
        store.close()


# ----------------------------------------------------------------- URL strings, zfuse
@pytest.fixture
def fsspec_cluster_scheme():
    """fsspec finds redis+cluster:// through zstores' entry point.  An environment installed
    before the entry point was added (pip install -e again refreshes it) gets it
    registered here, from the same table (PROTOCOLS) pyproject.toml lists."""
    import importlib.metadata

    import fsspec

    from zstores.adapters.fsspec import PROTOCOLS, StoreFileSystem

    assert "redis+cluster" in PROTOCOLS and "rediss+cluster" in PROTOCOLS
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    assert '"redis+cluster" = "zstores.adapters.fsspec:StoreFileSystem"' in pyproject.read_text()
    installed = {entry.name for entry in importlib.metadata.entry_points(group="fsspec.specs")}
    if "redis+cluster" not in installed:
        fsspec.register_implementation("redis+cluster", StoreFileSystem, clobber=True)
    assert fsspec.get_filesystem_class("redis+cluster") is StoreFileSystem
    yield
    from zstores.adapters.fsspec import close_shared_stores

    close_shared_stores()


def test_zarr_and_xarray_url_strings_on_the_cluster(cluster_url, fsspec_cluster_scheme,
                                                    tmp_path, monkeypatch):
    """zarr takes redis+cluster:// strings; xarray takes no '+' in a scheme (it makes such a
    string a local path, silently), so it gets redis://...&cluster=true, the same store."""
    zarr = pytest.importorskip("zarr")
    xarray = pytest.importorskip("xarray")
    from zstores.adapters.fsspec import close_shared_stores

    monkeypatch.chdir(tmp_path)  # a string taken for a local path would land here
    url = url_with_prefix(cluster_url, "zc-strings")
    plain = url.replace("redis+cluster://", "redis://") + "&cluster=true"
    try:
        array = zarr.create_array(url, name="a", shape=(50, 40), chunks=(10, 10), dtype="i4",
                                  zarr_format=3, overwrite=True)
        array[:] = np.arange(2000, dtype="i4").reshape(50, 40)
        dataset = xarray.Dataset({"t": (("x", "y"), np.arange(12.0).reshape(3, 4))},
                                 coords={"x": [10, 20, 30]})
        dataset.to_zarr(plain, group="ds", mode="w", consolidated=False)
        close_shared_stores()
        again = zarr.open_array(url, path="a", mode="r")
        np.testing.assert_array_equal(again[:], np.arange(2000, dtype="i4").reshape(50, 40))
        xarray.testing.assert_identical(
            xarray.open_zarr(plain, group="ds", consolidated=False).load(), dataset)
        assert not os.listdir(tmp_path)
        close_shared_stores()
        with open_store(url, mode="r") as store:  # the bytes went to the cluster
            assert type(store) is RedisClusterStore
            assert "a/zarr.json" in store and "ds/t/zarr.json" in store
            assert len(store.listdir("a/c")) == 5
    finally:
        delete_prefix(cluster_url, "zc-strings")


def test_zfuse_mount_of_a_cluster_store(cluster_url, tmp_path):
    from fuse_helpers import require_fuse, run_zfuse, zfuse_mounts

    require_fuse()
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    url = url_with_prefix(cluster_url, "zc-fuse")
    with open_store(url, mode="w") as store:
        store.setitems({f"g/a/{i}": b"%d" % i for i in range(30)} | {"g/.zgroup": b"{}"})
    mounted = run_zfuse("mount", url, str(mountpoint))
    assert mounted.returncode == 0, mounted.stderr
    try:
        folder = mountpoint / "g" / "a"
        assert sorted(os.listdir(folder), key=int) == [str(i) for i in range(30)]
        assert (folder / "17").read_bytes() == b"17"
        (mountpoint / "g" / "new").write_bytes(b"from the mount")
        (folder / "3").unlink()
    finally:
        done = run_zfuse("unmount", str(mountpoint))
        assert done.returncode == 0, done.stderr
    assert str(mountpoint) not in zfuse_mounts()
    try:
        with open_store(url, mode="r") as store:
            assert store["g/new"] == b"from the mount"
            assert "g/a/3" not in store and len(store) == 31
    finally:
        delete_prefix(cluster_url, "zc-fuse")


def test_dask_tasks_on_the_cluster_hold_connections_per_worker_not_per_task(
        private_redis_cluster):
    """400 tasks, each with its own unpickled cluster store, on 2 workers x 2 threads: each
    primary holds at most workers x (threads + 1) connections (a worker's one shared
    cluster client: a connection per thread at work, and the one it read the layout
    through), none from the scheduler or the client process; before, each task's store
    opened its own."""
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    workers, threads = 2, 2
    cluster = private_redis_cluster()
    ports = [node.port for node in cluster.nodes]
    store = open_store(f"{cluster.url}?prefix=zc-dask", mode="w")
    store.close()
    assert connected_clients(ports) == 0
    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True,
                      dashboard_address=None) as dask_cluster, Client(dask_cluster) as client:
        futures = [client.submit(_write_one, store, i, pure=False) for i in range(400)]
        assert sum(client.gather(futures)) == sum(len(b"%d" % i) for i in range(400))
        per_node = [connected_clients([port]) for port in ports]  # the futures still alive
    print(f"400 tasks on {workers} workers x {threads} threads: {per_node} connections "
          "per primary")
    assert max(per_node) <= workers * (threads + 1), per_node
    with open_store(f"{cluster.url}?prefix=zc-dask", mode="r") as check:
        assert len(check) == 400
