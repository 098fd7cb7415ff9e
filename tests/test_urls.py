"""open_store: one URL (or path) picks and configures any backend."""

from __future__ import annotations

import dbm.dumb
import time
import zipfile

import pytest

from zstores.adapters import zarr_store
from zstores.errors import StoreConnectionError, StoreNotFoundError
from zstores.stores.dbm import DBMStore
from zstores.stores.directory import DirectoryStore, NestedDirectoryStore
from zstores.stores.lmdb import LMDBStore
from zstores.stores.memory import MemoryStore
from zstores.stores.sqlite import SQLiteStore
from zstores.stores.zip import ZipStore
from zstores.urls import SCHEMES, StoreURLError, is_read_only_url, open_store, redact_url

from servers import free_port, silent_server


def opened(url, **kwargs):
    store = open_store(url, **kwargs)
    store.close()
    return store


# ------------------------------------------------------------------ schemes
@pytest.mark.parametrize(
    ("url", "cls", "location"),
    [
        ("file://{root}/d", DirectoryStore, "d"),
        ("nested://{root}/n", NestedDirectoryStore, "n"),
        ("zip://{root}/a.zip", ZipStore, "a.zip"),
        ("dbm://{root}/db?open=dumb", DBMStore, "db"),
        ("lmdb://{root}/l.lmdb", LMDBStore, "l.lmdb"),
        ("sqlite://{root}/s.sqlite", SQLiteStore, "s.sqlite"),
    ],
)
def test_each_scheme_opens_its_store_at_the_absolute_path(tmp_path, url, cls, location):
    store = open_store(url.format(root=tmp_path))
    store["a/b"] = b"value"
    assert type(store) is cls
    assert store._params()["path"] == str(tmp_path / location)
    store.close()
    with open_store(url.format(root=tmp_path), mode="r") as again:
        assert again["a/b"] == b"value"


@pytest.mark.parametrize("url, expected", [
    ("http://127.0.0.1:1/data.zarr", True),
    ("HTTPS://example.org/data.zarr?connect_timeout=2", True),
    ("lmdb:///tmp/x.lmdb", False),
    ("s3://bucket/prefix", False),
    ("/tmp/plain/folder", False),
    ("/tmp/archive.zip", False),
    ("unknown-scheme://x", False),
])
def test_is_read_only_url_answers_from_the_scheme_table(url, expected):
    # Tools (zfuse mount) ask this rather than hard-coding which schemes only read.
    assert is_read_only_url(url) is expected


def test_read_only_schemes_are_the_read_only_stores():
    read_only = {name for name, spec in SCHEMES.items() if spec.read_only}
    assert read_only == {"http", "https"}
    from zstores.stores.objectstore import HTTPStore

    for name in read_only:
        assert SCHEMES[name].load(name) is HTTPStore


def test_memory_scheme():
    store = open_store("memory://")
    assert type(store) is MemoryStore and not store.read_only
    assert open_store("memory://", mode="r").read_only


def test_relative_path_after_the_scheme(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = opened("lmdb://rel/x.lmdb")
    assert store.path == str(tmp_path / "rel" / "x.lmdb")
    assert (tmp_path / "rel" / "x.lmdb" / "data.mdb").is_file()


def test_path_is_percent_decoded(tmp_path):
    store = opened(f"file://{tmp_path}/with%20space")
    assert store.path == str(tmp_path / "with space")


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("a.zip", ZipStore), ("A.ZIP", ZipStore), ("a.lmdb", LMDBStore), ("a.sqlite", SQLiteStore),
        ("a.sqlite3", SQLiteStore), ("a.db", SQLiteStore), ("a.zarr", DirectoryStore),
        ("plain", DirectoryStore),
    ],
)
def test_plain_path_picks_backend_by_ending(tmp_path, name, cls):
    assert type(opened(str(tmp_path / name))) is cls
    assert type(opened(tmp_path / f"p{name}")) is cls  # os.PathLike too


def test_mdb_ending_is_an_lmdb_data_file(tmp_path):
    store = opened(str(tmp_path / "x.mdb"))
    assert type(store) is LMDBStore
    assert (tmp_path / "x.mdb").is_file()  # the data file itself, no folder


def test_plain_path_keeps_question_marks_and_percents(tmp_path):
    store = opened(str(tmp_path / "odd?name%20"))
    assert store.path == str(tmp_path / "odd?name%20")


def test_scheme_table_is_the_one_place():
    assert {"file", "nested", "zip", "dbm", "lmdb", "sqlite", "redis", "rediss", "mongodb",
            "memory"} <= set(SCHEMES)


# ------------------------------------------------------------------ options
def test_query_options_are_converted_to_annotated_types(tmp_path):
    store = opened(f"file://{tmp_path}/d?fsync=TRUE&normalize_keys=0")
    assert store._params()["fsync"] is True and store._params()["normalize_keys"] is False
    sqlite = opened(f"sqlite://{tmp_path}/s.db?timeout=2.5&table=arrays")
    assert sqlite._params()["timeout"] == 2.5 and sqlite._params()["table"] == "arrays"
    with open_store(f"lmdb://{tmp_path}/l?map_size=1048576&sync=yes&writemap=false") as lmdb:
        assert lmdb.map_size == 1 << 20
        params = lmdb._params()
        assert params["map_size"] == 1 << 20 and params["sync"] is True
        assert params["writemap"] is False
    assert opened(f"lmdb://{tmp_path}/m?map_size=none")._params()["map_size"] is None


def test_normalize_keys_from_url_takes_effect(tmp_path):
    with open_store(f"file://{tmp_path}/d?normalize_keys=on") as store:
        store["FOO/Bar"] = b"x"
        assert list(store) == ["foo/bar"]


def test_zip_compression_by_name_or_number(tmp_path):
    for query, expected in (("deflated", zipfile.ZIP_DEFLATED), ("8", zipfile.ZIP_DEFLATED),
                            ("stored", zipfile.ZIP_STORED)):
        path = tmp_path / f"{query}.zip"
        with open_store(f"zip://{path}?compression={query}") as store:
            store["k"] = b"a" * 1000
        with zipfile.ZipFile(path) as archive:
            assert archive.getinfo("k").compress_type == expected
    with pytest.raises(StoreURLError, match="compression.*'gzip'.*expected one of"):
        open_store(f"zip://{tmp_path}/x.zip?compression=gzip")


def test_dbm_flavour_by_name(tmp_path):
    store = opened(f"dbm://{tmp_path}/d?open=dumb")
    assert store._params()["open"] is dbm.dumb.open
    assert (tmp_path / "d.dat").exists()
    with pytest.raises(StoreURLError, match="'open'.*'berkeley'.*dumb, gnu, ndbm, sqlite3"):
        open_store(f"dbm://{tmp_path}/e?open=berkeley")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("fsync=maybe", r"option 'fsync' of file:// in .* bad value 'maybe': expected bool"),
        ("fsync", "query parameter 'fsync' .* has no value"),
        ("fsync=1&fsync=0", "query parameter 'fsync' is given twice"),
        ("bogus=1", "unknown option 'bogus' for file://.*known options: fsync, normalize_keys"),
        ("mode=r", "give the mode as open_store"),
    ],
)
def test_bad_query_options(tmp_path, query, message):
    with pytest.raises(StoreURLError, match=message):
        open_store(f"file://{tmp_path}/d?{query}")


def test_bad_int_names_the_type(tmp_path):
    with pytest.raises(StoreURLError, match=r"'map_size'.*'1GB'.*expected none or int"):
        open_store(f"lmdb://{tmp_path}/l?map_size=1GB")


def test_keyword_options(tmp_path):
    assert opened(f"file://{tmp_path}/d", fsync=True)._params()["fsync"] is True
    with pytest.raises(StoreURLError, match="'fsync' is given both"):
        open_store(f"file://{tmp_path}/d?fsync=1", fsync=True)
    with pytest.raises(StoreURLError, match="unknown option 'colour'.*fsync, normalize_keys"):
        open_store(f"file://{tmp_path}/d", colour="red")


def test_mode_reaches_the_store(tmp_path):
    with pytest.raises(StoreNotFoundError):
        open_store(f"sqlite://{tmp_path}/missing.sqlite", mode="r")
    with pytest.raises(ValueError, match="invalid mode 'x'"):
        open_store(f"sqlite://{tmp_path}/s.sqlite", mode="x")


def test_unknown_scheme_lists_the_known_ones():
    with pytest.raises(StoreURLError) as caught:
        open_store("s4://bucket/data")
    message = str(caught.value)
    assert "unknown scheme 's4'" in message
    for scheme in ("file://", "lmdb://", "sqlite://", "redis://", "mongodb://", "memory://"):
        assert scheme in message


def test_paths_are_required_and_memory_takes_none():
    with pytest.raises(StoreURLError, match="names no path"):
        open_store("sqlite://?table=t")
    with pytest.raises(StoreURLError, match="memory:// takes no path"):
        open_store("memory://somewhere")


# -------------------------------------------------------------- credentials
def test_redact_url():
    assert redact_url("redis://user:s3cret@h:6379/0") == "redis://user:***@h:6379/0"
    assert redact_url("rediss://:s3cret@h/0?db=1") == "rediss://:***@h/0?db=1"
    assert redact_url("mongodb://u:p@h/?password=x&w=1") == "mongodb://u:***@h/?password=***&w=1"
    assert redact_url("/data/a@b:c") == "/data/a@b:c"


def test_secrets_live_in_one_module():
    # zstores.urls.redact_url and StoreURLError stay importable (documented) and are
    # the one implementation, not copies.
    import zstores.errors
    import zstores.secrets
    import zstores.urls

    assert zstores.urls.redact_url is zstores.secrets.redact_url
    assert zstores.urls.StoreURLError is zstores.errors.StoreURLError
    assert zstores.secrets.secrets_of("mongodb://u:p%40ss@h/?password=x") == ["p%40ss", "p@ss", "x"]
    assert zstores.secrets.scrub("a p@ss\nb p%40ss", ["p@ss", "p%40ss"]) == "a *** b ***"


def _imports_of(path) -> set[str]:
    """The absolute module names a source file imports (relative ones resolved)."""
    import ast

    package = "zstores." + ".".join(path.relative_to(path.parents[1]).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                found.add(f"{base}.{node.module}" if node.module else base)
            else:
                found.add(node.module or "")
    return found


def test_stores_import_neither_urls_nor_sync():
    """The layers point one way: urls (the factory) and sync build on stores, never
    the reverse (issue #14)."""
    from pathlib import Path

    import zstores.stores

    folder = Path(zstores.stores.__file__).parent
    wrong = {f"{path.name}: {name}" for path in sorted(folder.glob("*.py"))
             for name in _imports_of(path)
             if name.startswith(("zstores.urls", "zstores.sync"))}
    assert not wrong, wrong


def test_opening_a_single_writer_store_loads_no_synchronizer():
    # (zstores/__init__ imports urls for open_store, so only sync can be checked here.)
    import subprocess
    import sys

    code = ("import sys, tempfile, os; from zstores.stores.zip import ZipStore; "
            "from zstores.stores.dbm import DBMStore; from zstores.stores.redis import RedisStore; "
            "d = tempfile.mkdtemp(); ZipStore(os.path.join(d, 'a.zip'), mode='w').close(); "
            "DBMStore(os.path.join(d, 'a.db'), mode='w').close(); "
            "print(sorted(m for m in sys.modules if m.startswith('zstores.sync')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]", result.stdout


@pytest.mark.parametrize(
    "url",
    [
        "nope://user:s3cret@host/x",
        "file://user:s3cret@host/x?fsync=perhaps",
        "file://user:s3cret@host/x?password=s3cret&colour=red",
    ],
)
def test_errors_never_show_passwords(url):
    with pytest.raises(StoreURLError) as caught:
        open_store(url)
    assert "s3cret" not in str(caught.value)
    assert "***" in str(caught.value)


# ---------------------------------------------------------- network stores
def test_redis_url_reaches_the_client_without_zstores_options(redis_url):
    url = redis_url
    import redis

    joiner = "&" if "?" in url else "?"
    with open_store(f"{url}{joiner}prefix=zstores-url-test&socket_timeout=5") as store:
        store["a/b"] = b"v"
        client = redis.Redis.from_url(url)
        assert client.get("zstores-url-test:a/b") == b"v"
        # the client got its own option in the URL; zstores took prefix out of it
        assert store._params()["url"].endswith("?socket_timeout=5")
        assert store._client.connection_pool.connection_kwargs["socket_timeout"] == 5
        store.clear()
    with pytest.raises(StoreURLError, match="unknown scheme"):
        open_store(url.replace("redis", "redix", 1))


def test_redis_repr_hides_the_password(private_redis):
    server = private_redis(password="s3cret")
    store = open_store(f"{server.url('s3cret')}?prefix=p")
    assert "s3cret" not in repr(store)
    assert "s3cret" not in repr(zarr_store(store))
    store.close()


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("redis://:s3cret@127.0.0.1:{port}/0?prefx=a", ["prefix", "connect_timeout", "db"]),
        ("rediss://:s3cret@127.0.0.1:{port}/0?ssl_ca_cert=x", ["ssl_ca_certs"]),
        ("mongodb://u:s3cret@127.0.0.1:{port}/?databse=d", ["database", "authsource"]),
        ("mongodb://u:s3cret@127.0.0.1:{port}/?w=-1", ["w"]),
    ],
)
def test_network_url_options_are_checked_before_connecting(url, names):
    """A typo is reported as such, at once, even when no server listens."""
    started = time.monotonic()
    with pytest.raises(StoreURLError) as caught:
        open_store(url.format(port=free_port()))
    assert time.monotonic() - started < 1
    message = str(caught.value)
    assert "s3cret" not in message and "***" in message and "\n" not in message
    for name in names:
        assert name in message.lower()


def test_network_stores_take_connect_timeout_from_the_url():
    started = time.monotonic()
    with silent_server() as port, pytest.raises(StoreConnectionError, match="within 0.5 s"):
        open_store(f"redis://127.0.0.1:{port}/0?connect_timeout=0.5")
    assert time.monotonic() - started < 3


# -------------------------------------------------------- entry-point plugins
PLUGIN = '''
from zstores.stores.memory import MemoryStore

class DemoStore(MemoryStore):
    """A MemoryStore that records where it was pointed."""

    def __init__(self, where: str, *, size: int = 0, ratio: float = 1.0, mode="a"):
        super().__init__(mode=mode)
        self.where, self.size, self.ratio = where, size, ratio
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A distribution on sys.path whose entry point registers the demo:// scheme."""
    site = tmp_path / "site"
    (site / "zstores_demo_plugin-1.0.dist-info").mkdir(parents=True)
    (site / "zstores_demo_plugin.py").write_text(PLUGIN)
    info = site / "zstores_demo_plugin-1.0.dist-info"
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: zstores-demo-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[zstores.stores]\ndemo = zstores_demo_plugin:DemoStore\n"
        "file = zstores_demo_plugin:DemoStore\n"
    )
    monkeypatch.syspath_prepend(str(site))
    yield
    import sys

    sys.modules.pop("zstores_demo_plugin", None)


def test_entry_point_registers_a_scheme(plugin):
    store = open_store("demo://over/there?size=3&ratio=0.5", mode="r")
    assert type(store).__name__ == "DemoStore"
    assert (store.where, store.size, store.ratio, store.read_only) == ("over/there", 3, 0.5, True)
    with pytest.raises(StoreURLError) as caught:
        open_store("s4://x")
    assert "demo://" in str(caught.value)


def test_entry_point_options_are_checked(plugin):
    with pytest.raises(StoreURLError, match="unknown option 'colour' for demo://.*ratio, size"):
        open_store("demo://x?colour=red")
    with pytest.raises(StoreURLError, match="'size' of demo:// .*'big'.*expected int"):
        open_store("demo://user:s3cret@x?size=big")


def test_entry_point_cannot_replace_a_builtin_scheme(plugin, tmp_path):
    assert type(opened(f"file://{tmp_path}/d")) is DirectoryStore


def test_without_the_plugin_the_scheme_is_unknown():
    with pytest.raises(StoreURLError, match="unknown scheme 'demo'"):
        open_store("demo://x")
