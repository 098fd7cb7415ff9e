"""RedisStore against real redis-server processes: the conformance harness on the
shared test server (ZSTORES_TEST_REDIS_URL), and private servers for restarts,
passwords, TLS and command counts; plus zarr-python 2.18 compatibility."""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import shutil
import socket
import subprocess
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
from conftest import missing_peer
from zarr2_roundtrip import decode_array

from zstores.errors import (
    ReadOnlyError,
    StoreConnectionError,
    StoreExistsError,
    StoreNotFoundError,
    ValueTooLargeError,
)
from zstores.stores.redis import RedisStore, glob_escape
from zstores.testing import StoreTests
from zstores.urls import redact_url

redis = pytest.importorskip("redis")

MiB = 1 << 20


# ------------------------------------------------------------------ servers
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """A private redis-server on 127.0.0.1 that a test can stop and start again."""

    def __init__(self, folder: Path, *options: str, tls: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            missing_peer("redis-server is not installed (apt-get install redis-server)")
        self.binary, self.folder, self.options, self.tls = binary, folder, options, tls
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        folder.mkdir(parents=True, exist_ok=True)

    def url(self, password: str = "") -> str:
        scheme = "rediss" if self.tls else "redis"
        auth = f":{password}@" if password else ""
        return f"{scheme}://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        ports = ["--port", "0", "--tls-port", str(self.port)] if self.tls else ["--port", str(self.port)]
        with open(self.folder / "redis.log", "ab") as log:
            self.process = subprocess.Popen(
                [self.binary, "--bind", "127.0.0.1", *ports, "--save", "", "--appendonly", "no",
                 "--dir", str(self.folder), *self.options],
                stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError((self.folder / "redis.log").read_text()) from None
                time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self.process = None


@pytest.fixture
def private_redis(tmp_path):
    servers: list[RedisServer] = []

    def start(*options: str, tls: bool = False) -> RedisServer:
        server = RedisServer(tmp_path / f"server{len(servers)}", *options, tls=tls)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()


def prefix_for(location: Path) -> str:
    # Glob characters in the prefix check that SCAN's MATCH is escaped.
    digest = hashlib.sha1(str(location).encode()).hexdigest()[:12]
    return f"zt[{digest}]*?"


def delete_prefix(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url)
    for name in list(client.scan_iter(match=glob_escape(prefix.encode() + b":") + b"*", count=1000)):
        client.delete(name)
    client.close()


# ---------------------------------------------------------------- harness
class TestRedisStore(StoreTests):
    @pytest.fixture(autouse=True)
    def _server(self, redis_url):
        self.url = redis_url
        self.prefixes: set[str] = set()
        yield
        for prefix in self.prefixes:
            delete_prefix(redis_url, prefix)

    def open_store(self, location, mode="a"):
        prefix = prefix_for(location)
        self.prefixes.add(prefix)
        return RedisStore(self.url, prefix=prefix, mode=mode)


@pytest.fixture
def store(redis_url, request):
    prefix = prefix_for(Path(request.node.nodeid))
    delete_prefix(redis_url, prefix)
    with RedisStore(redis_url, prefix=prefix) as opened:
        yield opened
    delete_prefix(redis_url, prefix)


# ----------------------------------------------------------------- layout
def test_layout_is_prefix_colon_key(store, redis_url):
    store["a/b/.zarray"] = b"{}"
    raw = redis.Redis.from_url(redis_url)
    assert raw.get(f"{store.prefix}:a/b/.zarray") == b"{}"
    raw.set(f"{store.prefix}:x/0.0", b"from outside")
    assert store["x/0.0"] == b"from outside"
    raw.close()


def test_glob_characters_never_widen_a_listing(redis_url):
    keys = {"a*": "star", "ab": "plain", "a?": "question", "a[b]": "bracket", "a\\": "backslash"}
    stores = {prefix: RedisStore(redis_url, prefix=f"zt-glob-{prefix}") for prefix in keys}
    try:
        for prefix, store in stores.items():
            store.clear()
            store.setitems({"g/x": keys[prefix].encode(), "g*/y": b"1", "g?/z": b"2"})
        for prefix, store in stores.items():
            assert sorted(store) == ["g*/y", "g/x", "g?/z"], prefix
            assert store.listdir("g") == ["x"]
            assert store.listdir() == ["g", "g*", "g?"]
            assert store.getsize() == len(keys[prefix]) + 2
        stores["a*"].rmdir("g*")
        stores["a*"].rmdir("g")
        assert sorted(stores["a*"]) == ["g?/z"]
        stores["a?"].clear()
        for prefix in ("ab", "a[b]", "a\\"):
            assert len(stores[prefix]) == 3, prefix
    finally:
        for store in stores.values():
            store.clear()
            store.close()


def test_commands_are_batched_and_never_keys(private_redis):
    server = private_redis()
    admin = redis.Redis.from_url(server.url())
    store = RedisStore(server.url(), prefix="p")
    keys = [f"g/{i}" for i in range(2500)]

    def counts(action) -> dict[str, int]:
        admin.config_resetstat()
        action()
        stats = admin.info("commandstats")
        # Leave out the admin's own commands and connection handshakes.
        return {name[len("cmdstat_"):]: row["calls"] for name, row in stats.items()
                if name.split("|")[0] not in ("cmdstat_config", "cmdstat_info", "cmdstat_hello",
                                              "cmdstat_client")}

    assert counts(lambda: store.setitems({k: b"v" for k in keys})) == {"mset": 1}
    large = {f"big/{i}": bytes([i]) * (30 * MiB) for i in range(3)}  # over one MSET's 64 MiB
    assert counts(lambda: store.setitems(large)) == {"multi": 1, "mset": 2, "exec": 1}
    assert store.getitems(list(large)) == large
    store.rmdir("big")
    assert counts(lambda: store.getitems(keys + ["missing"])) == {"mget": 1}
    listing = counts(lambda: store.listdir("g"))
    assert set(listing) == {"scan"} and listing["scan"] <= 10
    sizes = counts(lambda: store.getsize("g"))
    assert set(sizes) == {"scan", "strlen", "exists"} and sizes["strlen"] == 2500
    assert counts(lambda: store.delitems(keys[:100])) == {"del": 1}
    store.get_range("g/200", -1)  # the first call loads the script
    assert counts(lambda: store.get_range("g/200", -1)) == {"evalsha": 1, "strlen": 1, "getrange": 1}
    removal = counts(lambda: store.rmdir("g"))
    assert set(removal) == {"scan", "unlink"} and removal["unlink"] <= removal["scan"] <= 10
    assert len(store) == 0
    store.close()
    admin.close()


def test_rename_is_one_atomic_command(store):
    store["src/a"] = b"1"
    store["dst/a"] = b"old"
    store.rename("src/a", "dst/a")
    assert dict(store.items()) == {"dst/a": b"1"}
    store.update({"p/x": b"1", "p/y/z": b"2", "p/y/y/q": b"3"})
    store.rename("p/y", "p")  # into an ancestor: targets are sources too
    assert {k: store[k] for k in store if k.startswith("p/")} == {
        "p/x": b"1", "p/z": b"2", "p/y/q": b"3"}
    with pytest.raises(KeyError):
        store.rename("nothing", "else")


def test_get_range_cases_match_python_slices(store):
    value = bytes(range(256)) * 4
    store["v"] = value
    store["short"] = b"abcde"
    for start in (-2000, -1024, -10, -1, 0, 1, 500, 1023, 1024, 5000):
        for length in (None, 0, 1, 3, 1000, 5000):
            stop = None if length is None else (start if start >= 0 else max(len(value) + start, 0)) + length
            assert store.get_range("v", start, length) == value[start:stop], (start, length)
    assert store.get_range("short", -10, 3) == b"abc"  # GETRANGE alone would give b"a"
    store["empty"] = b""
    assert store.get_range("empty", 0, 5) == b""
    with pytest.raises(KeyError):
        store.get_range("missing", 0, 0)


def test_value_over_512_mib_is_refused_before_sending(store):
    assert store.max_value_size == 512 * MiB
    with pytest.raises(ValueTooLargeError, match="'big'.*536870912"):
        store["big"] = np.empty(512 * MiB + 1, dtype=np.uint8)
    assert "big" not in store


def test_modes_mean_keys_under_the_prefix(redis_url):
    prefix = "zt-modes"
    delete_prefix(redis_url, prefix)
    with pytest.raises(StoreNotFoundError, match="zt-modes"):
        RedisStore(redis_url, prefix=prefix, mode="r")
    with RedisStore(redis_url, prefix=prefix, mode="w-") as store:
        assert len(store) == 0  # nothing written: the store still does not exist
    with pytest.raises(StoreNotFoundError):
        RedisStore(redis_url, prefix=prefix, mode="r+")
    with RedisStore(redis_url, prefix=prefix + ":nested-is-not-a-neighbour") as neighbour:
        neighbour["k"] = b"v"
    with RedisStore(redis_url, prefix=prefix, mode="r") as store:  # "p:nested..." lies under "p:"
        assert list(store) == ["nested-is-not-a-neighbour:k"]
    delete_prefix(redis_url, prefix)


def test_decode_responses_client_is_refused(redis_url):
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    with pytest.raises(ValueError, match="decode_responses=False"):
        RedisStore(client)
    client.close()


def test_ready_client_is_used_not_closed_and_not_pickled(redis_url):
    client = redis.Redis.from_url(redis_url)
    store = RedisStore(client, prefix="zt-client")
    store["k"] = b"v"
    assert store.client is client
    with pytest.raises(TypeError, match="ready redis.Redis client.*from a URL"):
        pickle.dumps(store)
    assert store == RedisStore(redis_url, prefix="zt-client")
    assert store != RedisStore(redis_url, prefix="zt-client2")
    store.clear()
    store.close()
    assert client.ping()  # the caller's client still works
    with pytest.raises(ValueError, match="client options"):
        RedisStore(client, socket_timeout=1)
    client.close()


def test_pickle_carries_url_and_options(redis_url):
    store = RedisStore(redis_url, prefix="zt-pickle", socket_timeout=7)
    clone = pickle.loads(pickle.dumps(store))
    assert clone == store
    assert clone.client.connection_pool.connection_kwargs["socket_timeout"] == 7
    clone.close()
    store.close()


# ------------------------------------------------- failures and credentials
def test_redact_url():
    assert redact_url("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert redact_url("rediss://user:pw@h/0") == "rediss://user:***@h/0"
    assert redact_url("redis://user@h/0") == "redis://user@h/0"
    assert redact_url("redis://h/0?password=pw&socket_timeout=1") == (
        "redis://h/0?password=***&socket_timeout=1")
    assert redact_url("unix:///tmp/r.sock?db=2") == "unix:///tmp/r.sock?db=2"


def assert_no_secret(secret: str, error: BaseException, caplog) -> None:
    shown = "".join(traceback.format_exception(error)) + repr(error) + caplog.text
    assert secret not in shown


def test_server_down_and_back(private_redis, caplog):
    caplog.set_level(logging.DEBUG)
    secret = "s3cret-pw"
    server = private_redis("--requirepass", secret)
    url = server.url(secret)
    shown_url = f"redis://:***@127.0.0.1:{server.port}/0"
    store = RedisStore(url, prefix="p")
    store["a"] = b"1"
    reader = RedisStore(url, prefix="p", mode="r")
    assert secret not in repr(store) and shown_url in repr(store)
    server.stop()

    calls = {
        "get": lambda: store["a"],
        "set": lambda: store.__setitem__("b", b"2"),
        "contains": lambda: "a" in store,
        "listdir": lambda: store.listdir(),
        "getitems": lambda: store.getitems(["a"]),
        "setitems": lambda: store.setitems({"b": b"2", "c": b"3"}),
        "rmdir": lambda: store.rmdir("x"),
        "get_range": lambda: store.get_range("a", 0, 1),
        "reader": lambda: reader["a"],
    }
    for name, call in calls.items():
        with pytest.raises(StoreConnectionError) as info:
            call()
        assert isinstance(info.value, ConnectionError), name
        assert shown_url in str(info.value), name
        assert_no_secret(secret, info.value, caplog)
    # A read-only store refuses writes before any round trip: with the server
    # down the refusal is ReadOnlyError, not a connection error.
    for write in (lambda: reader.__setitem__("a", b"x"), lambda: reader.clear(),
                  lambda: reader.setitems({"a": b"x"}), lambda: reader.rename("a", "b")):
        with pytest.raises(ReadOnlyError):
            write()

    server.start()  # same port, empty (no persistence)
    store["c"] = b"3"
    assert store["c"] == b"3"
    assert reader["c"] == b"3"
    assert store.listdir() == ["c"]
    store.close()
    reader.close()


def test_wrong_password_is_a_connection_error_without_the_password(private_redis, caplog):
    caplog.set_level(logging.DEBUG)
    server = private_redis("--requirepass", "right-one")
    store = RedisStore(server.url("wrong-one"), prefix="p")
    with pytest.raises(StoreConnectionError, match=r"redis://:\*\*\*@127\.0\.0\.1") as info:
        store["k"] = b"v"
    assert_no_secret("wrong-one", info.value, caplog)
    store.close()
    with RedisStore(server.url("right-one"), prefix="p") as good:
        good["k"] = b"v"
        assert good["k"] == b"v"


def test_tls_with_password(private_redis, tmp_path):
    openssl = shutil.which("openssl")
    if openssl is None:
        missing_peer("openssl is not installed: cannot make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    server = private_redis("--tls-cert-file", str(cert), "--tls-key-file", str(key),
                           "--tls-auth-clients", "no", "--requirepass", "tls-secret", tls=True)
    url = server.url("tls-secret")
    with RedisStore(url, prefix="t", ssl_ca_certs=str(cert)) as store:
        store.setitems({"a/0": b"over tls", "a/1": b"x"})
        assert store.listdir("a") == ["0", "1"]
        assert store.get_range("a/0", -3) == b"tls"
        assert "tls-secret" not in repr(store) and "rediss://:***@127.0.0.1" in repr(store)
        clone = pickle.loads(pickle.dumps(store))
        assert clone["a/0"] == b"over tls"
        clone.close()
    # Without the CA the certificate is refused: TLS is really checked.
    with RedisStore(url, prefix="t") as untrusting, \
            pytest.raises(StoreConnectionError, match="rediss://:\\*\\*\\*@"):
        untrusting["a/0"]


def test_existence_check_at_open_reports_a_down_server(private_redis):
    server = private_redis()
    url = server.url()
    server.stop()
    with pytest.raises(StoreConnectionError, match=f"127.0.0.1:{server.port}"):
        RedisStore(url, prefix="p", mode="r")
    store = RedisStore(url, prefix="p", mode="a")  # mode "a" opens without a round trip
    server.start()
    store["k"] = b"v"
    assert store["k"] == b"v"
    store.close()


def test_w_minus_refuses_existing_keys(store, redis_url):
    store["k"] = b"v"
    with pytest.raises(StoreExistsError, match=store.prefix.replace("[", "\\[").replace("*", "\\*")
                       .replace("?", "\\?")):
        RedisStore(redis_url, prefix=store.prefix, mode="w-")


# ------------------------------------------------ zarr-python 2 compatibility
ZARR2_WRITE = """
import warnings, zarr, numpy as np, redis
warnings.simplefilter("ignore", FutureWarning)
store = zarr.RedisStore(prefix=prefix, **redis.connection.parse_url(url))
store.clear()
root = zarr.group(store=store)
root.attrs["title"] = "written by zarr 2"
arr = root.create_dataset("grp/arr", shape=(20, 30), chunks=(7, 8), dtype="<i4")
arr[:] = np.arange(600, dtype="<i4").reshape(20, 30)
root.create_dataset("a_b", shape=(3,), dtype="u1", fill_value=7)
result = {key: bytes(store[key]).hex() for key in store.keys()}
"""

ZARR2_READ = """
import warnings, zarr, redis
warnings.simplefilter("ignore", FutureWarning)
store = zarr.RedisStore(prefix=prefix, **redis.connection.parse_url(url))
root = zarr.open_group(store=store, mode="r")
result = {
    "data": root["grp/arr"][:].tolist(),
    "attrs": root.attrs.asdict(),
    "items": {key: bytes(store[key]).hex() for key in store.keys()},
}
"""


def test_reads_what_zarr2_wrote(redis_url, zarr2):
    prefix = "zt-zarr2-write"
    written = {k: bytes.fromhex(v) for k, v in zarr2.run(ZARR2_WRITE, url=redis_url, prefix=prefix).items()}
    with RedisStore(redis_url, prefix=prefix, mode="r") as store:
        contents = {key: store[key] for key in store}
        assert contents == written
        assert store.listdir() == [".zattrs", ".zgroup", "a_b", "grp"]
        assert store.listdir("grp/arr")[:1] == [".zarray"]
    assert json.loads(contents[".zattrs"]) == {"title": "written by zarr 2"}
    np.testing.assert_array_equal(
        decode_array(contents, "grp/arr"), np.arange(600, dtype="<i4").reshape(20, 30))
    delete_prefix(redis_url, prefix)


def test_zarr2_reads_what_we_wrote(redis_url, zarr2):
    import zarr

    memory: dict = {}
    root = zarr.open_group(store=memory, zarr_format=2, mode="w")
    root.attrs["title"] = "written by zstores"
    arr = root.create_array("grp/arr", shape=(20, 30), chunks=(7, 8), dtype="<f8")
    arr[:] = np.linspace(0, 1, 600).reshape(20, 30)
    contents = {key: value.to_bytes() for key, value in memory.items()}
    prefix = "zt-zarr2-read"
    with RedisStore(redis_url, prefix=prefix, mode="w") as store:
        store.setitems(contents)
    seen = zarr2.run(ZARR2_READ, url=redis_url, prefix=prefix)
    assert {k: bytes.fromhex(v) for k, v in seen["items"].items()} == contents
    np.testing.assert_array_equal(np.array(seen["data"]), np.linspace(0, 1, 600).reshape(20, 30))
    assert seen["attrs"] == {"title": "written by zstores"}
    delete_prefix(redis_url, prefix)
