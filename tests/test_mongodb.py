"""MongoDBStore against real MongoDB wire-protocol servers: the conformance harness
on the shared test server (ZSTORES_TEST_MONGODB_URL), private servers for
restarts, what crosses the wire (pymongo's command monitoring), large values,
and zarr-python 2.18 compatibility.

The server here is nx-27017 (MongoDB's wire protocol on SQLite): no mongod can
be installed.  Where it departs from MongoDB's documented behaviour the test
stays, marked ``xfail(strict=True)`` with the reason.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import subprocess
import threading
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import pytest

from zstores.errors import (
    InvalidKeyError,
    ReadOnlyError,
    StoreConnectionError,
    StoreExistsError,
    StoreIOError,
    StoreNotFoundError,
    UnsupportedOperationError,
)
from zstores.stores.mongodb import PART_SIZE, MongoDBStore, client_url_options
from zstores.testing import StoreTests
from zstores.urls import StoreURLError, open_store

from cli_helpers import zstores_cmd
from fuse_helpers import run_zfuse, zfuse_mounts
from raw_access import mongodb_get, mongodb_set
from servers import chain_text, free_port, silent_server
from zarr2_roundtrip import decode_array

pymongo = pytest.importorskip("pymongo")
from pymongo import monitoring  # noqa: E402 - only once importorskip found pymongo

MiB = 1 << 20
TIMEOUT = {"serverSelectionTimeoutMS": 5000}


# ------------------------------------------------------------------ servers
@pytest.fixture(scope="session")
def server_is_nx(mongodb_url) -> bool:
    """True when the server is nx-27017 (it names itself in buildInfo), not a mongod."""
    client = pymongo.MongoClient(mongodb_url, **TIMEOUT)
    process = client.admin.command("buildInfo").get("process")
    client.close()
    return process == "nx_27017"


def database_for(location: Path) -> str:
    return "zt_" + hashlib.sha1(str(location).encode()).hexdigest()[:16]


def drop(url: str, databases) -> None:
    client = pymongo.MongoClient(url, **TIMEOUT)
    for name in databases:
        client.drop_database(name)
    client.close()


# ---------------------------------------------------------------- harness
class TestMongoDBStore(StoreTests):
    @pytest.fixture(autouse=True)
    def _server(self, mongodb_url):
        self.url = mongodb_url
        self.databases: set[str] = set()
        yield
        drop(mongodb_url, self.databases)

    @pytest.mark.slow
    def test_100000_keys(self, store, server_is_nx):
        if server_is_nx:
            # Not run: it would hold the shared server for hours.
            pytest.xfail("nx-27017 looks up every upsert without the index (a bulk_write of "
                         "4,000 upserts takes ~30 s, 1,000 ~2.6 s), so 100,000 keys would take "
                         "hours; this test runs in full against a mongod")
        super().test_100000_keys(store)

    def open_store(self, location, mode="a"):
        database = database_for(location)
        self.databases.add(database)
        return MongoDBStore(self.url, database=database, mode=mode, **TIMEOUT)

    # Out of band: a client of the test's own reads and writes the documents.
    def raw_get(self, store, key):
        return mongodb_get(self.url, store, key)

    def raw_set(self, store, key, value):
        mongodb_set(self.url, store, key, value)


class Recorder(monitoring.CommandListener):
    """pymongo's command monitoring: every command sent and every reply received."""

    def __init__(self) -> None:
        self.commands: list[dict] = []
        self.replies: list[dict] = []

    def started(self, event) -> None:
        if event.command_name not in ("hello", "ismaster", "endSessions"):
            self.commands.append({"name": event.command_name, **dict(event.command)})

    def succeeded(self, event) -> None:
        if event.command_name not in ("hello", "ismaster", "endSessions"):
            self.replies.append(event.reply)

    def failed(self, event) -> None:
        pass

    def reset(self) -> None:
        self.commands.clear()
        self.replies.clear()

    def names(self) -> list[str]:
        return [c["name"] for c in self.commands]


@pytest.fixture
def database(mongodb_url, request):
    name = database_for(Path(request.node.nodeid))
    drop(mongodb_url, [name])
    yield name
    drop(mongodb_url, [name])


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture
def store(mongodb_url, database, recorder):
    with MongoDBStore(mongodb_url, database=database, event_listeners=[recorder],
                      **TIMEOUT) as opened:
        yield opened


# ------------------------------------------------------------------ layout
def test_documents_have_zarr2_layout_and_a_unique_index(store):
    store["a/.zarray"] = b"{}"
    store["a/.zarray"] = b"{ }"
    docs = list(store.collection.find({}, {"_id": 0}))
    assert [{k: v for k, v in doc.items() if k != "rev"} for doc in docs] == [
        {"key": "a/.zarray", "value": b"{ }", "size": 3}]
    assert re.fullmatch("[0-9a-f]{16}", docs[0]["rev"])  # a fresh id per write: replace_if's
    indexes = store.collection.index_information().values()
    assert any(index["key"] == [("key", 1)] and index.get("unique") for index in indexes)
    store.collection.insert_one({"key": "x/0.0", "value": b"from outside"})
    assert store["x/0.0"] == b"from outside"
    assert store.getsize("x/0.0") == store.getsize("x") == len(b"from outside")
    assert store.getsize() == 3 + len(b"from outside")
    with pytest.raises(pymongo.errors.DuplicateKeyError):
        store.collection.insert_one({"key": "x/0.0", "value": b"twice"})


def test_conditional_writes_on_documents_written_by_zarr2(store):
    """A document without "rev" (zarr-python 2 wrote it) is compared by its value."""
    store.collection.insert_one({"key": "old", "value": b"from zarr 2"})
    assert not store.set_if_not_exists("old", b"x")
    assert not store.replace_if("old", b"other", b"x")
    try:
        replaced = store.replace_if("old", b"from zarr 2", b"new")
    except StoreIOError as error:  # a server that cannot match binaries (nx-27017) says so
        assert "without a 'rev'" in str(error) and "Write it through zstores" in str(error)
        store["old"] = b"from zarr 2"  # written through zstores: it has a rev now
        replaced = store.replace_if("old", b"from zarr 2", b"new")
    assert replaced and store["old"] == b"new"


def test_listing_and_membership_never_fetch_values(store, recorder):
    store.setitems({f"g/{i}": b"V" * 1000 for i in range(50)})
    store["g/big"] = bytes(17 * MiB)
    recorder.reset()
    assert store.listdir("g") == sorted([str(i) for i in range(50)] + ["big"])
    assert sorted(store) == sorted([f"g/{i}" for i in range(50)] + ["g/big"])
    assert "g/7" in store and "g/none" not in store
    assert len(store) == 51
    assert store.getsize("g") == 50_000 + 17 * MiB
    assert recorder.names().count("find") >= 4
    for command in recorder.commands:
        if command["name"] == "find":
            # (getsize of a path may first look for it as a key: its size only)
            assert command["projection"] in (
                {"_id": 0, "key": 1}, {"_id": 0, "key": 1, "size": 1}, {"_id": 0, "size": 1},
            ), command
    received = json.dumps([reply for reply in recorder.replies], default=str)
    assert "VVVV" not in received
    assert len(received) < 50_000


def test_prefix_queries_are_anchored_and_escaped(store, recorder):
    names = ["a_b", "axb", "a.b", "a+b", "a(b", "a[b]", "a*b", "a?b", "a$b", "a^b", "a|b", "a{2}b"]
    store.setitems({f"{name}/x": name.encode() for name in names} | {"z/a_b/x": b"deep"})
    for name in names:
        recorder.reset()
        assert store.listdir(name) == ["x"], name
        (find,) = [c for c in recorder.commands if c["name"] == "find"]
        assert find["filter"]["key"]["$regex"].startswith("^"), find
    store.rmdir("a.b")
    store.rmdir("a*b")
    assert sorted(store) == sorted(f"{n}/x" for n in names if n not in ("a.b", "a*b")) + ["z/a_b/x"]


@pytest.mark.xfail(strict=True, reason="nx-27017 plans every query as a table SCAN; mongod uses "
                   "the unique key index (IXSCAN) for equality and anchored-prefix queries")
def test_prefix_queries_use_the_key_index(store, recorder):
    store.setitems({f"g/{i}": b"x" for i in range(20)})
    recorder.reset()
    store.listdir("g")
    (find,) = [c for c in recorder.commands if c["name"] == "find"]
    db = store.collection.database
    plan = db.command("explain", {"find": store.collection.name, "filter": find["filter"],
                                  "projection": find["projection"]})
    assert "IXSCAN" in json.dumps(plan["queryPlanner"]["winningPlan"], default=str)


def test_batches_are_one_round_trip(store, recorder):
    values = {f"b/{i}": bytes([i % 256]) * 100 for i in range(1000)}
    recorder.reset()
    store.setitems(values)
    assert recorder.names() == ["find", "update"]  # which values had parts; the upserts
    assert len(recorder.commands[1]["updates"]) == 1000
    recorder.reset()
    assert store.getitems(list(values) + ["b/missing"]) == values
    assert recorder.names() == ["find"]
    assert "$in" in recorder.commands[0]["filter"]["key"]
    recorder.reset()
    store.delitems(list(values)[:500])
    assert recorder.names() == ["find", "delete"]
    recorder.reset()
    store.rmdir("b")
    assert recorder.names() == ["find", "delete"]
    assert len(store) == 0


# ------------------------------------------------------------- large values
def test_values_over_the_document_limit_are_split_and_read_whole(store):
    rng = np.random.default_rng(2)
    big = rng.integers(0, 256, 2 * PART_SIZE + 12345, dtype=np.uint8)
    parts = store.collection.database[store.collection.name + "_parts"]
    store["arr/0.0"] = big
    assert store["arr/0.0"] == big.tobytes()
    assert store.getsize("arr/0.0") == big.nbytes
    assert store.getsize("arr") == big.nbytes
    assert store.get_range("arr/0.0", -5) == big[-5:].tobytes()
    assert parts.count_documents({}) == 3
    assert "value" not in store.collection.find_one({"key": "arr/0.0"})

    other = rng.integers(0, 256, 17 * MiB, dtype=np.uint8)
    store.setitems({"arr/0.0": other, "arr/1.0": b"small", "arr/2.0": big})
    assert store.getitems(["arr/0.0", "arr/1.0", "arr/2.0"]) == {
        "arr/0.0": other.tobytes(), "arr/1.0": b"small", "arr/2.0": big.tobytes()}
    assert parts.count_documents({}) == 3 + 3  # the replaced version's parts are gone

    store["arr/0.0"] = b"small again"
    assert store["arr/0.0"] == b"small again"
    store.rename("arr/2.0", "moved/2.0")
    assert store["moved/2.0"] == big.tobytes()
    assert "arr/2.0" not in store
    store.rename("moved", "arr")
    assert store["arr/2.0"] == big.tobytes()
    assert parts.count_documents({}) == 3
    del store["arr/2.0"]
    assert parts.count_documents({}) == 0
    store["x"] = big
    store.rmdir()
    assert parts.count_documents({}) == 0 and len(store) == 0


def test_readers_never_see_a_partly_written_large_value(mongodb_url, database):
    first = bytes([1]) * (PART_SIZE + 1000)
    second = bytes([2]) * (2 * PART_SIZE + 7)
    writer = MongoDBStore(mongodb_url, database=database, **TIMEOUT)
    reader = MongoDBStore(mongodb_url, database=database, **TIMEOUT)
    writer["big"] = first
    seen: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            while not done.is_set():
                value = reader["big"]
                seen.append((len(value), value[0]))
                assert value in (first, second), "a torn value"
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for round_ in range(6):
            writer["big"] = second if round_ % 2 == 0 else first
    finally:
        done.set()
        thread.join(timeout=120)
    assert not errors, errors[0]
    assert len(seen) >= 2
    assert writer["big"] == first
    writer.close()
    reader.close()


# ------------------------------------------------------------------- modes
def test_modes_mean_the_collection_exists(mongodb_url, database):
    with pytest.raises(StoreNotFoundError, match=f"{database}.zarr"):
        MongoDBStore(mongodb_url, database=database, mode="r", **TIMEOUT)
    with MongoDBStore(mongodb_url, database=database, mode="w-", **TIMEOUT) as store:
        assert len(store) == 0
    # Created with its index, empty: it exists now.
    with MongoDBStore(mongodb_url, database=database, mode="r", **TIMEOUT) as store:
        assert len(store) == 0
    with pytest.raises(StoreExistsError):
        MongoDBStore(mongodb_url, database=database, mode="w-", **TIMEOUT)
    with pytest.raises(StoreNotFoundError):
        MongoDBStore(mongodb_url, database=database, collection="other", mode="r+", **TIMEOUT)
    client = pymongo.MongoClient(mongodb_url, **TIMEOUT)
    assert "other" not in client[database].list_collection_names()  # "r+" created nothing
    client.close()


@pytest.mark.parametrize("options, message", [
    ({"database": ""}, "database option"), ({"database": "a.b"}, "database option"),
    ({"database": "a/b"}, "database option"), ({"database": "x" * 64}, "database option"),
    ({"collection": ""}, "collection option"), ({"collection": "a$b"}, "collection option"),
    ({"collection": "system.x"}, "collection option"),
])
def test_names_are_checked(options, message):
    with pytest.raises(ValueError, match=message):
        MongoDBStore("mongodb://127.0.0.1:1", **options)


def test_lone_surrogate_key_is_refused(store):
    with pytest.raises(InvalidKeyError, match="UTF-8"):
        store["lone\udc80"] = b"x"


def test_ready_client_is_used_not_closed_and_not_pickled(mongodb_url, database):
    client = pymongo.MongoClient(mongodb_url, **TIMEOUT)
    store = MongoDBStore(client, database=database)
    store["k"] = b"v"
    assert store.client is client
    with pytest.raises(TypeError, match="ready MongoClient.*from a URL"):
        pickle.dumps(store)
    with MongoDBStore(mongodb_url, database=database, **TIMEOUT) as by_url:
        assert by_url == store
    store.close()
    assert client[database]["zarr"].find_one({"key": "k"})["value"] == b"v"  # still open
    with pytest.raises(ValueError, match="client options"):
        MongoDBStore(client, database=database, tz_aware=True)
    client.close()


# ------------------------------------------------ failures and credentials
def _once_reconnected(call, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except StoreConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_server_down_and_back(private_mongodb, tmp_path):
    server = private_mongodb()
    options = {"serverSelectionTimeoutMS": 400}
    store = MongoDBStore(server.url, database="db", **options)
    store.setitems({"a": b"1", "big": bytes([7]) * (PART_SIZE + 5)})
    reader = MongoDBStore(server.url, database="db", mode="r", **options)
    server.stop()

    calls = {
        "get": lambda: store["a"],
        "set": lambda: store.__setitem__("b", b"2"),
        "set large": lambda: store.__setitem__("big", bytes([8]) * (PART_SIZE + 5)),
        "contains": lambda: "a" in store,
        "listdir": lambda: store.listdir(),
        "getitems": lambda: store.getitems(["a"]),
        "setitems": lambda: store.setitems({"b": b"2"}),
        "rmdir": lambda: store.rmdir("x"),
        "len": lambda: len(store),
        "reader": lambda: reader["a"],
    }
    for name, call in calls.items():
        where = f"mongodb://127.0.0.1:{server.port}"
        with pytest.raises(StoreConnectionError, match=where) as info:
            call()
        assert isinstance(info.value, ConnectionError), name
    # A read-only store refuses writes before any round trip.
    for write in (lambda: reader.__setitem__("a", b"x"), lambda: reader.clear(),
                  lambda: reader.setitems({"a": b"x"}), lambda: reader.rename("a", "b")):
        with pytest.raises(ReadOnlyError):
            write()

    server.start()  # same port, same data file
    # Each client notices the server is back at its monitor's next check
    # (pymongo waits at least 500 ms between checks, longer than the 400 ms
    # selection timeout): retry the first call of each until then.
    assert _once_reconnected(lambda: store["a"]) == b"1"
    assert store["big"] == bytes([7]) * (PART_SIZE + 5)  # the failed overwrite left it whole
    store["c"] = b"3"
    assert _once_reconnected(lambda: reader["c"]) == b"3"
    assert sorted(store) == ["a", "big", "c"]
    store.close()
    reader.close()


def test_server_killed_in_the_middle_of_a_large_write(private_mongodb):
    """SIGKILL the server as soon as the first write of a large overwrite lands:
    after a restart the key holds the old value or the new one, whole."""
    server = private_mongodb()
    old, new = bytes([1]) * (2 * PART_SIZE + 3), bytes([2]) * (2 * PART_SIZE + 5)
    store = MongoDBStore(server.url, database="db", serverSelectionTimeoutMS=400)
    store["big"] = old
    watcher = pymongo.MongoClient(server.url, serverSelectionTimeoutMS=2000)
    parts, docs = watcher["db"]["zarr_parts"], watcher["db"]["zarr"]
    before = (parts.count_documents({}), docs.find_one({"key": "big"}, {"_id": 0, "parts": 1}))
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            store["big"] = new
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - checked below
            outcome.append(error)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        while (parts.count_documents({}),
               docs.find_one({"key": "big"}, {"_id": 0, "parts": 1})) == before:
            pass
    finally:
        server.process.kill()  # no shutdown: whatever was committed stays, nothing more
        server.process.wait()
    thread.join(timeout=60)
    watcher.close()
    assert outcome and (outcome[0] is None or isinstance(outcome[0], StoreConnectionError)), outcome
    server.start()
    assert store["big"] in (old, new)
    store.close()


def test_password_never_shown():
    port = free_port()  # nothing listens here
    url = f"mongodb://zarr-user:hunter2-secret@127.0.0.1:{port}/?authSource=admin"
    started = time.monotonic()
    within = r"within 0\.3 s \(serverSelectionTimeoutMS\)"
    with pytest.raises(StoreConnectionError, match=within) as info:
        MongoDBStore(url, database="db", serverSelectionTimeoutMS=300)
    assert time.monotonic() - started < 0.3 + MARGIN  # the lower of the two timeouts
    shown = "".join(traceback.format_exception(info.value))
    assert "hunter2-secret" not in shown
    assert f"mongodb://zarr-user:***@127.0.0.1:{port}/?authSource=admin db.zarr" in shown


# ------------------------------------------------- transactions, snapshots
class ServerQuestions(monitoring.CommandListener):
    """Counts the hello and buildInfo commands the store sends (monitoring's own
    heartbeats are not commands)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def started(self, event) -> None:
        if event.command_name in ("hello", "buildInfo", "buildinfo"):
            self.asked.append(event.command_name)

    def succeeded(self, event) -> None:
        pass

    def failed(self, event) -> None:
        pass


def test_transaction_and_snapshot_are_refused_with_the_servers_answer(
        mongodb_url, database, server_is_nx):
    """The test server is no replica set: transaction() and snapshot() refuse at
    once, naming the store and what the server answered, asked once per store;
    nothing is written.  (Measured with nx-27017 0.8.1: it accepts startTransaction
    but runs it on the connection every client shares, so another client saw the
    uncommitted insert and the abort rolled back that client's own insert.)"""
    questions = ServerQuestions()
    store = MongoDBStore(mongodb_url, database=database, event_listeners=[questions],
                         **TIMEOUT)
    store["a"] = b"1"
    asked_at_open = len(questions.asked)
    for _ in range(3):
        for call, what in ((store.transaction, "run transactions"),
                           (store.snapshot, "take snapshots")):
            with pytest.raises(UnsupportedOperationError) as info:
                call()
            message = str(info.value)
            assert message.startswith(f"{store!r} cannot {what}"), message
            assert "without setName and is no mongos: a standalone server" in message
            assert "only on replica-set members and through mongos" in message
            assert ("'nx_27017'" in message) == server_is_nx
            assert "\n" not in message
    assert len(questions.asked) - asked_at_open == 2  # hello and buildInfo, once
    assert not store.in_transaction and store.supports_transactions is False
    with open_store(f"{mongodb_url}?database={database}") as other, \
            pytest.raises(UnsupportedOperationError, match="transactions"):
        other.transaction()
    assert list(store.items()) == [("a", b"1")]
    store.close()


def test_transaction_with_the_server_down_is_a_connection_error(private_mongodb):
    server = private_mongodb()
    store = MongoDBStore(server.url, database="db", serverSelectionTimeoutMS=500)
    server.stop()
    with pytest.raises(StoreConnectionError, match="could not talk to the server"):
        store.transaction()
    server.start()
    with pytest.raises(UnsupportedOperationError, match="standalone"):
        store.transaction()
    store.close()


# ------------------------------------------- failing fast, clearly and typed
SECRET = "pw-4-sure"
MARGIN = 3.0  # seconds beyond connect_timeout for process and scheduling noise
STARTUP = 15.0  # seconds a command may take to start on a loaded machine (2 cores, shared)


def open_fails(url: str, expected: type[BaseException], limit: float, **options):
    """Open ``url``: the typed error within ``limit`` seconds, one line, no
    password, no topology dump and no warning."""
    started = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(expected) as info:
            open_store(url, **options)
    elapsed = time.monotonic() - started
    assert elapsed < limit, f"{url}: {elapsed:.1f} s"
    message = str(info.value)
    assert "\n" not in message and "Topology Description" not in message, message
    assert SECRET not in chain_text(info.value)
    assert not [w for w in caught if "pymongo" in str(w.filename) or "option" in str(w.message)]
    return info.value


def test_unreachable_server_fails_within_connect_timeout_not_30_s():
    url = f"mongodb://zarr:{SECRET}@127.0.0.1:{free_port()}/?authSource=admin"
    error = open_fails(f"{url}&connect_timeout=1", StoreConnectionError, 1 + MARGIN)
    assert "no server answered within 1 s (connect_timeout)" in str(error)
    assert "mongodb://zarr:***@127.0.0.1" in str(error) and len(str(error)) < 300
    with silent_server() as port:  # accepts, never answers
        open_fails(f"mongodb://127.0.0.1:{port}/?connect_timeout=1.5&connectTimeoutMS=60000",
                   StoreConnectionError, 1.5 + MARGIN)
    started = time.monotonic()
    with pytest.raises(StoreConnectionError):  # the default: 5 s
        MongoDBStore(f"mongodb://127.0.0.1:{free_port()}")
    assert 4 < time.monotonic() - started < 5 + MARGIN


def test_connect_timeout_leaves_later_calls_their_own_timeouts(private_mongodb):
    server = private_mongodb()
    store = MongoDBStore(server.url, database="db", connect_timeout=0.5,
                         serverSelectionTimeoutMS=1500)
    assert store.client.options.server_selection_timeout == 1.5
    assert pickle.loads(pickle.dumps(store))._params()["connect_timeout"] == 0.5
    server.stop()
    started = time.monotonic()
    with pytest.raises(StoreConnectionError):
        store["a"]
    assert 1.2 < time.monotonic() - started < 1.5 + MARGIN  # 1.5 s, not connect_timeout
    store.close()
    for bad in (0, -2, "1", float("inf")):
        with pytest.raises(ValueError, match="connect_timeout"):
            MongoDBStore(server.url, connect_timeout=bad)


def test_unknown_options_are_refused_without_pymongo_warnings(mongodb_url):
    secret_url = mongodb_url.replace("mongodb://", f"mongodb://u:{SECRET}@", 1)
    error = open_fails(f"{secret_url}/?prefx=a", StoreURLError, 1.0)
    message = str(error)
    assert "unknown option 'prefx' for mongodb://" in message and "mongodb://u:***@" in message
    for known in ("database", "collection", "connect_timeout", "serverselectiontimeoutms"):
        assert known in message
    open_fails(secret_url, StoreURLError, 1.0, serverSelectionTimeout=5)  # a keyword typo
    with pytest.raises(StoreURLError, match="'database'.*MongoDBStore option"):
        MongoDBStore(f"{mongodb_url}/?database=x")
    for bad in ("w=-5", "tls=maybe", "maxPoolSize=many"):  # values pymongo would ignore
        error = open_fails(f"{secret_url}/?{bad}", StoreURLError, 2.0)
        assert bad.split("=")[0].lower() in str(error).lower()
    # pymongo matches URI options case-insensitively; so do we.
    assert "serverselectiontimeoutms" in client_url_options()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store = open_store(f"{mongodb_url}/?ServerSelectionTimeoutMs=2000&database=zt_opts")
    assert store.client.options.server_selection_timeout == 2
    store.close()


def test_credentials_to_a_server_without_authentication(private_mongodb, caplog):
    """nx-27017 implements no authentication (it answers saslStart without a payload,
    which pymongo reads as a KeyError): the store says so in one typed line, and
    the password shows nowhere."""
    caplog.set_level("DEBUG")
    server = private_mongodb()
    url = server.url.replace("mongodb://", f"mongodb://zarr:{SECRET}@") + "/?authSource=admin"
    error = open_fails(url, StoreConnectionError, 5 + MARGIN)
    assert "mongodb://zarr:***@" in str(error)
    assert SECRET not in caplog.text


def test_every_public_call_with_the_server_down_is_typed(private_mongodb):
    server = private_mongodb()
    store = MongoDBStore(server.url, database="db", serverSelectionTimeoutMS=400)
    store.setitems({"a/b": b"1", "c": b"2"})
    server.stop()
    calls = [lambda: store["a/b"], lambda: store.getitems(["a/b"]),
             lambda: store.setitems({"x": b"1"}), lambda: store.delitems(["c"]),
             lambda: store.__delitem__("c"), lambda: store.listdir("a"), lambda: list(store),
             lambda: len(store), lambda: store.getsize(), lambda: store.getsize("c"),
             lambda: store.rmdir("a"), lambda: store.rename("c", "d"),
             lambda: store.rename("a", "e"), lambda: store.clear(), lambda: "c" in store]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(StoreConnectionError) as info:
            call()
        assert time.monotonic() - started < 5
        assert not isinstance(info.value, pymongo.errors.PyMongoError)
        assert "Topology Description" not in str(info.value)
    store.close()


def test_server_killed_during_a_large_setitems(private_mongodb):
    """SIGKILL the server while a setitems of 2,000 keys is being written: the call
    fails typed and in bounded time; after a restart each key holds its old
    value or its new one, whole (MongoDB writes each document atomically; the
    batch is not one transaction)."""
    server = private_mongodb()
    store = MongoDBStore(server.url, database="db")
    keys = [f"k/{i}" for i in range(2000)]
    old = {key: b"old " + key.encode() for key in keys}
    store.setitems(old)
    new = {key: b"new " + key.encode() * 50 for key in keys}
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            store.setitems(new)
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - checked below
            outcome.append(error)

    thread = threading.Thread(target=write)
    thread.start()
    # nx-27017 answers no query while it applies a bulk write, so the test
    # cannot watch the write land: it kills the server a moment into it.
    time.sleep(0.5)
    in_flight = thread.is_alive()
    server.kill()
    killed = time.monotonic()
    thread.join(timeout=60)
    assert not thread.is_alive(), "setitems hung after the server died"
    assert time.monotonic() - killed < 35  # at most one server selection (30 s default)
    assert in_flight, "the batch was written before the server could be killed"
    assert outcome and (outcome[0] is None or isinstance(outcome[0], StoreConnectionError)), outcome
    server.start()
    now = _once_reconnected(lambda: store.getitems(keys), timeout=40)
    assert sorted(now) == sorted(keys)
    changed = [key for key in keys if now[key] == new[key]]
    assert all(now[key] in (old[key], new[key]) for key in keys)
    print(f"killed mid-write: {len(changed)} of {len(keys)} keys new, outcome {outcome[0]!r}")
    assert outcome[0] is not None or len(changed) == len(keys)
    store.close()


@pytest.mark.parametrize("case", ["dead port", "typo", "credentials"])
def test_cli_and_zfuse_say_one_line_without_the_password(private_mongodb, mountpoint, case):
    server = private_mongodb()
    with_secret = server.url.replace("mongodb://", f"mongodb://zarr:{SECRET}@")
    url = {"dead port": f"mongodb://zarr:{SECRET}@127.0.0.1:{free_port()}/?connect_timeout=1",
           "typo": with_secret + "/?prefx=a",
           "credentials": with_secret + "/?connect_timeout=2"}[case]
    for command in (lambda: zstores_cmd("ls", url, timeout=60),
                    lambda: run_zfuse("mount", url, str(mountpoint), timeout=60)):
        started = time.monotonic()
        done = command()
        if str(mountpoint) in zfuse_mounts():  # mounted after all: never leave it behind
            subprocess.run(["fusermount", "-u", "-z", str(mountpoint)], check=False)
            pytest.fail(f"zfuse mounted {url} although the store cannot be opened")
        assert time.monotonic() - started < 2 + MARGIN + STARTUP  # < 30 s
        code = getattr(done, "code", getattr(done, "returncode", None))
        err = done.err if hasattr(done, "err") else done.stderr
        out = done.out if hasattr(done, "out") else done.stdout
        lines = [line for line in err.splitlines() if line.strip()]
        assert code != 0 and len(lines) == 1, err
        assert SECRET not in out + err and "mongodb://zarr:***@" in err
        assert "Warning" not in err and "Traceback" not in err
    assert str(mountpoint) not in zfuse_mounts()


# ------------------------------------------------ zarr-python 2 compatibility
ZARR2_WRITE = """
import warnings, zarr, numpy as np
warnings.simplefilter("ignore", FutureWarning)
store = zarr.MongoDBStore(database=database, collection="zarr", host=url)
root = zarr.group(store=store)
root.attrs["title"] = "written by zarr 2"
arr = root.create_dataset("grp/arr", shape=(20, 30), chunks=(7, 8), dtype="<i4")
arr[:] = np.arange(600, dtype="<i4").reshape(20, 30)
root.create_dataset("a_b", shape=(3,), dtype="u1", fill_value=7)
result = {key: bytes(store[key]).hex() for key in store.keys()}
store.close()
"""

ZARR2_READ = """
import warnings, zarr
warnings.simplefilter("ignore", FutureWarning)
store = zarr.MongoDBStore(database=database, collection="zarr", host=url)
root = zarr.open_group(store=store, mode="r")
result = {
    "data": root["grp/arr"][:].tolist(),
    "attrs": root.attrs.asdict(),
    "items": {key: bytes(store[key]).hex() for key in store.keys()},
}
store.close()
"""


def test_reads_what_zarr2_wrote(mongodb_url, database, zarr2):
    written = {k: bytes.fromhex(v)
               for k, v in zarr2.run(ZARR2_WRITE, url=mongodb_url, database=database).items()}
    with MongoDBStore(mongodb_url, database=database, mode="r", **TIMEOUT) as store:
        contents = {key: store[key] for key in store}
        assert contents == written
        assert store.listdir() == [".zattrs", ".zgroup", "a_b", "grp"]
    assert json.loads(contents[".zattrs"]) == {"title": "written by zarr 2"}
    np.testing.assert_array_equal(
        decode_array(contents, "grp/arr"), np.arange(600, dtype="<i4").reshape(20, 30))


def test_zarr2_reads_what_we_wrote(mongodb_url, database, zarr2):
    import zarr

    memory: dict = {}
    root = zarr.open_group(store=memory, zarr_format=2, mode="w")
    root.attrs["title"] = "written by zstores"
    arr = root.create_array("grp/arr", shape=(20, 30), chunks=(7, 8), dtype="<f8")
    arr[:] = np.linspace(0, 1, 600).reshape(20, 30)
    contents = {key: value.to_bytes() for key, value in memory.items()}
    with MongoDBStore(mongodb_url, database=database, mode="w", **TIMEOUT) as store:
        store.setitems(contents)
    seen = zarr2.run(ZARR2_READ, url=mongodb_url, database=database)
    assert {k: bytes.fromhex(v) for k, v in seen["items"].items()} == contents
    np.testing.assert_array_equal(np.array(seen["data"]), np.linspace(0, 1, 600).reshape(20, 30))
    assert seen["attrs"] == {"title": "written by zstores"}


# ------------------------------------------------ connections per process, not per store
class ConnectionCount:
    """Connections a server holds beyond those it held when this was made (serverStatus,
    asked through one client of the test's own, kept open so its connections stay put)."""

    def __init__(self, url: str) -> None:
        self.admin = pymongo.MongoClient(url, serverSelectionTimeoutMS=5000, maxPoolSize=1)
        self.baseline = self._current()

    def _current(self) -> int:
        return self.admin.admin.command("serverStatus")["connections"]["current"]

    def __call__(self) -> int:
        return self._current() - self.baseline

    def close(self) -> None:
        self.admin.close()


def test_unpickled_stores_share_one_client_and_connect_on_first_use(private_mongodb):
    """50 stores unpickled in one process (a dask worker's tasks): no connection until
    used (a scheduler moving them opens none), then one client among them."""
    server = private_mongodb()
    store = open_store(f"{server.url}/?database=share&collection=c", mode="w")
    store.setitems({f"k{i}": b"v" for i in range(30)})
    blob = pickle.dumps(store)
    store.close()
    connections = ConnectionCount(server.url)
    try:
        copies = [pickle.loads(blob) for _ in range(50)]
        assert connections() == 0  # unpickling never connects
        for copy in copies:
            assert copy.getitems(["k1", "k7", "k20"]) == {"k1": b"v", "k7": b"v", "k20": b"v"}
        assert len({id(copy.client) for copy in copies}) == 1
        used = connections()
        assert 1 <= used <= 3, used  # one client: its monitors and one pooled connection
        for copy in copies:
            copy.close()
        wait_for_connections(connections, 0)  # the last store closed closes the client
    finally:
        connections.close()


def wait_for_connections(connections, expected: int) -> None:
    """Until the server counts ``expected`` (it sees a closed socket a moment later)."""
    deadline = time.monotonic() + 30
    while connections() != expected:
        assert time.monotonic() < deadline, (connections(), expected)
        time.sleep(0.05)


def test_max_pool_size_below_the_adapter_threads_is_refused(mongodb_url):
    from zstores._concurrency import ADAPTER_THREADS

    url = f"{mongodb_url.rstrip('/')}/?database=zstores_tests&collection=pool"
    with pytest.raises(StoreURLError, match=rf"maxPoolSize=2 is below {ADAPTER_THREADS}\b"):
        open_store(f"{url}&maxPoolSize=2")
    with open_store(f"{url}&maxPoolSize={ADAPTER_THREADS}") as store:
        store["a"] = b"1"
        store.clear()


def _write_one(store, i: int) -> int:
    """A dask task: one value written through a store that arrived pickled."""
    store[f"t/{i}"] = b"%d" % i
    return len(store[f"t/{i}"])


def test_dask_tasks_hold_one_client_per_worker_not_per_task(private_mongodb):
    """400 tasks, each with its own unpickled store, on 2 workers x 2 threads: the server
    holds a bounded number of connections (one client per worker: its 2 monitors and at
    most a pooled connection per thread), none from the scheduler or the client process."""
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    workers, threads = 2, 2
    server = private_mongodb()
    store = open_store(f"{server.url}/?database=dask&collection=c", mode="w")
    store.close()
    bound = workers * (2 + threads)
    connections = ConnectionCount(server.url)
    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        futures = [client.submit(_write_one, store, i, pure=False) for i in range(400)]
        assert sum(client.gather(futures)) == sum(len(b"%d" % i) for i in range(400))
        peak = connections()  # the futures (and their stores) still alive
    connections.close()
    print(f"400 tasks on {workers} workers x {threads} threads: {peak} MongoDB connections")
    assert peak <= bound, peak
    with open_store(f"{server.url}/?database=dask&collection=c", mode="r") as check:
        assert len(check) == 400
