"""RedisStore against real redis-server processes: the conformance harness on the
shared test server (ZSTORES_TEST_REDIS_URL), and private servers for restarts,
passwords, TLS and command counts; plus zarr-python 2.18 compatibility."""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import pickle
import shutil
import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from zstores.errors import (
    ReadOnlyError,
    StoreConnectionError,
    StoreExistsError,
    StoreFullError,
    StoreIOError,
    StoreNotFoundError,
    TransactionConflictError,
    ValueTooLargeError,
)
from zstores.stores.redis import RedisStore, client_url_options, glob_escape
from zstores.testing import StoreTests
from zstores.urls import StoreURLError, open_store, redact_url

from cli_helpers import zstores_cmd
from conftest import missing_peer
from full_disk import check_acknowledged, delete_half_and_refill, fill_until_full
from fuse_helpers import run_zfuse, zfuse_mounts
from raw_access import redis_get, redis_set
from relays import CuttingRelay, through
from servers import chain_text, free_port, silent_server
from zarr2_roundtrip import decode_array

redis = pytest.importorskip("redis")

MiB = 1 << 20


def prefix_for(location: Path) -> str:
    # Glob characters in the prefix check that SCAN's MATCH is escaped.
    digest = hashlib.sha1(str(location).encode()).hexdigest()[:12]
    return f"zt[{digest}]*?"


def delete_prefix(url: str, prefix: str) -> None:
    client = redis.Redis.from_url(url)
    pattern = glob_escape(prefix.encode() + b":") + b"*"
    for name in list(client.scan_iter(match=pattern, count=1000)):
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

    # Out of band: a client of the test's own reads and writes "<prefix>:<key>".
    def raw_get(self, store, key):
        return redis_get(self.url, store, key)

    def raw_set(self, store, key, value):
        redis_set(self.url, store, key, value)


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
    store.stat("g")  # the first call loads the stat script
    sizes = counts(lambda: store.getsize("g"))
    # (getsize of a path first asks for it as a key: one EVALSHA, whose
    # STRLEN and EXISTS the server counts too)
    assert set(sizes) == {"scan", "strlen", "exists", "evalsha"}, sizes
    assert sizes["evalsha"] == 1 and sizes["exists"] == 1 and sizes["strlen"] == 2501
    assert counts(lambda: store.stat("g/7")) == {"evalsha": 1, "strlen": 1}
    assert counts(lambda: store.stat("g/none")) == {"evalsha": 1, "strlen": 1, "exists": 1}
    assert counts(lambda: store.delitems(keys[:100])) == {"del": 1}
    store.get_range("g/200", -1)  # the first call loads the script
    assert counts(lambda: store.get_range("g/200", -1)) == {
        "evalsha": 1, "strlen": 1, "getrange": 1}
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
            first = start if start >= 0 else max(len(value) + start, 0)
            stop = None if length is None else first + length
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


def test_wrong_password_is_refused_at_open_without_the_password(private_redis, caplog):
    caplog.set_level(logging.DEBUG)
    server = private_redis(password="right-one")
    for url in (server.url("wrong-one"), server.url().replace("/0", "/0?password=wrong-one")):
        with pytest.raises(StoreConnectionError, match="refused the credentials") as info:
            RedisStore(url, prefix="p")
        assert "redis://" in str(info.value) and "\n" not in str(info.value)
        assert_no_secret("wrong-one", info.value, caplog)
    with pytest.raises(StoreConnectionError, match="refused the credentials"):
        RedisStore(server.url(), prefix="p")  # no password at all
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
                           "--tls-auth-clients", "no", tls=True, password="tls-secret")
    url = server.url("tls-secret")
    with RedisStore(url, prefix="t", ssl_ca_certs=str(cert)) as store:
        store.setitems({"a/0": b"over tls", "a/1": b"x"})
        assert store.listdir("a") == ["0", "1"]
        assert store.get_range("a/0", -3) == b"tls"
        assert "tls-secret" not in repr(store) and "rediss://:***@127.0.0.1" in repr(store)
        clone = pickle.loads(pickle.dumps(store))
        assert clone["a/0"] == b"over tls"
        clone.close()
    # Without the CA the certificate is refused, at open: TLS is really checked.
    with pytest.raises(StoreConnectionError, match="rediss://:\\*\\*\\*@"):
        RedisStore(url, prefix="t")


def test_every_mode_checks_the_server_at_open(private_redis):
    server = private_redis()
    url = server.url()
    server.stop()
    for mode in ("a", "r", "r+", "w", "w-"):
        with pytest.raises(StoreConnectionError, match=f"127.0.0.1:{server.port}"):
            RedisStore(url, prefix="p", mode=mode)
    server.start()
    store = RedisStore(url, prefix="p", mode="a")
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
    written = {k: bytes.fromhex(v)
               for k, v in zarr2.run(ZARR2_WRITE, url=redis_url, prefix=prefix).items()}
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


# ------------------------------------------- failing fast, clearly and typed
SECRET = "pw-4-sure"
MARGIN = 3.0  # seconds beyond connect_timeout for process and scheduling noise
STARTUP = 15.0  # seconds a command may take to start on a loaded machine (2 cores, shared)


def open_fails(url: str, expected: type[BaseException], limit: float, **options):
    """Open ``url``; the typed error raised within ``limit`` seconds, on one line."""
    started = time.monotonic()
    with pytest.raises(expected) as info:
        open_store(url, **options)
    elapsed = time.monotonic() - started
    assert elapsed < limit, f"{url}: {elapsed:.1f} s"
    assert "\n" not in str(info.value)
    assert SECRET not in chain_text(info.value)
    return info.value


def test_dead_port_and_silent_server_fail_at_open_within_connect_timeout():
    dead = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"
    error = open_fails(dead, StoreConnectionError, 1.0)
    assert "redis://:***@127.0.0.1" in str(error) and "Connection refused" in str(error)
    with silent_server() as port:
        url = f"redis://:{SECRET}@127.0.0.1:{port}/0?socket_timeout=60"
        error = open_fails(f"{url}&connect_timeout=1", StoreConnectionError, 1 + MARGIN)
        assert "within 1 s (connect_timeout)" in str(error)
        started = time.monotonic()
        with pytest.raises(StoreConnectionError):
            RedisStore(url, connect_timeout=0.5)
        assert 0.4 < time.monotonic() - started < 0.5 + MARGIN


def test_connect_timeout_is_checked_and_pickled(redis_url):
    for bad in (0, -1, float("nan"), "5", True):
        with pytest.raises(ValueError, match="connect_timeout"):
            RedisStore(redis_url, prefix="zt-timeout", connect_timeout=bad)
    with pytest.raises(StoreURLError, match="'connect_timeout'.*'soon'"):
        open_store(f"{redis_url}?connect_timeout=soon")
    store = open_store(f"{redis_url}?connect_timeout=2.5&prefix=zt-timeout")
    assert pickle.loads(pickle.dumps(store))._params()["connect_timeout"] == 2.5
    store.close()


def test_unknown_options_are_refused_with_the_known_ones(redis_url):
    secret_url = redis_url.replace("redis://", f"redis://:{SECRET}@", 1)
    error = open_fails(f"{secret_url}?prefx=a", StoreURLError, 1.0)
    message = str(error)
    assert "unknown option 'prefx' for redis://" in message
    for known in ("prefix", "connect_timeout", "socket_timeout", "db", "client_name"):
        assert known in message
    assert "ssl_ca_certs" not in message  # only rediss:// connections take it
    assert "ssl_ca_certs" in client_url_options("rediss")
    open_fails(f"{secret_url}?ssl_ca_certs=/x.pem", StoreURLError, 1.0)
    open_fails(secret_url, StoreURLError, 1.0, prefx="a")  # a keyword typo too
    with pytest.raises(StoreURLError, match="'prefix'.*RedisStore option"):
        RedisStore(f"{redis_url}?prefix=a")  # the constructor takes it as a keyword
    with pytest.raises(StoreURLError, match="'db'.*'x'|Invalid value for 'db'"):
        open_store(f"{secret_url}?db=x")
    # Options redis-py takes as text reach it.
    with open_store(f"{redis_url}?client_name=zt-named&prefix=zt-named") as store:
        assert store.client.client_getname() in ("zt-named", b"zt-named")


def test_out_of_memory_is_a_full_store(private_redis, tmp_path):
    server = private_redis("--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    url = f"{server.url()}?prefix=full"
    code = f"zstores.open_store({url!r})"
    result = fill_until_full(code, tmp_path / "log", size=16 << 10, timeout=120)
    result.assert_store_full()
    assert "out of memory" in result.message and "\n" not in result.message
    assert result.overwrite == "failed"
    with open_store(url) as store:
        check_acknowledged(store, result.acknowledged)
        # A batch is refused whole: MSET runs entirely or not at all.
        batch = {f"batch/{i}": bytes(64 << 10) for i in range(8)}
        with pytest.raises(StoreFullError) as info:
            store.setitems(batch)
        assert info.value.errno == 28 and isinstance(info.value.__cause__, redis.RedisError)
        assert not any(key in store for key in batch)
    delete_half_and_refill(code, lambda: open_store(url), result.acknowledged,
                           tmp_path / "log2", size=16 << 10, writes=10)


def test_server_errors_are_typed(private_redis):
    server = private_redis()
    admin = redis.Redis.from_url(server.url())
    admin.acl_setuser("limited", enabled=True, passwords=["+lim-pw"], keys=["p:*"],
                      commands=["+@all", "-mget", "-unlink"])
    admin.close()
    store = RedisStore(server.url().replace("redis://", "redis://limited:lim-pw@"), prefix="p")
    store.setitems({"a": b"1", "d/x": b"2"})
    with pytest.raises(StoreIOError) as info:
        store.getitems(["a"])  # MGET is denied by the ACL
    assert info.value.errno == 13 and "denied" in str(info.value)
    assert "lim-pw" not in chain_text(info.value)
    with pytest.raises(StoreIOError):
        store.rmdir("d")  # UNLINK denied
    assert store["d/x"] == b"2"
    store.close()


def test_every_public_call_with_the_server_down_is_typed(private_redis):
    server = private_redis()
    store = RedisStore(server.url(), prefix="p")
    store.setitems({"a/b": b"1", "c": b"2"})
    server.kill()
    calls = [lambda: store["a/b"], lambda: store.get_range("a/b", 0, 1),
             lambda: store.getitems(["a/b"]), lambda: store.setitems({"x": b"1"}),
             lambda: store.delitems(["c"]), lambda: store.__delitem__("c"),
             lambda: store.listdir("a"), lambda: list(store), lambda: len(store),
             lambda: store.getsize(), lambda: store.getsize("c"), lambda: store.rmdir("a"),
             lambda: store.rename("c", "d"), lambda: store.rename("a", "e"),
             lambda: store.clear(), lambda: "c" in store]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(StoreConnectionError) as info:
            call()
        assert time.monotonic() - started < 10
        assert not isinstance(info.value, redis.RedisError)
    store.close()  # closing never raises a driver error


#: Bytes of a 96 MiB write the fault tests' relay lets through before it holds the rest:
#: the server has a command cut short in its buffer when the test strikes.
ON_THE_WIRE = 32 << 20


def strike_at_the_cut(relay: CuttingRelay, writer: threading.Thread,
                      strike: Callable[[], Any]) -> tuple[Any, float]:
    """Once ``writer``'s write reaches ``relay``'s cut, ``strike()``; then wait (30 s at
    most) for the writer.  What ``strike`` returned and when; the relay is closed."""
    try:
        assert relay.cut.wait(timeout=60), "the write never reached the relay's cut"
        struck, when = strike(), time.monotonic()
        writer.join(timeout=30)
    finally:
        relay.close()
    return struck, when


def test_server_killed_during_a_large_setitems(private_redis):
    """SIGKILL the server while a 96 MiB setitems (one MULTI/EXEC of two MSETs) is on
    the wire: the call fails typed and at once; after a restart (append-only file,
    fsynced always) the batch is there whole or not at all, and older data is intact.

    The store reaches the server through a relay that passes the first 32 MiB and
    then holds the rest, so the kill lands mid-batch by construction."""
    server = private_redis("--appendonly", "yes", "--appendfsync", "always")
    relay = CuttingRelay(server.port, budget=ON_THE_WIRE)
    store = RedisStore(through(server.url(), relay), prefix="p")
    store.setitems({"old/0": b"kept", "old/1": b"kept too"})
    batch = {f"new/{i}": bytes([i]) * (8 << 20) for i in range(12)}
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            store.setitems(batch)
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - checked below
            outcome.append(error)

    thread = threading.Thread(target=write)
    thread.start()
    _, killed = strike_at_the_cut(relay, thread, server.kill)
    assert not thread.is_alive(), "setitems hung after the server died"
    assert time.monotonic() - killed < 10
    assert outcome and isinstance(outcome[0], StoreConnectionError), outcome
    server.start()  # same port; replays the append-only file
    store = RedisStore(server.url(), prefix="p")
    new = store.getitems(list(batch))
    assert new == {}, f"{len(new)} of {len(batch)} keys of a batch cut short"
    assert store.getitems(["old/0", "old/1"]) == {"old/0": b"kept", "old/1": b"kept too"}
    # (A failed call may still have landed whole: the server can die after
    # EXEC ran and before its reply left.)
    store.close()


@pytest.mark.parametrize("case", ["dead port", "typo", "wrong password"])
def test_cli_and_zfuse_say_one_line_without_the_password(private_redis, mountpoint, case):
    server = private_redis(password=SECRET[::-1])
    url = {"dead port": f"redis://:{SECRET}@127.0.0.1:{free_port()}/0",
           "typo": server.url(SECRET) + "?prefx=a",
           "wrong password": server.url(SECRET)}[case]
    started = time.monotonic()
    done = zstores_cmd("ls", url, timeout=60)
    assert time.monotonic() - started < 5 + MARGIN + STARTUP
    assert done.code != 0 and len(done.err_lines) == 1, done.err
    assert SECRET not in done.out + done.err and "redis://:***@" in done.err
    assert "Traceback" not in done.err and "Warning" not in done.err
    started = time.monotonic()
    mounted = run_zfuse("mount", url, str(mountpoint), timeout=60)
    if str(mountpoint) in zfuse_mounts():  # mounted after all: never leave it behind
        subprocess.run(["fusermount", "-u", "-z", str(mountpoint)], check=False)
        pytest.fail(f"zfuse mounted {url} although the store cannot be opened")
    assert time.monotonic() - started < 5 + MARGIN + STARTUP
    assert mounted.returncode != 0
    lines = [line for line in mounted.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot open store" in lines[0], mounted.stderr
    assert SECRET not in mounted.stdout + mounted.stderr
    assert str(mountpoint) not in zfuse_mounts()


# ------------------------------------------------------------ transactions
def test_transaction_is_never_seen_half_done(store, redis_url):
    """A reader on another connection (one MGET per read, itself atomic) never sees a
    transaction half applied: each commit clears the folder and writes 16 keys of
    64 KiB, all with the round's value, so a torn view shows missing or mixed keys."""
    keys = [f"r/{i}" for i in range(16)]
    store.setitems({key: bytes([0]) * (64 << 10) for key in keys})
    reader = RedisStore(redis_url, prefix=store.prefix)
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for round_ in range(1, 41):
                with store.transaction():
                    store.rmdir("r")
                    store.setitems({key: bytes([round_]) * (64 << 10) for key in keys})
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            stop.set()

    writer = threading.Thread(target=write)
    writer.start()
    views, torn = 0, []
    while not stop.is_set() or views == 0:
        seen = reader.getitems(keys)
        views += 1
        rounds = {value[0] for value in seen.values()}
        if len(seen) != len(keys) or len(rounds) != 1:
            torn.append((len(seen), sorted(rounds)))
    writer.join(60)
    reader.close()
    assert not errors, errors
    assert not torn, f"{len(torn)} of {views} reads saw a commit half done: {torn[:5]}"
    assert store.getitems(keys) == {key: bytes([40]) * (64 << 10) for key in keys}


def test_transaction_clears_keys_added_under_the_prefix_before_the_commit(store, redis_url):
    """rmdir in a transaction deletes what is under the prefix when the commit runs
    (the listing is inside the atomic step), not what was there at rmdir."""
    store.setitems({"a/0": b"old", "b/0": b"kept"})
    other = RedisStore(redis_url, prefix=store.prefix)
    with store.transaction():
        store.rmdir("a")
        store["a/1"] = b"from the transaction"
        other["a/added-before-commit"] = b"another client"
        other["a/*"] = b"glob characters are not a wildcard"
        other["ab"] = b"beside the prefix"
    assert sorted(other.items()) == [("a/1", b"from the transaction"),
                                     ("ab", b"beside the prefix"), ("b/0", b"kept")]
    with store.transaction():
        store.clear()
        store["only"] = b"1"
    assert sorted(other.items()) == [("only", b"1")]
    other.close()


def test_transaction_too_large_for_maxmemory_applies_nothing(private_redis, monkeypatch):
    """A commit that does not fit under maxmemory is refused whole by the server
    (EXECABORT: each queued MSET is checked as it arrives), StoreFullError with
    nothing applied, even when it is several MSETs; the same store commits a
    transaction that fits afterwards."""
    import zstores.stores.redis.store as redis_module

    monkeypatch.setattr(redis_module, "_MSET_BYTES", 1 << 20)  # 1 MSET per MiB
    server = private_redis("--maxmemory", "8mb", "--maxmemory-policy", "noeviction")
    store = RedisStore(server.url(), prefix="p")
    store.setitems({"old/0": b"old", "old/1": b"old"})
    with pytest.raises(StoreFullError) as info:
        with store.transaction():
            assert store["old/0"] == b"old"  # a read: the commit WATCHes it
            store.rmdir("old")
            store.setitems({f"big/{i}": bytes([i]) * (1 << 20) for i in range(16)})
    assert info.value.errno == 28 and "out of memory" in str(info.value)
    assert "nothing of the transaction" in "\n".join(info.value.__notes__)
    # redis-py's note on a pipeline's command lists its values: only its name is kept.
    assert "<memory at" not in chain_text(info.value) and "\\x0" not in chain_text(info.value)
    assert sorted(store.items()) == [("old/0", b"old"), ("old/1", b"old")]
    assert redis.Redis.from_url(server.url()).dbsize() == 2
    with store.transaction():
        store.setitems({f"small/{i}": b"x" * 1000 for i in range(16)})
    assert len(store) == 18
    store.close()


@pytest.mark.parametrize("reads", [False, True], ids=["blind", "with-reads"])
def test_server_killed_during_a_commit(private_redis, reads):
    """SIGKILL the server while a 96 MiB commit (a cleared folder, then 12 values of
    8 MiB) is on the wire: the commit fails typed (also when it WATCHes keys it read,
    which redis-py reports as a WatchError) and at once; after a restart (append-only
    file, fsynced always) the transaction is there whole or not at all.  The kill
    lands mid-commit by construction: the store's relay holds all past 32 MiB."""
    server = private_redis("--appendonly", "yes", "--appendfsync", "always")
    relay = CuttingRelay(server.port, budget=ON_THE_WIRE)
    store = RedisStore(through(server.url(), relay), prefix="p")
    old = {"old/0": b"kept", "old/1": b"kept too"}
    store.setitems(old)
    new = {f"new/{i}": bytes([i]) * (8 << 20) for i in range(12)}
    outcome: list[BaseException | None] = []
    tx = store.transaction(bind_thread=False)
    if reads:
        assert tx["old/0"] == b"kept"
    tx.rmdir("old")
    tx.setitems(new)

    def commit() -> None:
        try:
            tx.commit()
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - checked below
            outcome.append(error)

    thread = threading.Thread(target=commit)
    thread.start()
    _, killed = strike_at_the_cut(relay, thread, server.kill)
    assert not thread.is_alive(), "the commit hung after the server died"
    assert time.monotonic() - killed < 10
    assert outcome and isinstance(outcome[0], StoreConnectionError), outcome
    assert not isinstance(outcome[0], redis.RedisError)
    assert "could not talk to the server" in str(outcome[0])
    server.start()  # same port; replays the append-only file
    store = RedisStore(server.url(), prefix="p")
    after = dict(store.items())
    assert after == old, f"a commit cut short before its EXEC applied: {sorted(after)}"
    with store.transaction():
        store["after"] = b"the store commits again"
    assert store["after"] == b"the store commits again"
    store.close()


def test_transaction_conflict_across_stores(store, redis_url):
    """Two handles read the same key and write it: the second commit fails, naming
    the key, and applies nothing; a rewrite with the same value is no conflict."""
    store["n"] = b"1"
    other = RedisStore(redis_url, prefix=store.prefix)
    first, second = store.transaction(bind_thread=False), other.transaction(bind_thread=False)
    for name, tx in (("first", first), ("second", second)):
        tx["n"] = str(int(tx["n"]) + 1).encode()
        tx["written-by"] = name.encode()
    first.commit()
    with pytest.raises(TransactionConflictError, match="'n'"):
        second.commit()
    assert store["n"] == b"2" and store["written-by"] == b"first"
    third = store.transaction(bind_thread=False)
    assert third["n"] == b"2"
    other["n"] = b"2"  # written again, same value: what the transaction read still holds
    third["m"] = b"3"
    third.commit()
    assert store["m"] == b"3"
    # A transaction that only reads commits only if what it read is still current.
    reading = store.transaction(bind_thread=False)
    assert (reading["n"], reading["m"]) == (b"2", b"3")
    other["m"] = b"4"
    with pytest.raises(TransactionConflictError, match="'m'"):
        reading.commit()
    other.close()


@pytest.mark.parametrize("reads", [False, True], ids=["blind", "with-reads"])
def test_connection_lost_during_a_commit_is_not_retried(private_redis, reads):
    """The server drops the committing connection (CLIENT KILL) while a 96 MiB commit
    is on the wire: the commit raises StoreConnectionError and is never sent again
    (one MULTI on the server), since after a lost reply nobody knows whether EXEC ran.
    The store's relay holds all past 32 MiB, so the drop lands mid-commit by
    construction; a commit sent again would stall at the relay and fail the test."""
    server = private_redis()
    relay = CuttingRelay(server.port, budget=ON_THE_WIRE)
    store = RedisStore(through(server.url(), relay), prefix="p")
    store["old/0"] = b"kept"
    admin = redis.Redis.from_url(server.url())
    admin.client_setname("admin")
    admin.config_resetstat()
    tx = store.transaction(bind_thread=False)
    if reads:
        assert tx["old/0"] == b"kept"
    tx.setitems({f"new/{i}": bytes([i]) * (8 << 20) for i in range(12)})
    outcome: list[BaseException | None] = []

    def commit() -> None:
        try:
            tx.commit()
            outcome.append(None)
        except BaseException as error:  # noqa: BLE001 - checked below
            outcome.append(error)

    thread = threading.Thread(target=commit)
    thread.start()
    killed, _ = strike_at_the_cut(  # the store's connections
        relay, thread, lambda: admin.client_kill_filter(_type="normal", skipme=True))
    assert killed, "no connection of the store to drop"
    assert outcome and isinstance(outcome[0], StoreConnectionError), outcome
    stats = admin.info("commandstats")
    assert stats.get("cmdstat_multi", {}).get("calls", 0) <= 1, stats
    assert stats.get("cmdstat_watch", {}).get("calls", 0) == (1 if reads else 0), stats
    store = RedisStore(server.url(), prefix="p")
    assert sorted(store) == ["old/0"]  # dropped before EXEC: nothing applied
    admin.close()
    store.close()


# ------------------------------------------------------------ wait_replicas
def test_wait_replicas_waits_for_a_replica_and_says_when_none_confirmed(private_redis):
    """With wait_replicas=1 each write returns once the replica has it (read on the replica
    at once, no waiting of the test's); with the replica stopped the write is applied on
    the primary but raises ReplicationTimeoutError naming the option."""
    from zstores.errors import ReplicationTimeoutError

    primary = private_redis()
    replica = private_redis("--replicaof", "127.0.0.1", str(primary.port))
    with redis.Redis(port=replica.port) as watcher:
        while watcher.info("replication").get("master_link_status") != "up":
            time.sleep(0.05)  # the replica's first sync; not a timing assert
    url = f"{primary.url()}?prefix=zw&wait_replicas=1&wait_timeout=0.5"
    store = open_store(url, mode="w")
    on_replica = redis.Redis(port=replica.port)
    try:
        store["a"] = b"1"
        store.setitems({f"b/{i}": b"%d" % i for i in range(20)})
        store.rename("b", "c")
        assert store.set_if_not_exists("lock", b"x")
        with store.transaction():
            store["t"] = store["a"] + b"!"
        # Each write returned only once the replica confirmed it: it is there now.
        assert on_replica.get("zw:a") == b"1" and on_replica.get("zw:t") == b"1!"
        assert on_replica.get("zw:c/19") == b"19" and on_replica.get("zw:b/0") is None
        assert pickle.loads(pickle.dumps(store))._wait_replicas == 1
        replica.kill()
        with pytest.raises(ReplicationTimeoutError) as info:
            store["late"] = b"2"
        assert info.value.errno == errno.ETIMEDOUT and isinstance(info.value, OSError)
        assert "wait_replicas=1" in str(info.value) and "applied" in str(info.value)
        assert store["late"] == b"2"  # applied on the primary all the same
    finally:
        on_replica.close()
        store.close()
    with pytest.raises(ValueError, match="wait_replicas"):
        RedisStore(primary.url(), wait_replicas=-1)
    with pytest.raises(ValueError, match="wait_timeout"):
        RedisStore(primary.url(), wait_replicas=1, wait_timeout=0)
    with redis.Redis.from_url(primary.url()) as client, \
            pytest.raises(ValueError, match="wait_replicas"):
        RedisStore(client, wait_replicas=1)


def test_failed_durable_writes_give_their_connections_back(private_redis):
    """A durable write (wait_replicas=1) that fails on the server gives its pinned
    connection back to the pool: three pools' worth of refused writes (the server out of
    memory), then writes go through again on the same store handle.  (They once stayed
    pinned: the pool filled and every later call said "Too many connections" for good,
    as a cluster failover's failed writes did to every node's pool.)"""
    from zstores._concurrency import ADAPTER_THREADS
    from zstores.errors import StoreFullError

    primary = private_redis("--maxmemory-policy", "noeviction")
    replica = private_redis("--replicaof", "127.0.0.1", str(primary.port))
    with redis.Redis(port=replica.port) as watcher:
        while watcher.info("replication").get("master_link_status") != "up":
            time.sleep(0.05)  # the replica's first sync; not a timing assert
    limit = ADAPTER_THREADS  # the smallest pool the store accepts
    store = open_store(f"{primary.url()}?prefix=zp&wait_replicas=1&wait_timeout=2"
                       f"&max_connections={limit}", mode="w")
    with redis.Redis(port=primary.port) as admin:
        try:
            store["before"] = b"1"
            admin.config_set("maxmemory", 1)  # every write refused: OOM
            for number in range(3 * limit):
                with pytest.raises(StoreFullError):
                    if number % 2:
                        store.setitems({f"a/{number}": b"x", f"b/{number}": b"y"})
                    else:
                        store[f"k{number}"] = b"x"
            admin.config_set("maxmemory", 0)
            store["after"] = b"2"
            store.setitems({f"c/{i}": b"%d" % i for i in range(10)})
            assert store["after"] == b"2"
            assert len(store.getitems([f"c/{i}" for i in range(10)])) == 10
            # the store's pool, the replica's link and this admin connection at most
            assert admin.info("clients")["connected_clients"] <= limit + 2
        finally:
            store.close()
