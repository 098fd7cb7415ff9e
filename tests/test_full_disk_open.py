"""Every local store opens on a full disk, so that its user can read, delete and recover.

Issue #12.  A disk fills up, by another program's file or by the store itself;
the store was closed.  Its user must still be able to open it read-only and
read every value, open it writable and delete (``delitems``, ``rmdir``,
``clear``), and, once deletes or a removed file gave room, write again.

Each scenario runs in a child process (``python -c``), because the ``dbm.gnu``
and ``dbm.ndbm`` flavours live only in the system interpreter
(``.venv-system``); the child imports this module and calls the scenario
function, which asserts as it goes.  File systems are real: a tmpfs and an
ext4 image on a loop device (``full_disk.small_filesystem``), filled to the
last byte.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

import zstores
from zstores.errors import StoreFullError
from zstores.stores._reserve import RESERVE_SUFFIX, free_bytes

from full_disk import check_acknowledged, check_value, fill_until_full, make_value, small_filesystem

ROOT = Path(__file__).resolve().parent.parent
TESTS = str(Path(__file__).resolve().parent)

#: backend -> the interpreter module it needs (None: any Python with zstores).
NEEDS = {"sqlite": None, "lmdb": None, "zip": None, "dumb": None, "directory": None,
         "nested": None, "gnu": "dbm.gnu", "ndbm": "dbm.ndbm"}

#: How the filling writer makes a write durable before it counts as acknowledged:
#: a zip archive's writes are saved by flush(); a dbm's by the sync that ends
#: setitems (gdbm keeps its index in memory until then: a failed write loses
#: every write since the last sync, measured).
FILL_OPTIONS = {"zip": {"flush": "flush"}, "dumb": {"batch": 2}, "gnu": {"batch": 2},
                "ndbm": {"batch": 2}}

#: Flavours whose own files lose acknowledged values when a write meets a full
#: disk (measured on a 4 MiB tmpfs: plain dbm.gnu, no zstores, synced after
#: every write, lost all 113 keys at the failing write in some runs; DBMStore
#: on Berkeley DB's ndbm lost 60, read one back as zeros, or lost values
#: written after deletes).  No open brings them back: for these the
#: store-filled scenario checks the values that survived, deletes and clears.
LOSES_VALUES = {"gnu", "ndbm"}

#: The values a scenario starts with: three folders of four keys.
VALUES = {f"g/{folder}/{i}": make_value(f"g/{folder}/{i}", 1, 3000)
          for folder in "abc" for i in range(4)}


def open_store(backend: str, folder: str, mode: str) -> zstores.Store:
    """The store of ``backend`` in ``folder``, opened with ``mode``."""
    path = os.path.join(folder, "store")
    if backend == "sqlite":
        return zstores.SQLiteStore(path + ".sqlite", mode=mode)
    if backend == "lmdb":
        return zstores.LMDBStore(path + ".lmdb", mode=mode, map_size=1 << 20)
    if backend == "zip":
        return zstores.ZipStore(path + ".zip", mode=mode)
    if backend == "directory":
        return zstores.DirectoryStore(path, mode=mode)
    if backend == "nested":
        return zstores.NestedDirectoryStore(path, mode=mode)
    from zstores.stores.dbm import DBMStore

    flavour = {"dumb": "dbm.dumb", "gnu": "dbm.gnu", "ndbm": "dbm.ndbm"}[backend]
    module = __import__(flavour, fromlist=["open"])
    return DBMStore(path, open=module.open, mode=mode)


def fill_disk(folder: str) -> None:
    """Fill the file system of ``folder`` to its last byte with a file, ``filler``."""
    with open(os.path.join(folder, "filler"), "ab", buffering=0) as filler:
        for step in (1 << 20, 64 << 10, 4096, 512, 1):
            try:
                while True:
                    filler.write(b"\1" * step)
            except OSError as error:
                assert error.errno == errno.ENOSPC, error
    assert free_bytes(folder) < 4096, "the disk did not fill up"


def files(folder: str) -> set[str]:
    """Every file below ``folder`` (relative paths), the filler left out."""
    found = set()
    for where, _, names in os.walk(folder):
        found.update(os.path.relpath(os.path.join(where, name), folder) for name in names)
    return found - {"filler"}


def read_all(store: zstores.Store, expected: dict[str, bytes]) -> None:
    assert sorted(store) == sorted(expected)
    for key, value in expected.items():
        assert store[key] == value, f"{key!r} reads back wrong"


def intact(store: zstores.Store, key: str) -> bool:
    """Whether ``key`` is in ``store`` with a whole, self-checking value."""
    try:
        check_value(key, store[key])
    except (KeyError, AssertionError):
        return False
    return True


def check_reader_leaves_nothing(before: set[str], after: set[str]) -> None:
    """Mode "r" leaves no new files; only a store's reserve (no data) may be gone."""
    assert after <= before, f"mode 'r' left {sorted(after - before)} behind"
    assert all(name.endswith(RESERVE_SUFFIX) for name in before - after), before - after


# ------------------------------------------------------------- the scenarios
def scenario_filled_by_another_file(backend: str, folder: str) -> None:
    """A closed store, a disk filled by another file: read, delete, write again."""
    with open_store(backend, folder, "w") as store:
        store.setitems(VALUES)
    fill_disk(folder)
    expected = dict(VALUES)

    before = files(folder)
    with open_store(backend, folder, "r") as store:
        read_all(store, expected)
    check_reader_leaves_nothing(before, files(folder))

    with open_store(backend, folder, "r+") as store:
        read_all(store, expected)
        store.delitems(["g/a/0", "g/a/1"])
        store.rmdir("g/b")
        expected = {k: v for k, v in expected.items()
                    if not k.startswith("g/b/") and k not in ("g/a/0", "g/a/1")}
        read_all(store, expected)
    with open_store(backend, folder, "r") as store:
        read_all(store, expected)

    with open_store(backend, folder, "a") as store:
        read_all(store, expected)
        store.clear()
        assert len(store) == 0
    # The deletes freed room (inside the store's files, or on the disk):
    # a value as large as one deleted fits again.
    fresh = {"new/0": make_value("new/0", 2, 3000)}
    with open_store(backend, folder, "a") as store:
        store.update(fresh)
    with open_store(backend, folder, "r") as store:
        read_all(store, fresh)

    os.unlink(os.path.join(folder, "filler"))
    fresh.update(VALUES)
    with open_store(backend, folder, "a") as store:
        store.setitems(VALUES)
    with open_store(backend, folder, "r") as store:
        read_all(store, fresh)


def scenario_filled_by_the_store(backend: str, folder: str, log: str) -> None:
    """The store filled the disk itself (``fill_until_full``), then was closed."""
    code = f"__import__('test_full_disk_open').open_store({backend!r}, {folder!r}, 'a')"
    result = fill_until_full(code, Path(log), size=64 << 10, **FILL_OPTIONS.get(backend, {}))
    result.assert_store_full()
    acknowledged = result.acknowledged
    # A store refuses writes before the disk's last bytes are gone (SQLite
    # once its WAL cannot be copied in); other programs then take the rest.
    fill_disk(folder)

    before = files(folder)
    with open_store(backend, folder, "r") as store:
        if backend in LOSES_VALUES:  # what the failed write left is checked instead
            acknowledged = {key: serial for key, serial in acknowledged.items()
                            if intact(store, key)}
        check_acknowledged(store, acknowledged)
    check_reader_leaves_nothing(before, files(folder))
    if not acknowledged:  # the flavour lost everything: opening and clearing still work
        with open_store(backend, folder, "a") as store:
            store.clear()
        return

    keys = sorted(acknowledged)
    doomed, kept = keys[::2], keys[1::2]
    with open_store(backend, folder, "r+") as store:
        check_acknowledged(store, acknowledged)
        store.delitems(doomed)
        assert not any(key in store for key in doomed)
    if backend in LOSES_VALUES:
        # Writes on the still nearly full disk are where these flavours lose
        # values (Berkeley DB acknowledges them, then fails to write its
        # pages at close): opening, reading and deleting is what they keep.
        with open_store(backend, folder, "a") as store:
            store.clear()
        return
    # Half the values are gone: as many new ones as a quarter of them fit.
    again = {f"again/{i}": make_value(f"again/{i}", 3, 64 << 10)
             for i in range(max(len(doomed) // 4, 1))}
    with open_store(backend, folder, "a") as store:
        for key, value in again.items():
            store[key] = value
    with open_store(backend, folder, "r") as store:
        check_acknowledged(store, {key: acknowledged[key] for key in kept})
        for key in again:
            assert check_value(key, store[key]) == 3
        assert not any(key in store for key in doomed)

    with open_store(backend, folder, "a") as store:
        store.rmdir("again")
        store.clear()
    with open_store(backend, folder, "r") as store:
        assert len(store) == 0


def scenario_sqlite_without_reserve(folder: str) -> None:
    """SQLite on a full disk with its reserve deleted by hand: reads, or a clear error."""
    path = os.path.join(folder, "store.sqlite")
    with zstores.SQLiteStore(path, mode="w") as store:
        store.setitems(VALUES)
    os.unlink(path + RESERVE_SUFFIX)
    fill_disk(folder)
    before = files(folder)

    # Reading needs no room: without -wal the file is read immutable.
    with zstores.SQLiteStore(path, mode="r") as store:
        read_all(store, VALUES)
    assert files(folder) == before

    for mode, where in [("a", path), ("r+", path), ("a", os.path.join(folder, "new.sqlite"))]:
        try:
            zstores.SQLiteStore(where, mode=mode)
        except StoreFullError as error:
            assert error.errno == errno.ENOSPC
            message = str(error)
            assert where in message and "disk is full" in message, message
            assert "free space" in message, message
        else:
            raise AssertionError(f"mode {mode!r} opened with no room for the -shm")
        # (SQLite leaves the empty file it made for a new database: valid, empty.)
        assert files(folder) - {"new.sqlite"} == before, "a failed open left files behind"

    os.unlink(os.path.join(folder, "filler"))
    with zstores.SQLiteStore(path, mode="a") as store:
        read_all(store, VALUES)
        store["more"] = b"1"
    assert os.path.exists(path + RESERVE_SUFFIX), "the reserve was not set aside again"


def scenario_lmdb_without_lock_file(folder: str) -> None:
    """LMDB whose lock file is gone (a copied environment) on a full disk: no SIGBUS.

    LMDB makes a new lock file sparse and writes it through a map: on a full
    tmpfs that killed the process.  The store allocates it first, from its
    reserve; without a reserve it says the disk is full.
    """
    path = os.path.join(folder, "store.lmdb")
    with zstores.LMDBStore(path, mode="w", map_size=1 << 20) as store:
        store.setitems(VALUES)
    os.unlink(os.path.join(path, "lock.mdb"))
    fill_disk(folder)
    with zstores.LMDBStore(path, mode="r") as store:
        read_all(store, VALUES)
    with zstores.LMDBStore(path, mode="a") as store:
        store.delitems(["g/a/0"])

    os.unlink(os.path.join(path, "lock.mdb"))
    os.unlink(os.path.join(path, "data.mdb" + RESERVE_SUFFIX))
    fill_disk(folder)
    try:
        zstores.LMDBStore(path, mode="r")
    except StoreFullError as error:
        assert error.errno == errno.ENOSPC and "disk is full" in str(error), error
    else:
        raise AssertionError("LMDB opened with no room for its lock file")
    assert sorted(os.listdir(path)) == ["data.mdb"]
    os.unlink(os.path.join(folder, "filler"))
    with zstores.LMDBStore(path, mode="r") as store:
        read_all(store, {k: v for k, v in VALUES.items() if k != "g/a/0"})


# ------------------------------------------------------------------ running
def python_for(backend: str) -> str:
    """The interpreter that has ``backend``'s module; skips when none has it."""
    module = NEEDS[backend]
    candidates = [sys.executable, str(ROOT / ".venv-system" / "bin" / "python")]
    for python in candidates:
        if module is None:
            return python
        if os.path.exists(python) and subprocess.run(
            [python, "-c", f"import {module}"], capture_output=True, check=False
        ).returncode == 0:
            return python
    pytest.skip(f"no Python here has {module}")


def run_scenario(python: str, call: str) -> None:
    """Run ``call`` (a scenario function call) in a child; fail with its traceback."""
    program = f"import sys; sys.path.insert(0, {TESTS!r})\nimport test_full_disk_open as t\n{call}"
    done = subprocess.run([python, "-c", program], capture_output=True, text=True, timeout=300,
                          cwd=TESTS, check=False)
    assert done.returncode == 0, f"{call} failed:\n{done.stdout[-2000:]}\n{done.stderr[-5000:]}"


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
@pytest.mark.parametrize("backend", sorted(NEEDS))
def test_opens_reads_deletes_and_writes_on_a_disk_filled_by_another_file(backend, kind):
    python = python_for(backend)
    with small_filesystem(4 if kind == "tmpfs" else 8, kind) as folder:
        run_scenario(python, f"t.scenario_filled_by_another_file({backend!r}, {str(folder)!r})")


@pytest.mark.parametrize("backend", sorted(NEEDS))
def test_opens_reads_deletes_and_writes_on_a_disk_the_store_filled(backend, tmp_path):
    python = python_for(backend)
    with small_filesystem(4, "tmpfs") as folder:
        run_scenario(python, f"t.scenario_filled_by_the_store({backend!r}, {str(folder)!r}, "
                             f"{str(tmp_path / 'log')!r})")


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_sqlite_without_its_reserve_reads_or_says_the_disk_is_full(kind):
    with small_filesystem(4 if kind == "tmpfs" else 8, kind) as folder:
        run_scenario(sys.executable, f"t.scenario_sqlite_without_reserve({str(folder)!r})")


def test_lmdb_without_its_lock_file_opens_or_says_the_disk_is_full():
    with small_filesystem(4, "tmpfs") as folder:
        run_scenario(sys.executable, f"t.scenario_lmdb_without_lock_file({str(folder)!r})")


def test_a_failing_scenario_fails(tmp_path):
    """The child's assertion reaches the test: a scenario cannot pass by not running."""
    with pytest.raises(AssertionError, match="read_all"):
        run_scenario(sys.executable, "t.read_all({}, {'missing': b''})")

