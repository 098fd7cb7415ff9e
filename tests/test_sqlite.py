"""SQLiteStore: the conformance harness (file and ":memory:") plus query plans,
threads, shared files and zarr-python 2 compatibility."""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import pickle
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from zstores.errors import (
    CorruptValueError,
    InvalidKeyError,
    ReadOnlyError,
    StoreFullError,
    StoreLockedError,
    StoreNotFoundError,
    UnsupportedOperationError,
)
from zstores.stores.sqlite import SQLiteStore
from zstores.stores.sqlite import connection as sqlite_connection
from zstores.stores.sqlite import store as sqlite_store
from zstores.testing import StoreTests

from conftest import missing_peer
from full_disk import (
    check_acknowledged,
    delete_half_and_refill,
    fill_until_full,
    make_value,
    small_filesystem,
)
from raw_access import sqlite_get, sqlite_set
from zarr2_roundtrip import check_reads_what_zarr2_wrote, check_zarr2_reads_what_we_wrote


class TestSQLiteStore(StoreTests):
    def open_store(self, location, mode="a"):
        return SQLiteStore(location, mode=mode)

    def raw_get(self, store, key):
        return sqlite_get(store, key)

    def raw_set(self, store, key, value):
        sqlite_set(store, key, value)


class TestSQLiteMemoryStore(TestSQLiteStore):
    # Its raw hooks skip: a ":memory:" database has no second connection.
    def open_store(self, location, mode="a"):
        return SQLiteStore(":memory:", mode=mode)


def test_memory_store_is_not_persistent_and_pickles_its_data():
    store = SQLiteStore(":memory:", table="scratch")
    store["a/b"] = b"1"
    assert not store.persistent and not store.supports_process_writers
    assert SQLiteStore.persistent and SQLiteStore.supports_process_writers
    clone = pickle.loads(pickle.dumps(store))
    assert clone.table == "scratch"
    assert dict(clone.items()) == {"a/b": b"1"}
    assert clone != store
    clone.close()
    store.close()


# ------------------------------------------------------------ query plans
def test_prefix_queries_use_the_primary_key_index(tmp_path):
    store = SQLiteStore(tmp_path / "db.sqlite")
    store.update({f"g/{name}/{i}": b"x" * i for name in ["a_b", "axb", "c"] for i in range(5)})
    store["g/c/0"] = bytes(100_000)  # a value in overflow pages
    statements: list[str] = []
    store._db().set_trace_callback(statements.append)
    assert store.listdir("g") == ["a_b", "axb", "c"]
    assert store.listdir() == ["g"]
    assert store.getsize("g/a_b") == 10
    assert store.get_range("g/c/0", -3) == b"\0\0\0"
    assert len(store.getitems(["g/c/1", "g/c/2"])) == 2
    store.rename("g/c", "g/d")
    store.rename("g/d/1", "g/d/one")
    store.rmdir("g/a_b")
    store.delitems(["g/axb/1"])
    assert sorted(store) == sorted(
        ["g/axb/0", "g/axb/2", "g/axb/3", "g/axb/4", "g/d/0", "g/d/one", "g/d/2", "g/d/3", "g/d/4"]
    )
    store._db().set_trace_callback(None)

    queries = [s for s in statements if s.split()[0] in ("SELECT", "DELETE", "INSERT")]
    assert any("k >= 'g/' AND k < 'g0'" in q for q in queries)  # the range form, not LIKE
    explain = sqlite3.connect(tmp_path / "db.sqlite")
    checked = 0
    for query in queries:
        assert "LIKE" not in query.upper(), query
        if "count(*)" in query:  # len() counts the whole table by design
            continue
        plan = [row[3] for row in explain.execute("EXPLAIN QUERY PLAN " + query)]
        assert not any(step.startswith("SCAN") for step in plan), (query, plan)
        assert any("sqlite_autoindex_zarr_1" in s or "INTEGER PRIMARY KEY" in s for s in plan), (
            query,
            plan,
        )
        checked += 1
    assert checked >= 10
    explain.close()
    store.close()


# ---------------------------------------------------------------- threads
def test_threads_hammer_one_file(tmp_path):
    path = tmp_path / "db.sqlite"
    first, second = SQLiteStore(path), SQLiteStore(path, timeout=60)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        store = first if worker % 2 else second
        try:
            for round_ in range(25):
                mine = f"w{worker}"
                batch = {f"{mine}/r{round_}/{i}": bytes([worker]) * (100 + i) for i in range(8)}
                store.setitems(batch)
                store[f"{mine}/single"] = bytes([round_]) * 50
                assert store.getitems(list(batch)) == batch
                assert store.get_range(f"{mine}/r{round_}/7", -7) == bytes([worker]) * 7
                assert store.listdir(f"{mine}/r{round_}") == sorted(str(i) for i in range(8))
                assert store.getsize(f"{mine}/r{round_}") == sum(map(len, batch.values()))
                store.rename(f"{mine}/r{round_}", f"{mine}/done{round_}")
                store.rmdir(f"{mine}/done{round_ - 1}")
                store.listdir()
                len(store)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors[0]
    for worker in range(8):
        assert first.listdir(f"w{worker}") == ["done24", "single"]
        assert second[f"w{worker}/single"] == bytes([24]) * 50
    first.close()
    second.close()


def test_close_closes_every_threads_connection(tmp_path):
    path = tmp_path / "db.sqlite"
    store = SQLiteStore(path)
    store["k"] = b"v"
    connections: list[sqlite3.Connection] = []
    release = threading.Event()
    one_at_a_time = threading.Lock()  # the read-modify-write below is not atomic by itself

    def use() -> None:
        try:
            with one_at_a_time:
                store["k"] = store["k"] + b"!"
        finally:
            connections.append(store._db())
        release.wait(30)

    threads = [threading.Thread(target=use) for _ in range(3)]
    for thread in threads:
        thread.start()
    for _ in range(3000):
        if len(connections) == 3:
            break
        threading.Event().wait(0.01)
    assert store["k"] == b"v!!!"
    assert len({id(c) for c in connections}) == 3
    assert (tmp_path / "db.sqlite-wal").exists()
    store.close()
    for connection in connections:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            connection.execute("SELECT 1")
    # The last connection to close checkpointed the WAL into the file.
    assert not (tmp_path / "db.sqlite-wal").exists()
    release.set()
    for thread in threads:
        thread.join()


# ------------------------------------------------------------ file & table
def test_file_uses_wal_and_mode_r_is_read_only(tmp_path):
    path = tmp_path / "db.sqlite"
    with SQLiteStore(path) as store:
        store["k"] = b"v"
        assert store._db().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with SQLiteStore(path, mode="r") as store:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store._db().execute('DELETE FROM "zarr"')
        assert store["k"] == b"v"


def synchronous_of(store):
    """SQLite's synchronous setting on the calling thread's connection (1 NORMAL, 2 FULL)."""
    return store._db().execute("PRAGMA synchronous").fetchone()[0]


def test_synchronous_option_applies_to_every_connection(tmp_path):
    from zstores import open_store

    path = tmp_path / "db.sqlite"
    with SQLiteStore(path) as store:
        assert synchronous_of(store) == 1  # NORMAL by default
    with SQLiteStore(path, synchronous="FULL") as store:
        store["k"] = b"v"
        in_thread = []
        thread = threading.Thread(target=lambda: in_thread.append(synchronous_of(store)))
        thread.start()
        thread.join()
        assert synchronous_of(store) == 2 and in_thread == [2]
        with store.reopen("r") as reader, pickle.loads(pickle.dumps(store)) as copy:
            assert synchronous_of(reader) == 2 and synchronous_of(copy) == 2
    with open_store(f"sqlite://{path}?synchronous=full") as store:
        assert synchronous_of(store) == 2
    with pytest.raises(ValueError, match=r"synchronous='off'.*'normal'.*'full'"):
        SQLiteStore(path, synchronous="off")


def fsyncs_while_writing(path, synchronous, commits):
    """The fsync/fdatasync calls of a process making ``commits`` single-key writes (strace)."""
    script = (
        "import sys\n"
        "from zstores.stores.sqlite import SQLiteStore\n"
        f"store = SQLiteStore({str(path)!r}, synchronous={synchronous!r})\n"
        "store['first'] = b'x'\n"
        "print('writes', flush=True)\n"
        f"for i in range({commits}):\n"
        "    store[f'k{i}'] = bytes(100)\n"
        "print('done', flush=True)\n"
        "store.close()\n"
    )
    trace = path.parent / f"strace-{synchronous}"
    done = subprocess.run(
        ["strace", "-f", "-e", "trace=fsync,fdatasync,write", "-o", str(trace),
         sys.executable, "-c", script],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()[-200:]}")
    lines = trace.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if '"writes"' in line)
    end = next(i for i, line in enumerate(lines) if '"done"' in line)
    return sum(1 for line in lines[start:end] if "sync(" in line)


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_synchronous_full_fsyncs_every_commit_and_normal_does_not(tmp_path):
    # What each setting promises (docs): FULL makes each commit durable before
    # it returns, NORMAL leaves the WAL to be synced at the next checkpoint.
    assert fsyncs_while_writing(tmp_path / "full.sqlite", "full", 20) >= 20
    assert fsyncs_while_writing(tmp_path / "normal.sqlite", "normal", 20) == 0


def test_values_around_the_blob_read_size_read_back_whole(tmp_path):
    # Values above 256 KiB are read through a blob handle, the rest by SELECT.
    limit = sqlite_store._BLOB_READ_ABOVE
    values = {f"v/{size}": bytes([size % 251]) * size
              for size in (0, 1, limit - 1, limit, limit + 1, 3 * limit + 7)}
    with SQLiteStore(tmp_path / "db.sqlite") as store:
        store.setitems(values)
        # Another tool's TEXT value of more than the limit reads as its UTF-8.
        text = "é" * limit
        with contextlib.closing(sqlite3.connect(store.path)) as other, other:
            other.execute('INSERT INTO "zarr"(k, v) VALUES (?, ?)', ("v/text", text))
        values["v/text"] = text.encode()
        for key, value in values.items():
            assert store[key] == value, key
            assert store.get_range(key, 1, 5) == value[1:6], key
        assert store.getitems([*values, "v/missing"]) == values


def test_large_values_read_whole_while_a_writer_replaces_them(tmp_path):
    # A large value is read in two steps (its row, then a blob handle on it):
    # both must see the same row, even while rows are replaced (and row ids
    # reused) by another connection, so a read returns one whole value of its
    # own key, never a mix or another key's value.
    path = tmp_path / "db.sqlite"
    size = 2 * sqlite_store._BLOB_READ_ABOVE
    versions = {key: [bytes([n]) * size for n in (i, i + 100)]
                for i, key in enumerate(["a", "b", "c"])}
    with SQLiteStore(path) as store:
        store.setitems({key: values[0] for key, values in versions.items()})
        stop = threading.Event()

        def rewrite():
            with SQLiteStore(path) as writer:
                n = 0
                while not stop.is_set():
                    n += 1
                    for key, values in versions.items():
                        del writer[key]
                        writer[key] = values[n % 2]

        thread = threading.Thread(target=rewrite)
        thread.start()
        try:
            for _ in range(30):
                for key, values in versions.items():
                    with contextlib.suppress(KeyError):  # between delete and write
                        assert store[key] in values, key
                for key, value in store.getitems(list(versions)).items():
                    assert value in versions[key], key
        finally:
            stop.set()
            thread.join()


def test_new_file_gets_16_kib_pages_and_an_existing_file_keeps_its_own(tmp_path):
    with SQLiteStore(tmp_path / "new.sqlite") as store:
        store["a/0"] = bytes(100_000)
        assert store._db().execute("PRAGMA page_size").fetchone()[0] == 16384
    old = tmp_path / "old.sqlite"
    db = sqlite3.connect(old)
    db.execute("PRAGMA page_size=4096")
    db.execute("CREATE TABLE zarr(k TEXT PRIMARY KEY, v BLOB)")
    db.execute("INSERT INTO zarr VALUES ('a/0', x'01')")
    db.commit()
    db.close()
    with SQLiteStore(old) as store:
        store["a/1"] = bytes(100_000)
        assert store["a/0"] == b"\x01" and store["a/1"] == bytes(100_000)
        assert store._db().execute("PRAGMA page_size").fetchone()[0] == 4096


def _checkpoint_threads():
    return [t for t in threading.enumerate() if t.name == "zstores-sqlite-checkpoint"]


def test_wal_is_checkpointed_by_a_thread_of_its_own_and_stays_bounded(tmp_path, monkeypatch):
    """Commits never run SQLite's automatic checkpoint; the store's thread
    copies the WAL into the file while writes go on, and the WAL stays bounded."""
    # Where it is read: the checkpoint thread counts the bytes written.
    monkeypatch.setattr(sqlite_connection, "_CHECKPOINT_BYTES", 1 << 20)
    path = tmp_path / "data.sqlite"
    value = bytes(range(256)) * 256  # 64 KiB
    largest_wal = 0
    with SQLiteStore(path) as store:
        assert store._db().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        for i in range(320):  # 20 MiB: twenty checkpoints' worth
            store[f"c/{i}"] = value
            largest_wal = max(largest_wal, (tmp_path / "data.sqlite-wal").stat().st_size)
        assert len(_checkpoint_threads()) == 1
        file_size_before_close = path.stat().st_size
        store.setitems({f"b/{i}": value for i in range(32)})
    # The file took in most of the data before close (the thread checkpointed),
    # and the WAL never held more than a few checkpoints' worth.
    assert file_size_before_close > 10 << 20
    # (a WAL frame holds a 16 KiB page: 64 KiB values take about 1.25x their size)
    assert largest_wal < 2 * (sqlite_connection._CHECKPOINT_LAG + 2) << 20  # unbounded: ~25 MiB
    assert not (tmp_path / "data.sqlite-wal").exists()  # the last close checkpointed it all
    assert not _checkpoint_threads()
    with SQLiteStore(path, mode="r") as store:
        assert len(store) == 352 and store["c/319"] == value and store["b/31"] == value


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_writers_never_wait_for_a_checkpoint_thread_that_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_connection, "_CHECKPOINT_BYTES", 1 << 16)
    with SQLiteStore(tmp_path / "data.sqlite") as store:
        def refuse():
            raise sqlite3.OperationalError("unable to open database file")

        store._checkpointer._connect = refuse
        for i in range(4 * sqlite_connection._CHECKPOINT_LAG):  # far past the lag
            store[f"k{i}"] = bytes(1 << 16)
        assert len(store) == 4 * sqlite_connection._CHECKPOINT_LAG


def test_a_read_only_store_starts_no_checkpoint_thread(tmp_path):
    path = tmp_path / "data.sqlite"
    with SQLiteStore(path) as store:
        store["a"] = b"1"
    with SQLiteStore(path, mode="r") as store:
        assert store["a"] == b"1" and store._checkpointer is None


def test_tables_share_a_file(tmp_path):
    path = tmp_path / "db.sqlite"
    with SQLiteStore(path, table="first") as one, SQLiteStore(path, table="second") as two:
        one["a/x"] = b"1"
        two["a/y"] = b"2"
        assert list(one) == ["a/x"] and list(two) == ["a/y"]
        assert one != two
        two.rmdir()
        assert list(one) == ["a/x"]
    with pytest.raises(StoreNotFoundError, match="third"):
        SQLiteStore(path, table="third", mode="r")
    with SQLiteStore(path, table="third", mode="w-") as three:
        assert len(three) == 0
    with SQLiteStore(path, table="first", mode="r") as one:
        assert one["a/x"] == b"1"
        assert "first" in repr(one)


@pytest.mark.parametrize(
    "table", ["", "two words", "1st", 'x"; DROP TABLE zarr; --', "sqlite_master", "tablé", None]
)
def test_table_must_be_a_plain_identifier(tmp_path, table):
    with pytest.raises(ValueError, match="table option must be a plain identifier"):
        SQLiteStore(tmp_path / "db.sqlite", table=table)
    assert not (tmp_path / "db.sqlite").exists()


def test_lone_surrogate_key_is_refused():
    with SQLiteStore(":memory:") as store, pytest.raises(InvalidKeyError, match="UTF-8"):
        store["lone\udc80surrogate"] = b"x"


def test_rmdir_treats_wildcard_names_literally(tmp_path):
    # zarr-python 2 deleted with LIKE 'a_b/%': "_" matched "x" and case was ignored.
    with SQLiteStore(tmp_path / "db.sqlite") as store:
        store.update({"a_b/x": b"1", "axb/x": b"2", "a%b/x": b"3", "A_B/x": b"4", "a_bc/x": b"5"})
        store.rmdir("a_b")
        assert sorted(store) == ["A_B/x", "a%b/x", "a_bc/x", "axb/x"]
        store.rmdir("a%b")
        assert sorted(store) == ["A_B/x", "a_bc/x", "axb/x"]
        assert store.getsize("a_b") == 0 and store.listdir("a_b") == []


# ------------------------------------------------ zarr-python 2 compatibility
def test_reads_what_zarr2_wrote(tmp_path, zarr2):
    check_reads_what_zarr2_wrote(zarr2, tmp_path / "z2.sqlite", "zarr.SQLiteStore(path)",
                                 SQLiteStore)


def test_zarr2_reads_what_we_wrote(tmp_path, zarr2):
    check_zarr2_reads_what_we_wrote(zarr2, tmp_path / "ours.sqlite", "zarr.SQLiteStore(path)",
                                    SQLiteStore)


# ------------------------------------------------------------ full disks
# A 16 MiB file system holds about 200 values of 64 KiB: the store fills it in
# a child process, then this one checks, deletes half and writes again.
FULL_DISK_CASES = [("tmpfs", 1), ("tmpfs", 8), ("ext4", 1), ("ext4", 8)]


@pytest.mark.parametrize(("kind", "batch"), FULL_DISK_CASES)
def test_full_disk_raises_store_full_keeps_every_value_and_deletes_make_room(
    tmp_path, kind, batch
):
    with small_filesystem(16, kind) as fs:
        path = fs / "data.sqlite"
        code = f"zstores.SQLiteStore({str(path)!r})"
        result = fill_until_full(code, tmp_path / "log", batch=batch)
        result.assert_store_full()
        assert str(path) in result.message
        assert result.close_error is None
        with SQLiteStore(path, mode="r") as store:
            check_acknowledged(store, result.acknowledged)
        delete_half_and_refill(code, lambda: SQLiteStore(path), result.acknowledged,
                               tmp_path / "log")


def test_full_disk_in_one_process(small_fs):
    path = small_fs / "data.sqlite"
    values = {}
    with SQLiteStore(path) as store:
        with pytest.raises(StoreFullError) as caught:
            for i in range(10_000):
                key = f"k/{i:05d}"
                value = make_value(key, 1, 64 * 1024)
                store[key] = value
                values[key] = value
        assert caught.value.errno == errno.ENOSPC
        assert str(path) in str(caught.value)
        assert isinstance(caught.value.__cause__, sqlite3.Error)
        first = next(iter(values))
        with pytest.raises(StoreFullError):  # an overwrite that fails keeps the old value
            store[first] = make_value(first, 2, 256 * 1024)
        with pytest.raises(StoreFullError):
            store.setitems({"extra/0": b"x" * 65536, "extra/1": b"y" * 65536})
        assert "extra/0" not in store
        assert {key: store[key] for key in values} == values
        doomed = sorted(values)[::2]
        store.delitems(doomed)
        for key in doomed:
            del values[key]
        for i in range(len(doomed) // 2):  # the freed room takes new values
            key = f"again/{i:05d}"
            store[key] = values[key] = make_value(key, 3, 64 * 1024)
    with SQLiteStore(path, mode="r") as store:
        assert {key: store[key] for key in store} == values


def test_rmdir_and_clear_work_on_a_full_disk(small_fs):
    path = small_fs / "data.sqlite"
    with SQLiteStore(path) as store:
        with pytest.raises(StoreFullError):
            for i in range(10_000):
                store[f"{'ab'[i % 2]}/{i:05d}"] = make_value(str(i), 1, 64 * 1024)
        store.rmdir("a")
        assert store.listdir() == ["b"]
        with pytest.raises(StoreFullError):
            for i in range(10_000):
                store[f"c/{i:05d}"] = make_value(str(i), 1, 64 * 1024)
        store.clear()
        assert len(store) == 0
        store["d"] = b"1"
    with SQLiteStore(path, mode="r") as store:
        assert list(store) == ["d"]


# ------------------------------------------------------------ typed errors
def test_a_file_that_is_not_a_database_is_a_corrupt_value_error(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_bytes(b"these are not the pages you are looking for" * 100)
    for mode in ("r", "a"):
        with pytest.raises(CorruptValueError, match=re.escape(str(path))) as caught:
            SQLiteStore(path, mode=mode)
        assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


def test_a_write_locked_out_beyond_the_timeout_is_store_locked(tmp_path):
    path = tmp_path / "db.sqlite"
    with SQLiteStore(path, timeout=0.1) as store:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreLockedError, match="locked") as caught:
                store["k"] = b"v"
            assert isinstance(caught.value, BlockingIOError)
        finally:
            other.execute("ROLLBACK")
            other.close()
        store["k"] = b"v"


# ------------------------------------------------- read-only access, media
def _files(folder):
    return sorted(p.name for p in folder.iterdir())


def test_mode_r_leaves_no_files_behind(tmp_path):
    path = tmp_path / "db.sqlite"
    with SQLiteStore(path) as store:
        store["a/b"] = b"1"
    before = _files(tmp_path)
    assert not any(name.endswith(("-wal", "-shm")) for name in before)
    with SQLiteStore(path, mode="r") as store:
        assert store["a/b"] == b"1" and store.listdir() == ["a"] and store.getsize() == 1
    assert _files(tmp_path) == before


def test_mode_r_sees_a_writer_at_work_and_leaves_its_files_alone(tmp_path):
    path = tmp_path / "db.sqlite"
    with SQLiteStore(path) as writer:
        writer["k1"] = b"1"
        with SQLiteStore(path, mode="r") as reader:
            assert reader["k1"] == b"1"
            writer["k2"] = b"2"
            assert reader["k2"] == b"2"
        assert (tmp_path / "db.sqlite-wal").exists()
        writer["k3"] = b"3"
    before = _files(tmp_path)
    assert not any(name.endswith(("-wal", "-shm")) for name in before)
    # a reader that found no -wal removes the files once everyone is gone
    with SQLiteStore(path, mode="r") as reader:
        with SQLiteStore(path) as writer:
            writer["k4"] = b"4"
            assert reader["k4"] == b"4"
    assert _files(tmp_path) == before


@contextlib.contextmanager
def read_only_view(folder):
    """``folder`` seen through a read-only bind mount (read-only media, for root too)."""
    if os.geteuid() != 0:
        missing_peer("a read-only bind mount needs root")
    view = Path(tempfile.mkdtemp(prefix="zstores-ro-"))
    subprocess.run(["mount", "--bind", str(folder), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        yield view
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)
        view.rmdir()


@pytest.mark.parametrize("left_open", [False, True])
def test_store_on_read_only_media_opens_read_only(tmp_path, left_open):
    path = tmp_path / "db.sqlite"
    writer = SQLiteStore(path)
    writer.setitems({"a/0": b"0", "a/1": b"1"})
    if not left_open:
        writer.close()  # else a -wal and -shm stay, as after a crash
    before = _files(tmp_path)
    with read_only_view(tmp_path) as view:
        with SQLiteStore(view / "db.sqlite", mode="r") as store:
            assert store.listdir("a") == ["0", "1"] and store["a/1"] == b"1"
        with pytest.raises(ReadOnlyError, match=re.escape(str(view / "db.sqlite"))):
            SQLiteStore(view / "db.sqlite", mode="a")["a/2"] = b"2"
        with pytest.raises(StoreNotFoundError, match="missing.sqlite"):
            SQLiteStore(view / "missing.sqlite", mode="r")
    assert _files(tmp_path) == before
    writer.close()


def test_transaction_commit_is_one_sqlite_transaction(tmp_path):
    """A reader in another process never sees part of a commit of 16 sets."""
    path = tmp_path / "db.sqlite"
    store = SQLiteStore(path)
    keys = [f"r/{i}" for i in range(16)]
    store.update(dict.fromkeys(keys, b"\x00" * 1000))
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Event(), context.Event()
    reader = context.Process(target=_read_until_stopped, args=(str(path), keys, ready, stop))
    reader.start()
    try:
        assert ready.wait(120)
        for round_ in range(1, 200):
            with store.transaction():
                for key in keys:  # 16 sets: 16 commits without the transaction
                    store[key] = bytes([round_ % 250 + 1]) * 1000
    finally:
        stop.set()
        reader.join(120)
    assert reader.exitcode == 0, "the reader saw a region with mixed values"
    store.close()


def _read_until_stopped(path, keys, ready, stop):
    store = SQLiteStore(path, mode="r")
    ready.set()
    while not stop.is_set():
        values = store.getitems(keys)
        if len(set(values.values())) != 1:
            raise SystemExit(1)
    store.close()


def test_snapshot_of_memory_database_refused():
    store = SQLiteStore(":memory:")
    assert store.supports_transactions and not store.supports_snapshots
    with pytest.raises(UnsupportedOperationError, match="snapshot"):
        store.snapshot()
