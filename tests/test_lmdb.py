"""LMDBStore: the conformance harness plus map growth, sharing and zarr-python 2 compatibility."""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import lmdb
import numpy as np
import pytest

from zstores.errors import (
    CorruptValueError,
    InvalidKeyError,
    ReadOnlyError,
    StoreFullError,
    StoreIOError,
    UnsupportedOperationError,
)
from zstores.stores.lmdb import LMDBStore
from zstores.stores.lmdb import env as lmdb_env
from zstores.stores.lmdb.env import _Gate
from zstores.testing import StoreTests
from zstores.testing.workers import value_for, write_keys

from conftest import missing_peer
from full_disk import (
    check_acknowledged,
    delete_half_and_refill,
    fill_until_full,
    make_value,
    small_filesystem,
)
from raw_access import lmdb_get, lmdb_set
from zarr2_roundtrip import check_reads_what_zarr2_wrote, check_zarr2_reads_what_we_wrote

KiB, MiB = 1 << 10, 1 << 20


class TestLMDBStore(StoreTests):
    def open_store(self, location, mode="a"):
        return LMDBStore(location, mode=mode)

    def raw_get(self, store, key):
        return lmdb_get(store, key)

    def raw_set(self, store, key, value):
        lmdb_set(store, key, value)


# ------------------------------------------------------------ map growth
def test_gate_never_lets_a_remap_overlap_a_transaction():
    gate = _Gate()
    inside = []  # transactions in progress, as the remap sees them
    overlaps = []
    stop = threading.Event()

    def transact() -> None:
        while not stop.is_set():
            gate.enter_shared()
            inside.append(None)
            inside.pop()
            gate.leave_shared()

    def remap() -> None:
        for _ in range(300):
            with gate.exclusive():
                if inside:
                    overlaps.append(len(inside))

    threads = [threading.Thread(target=transact) for _ in range(4)]
    for thread in threads:
        thread.start()
    remappers = [threading.Thread(target=remap) for _ in range(2)]
    for thread in remappers:
        thread.start()
    for thread in remappers:
        thread.join(timeout=60)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads + remappers), "the gate deadlocked"
    assert overlaps == []


def test_map_grows_from_tiny_map(tmp_path):
    path = tmp_path / "tiny"
    with LMDBStore(path, map_size=64 * KiB) as store:
        assert store.map_size == 64 * KiB
        for i in range(3000):
            store[f"small/{i}"] = bytes([i % 256]) * 1000
        store.setitems({f"batch/{i}": bytes(5000) for i in range(200)})
        big = np.random.default_rng(1).integers(0, 256, 64 * MiB, dtype=np.uint8)
        store["big/0"] = big
        assert store.map_size > 64 * MiB
        assert len(store) == 3000 + 200 + 1
        assert store["small/2999"] == bytes([2999 % 256]) * 1000
        assert store.get_range("big/0", -7) == big[-7:].tobytes()
    with LMDBStore(path, mode="r") as store:
        assert store["big/0"] == big.tobytes()
        assert store.getsize("small") == 3000 * 1000


def test_range_reads_are_bytes_that_survive_a_remap(tmp_path):
    with LMDBStore(tmp_path / "s", map_size=64 * KiB) as store:
        value = bytes(range(256)) * 64
        store["v"] = value
        part, whole = store.get_range("v", 10, 100), store["v"]
        many = store.getitems(["v"])
        assert type(part) is bytes and type(whole) is bytes and type(many["v"]) is bytes
        before = store.map_size
        for i in range(300):  # unmaps and remaps the file several times
            store[f"fill/{i}"] = bytes(8 * KiB)
        assert store.map_size > before
        assert part == value[10:110]
        assert whole == value
        assert many["v"] == value


def test_threads_grow_the_map_while_others_read(tmp_path):
    store = LMDBStore(tmp_path / "s", map_size=64 * KiB)
    store["anchor"] = b"a" * 1000
    errors: list[BaseException] = []
    stop = threading.Event()

    def write(writer: int) -> None:
        try:
            for index in range(150):
                store[f"w{writer}/{index}"] = value_for(writer, index, 3000)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    def read() -> None:
        try:
            while not stop.is_set():
                assert store.get_range("anchor", 1, 3) == b"aaa"
                assert store["anchor"] == b"a" * 1000
                store.listdir()
                store.getsize()
                # Hand the GIL over: without it, writers coming back from LMDB
                # calls queue behind the busy readers and the test takes minutes.
                time.sleep(0)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    writers = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    readers = [threading.Thread(target=read) for _ in range(2)]
    for thread in writers + readers:
        thread.start()
    for thread in writers:
        thread.join(timeout=60)
    stop.set()
    for thread in readers:
        thread.join(timeout=60)
    assert not errors, errors[0]
    assert store.map_size > 1 * MiB
    for writer in range(4):
        assert store[f"w{writer}/149"] == value_for(writer, 149, 3000)
    assert len(store) == 4 * 150 + 1
    store.close()


def test_processes_write_while_the_map_grows(tmp_path):
    store = LMDBStore(tmp_path / "s", map_size=64 * KiB)
    store["parent"] = b"p"
    writers, count = 3, 120
    context = multiprocessing.get_context("spawn")
    with context.Pool(writers) as pool:
        done = pool.starmap(write_keys, [(store, w, count, "shared") for w in range(writers)])
    assert done == [count] * writers
    # The children grew the file past this process's map: reading adopts their size.
    assert store.map_size == 64 * KiB
    for writer in range(writers):
        for index in range(count):
            assert store[f"w{writer}/k{index}"] == value_for(writer, index)
    assert store.map_size > 64 * KiB
    assert store["shared"] in [value_for(w, 0) for w in range(writers)]
    store["parent"] = bytes(2 * MiB)  # and this process can still grow it further
    assert len(store) == writers * count + 2
    store.close()


# ------------------------------------------------- environment handling
def test_mode_r_opens_lmdb_read_only(tmp_path):
    LMDBStore(tmp_path / "s").close()
    with LMDBStore(tmp_path / "s", mode="r") as store:
        assert store._shared.env.flags()["readonly"]
    with LMDBStore(tmp_path / "s", mode="a") as store:
        assert not store._shared.env.flags()["readonly"]


def test_sync_option_reaches_lmdb(tmp_path):
    with LMDBStore(tmp_path / "a", sync=True) as store:
        flags = store._shared.env.flags()
        assert flags["sync"] and flags["metasync"]
    with LMDBStore(tmp_path / "b") as store:
        flags = store._shared.env.flags()
        assert not flags["sync"] and not flags["metasync"]


def test_map_is_read_only_unless_writemap_is_asked_for(tmp_path):
    # The default keeps a full disk an lmdb.Error (a writable map would SIGBUS)
    # and the data file at the size of its data, not of the map.
    with LMDBStore(tmp_path / "a", map_size=64 * MiB) as store:
        store["k"] = b"v"
        assert not store._shared.env.flags()["writemap"]
    assert (tmp_path / "a" / "data.mdb").stat().st_size < 64 * MiB
    with LMDBStore(tmp_path / "b", map_size=64 * MiB, writemap=True) as store:
        store["k"] = b"v"
        assert store._shared.env.flags()["writemap"]
    assert (tmp_path / "b" / "data.mdb").stat().st_size == 64 * MiB


def _descriptors_on(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.path.samefile(f"/proc/self/fd/{fd}", path)
    return count


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_commits_start_writing_the_file_back_every_few_mib(tmp_path):
    # sync=False: a commit reaches only the page cache.  Every 4 MiB committed
    # in values of 1 MiB or more (single sets and setitems alike) the store asks
    # the kernel to start writing the file, so close() waits for the last few
    # MiB, not for all; small values are left to the flush.
    data = tmp_path / "s" / "data.mdb"
    store = LMDBStore(tmp_path / "s")
    shared = store._shared
    for i in range(40):
        store[f"small/{i}"] = bytes(64 * KiB)
    store.setitems({f"small/{i}": bytes(64 * KiB) for i in range(40, 120)})
    assert shared.writeback_fd is None  # 7.5 MiB, all of it in small values
    for i in range(3):
        store[f"chunk/{i}"] = bytes(MiB)
    store.setitems({f"chunk/{i}": bytes(MiB) for i in range(3, 5)})
    assert shared.writeback_fd is not None
    assert os.path.samefile(f"/proc/self/fd/{shared.writeback_fd}", data)
    assert shared.unwritten < 4 * MiB  # the count starts over after each request
    store.close()
    assert _descriptors_on(data) == 0  # the descriptor closes with the environment
    shared.committed(8 * MiB)  # a thread that committed just before the close asks late:
    assert shared.writeback_fd is None and _descriptors_on(data) == 0  # nothing reopened
    with LMDBStore(tmp_path / "s", mode="r") as reader:
        assert reader["chunk/4"] == bytes(MiB)


@pytest.mark.parametrize("option", ["sync", "writemap"])
def test_no_early_writeback_where_it_does_not_apply(tmp_path, option):
    # sync=True flushes every commit itself; with writemap the written-back
    # pages would fault again when LMDB rewrites them.
    with LMDBStore(tmp_path / "s", **{option: True}) as store:
        store.setitems({f"chunk/{i}": bytes(MiB) for i in range(6)})
        assert store._shared.writeback_fd is None


def test_two_stores_on_one_environment_share_it(tmp_path):
    path = tmp_path / "s"
    LMDBStore(path).close()
    reader = LMDBStore(path, mode="r")  # opens the environment read-only
    writer = LMDBStore(path, mode="a")  # reopens it read-write for both
    assert reader._shared is writer._shared
    writer["k"] = b"v"
    assert reader["k"] == b"v"
    with pytest.raises(ReadOnlyError):
        reader["k"] = b"x"
    writer.close()
    assert reader["k"] == b"v"
    reader.close()
    with LMDBStore(path, mode="r") as again:
        assert again["k"] == b"v"


def test_managed_lmdb_options_are_refused(tmp_path):
    with pytest.raises(TypeError, match="readonly"):
        LMDBStore(tmp_path / "s", readonly=True)
    with pytest.raises(ValueError, match="map_size"):
        LMDBStore(tmp_path / "s", map_size=0)


def test_subdir_false_uses_a_single_file(tmp_path):
    path = tmp_path / "file.lmdb"
    with LMDBStore(path, subdir=False) as store:
        store["k"] = b"v"
    assert path.is_file()
    with LMDBStore(path, subdir=False, mode="r") as store:
        assert store["k"] == b"v"


def test_key_longer_than_lmdb_allows_is_refused(tmp_path):
    with LMDBStore(tmp_path / "s") as store:
        store["k" * 511] = b"fits"
        with pytest.raises(InvalidKeyError, match="511 bytes"):
            store["é" * 256] = b"512 bytes of UTF-8"
        with pytest.raises(InvalidKeyError, match="UTF-8"):
            store["lone\udc80surrogate"] = b"x"
        assert list(store) == ["k" * 511]


def test_rmdir_treats_wildcard_names_literally(tmp_path):
    # zarr-python 2's SQL LIKE made "a_b" match "axb"; a range scan cannot.
    with LMDBStore(tmp_path / "s") as store:
        store.update({"a_b/x": b"1", "axb/x": b"2", "a%b/x": b"3", "A_B/x": b"4", "a_bc/x": b"5"})
        store.rmdir("a_b")
        assert sorted(store) == ["A_B/x", "a%b/x", "a_bc/x", "axb/x"]
        assert store.listdir() == ["A_B", "a%b", "a_bc", "axb"]


# ------------------------------------------------ zarr-python 2 compatibility
def test_reads_what_zarr2_wrote(tmp_path, zarr2):
    check_reads_what_zarr2_wrote(zarr2, tmp_path / "z2.lmdb", "zarr.LMDBStore(path)", LMDBStore)


def test_zarr2_reads_what_we_wrote(tmp_path, zarr2):
    path = tmp_path / "ours.lmdb"
    contents = check_zarr2_reads_what_we_wrote(
        zarr2, path, "zarr.LMDBStore(path)", lambda p: LMDBStore(p, map_size=64 * KiB))
    # zarr 2 reopened it with a 1 TiB writable map; we still open and read it.
    with LMDBStore(path, mode="r") as store:
        assert {key: store[key] for key in store} == contents


# ------------------------------------------------------------ full disks
# A 16 MiB file system holds about 220 values of 64 KiB; the map starts at
# 256 KiB, so it grows several times before the disk fills up.
FULL_DISK_CASES = [("tmpfs", 1), ("tmpfs", 8), ("ext4", 1), ("ext4", 8)]


@pytest.mark.parametrize(("kind", "batch"), FULL_DISK_CASES)
def test_full_disk_raises_store_full_keeps_every_value_and_deletes_make_room(
    tmp_path, kind, batch
):
    with small_filesystem(16, kind) as fs:
        path = fs / "data.lmdb"
        code = f"zstores.LMDBStore({str(path)!r}, map_size=256 * 1024)"
        result = fill_until_full(code, tmp_path / "log", batch=batch)
        result.assert_store_full()
        assert str(path) in result.message
        assert result.close_error is None
        with LMDBStore(path, mode="r") as store:
            check_acknowledged(store, result.acknowledged)
        delete_half_and_refill(code, lambda: LMDBStore(path), result.acknowledged,
                               tmp_path / "log")


def test_full_disk_in_one_process(small_fs):
    path = small_fs / "data.lmdb"
    values = {}
    with LMDBStore(path, map_size=256 * KiB) as store:
        with pytest.raises(StoreFullError) as caught:
            for i in range(10_000):
                key = f"k/{i:05d}"
                value = make_value(key, 1, 64 * KiB)
                store[key] = value
                values[key] = value
        assert caught.value.errno == errno.ENOSPC
        assert str(path) in str(caught.value)
        assert isinstance(caught.value.__cause__, lmdb.Error)
        first = next(iter(values))
        with pytest.raises(StoreFullError):  # an overwrite that fails keeps the old value
            store[first] = make_value(first, 2, 256 * KiB)
        with pytest.raises(StoreFullError):
            store.setitems({"extra/0": b"x" * 65536, "extra/1": b"y" * 65536})
        assert "extra/0" not in store
        assert {key: store[key] for key in values} == values
        doomed = sorted(values)[::2]
        store.delitems(doomed)  # ~110 keys at once: copy-on-write needs room
        for key in doomed:
            del values[key]
        for i in range(len(doomed) // 2):  # the freed pages take new values
            key = f"again/{i:05d}"
            store[key] = values[key] = make_value(key, 3, 64 * KiB)
    with LMDBStore(path, mode="r") as store:
        assert {key: store[key] for key in store} == values


def test_rmdir_and_clear_work_on_a_full_disk(small_fs):
    path = small_fs / "data.lmdb"
    with LMDBStore(path, map_size=256 * KiB) as store:
        with pytest.raises(StoreFullError):
            for i in range(10_000):
                store[f"{'ab'[i % 2]}/{i:05d}"] = make_value(str(i), 1, 64 * KiB)
        store.rmdir("a")
        assert store.listdir() == ["b"]
        with pytest.raises(StoreFullError):
            for i in range(10_000):
                store[f"c/{i:05d}"] = make_value(str(i), 1, 64 * KiB)
        store.clear()
        assert len(store) == 0
        store["d"] = b"1"
    with LMDBStore(path, mode="r") as store:
        assert list(store) == ["d"]


def test_an_io_error_is_a_full_disk_only_when_the_disk_is_full(tmp_path, small_fs):
    # LMDB reports a write cut short by a full disk as EIO: the store tells
    # the two apart by the room left on the file system.
    eio = lmdb.Error("mdb_txn_commit: Input/output error")
    _translate = lmdb_env._translate
    error = _translate("store", eio, folder=str(tmp_path), write=True, payload=1000)
    assert type(error) is StoreIOError and error.errno == errno.EIO
    with open(small_fs / "filler", "wb") as filler:
        with contextlib.suppress(OSError):
            while True:
                filler.write(b"x" * MiB)
                filler.flush()
    error = _translate("store", eio, folder=str(small_fs), write=True, payload=1000)
    assert type(error) is StoreFullError and error.errno == errno.ENOSPC
    read = _translate("store", eio, folder=str(small_fs), write=False)
    assert type(read) is StoreIOError


# ------------------------------------------------------------ typed errors
def test_a_damaged_environment_is_a_corrupt_value_error(tmp_path):
    path = tmp_path / "s"
    path.mkdir()
    (path / "data.mdb").write_bytes(b"not an LMDB environment at all" * 1000)
    for mode in ("r", "a"):
        with pytest.raises(CorruptValueError, match=re.escape(str(path))) as caught:
            LMDBStore(path, mode=mode)
        assert isinstance(caught.value.__cause__, lmdb.Error)


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


def test_store_on_read_only_media_opens_read_only(tmp_path):
    with LMDBStore(tmp_path / "s") as store:
        store.setitems({"a/0": b"0", "a/1": b"1"})
    before = sorted(p.name for p in (tmp_path / "s").iterdir())
    with read_only_view(tmp_path) as view:
        with LMDBStore(view / "s", mode="r") as store:
            assert store.listdir("a") == ["0", "1"] and store["a/1"] == b"1"
        with pytest.raises(ReadOnlyError, match="read-only") as caught:
            LMDBStore(view / "s", mode="a")
        assert str(view / "s") in str(caught.value)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == before


# ------------------------------------------------ transactions, snapshots
def test_snapshot_survives_map_growth_and_pins_the_map(tmp_path):
    """A snapshot's read transaction must outlive writes that grow the map.

    py-lmdb ends every transaction of an environment whose map is resized, so
    the first snapshot grows the map well past the data first, and a commit
    that still needs more room while it is open fails cleanly (nothing
    written) instead of ending the snapshot.
    """
    store = LMDBStore(tmp_path / "env", map_size=1 << 16)
    store["a"] = b"before"
    with store.snapshot() as view:
        for i in range(40):  # 8 MB: far past the 64 KiB map the store opened with
            store[f"b/{i}"] = bytes(200_000)
        with pytest.raises(StoreFullError, match="snapshot"):
            with store.transaction():
                store["a"] = b"in a transaction"
                store["huge"] = bytes(store.map_size)  # cannot fit without a remap
        assert view["a"] == b"before" and list(view) == ["a"]
    assert store["a"] == b"before" and "huge" not in store  # nothing of it committed
    store["huge"] = bytes(1 << 20)  # with the snapshot closed the map grows again
    store.close()


def _drop_inherited_snapshot(held: list, store: LMDBStore, how: str) -> None:
    """In a forked child: use the inherited snapshot (refused), then drop it ``how``."""
    import gc

    view = held[0]
    try:
        view["a"]
    except UnsupportedOperationError as error:
        assert "forked" in str(error)
    else:
        os._exit(3)  # read through the parent's transaction
    del view
    if how == "close":
        held[0].close()
    elif how == "collect":
        held.clear()
        gc.collect()
    else:  # "close everything": the snapshot and the store (the environment too)
        held[0].close()
        store.close()
    if how != "close everything":
        with pytest.raises(StoreFullError, match="forked from process"):
            store._shared.adopt()  # a remap here would end the parent's transaction
    os._exit(0)


@pytest.mark.parametrize("how", ["close", "collect", "close everything"])
def test_a_forked_child_dropping_a_snapshot_leaves_the_parents_intact(tmp_path, how):
    """LMDB reader slots belong to the process that opened the environment.

    A forked child that ended the snapshot's inherited read transaction (its
    ``close()``, garbage collection, or closing the environment, which
    clears every slot of that process) would free the parent's slot: the
    writer would then reuse the pages the parent's snapshot still reads.
    """
    store = LMDBStore(tmp_path / "env")
    old = {"a": b"1" * 100_000, "b": b"2" * 5000}
    store.update(old)
    held = [store.snapshot()]
    child = multiprocessing.get_context("fork").Process(
        target=_drop_inherited_snapshot, args=(held, store, how))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    for round_ in range(6):  # each commit frees pages the next may reuse
        with store.transaction():
            store["a"] = bytes([round_]) * 100_000
            store["c"] = bytes(50_000)
    view = held[0]
    assert {key: view[key] for key in view} == old
    assert store["a"] == bytes([5]) * 100_000
    view.close()
    store.close()


def test_transaction_commit_is_one_lmdb_write_transaction(tmp_path):
    """A reader in another process never sees part of a commit of 16 sets."""
    store = LMDBStore(tmp_path / "env")
    keys = [f"r/{i}" for i in range(16)]
    store.update(dict.fromkeys(keys, b"\x00" * 1000))
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Event(), context.Event()
    reader = context.Process(target=_read_until_stopped,
                             args=(str(tmp_path / "env"), keys, ready, stop))
    reader.start()
    try:
        assert ready.wait(120)
        for round_ in range(1, 400):
            with store.transaction():
                for key in keys:  # 16 sets: 16 commits without the transaction
                    store[key] = bytes([round_ % 250 + 1]) * 1000
    finally:
        stop.set()
        reader.join(120)
    assert reader.exitcode == 0, "the reader saw a region with mixed values"
    store.close()


def _read_until_stopped(path, keys, ready, stop):
    store = LMDBStore(path, mode="r")
    ready.set()
    while not stop.is_set():
        values = store.getitems(keys)
        if len(set(values.values())) != 1:
            raise SystemExit(1)
    store.close()


# ------------------------------------------------------- zero-copy views
def test_a_view_never_changes_after_writes_reuse_its_pages(tmp_path):
    # Overwritten, deleted, and its pages freed and written over many times:
    # the view's read transaction keeps the pages it shows from being reused.
    store = LMDBStore(tmp_path / "v.lmdb")
    store["a"] = bytes([7]) * (256 * KiB)
    view = store.getview("a")
    assert isinstance(view, memoryview) and view.readonly
    store["a"] = bytes([8]) * (256 * KiB)
    del store["a"]
    for round_ in range(20):
        store.setitems({f"fill/{i}": bytes([round_]) * (64 * KiB) for i in range(16)})
        store.rmdir("fill")
    assert bytes(view) == bytes([7]) * (256 * KiB)
    store.close()


def test_views_see_every_commit_before_them(tmp_path):
    store = LMDBStore(tmp_path / "v.lmdb")
    other = LMDBStore(tmp_path / "v.lmdb")  # the same environment, another handle
    kept = []
    for number in range(50):
        other["k"] = bytes([number]) * (64 * KiB)
        kept.append(store.getview("k"))
        assert isinstance(kept[-1], memoryview)
        assert bytes(kept[-1][:1]) == bytes([number])
    assert [bytes(view[:1])[0] for view in kept] == list(range(50))
    assert bytes(store.getviews(["k", "missing"])["k"][:1]) == bytes([49])
    store.close()
    other.close()


def test_a_commit_in_another_process_is_seen_by_the_next_view(tmp_path):
    path = tmp_path / "v.lmdb"
    store = LMDBStore(path)
    store["k"] = b"a" * (32 * KiB)
    first = store.getview("k")
    code = ("import sys; from zstores import LMDBStore; s = LMDBStore(sys.argv[1]); "
            "s['k'] = b'b' * (32 << 10); s.close()")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True,
                   env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert bytes(store.getview("k")[:1]) == b"b"
    assert bytes(first[:1]) == b"a"
    store.close()


def test_thousands_of_views_alive_do_not_use_up_the_readers(tmp_path):
    # Each view taken after a commit needs a newer transaction; past their
    # share of the readers, values are copied, and other readers still get in.
    path = tmp_path / "v.lmdb"
    store = LMDBStore(path, max_readers=64)
    views = []
    for number in range(2000):
        store[f"k/{number % 10}"] = number.to_bytes(4, "little") * (16 * KiB)  # 64 KiB
        views.append(store.getview(f"k/{number % 10}"))
    assert all(bytes(view[:4]) == number.to_bytes(4, "little")
               for number, view in enumerate(views))
    assert sum(isinstance(view, memoryview) for view in views) >= 8
    code = ("import sys, lmdb; e = lmdb.open(sys.argv[1], readonly=True); "
            "print(len([e.begin() for _ in range(16)]))")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "16"
    store.close()
    del views


def test_small_values_are_copied_and_snapshots_copy(tmp_path):
    store = LMDBStore(tmp_path / "v.lmdb")
    store["small"] = b"x" * (64 * KiB - 1)  # below 64 KiB a copy costs less than a view
    store["big"] = b"y" * (64 * KiB)
    assert isinstance(store.getview("small"), bytes)
    assert isinstance(store.getview("big"), memoryview)
    with store.snapshot() as snapshot:
        assert isinstance(snapshot.getview("big"), bytes)
        assert isinstance(snapshot.getviews(["big"])["big"], bytes)
    with pytest.raises(KeyError):
        store.getview("missing")
    store.close()


def test_views_outlive_their_store_and_the_environment_closes_after_them(tmp_path):
    path = tmp_path / "v.lmdb"
    store = LMDBStore(path)
    store["k"] = b"z" * (64 * KiB)
    view = np.frombuffer(store.getview("k"), np.uint8)[10:20]
    store.close()
    assert bytes(view) == b"z" * 10  # the environment stays open for it
    del view
    # closed for good once the last view went: a fresh store opens it anew
    with LMDBStore(path, mode="r") as again:
        assert again["k"] == b"z" * (64 * KiB)


def test_the_map_is_made_large_before_the_first_view(tmp_path):
    store = LMDBStore(tmp_path / "v.lmdb", map_size=1 * MiB)
    store["k"] = b"z" * (64 * KiB)
    store.getview("k")
    assert store.map_size >= 1 << 40
    assert os.path.getsize(tmp_path / "v.lmdb" / "data.mdb") < 8 * MiB  # address space only
    store.close()


def test_a_map_growth_while_a_view_lives_waits_then_says_why(tmp_path, monkeypatch):
    # Where they are read: the environment's remap waits for views and sizes the map.
    monkeypatch.setattr(lmdb_env, "_VIEW_WAIT_SECONDS", 0.2)
    monkeypatch.setattr(lmdb_env, "_VIEW_MAP_SIZE", 1 * MiB)
    store = LMDBStore(tmp_path / "v.lmdb", map_size=1 * MiB)
    store["k"] = b"z" * (64 * KiB)
    view = store.getview("k")
    with pytest.raises(StoreFullError, match="zero-copy views"):
        store["big"] = b"b" * (4 * MiB)
    assert bytes(view[:1]) == b"z"
    del view
    store["big"] = b"b" * (4 * MiB)  # with the view gone the map grows
    assert store["big"] == b"b" * (4 * MiB)
    store.close()


def test_read_only_zarr_adapters_read_through_views(tmp_path):
    import zarr

    from zstores.adapters.zarr3 import ZarrStore

    path = tmp_path / "z.lmdb"
    with LMDBStore(path) as store:
        array = zarr.create_array(ZarrStore(store), shape=(1 << 20,), chunks=(64 * KiB,),
                                  dtype="u1", compressors=None, fill_value=0)
        array[:] = np.arange(1 << 20) % 251
    writer = LMDBStore(path)  # first: a read-write handle opened beside views must wait
    reader = LMDBStore(path, mode="r")
    adapter = ZarrStore(reader)
    back = zarr.open_array(adapter, mode="r")
    got = back[:]
    chunks = [zarr.core.sync.sync(adapter.get("c/3")) for _ in range(2)]
    assert isinstance(reader.getview("c/3"), memoryview)
    writer["c/3"] = bytes(64 * KiB)
    writer.close()
    assert (got == np.arange(1 << 20) % 251).all()
    assert all((chunk.as_numpy_array() == np.arange(3 * 64 * KiB, 4 * 64 * KiB) % 251).all()
               for chunk in chunks)
    reader.close()
