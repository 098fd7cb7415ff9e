import base64
import dbm
import dbm.dumb
import errno
import importlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from zstores.errors import CorruptValueError, StaleStoreError, StoreFullError
from zstores.stores._dumb import DumbFiles
from zstores.stores.dbm import DBMStore
from zstores.testing import StoreTests

from full_disk import (
    check_acknowledged,
    check_value,
    delete_half_and_refill,
    fill_until_full,
    make_value,
    small_filesystem,
)
from raw_access import dbm_get, dbm_set
from single_writer import WriterProcess, check_read, check_sees

PYTHON_313 = "/root/.pyenv/versions/3.13.0/bin/python"
ROOT = Path(__file__).resolve().parents[1]


def open_function(flavour):
    """The flavour's ``open`` and "", or None and why it is missing."""
    try:
        return importlib.import_module(flavour).open, ""
    except ImportError as error:
        return None, f"{flavour} is missing in Python {sys.version.split()[0]}: {error}"


class DBMStoreTests(StoreTests):
    flavour = ""

    def open_store(self, location, mode="a"):
        return DBMStore(location, open=open_function(self.flavour)[0], mode=mode)

    def raw_get(self, store, key):
        return dbm_get(store, key, open_function(self.flavour)[0])

    def raw_set(self, store, key, value):
        dbm_set(store, key, value, open_function(self.flavour)[0])


# A flavour missing from this Python is not collected at all (one visible skip
# in test_every_flavour_is_tested instead of one per harness test).
class TestDBMStoreDumb(DBMStoreTests):
    flavour = "dbm.dumb"
    __test__ = open_function(flavour)[0] is not None


class TestDBMStoreGnu(DBMStoreTests):
    flavour = "dbm.gnu"
    __test__ = open_function(flavour)[0] is not None


class TestDBMStoreNdbm(DBMStoreTests):
    flavour = "dbm.ndbm"
    __test__ = open_function(flavour)[0] is not None


class TestDBMStoreSqlite3(DBMStoreTests):
    flavour = "dbm.sqlite3"
    __test__ = open_function(flavour)[0] is not None


FLAVOUR_TESTS = [TestDBMStoreDumb, TestDBMStoreGnu, TestDBMStoreNdbm, TestDBMStoreSqlite3]


@pytest.mark.parametrize("tests", FLAVOUR_TESTS, ids=lambda cls: cls.flavour)
def test_every_flavour_is_tested(tests):
    opener, reason = open_function(tests.flavour)
    if opener is None:
        pytest.skip(f"{tests.__name__} not run: {reason}")
    assert tests.__test__
    assert "StoreTests" in [base.__name__ for base in tests.__mro__]


# -------------------------------------------------------------- behaviour
def test_modes_become_dbm_flags(tmp_path):
    flags = []

    def recording_open(path, flag, *args, **kwargs):
        flags.append(flag)
        return dbm.dumb.open(path, flag, *args, **kwargs)

    path = tmp_path / "db"
    for mode in ("w", "a", "r+", "r"):
        DBMStore(path, open=recording_open, mode=mode).close()
    DBMStore(tmp_path / "new", open=recording_open, mode="w-").close()
    assert flags == ["n", "c", "w", "r", "c"]


def test_default_open_creates_and_recognizes_the_default_flavour(tmp_path):
    path = tmp_path / "db"
    with DBMStore(path, mode="w") as store:
        store["k"] = b"v"
    flavour = dbm.whichdb(str(path))
    assert flavour and flavour.startswith("dbm.")
    with DBMStore(path, open=open_function(flavour)[0], mode="r") as store:
        assert store["k"] == b"v"


def test_keys_are_stored_as_utf8(tmp_path):
    path = tmp_path / "db"
    with DBMStore(path, open=dbm.dumb.open, mode="w") as store:
        store["données/ü"] = b"1"
        store["plain/.zarray"] = b"2"
    with dbm.dumb.open(str(path), "r") as db:
        assert sorted(db.keys()) == [b"donn\xc3\xa9es/\xc3\xbc", b"plain/.zarray"]
        assert db[b"donn\xc3\xa9es/\xc3\xbc"] == b"1"


def test_dumb_batch_delete_rewrites_the_index_once(tmp_path, monkeypatch):
    path = tmp_path / "db"
    store = DBMStore(path, open=dbm.dumb.open, mode="w")
    store.setitems({f"g/{i}": b"x" for i in range(2000)})
    store["keep"] = b"k"
    commits = []
    real_commit = DumbFiles.commit

    def counting_commit(files):
        commits.append(1)
        return real_commit(files)

    monkeypatch.setattr(DumbFiles, "commit", counting_commit)
    store.rmdir("g")
    assert len(commits) == 1  # per-key deletes would rewrite the index 2000 times
    store.delitems(["keep", "missing"])
    assert len(commits) == 2
    store.close()
    with DBMStore(path, open=dbm.dumb.open, mode="r") as again:
        assert len(again) == 0


def test_dumb_fast_paths_keep_dbm_dumbs_own_format(tmp_path):
    """Reads and writes through the store's own descriptor on the data file
    leave a database that dbm.dumb reads as if it had written it itself."""
    path = str(tmp_path / "data")
    with DBMStore(path, open=dbm.dumb.open, mode="w") as store:
        assert store._files is not None  # the fast path is what this tests
        store["grows"] = b"a" * 10
        store["shrinks"] = b"b" * 2000
        store["odd"] = b"c" * 513  # ends past a block boundary: the next is padded
        store.setitems({"batch/0": b"d" * 700, "batch/1": b""})
        store["grows"] = b"A" * 5000  # no longer fits its blocks: appended
        store["shrinks"] = b"B" * 3  # written elsewhere: the old value stays until synced
        del store["odd"]
        expected = {"grows": b"A" * 5000, "shrinks": b"B" * 3, "batch/0": b"d" * 700,
                    "batch/1": b""}
        assert dict(store) == expected
        assert store.getsize("grows") == 5000
    with dbm.dumb.open(path, "r") as db:
        assert {key.decode(): db[key] for key in db} == expected
        assert all(position % 512 == 0 for position, _ in db._index.values())
    with DBMStore(path, open=dbm.dumb.open, mode="r") as store:
        assert dict(store) == expected


def test_one_lock_serializes_every_operation(tmp_path):
    store = DBMStore(tmp_path / "db", open=dbm.dumb.open, mode="w")
    store["k"] = b"v"
    calls = []

    class ProbeLock:
        def __enter__(self):
            calls.append("enter")

        def __exit__(self, *exc):
            calls.append("exit")

    store._lock = ProbeLock()
    operations = [
        lambda: store["k"],
        lambda: store.__setitem__("k", b"w"),
        lambda: "k" in store,
        lambda: list(store),
        lambda: len(store),
        lambda: store.getitems(["k"]),
        lambda: store.setitems({"j": b"1"}),
        lambda: store.delitems(["j"]),
        lambda: store.__delitem__("k"),
    ]
    for operation in operations:
        before = len(calls)
        operation()
        assert calls[before:before + 1] == ["enter"], operation
    store._lock = threading.RLock()
    store.close()


# --------------------------------------------------- Python 3.13 dbm.sqlite3
SQLITE3_SCRIPT = """
import dbm, json, os, pickle, sys, threading, types

root, path = sys.argv[1], sys.argv[2]
# zstores' package __init__ may import numpy, which this interpreter lacks: load
# only the package's modules the dbm store needs.
package = types.ModuleType("zstores")
package.__path__ = [os.path.join(root, "zstores")]
sys.modules["zstores"] = package
import dbm.sqlite3
from zstores.errors import StoreExistsError, StoreNotFoundError
from zstores.stores.dbm import DBMStore

out = {}
with DBMStore(path, open=dbm.sqlite3.open, mode="w") as store:
    store["a/.zarray"] = b"1"
    store["donn\\u00e9es/0"] = b"2"
    store.setitems({"b/0.0": b"3", "b/0.1": b"4"})
    store["a/.zarray"] = b"one"
    del store["b/0.1"]
    out["listdir"] = store.listdir()
    out["listdir_b"] = store.listdir("b")
    out["len"] = len(store)
out["whichdb"] = dbm.whichdb(path)
with DBMStore(path, mode="r") as store:
    out["items"] = {key: store[key].decode() for key in sorted(store)}
    clone = pickle.loads(pickle.dumps(store))
    out["clone"] = sorted(clone)
    clone.close()
with DBMStore(path, open=dbm.sqlite3.open, mode="r+") as store:
    statements = []
    store._run(store._db._cx.set_trace_callback, statements.append)
    store.setitems({f"batch/{i}": b"x" for i in range(50)})
    out["batch statements"] = [s.split()[0] for s in statements if not s.startswith("REPLACE")]
    store.delitems(["b/0.0", *(f"batch/{i}" for i in range(50))])
    # The connection belongs to the thread that opened it; others use it too.
    worker = threading.Thread(target=store.__setitem__, args=("c", b"5"))
    worker.start()
    worker.join()
with dbm.sqlite3.open(path, "r") as db:
    out["raw"] = {key.decode("utf-8"): db[key].decode() for key in db.keys()}
try:
    DBMStore(path, open=dbm.sqlite3.open, mode="w-")
except StoreExistsError:
    out["w-"] = "refused"
try:
    DBMStore(path + "-missing", open=dbm.sqlite3.open, mode="r")
except StoreNotFoundError:
    out["r missing"] = "refused"
with DBMStore(path + "-default", mode="w") as store:
    store["k"] = b"v"
out["default_flavour"] = dbm.whichdb(path + "-default")
with DBMStore(path + "-dbm-open", open=dbm.open, mode="w") as store:
    store["k"] = b"v"
out["dbm_open_flavour"] = dbm.whichdb(path + "-dbm-open")
print(json.dumps(out))
"""


@pytest.mark.skipif(not os.path.exists(PYTHON_313), reason=f"no Python 3.13 at {PYTHON_313}")
def test_python313_dbm_sqlite3(tmp_path):
    done = subprocess.run(
        [PYTHON_313, "-c", SQLITE3_SCRIPT, str(ROOT), str(tmp_path / "db.sqlite")],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["listdir"] == ["a", "b", "données"]
    assert out["listdir_b"] == ["0.0"]
    assert out["len"] == 3
    assert out["whichdb"] == "dbm.sqlite3"
    assert out["items"] == {"a/.zarray": "one", "b/0.0": "3", "données/0": "2"}
    assert out["clone"] == sorted(out["items"])
    assert out["raw"] == {"a/.zarray": "one", "c": "5", "données/0": "2"}
    assert out["batch statements"] == ["BEGIN", "COMMIT"]  # one transaction per batch
    assert out["w-"] == out["r missing"] == "refused"
    assert out["default_flavour"] == "dbm.dumb"  # new databases: dbm.dumb by default
    assert out["dbm_open_flavour"] == "dbm.sqlite3"  # dbm.open picks the first installed


SQLITE3_BESIDE_A_WRITER = """
import dbm.sqlite3, json, os, subprocess, sys, types

root, path = sys.argv[1], sys.argv[2]
package = types.ModuleType("zstores")  # the modules the dbm store needs, as above
package.__path__ = [os.path.join(root, "zstores")]
sys.modules["zstores"] = package
from zstores.stores.dbm import DBMStore

def value(key, serial):
    return f"{key}|{serial}|".encode() * (300 + 700 * ((serial * 7 + len(key)) % 5))

WRITER = '''
import dbm.sqlite3, os, sys, types
package = types.ModuleType("zstores")
package.__path__ = [os.path.join(sys.argv[1], "zstores")]
sys.modules["zstores"] = package
from zstores.stores.dbm import DBMStore
serial = int(sys.argv[3])
def value(key, serial):
    return f"{key}|{serial}|".encode() * (300 + 700 * ((serial * 7 + len(key)) % 5))
with DBMStore(sys.argv[2], open=dbm.sqlite3.open) as store:
    for i in range(serial % 3, 12, 3):
        store.pop(f"k{i}", None)
    for i in range(12):
        if i % 3 != serial % 3:
            store[f"k{i}"] = value(f"k{i}", serial)
'''
with DBMStore(path, open=dbm.sqlite3.open, mode="w") as store:
    for i in range(12):
        store[f"k{i}"] = value(f"k{i}", 0)
reader = DBMStore(path, open=dbm.sqlite3.open, mode="r")
rounds = []
for serial in range(1, 5):
    subprocess.run([sys.executable, "-c", WRITER, root, path, str(serial)], check=True)
    seen = {}
    for key in sorted(reader):
        got = reader[key]
        serial_read = int(got.split(b"|")[1])
        seen[key] = serial_read if got == value(key, serial_read) else -1
    rounds.append(seen)
reader.close()
print(json.dumps(rounds))
"""


@pytest.mark.skipif(not os.path.exists(PYTHON_313), reason=f"no Python 3.13 at {PYTHON_313}")
def test_python313_dbm_sqlite3_reader_beside_a_writer(tmp_path):
    """dbm.sqlite3: a reader opened before a writer process deletes and rewrites keys
    reads each round's values whole (SQLite's own locking; nothing is refused)."""
    done = subprocess.run(
        [PYTHON_313, "-c", SQLITE3_BESIDE_A_WRITER, str(ROOT), str(tmp_path / "db.sqlite")],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    for serial, seen in enumerate(json.loads(done.stdout), start=1):
        assert seen == {f"k{i}": serial for i in range(12) if i % 3 != serial % 3}


# ------------------------------------------------------------ zarr 2 compat
ZARR2_WRITE = """
import base64, dbm.dumb, warnings
import numpy as np
import zarr
warnings.simplefilter("ignore", FutureWarning)  # DBMStore is deprecated in 2.18
store = zarr.DBMStore(path, flag="n", open=dbm.dumb.open if explicit else None)
root = zarr.group(store=store)
root.attrs["title"] = "written by zarr 2"
array = root.create_dataset("sub/arr", shape=(10, 12), chunks=(4, 5), dtype="<i4")
array[:] = 7
array[:] = np.arange(120, dtype="<i4").reshape(10, 12)
array.attrs["units"] = "m"
store.close()
with dbm.dumb.open(path, "r") as db:
    result = {key.decode(): base64.b64encode(db[key]).decode() for key in db.keys()}
"""

ZARR2_READ = """
import base64, dbm.dumb, warnings
import zarr
warnings.simplefilter("ignore", FutureWarning)
store = zarr.DBMStore(path, flag="r", open=dbm.dumb.open)
root = zarr.open_group(store=store, mode="r")
array = root["sub/arr"]
result = {
    "values": {key: base64.b64encode(store[key]).decode() for key in store.keys()},
    "array": array[:].tolist(),
    "attrs": dict(root.attrs),
    "array_attrs": dict(array.attrs),
}
store.close()
"""


def zarr3_read_array(values, path):
    import zarr
    from zarr.core.buffer import cpu

    memory = zarr.storage.MemoryStore({k: cpu.Buffer.from_bytes(v) for k, v in values.items()})
    return zarr.open_array(store=memory, path=path, zarr_format=2, mode="r")[:]


@pytest.mark.parametrize("explicit", [True, False], ids=["dbm.dumb.open", "dbm.open"])
def test_reads_zarr2_dbmstore(tmp_path, zarr2, explicit):
    path = tmp_path / "zarr2.db"
    written = zarr2.run(ZARR2_WRITE, path=str(path), explicit=explicit)
    expected = {k: base64.b64decode(v) for k, v in written.items()}
    assert "sub/arr/.zarray" in expected
    opener = dbm.dumb.open if explicit else dbm.open
    with DBMStore(path, open=opener, mode="r") as store:
        got = dict(store.items())
        assert got == expected
        assert store.listdir() == [".zattrs", ".zgroup", "sub"]
    np.testing.assert_array_equal(zarr3_read_array(got, "sub/arr"), np.arange(120).reshape(10, 12))


def test_zarr2_reads_our_dbmstore(tmp_path, zarr2):
    import zarr

    memory = {}
    group = zarr.open_group(store=zarr.storage.MemoryStore(memory), mode="w", zarr_format=2)
    group.attrs["title"] = "written by zstores"
    array = group.create_array("sub/arr", shape=(10, 12), chunks=(4, 5), dtype="<i4")
    array[:] = np.arange(120, dtype="<i4").reshape(10, 12)
    array.attrs["units"] = "m"
    values = {key: buf.to_bytes() for key, buf in memory.items()}

    path = tmp_path / "ours.db"
    with DBMStore(path, open=dbm.dumb.open, mode="w") as store:
        store["junk"] = b"deleted below"
        store.update(values)
        del store["junk"]
    seen = zarr2.run(ZARR2_READ, path=str(path))
    assert {k: base64.b64decode(v) for k, v in seen["values"].items()} == values
    assert seen["array"] == np.arange(120).reshape(10, 12).tolist()
    assert seen["attrs"] == {"title": "written by zstores"}
    assert seen["array_attrs"] == {"units": "m"}


# ------------------------------------------------------------------ full disks
DUMB_OPEN = "zstores.DBMStore({path!r}, open=__import__('dbm.dumb').dumb.open)"


def check_with_dbm_dumb(path, acknowledged):
    """dbm.dumb itself opens the files and reads every acknowledged value intact."""
    with dbm.dumb.open(str(path), "r") as db:
        for key, serial in acknowledged.items():
            assert check_value(key, db[key.encode()]) >= serial


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_dumb_full_disk_keeps_every_acknowledged_value(tmp_path, kind):
    with small_filesystem(16, kind) as fs:
        path = fs / "db"
        open_code = DUMB_OPEN.format(path=str(path))
        result = fill_until_full(open_code, tmp_path / "log")
        result.assert_store_full()
        assert str(path) in result.message
        assert result.overwrite == "failed"
        assert result.close_error is None
        with DBMStore(path, open=dbm.dumb.open, mode="r") as store:
            check_acknowledged(store, result.acknowledged)
            assert len(store) == len(result.acknowledged)
        check_with_dbm_dumb(path, result.acknowledged)
        delete_half_and_refill(open_code, lambda: DBMStore(path, open=dbm.dumb.open),
                               result.acknowledged, tmp_path / "again")
        with DBMStore(path, open=dbm.dumb.open, mode="r") as store:
            check_with_dbm_dumb(path, {key: 1 for key in store})


def test_dumb_full_disk_error_is_typed_and_changes_nothing(tmp_path):
    with small_filesystem(16, "tmpfs") as fs:
        path = fs / "db"
        store = DBMStore(path, open=dbm.dumb.open, mode="w")
        written = {}
        with pytest.raises(StoreFullError) as caught:
            for n in range(1000):
                key = f"k/{n}"
                store[key] = make_value(key, 1, 64 * 1024)
                written[key] = 1
        error = caught.value
        assert error.errno == errno.ENOSPC and repr(store) in str(error) and key in str(error)
        assert isinstance(error.__cause__, OSError) and error.__cause__.errno == errno.ENOSPC
        sizes = {name: os.path.getsize(fs / name) for name in ("db.dat", "db.dir")}
        first = next(iter(written))
        with pytest.raises(StoreFullError):
            store[first] = make_value(first, 2, 1 << 20)
        with pytest.raises(StoreFullError):
            store.setitems({"x/0": make_value("x/0", 1, 1 << 20)})
        assert {name: os.path.getsize(fs / name) for name in sizes} == sizes
        check_acknowledged(store, written)
        # Deleting on the full disk works, and the space is reused at once.
        store.delitems(list(written)[:5])
        for n in range(5):
            store[f"new/{n}"] = make_value(f"new/{n}", 1, 64 * 1024)
        store.close()
        kept = {key: 1 for key in list(written)[5:]}
        kept.update({f"new/{n}": 1 for n in range(5)})
        check_with_dbm_dumb(path, kept)
        with dbm.dumb.open(str(path), "r") as db:
            assert len(db) == len(kept)


KILLED_WRITER = """
import random, sys
sys.path.insert(0, {tests!r})
from full_disk import make_value
import dbm.dumb, zstores
store = zstores.DBMStore({path!r}, open=dbm.dumb.open)
store["first"] = make_value("first", 0, 10)
print("ready", flush=True)
rng = random.Random({seed})
serial = 0
while True:
    serial += 1
    key = f"k/{{rng.randrange(40)}}"
    action = rng.random()
    if action < 0.6:
        store[key] = make_value(key, serial, rng.choice([100, 600, 5000, 70000]))
    elif action < 0.8:
        store.setitems({{f"b/{{i}}": make_value(f"b/{{i}}", serial, 700) for i in range(3)}})
    else:
        store.delitems([key, f"b/{{rng.randrange(3)}}"])
"""


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_dumb_killed_writer_leaves_files_dbm_dumb_reads(tmp_path, seed):
    path = tmp_path / "db"
    tests = str(Path(__file__).resolve().parent)
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER.format(
        tests=tests, path=str(path), seed=seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout.readline() == b"ready\n", child.communicate()[1].decode()[-2000:]
    time.sleep(0.2 + 0.2 * seed)  # a few hundred writes, deletes and batches
    child.kill()
    _, stderr = child.communicate()
    assert child.returncode == -9, stderr.decode()[-2000:]
    with dbm.dumb.open(str(path), "r") as db:  # dbm.dumb itself, no repair
        assert len(db) > 0
        for raw in db.keys():
            check_value(raw.decode(), db[raw])
    with DBMStore(path, open=dbm.dumb.open) as store:  # and the store goes on
        store["after"] = b"crash"
    with dbm.dumb.open(str(path), "r") as db:
        assert db[b"after"] == b"crash"


def test_dumb_damaged_files_raise_corrupt_value_error(tmp_path):
    path = tmp_path / "db"
    with DBMStore(path, open=dbm.dumb.open, mode="w") as store:
        store["a"] = b"x" * 2000
        store["b"] = b"y" * 10
    with open(tmp_path / "db.dat", "r+b") as data:
        data.truncate(1000)  # cut inside the value of "a"
    with DBMStore(path, open=dbm.dumb.open, mode="r") as store:
        with pytest.raises(CorruptValueError, match="'a'") as caught:
            store["a"]
        assert str(path) in str(caught.value)
    with open(tmp_path / "db.dir", "a") as index:
        index.write("'c', (0,")  # half a line, as dbm.dumb leaves on a full disk
    with pytest.raises(CorruptValueError, match="index is damaged"):
        DBMStore(path, open=dbm.dumb.open, mode="r")


SQLITE3_FULL_SCRIPT = """
import dbm.sqlite3, errno, hashlib, json, os, sys, types
package = types.ModuleType("zstores")  # as SQLITE3_SCRIPT: only the modules needed
package.__path__ = [os.path.join(sys.argv[1], "zstores")]
sys.modules["zstores"] = package
from zstores.stores.dbm import DBMStore
from zstores.errors import StoreFullError

def value(key, serial, size=64 * 1024):
    seed = hashlib.sha256(f"{key}|{serial}".encode()).digest()
    return (seed * (size // 32 + 1))[:size]

path, out = sys.argv[2], {}
with open(sys.argv[3], "wb") as ballast:  # room that can be made later
    ballast.write(bytes(12 << 20))
store = DBMStore(path, open=dbm.sqlite3.open, mode="w")
written = []
try:
    for n in range(100_000):
        store[f"k/{n}"] = value(f"k/{n}", 1)
        written.append(f"k/{n}")
except Exception as error:
    out["error"] = [f"{c.__module__}.{c.__qualname__}" for c in type(error).__mro__]
    out["errno"] = error.errno
    out["message"] = str(error)
    out["cause"] = repr(error.__cause__)
try:
    store[written[0]] = value(written[0], 2, 4 << 20)
    out["overwrite"] = "succeeded"
except StoreFullError:
    out["overwrite"] = "failed"
store.close()
with DBMStore(path, open=dbm.sqlite3.open, mode="r") as store:
    first = 2 if out["overwrite"] == "succeeded" else 1
    out["intact"] = all(store[key] == value(key, first if key == written[0] else 1,
                                            len(store[key])) for key in written)
    out["count"] = [len(store), len(written)]
# SQLite logs a delete in its WAL before it frees pages: on a disk with no
# room at all for that log the delete fails, typed, and changes nothing.
with DBMStore(path, open=dbm.sqlite3.open) as store:
    try:
        store.delitems(written[::2])
        out["delete"] = "succeeded"
    except StoreFullError as error:
        out["delete"] = "failed"
        out["delete_errno"] = error.errno
        out["kept"] = len(store) == len(written)
if out["delete"] == "failed":  # room made elsewhere on the disk: it works
    os.unlink(sys.argv[3])
    with DBMStore(path, open=dbm.sqlite3.open) as store:
        store.delitems(written[::2])
with DBMStore(path, open=dbm.sqlite3.open) as store:
    for n in range(20):
        store[f"again/{n}"] = value(f"again/{n}", 2)
with DBMStore(path, open=dbm.sqlite3.open, mode="r") as store:
    out["after"] = sorted(store) == sorted([*written[1::2], *(f"again/{n}" for n in range(20))])
    out["after_intact"] = all(store[f"again/{n}"] == value(f"again/{n}", 2) for n in range(20))
print(json.dumps(out))
"""


@pytest.mark.skipif(not os.path.exists(PYTHON_313), reason=f"no Python 3.13 at {PYTHON_313}")
def test_python313_dbm_sqlite3_full_disk_is_typed(tmp_path):
    with small_filesystem(32, "tmpfs") as fs:
        done = subprocess.run(
            [PYTHON_313, "-c", SQLITE3_FULL_SCRIPT, str(ROOT), str(fs / "db.sqlite"),
             str(fs / "ballast")],
            capture_output=True, text=True, timeout=300, check=False,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert "zstores.errors.StoreFullError" in out["error"], out
    assert out["errno"] == errno.ENOSPC and "db.sqlite" in out["message"]
    assert "full" in out["cause"]
    assert out["intact"] and out["count"][0] == out["count"][1] > 10
    if out["delete"] == "failed":
        assert out["delete_errno"] == errno.ENOSPC and out["kept"]
    assert out["after"] and out["after_intact"]


FLAVOUR_FULL_SCRIPT = """
import importlib, json, sys
from zstores.stores.dbm import DBMStore
flavour, path = sys.argv[1], sys.argv[2]
store = DBMStore(path, open=importlib.import_module(flavour).open, mode="w")
out = {}
try:
    for n in range(100_000):
        store[f"k/{n}"] = bytes(64 * 1024)
except Exception as error:
    out["error"] = [f"{c.__module__}.{c.__qualname__}" for c in type(error).__mro__]
    out["errno"], out["message"] = error.errno, str(error)
    out["cause"] = type(error.__cause__).__module__
try:
    store.close()
except Exception as error:
    out["close"] = [f"{c.__module__}.{c.__qualname__}" for c in type(error).__mro__]
print(json.dumps(out))
"""


@pytest.mark.parametrize("flavour", ["dbm.gnu", "dbm.ndbm"])
def test_gnu_and_ndbm_full_disk_errors_are_typed(flavour):
    """dbm.gnu and dbm.ndbm, under a Python that has them: a full disk is a StoreFullError.

    (Their engines are not safe on a full disk: gdbm can lose the key whose
    write failed, Berkeley DB values still in its cache; the docs say so.)
    """
    python = os.environ.get("ZSTORES_DBM_PYTHON") or str(ROOT / ".venv-system" / "bin" / "python")
    if not os.path.exists(python):
        pytest.skip(f"no Python with {flavour} at {python}")
    with small_filesystem(16, "tmpfs") as fs:
        done = subprocess.run([python, "-c", FLAVOUR_FULL_SCRIPT, flavour, str(fs / "db")],
                              capture_output=True, text=True, cwd=ROOT, timeout=300,
                              check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert "zstores.errors.StoreFullError" in out["error"], out
    assert out["errno"] == errno.ENOSPC and str(fs / "db") in out["message"]
    assert out["cause"] in ("_gdbm", "_dbm", "dbm.gnu", "dbm.ndbm"), out
    assert "close" not in out or "zstores.errors.StoreIOError" in out["close"], out


# ------------------------------------------------- a reader beside a writer process
def _dumb_writer(path, **options) -> WriterProcess:
    return WriterProcess(f"zstores.DBMStore({str(path)!r}, open=dbm.dumb.open)", **options)


def test_a_dumb_reader_opened_before_a_writer_rewrites_sees_each_value(tmp_path):
    """Each round deletes (a new .dir), rewrites in new sizes (appended lines) and
    rewrites into the space just freed: the reader reads the index again and serves
    every new value (the code before served another key's bytes)."""
    path = tmp_path / "data"
    with _dumb_writer(path) as writer:
        with DBMStore(path, open=dbm.dumb.open, mode="r") as reader:
            check_sees(reader, writer.visible, writer.keys)
            for _ in range(6):
                check_sees(reader, writer.round(), writer.keys)


def test_a_dumb_reader_follows_a_database_made_anew(tmp_path):
    """Mode "w" removes and recreates the files: the reader reads the new ones."""
    path = tmp_path / "data"
    with DBMStore(path, open=dbm.dumb.open, mode="w") as store:
        store.update({f"k{i}": make_value(f"k{i}", 0, 5000) for i in range(6)})
    reader = DBMStore(path, open=dbm.dumb.open, mode="r")
    check_sees(reader, {f"k{i}": 0 for i in range(6)}, 6)
    code = (f"import dbm.dumb, zstores, sys; sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
            "from full_disk import make_value\n"
            f"with zstores.DBMStore({str(path)!r}, open=dbm.dumb.open, mode='w') as s:\n"
            "    s.update({f'k{i}': make_value(f'k{i}', 1, 700) for i in range(0, 6, 2)})\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    check_sees(reader, {f"k{i}": 1 for i in range(0, 6, 2)}, 6)
    reader.close()


@pytest.fixture
def paused_dumb_reads(monkeypatch):
    """Make the next read of ``state["key"]`` stop inside its pread until ``state["go"]``."""
    state = {"key": None, "reading": threading.Event(), "go": threading.Event()}
    real = DumbFiles._read_at

    def read_at(self, position, size):
        if state["key"] is not None and size > 100:
            state["key"] = None
            state["reading"].set()
            assert state["go"].wait(60)
        return real(self, position, size)

    monkeypatch.setattr(DumbFiles, "_read_at", read_at)
    return state


def test_a_dumb_read_the_writer_overtakes_returns_one_whole_version(tmp_path, paused_dumb_reads):
    """A read stopped inside its pread while a whole writer round runs (its space
    given to other values): the old value, or the new one read again; never the
    bytes now there."""
    path = tmp_path / "data"
    state = paused_dumb_reads
    outcomes = []
    with _dumb_writer(path) as writer:
        reader = DBMStore(path, open=dbm.dumb.open, mode="r")
        reader["k0"]  # the index read once, before any pause
        for round_number in range(1, 10):
            before = dict(writer.visible)
            key = sorted(before)[round_number % len(before)]
            state["reading"], state["go"] = threading.Event(), threading.Event()
            state["key"] = key
            result: list = []
            thread = threading.Thread(target=lambda key=key, result=result: result.append(
                check_read(key, lambda: reader[key])))
            thread.start()
            assert state["reading"].wait(30)
            after = writer.round()
            state["go"].set()
            thread.join(60)
            assert result and result[0] in ("value", "missing"), result
            if result[0] == "missing":
                assert key not in after
            outcomes.append(result[0])
        reader.close()
    assert "value" in outcomes


def test_dumb_readers_beside_a_busy_writer_never_get_wrong_bytes(tmp_path):
    """The stress variant: 40 rounds run on their own while this process reads."""
    path = tmp_path / "data"
    seen = {"value": 0, "missing": 0, "stale": 0}
    with _dumb_writer(path, keys=8) as writer:
        reader = DBMStore(path, open=dbm.dumb.open, mode="r")
        done = threading.Event()
        writer.run_rounds(40)
        waiter = threading.Thread(target=lambda: (writer.wait(), done.set()))
        waiter.start()
        reads = 0
        # One pass over the keys at least, even if the writer's rounds all ran
        # before this thread got a core (a busy machine).
        while reads < 8 or (not done.is_set() and reads < 200_000):
            key = f"k{reads % 8}"
            seen[check_read(key, lambda key=key: reader[key])] += 1
            reads += 1
        waiter.join()
        check_sees(reader, writer.visible, writer.keys)
        reader.close()
    assert seen["value"] > 0, seen


def test_a_dumb_read_overtaken_at_every_attempt_raises_stale_store_error(tmp_path, monkeypatch):
    """A writer that rewrites the key during each of the 4 attempts: one StaleStoreError
    (ESTALE) naming the store and key; once it stops, the newest value."""
    path = tmp_path / "data"
    writer = DBMStore(path, open=dbm.dumb.open, mode="w")
    writer["k"] = make_value("k", 1, 5000)
    reader = DBMStore(path, open=dbm.dumb.open, mode="r")
    real = DumbFiles._read_at
    rounds = []

    def read_at(self, position, size):
        if not self._writable and writer is not None:
            rounds.append(1)
            writer["k"] = make_value("k", 1 + len(rounds), 7000)
        return real(self, position, size)

    monkeypatch.setattr(DumbFiles, "_read_at", read_at)
    with pytest.raises(StaleStoreError) as caught:
        reader["k"]
    assert caught.value.errno == errno.ESTALE and len(rounds) == 4
    assert repr(reader) in str(caught.value) and "'k'" in str(caught.value)
    writer.close()
    writer = None
    assert check_value("k", reader["k"]) == 5
    reader.close()
