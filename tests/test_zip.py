import base64
import errno
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from zstores.errors import CorruptValueError, StaleStoreError, StoreFullError
from zstores.stores.zip import ZipStore
from zstores.testing import StoreTests

from full_disk import (
    check_acknowledged,
    check_value,
    delete_half_and_refill,
    fill_until_full,
    make_value,
    small_filesystem,
)
from raw_access import zip_get, zip_set
from single_writer import WriterProcess, check_read, check_sees


class TestZipStore(StoreTests):
    compression = zipfile.ZIP_STORED

    def open_store(self, location, mode="a"):
        return ZipStore(location, compression=self.compression, mode=mode)

    def raw_get(self, store, key):
        return zip_get(store, key)

    def raw_set(self, store, key, value):
        zip_set(store, key, value, self.compression)


class TestZipStoreDeflated(TestZipStore):
    compression = zipfile.ZIP_DEFLATED


def members(path):
    """(name, value) of every member in the archive, duplicates included."""
    with zipfile.ZipFile(path) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_one_member_per_live_key_after_close(tmp_path, compression):
    path = tmp_path / "data.zip"
    with ZipStore(path, mode="w", compression=compression) as store:
        store["a"] = b"1"
        store["b"] = b"2"
        store["c/d"] = b"3"
        store["a"] = b"one"
        store["a"] = b"uno"
        del store["b"]
        store.setitems({"c/d": b"three", "e": b"5"})
        store.delitems(["e"])
        store["b"] = b"back"
    assert sorted(members(path)) == [("a", b"uno"), ("b", b"back"), ("c/d", b"three")]
    # Reopening to append also compacts the overwrite on close.
    with ZipStore(path, mode="a") as store:
        store["a"] = b"again"
        store.rename("c/d", "c/moved")
    assert sorted(members(path)) == [("a", b"again"), ("b", b"back"), ("c/moved", b"three")]


def test_archive_without_overwrites_is_not_rewritten(tmp_path):
    path = tmp_path / "data.zip"
    with ZipStore(path, mode="w") as store:
        store["a"] = b"1"
    inode = os.stat(path).st_ino
    with ZipStore(path, mode="a") as store:
        store["b"] = b"2"
        assert store["a"] == b"1"
    assert os.stat(path).st_ino == inode
    assert sorted(members(path)) == [("a", b"1"), ("b", b"2")]


def test_rewrite_keeps_permissions_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "data.zip"
    with ZipStore(path, mode="w") as store:
        store["a"] = b"1"
    os.chmod(path, 0o640)
    with ZipStore(path, mode="a") as store:
        store["a"] = b"2"
    assert members(path) == [("a", b"2")]
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.zip"]


def test_reads_before_close_see_latest_value(tmp_path):
    with ZipStore(tmp_path / "data.zip", mode="w") as store:
        store["k"] = b"first value"
        store["k"] = b"second"
        assert store["k"] == b"second"
        assert store.get_range("k", 1, 3) == b"eco"
        assert store.getsize("k") == 6
        assert list(store) == ["k"]
        assert len(store) == 1
        del store["k"]
        assert "k" not in store
        assert store.get("k") is None
        assert store.listdir() == []
        store["k"] = b"third!!"
        assert store.getitems(["k"]) == {"k": b"third!!"}
        assert store.get_range("k", -2) == b"!!"


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_damaged_member_fails_its_crc_check(tmp_path, compression):
    path = tmp_path / "a.zip"
    value = b"intact value " * 100
    with ZipStore(path, mode="w", compression=compression) as store:
        store["k"] = value
        store["other"] = b"untouched"
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("k")
    data_start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    raw[data_start + 5] ^= 0xFF  # one byte inside the member's data
    path.write_bytes(bytes(raw))
    with ZipStore(path, mode="r") as store:
        assert store["other"] == b"untouched"
        with pytest.raises(CorruptValueError, match="(?i)crc|decompress") as caught:
            store["k"]
        assert "'k'" in str(caught.value) and str(path) in str(caught.value)
        assert caught.value.errno == 5


def test_a_truncated_archive_is_a_corrupt_value_error(tmp_path):
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("k", b"v" * 1000)
    path.write_bytes(path.read_bytes()[:500])  # no central directory any more
    for mode in ("r", "a"):
        with pytest.raises(CorruptValueError, match="not a readable zip archive") as caught:
            ZipStore(path, mode=mode)
        assert isinstance(caught.value.__cause__, zipfile.BadZipFile)


def test_stored_range_read_reads_only_the_range(tmp_path, monkeypatch):
    value = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    store = ZipStore(tmp_path / "data.zip", mode="w")
    assert store.supports_range_reads
    store["big/0"] = value  # the store knows where its data start: no header read
    sizes = []
    real_pread = os.pread

    def counting_pread(fd, size, offset):
        sizes.append(size)
        return real_pread(fd, size, offset)

    def no_member_reads(*args, **kwargs):
        raise AssertionError("the range read opened the whole member")

    monkeypatch.setattr(os, "pread", counting_pread)
    monkeypatch.setattr(zipfile.ZipFile, "open", no_member_reads)
    assert store.get_range("big/0", 1000, 10) == value[1000:1010]
    assert sizes == [10]  # only the range
    assert store.get_range("big/0", -5) == value[-5:]
    assert store.get_range("big/0", 5 << 20, 10) == b""
    assert sizes == [10, 5]
    monkeypatch.undo()
    store.close()
    with ZipStore(tmp_path / "data.zip", mode="r") as store:
        monkeypatch.setattr(os, "pread", counting_pread)
        assert store.get_range("big/0", 1000, 10) == value[1000:1010]
        # The local header and name once, the range, then the header again: a
        # reader checks no writer gave the member's space to another meanwhile.
        assert sizes == [10, 5, 30, 5, 10, 35]
        assert store.get_range("big/0", 2000, 10) == value[2000:2010]
        assert sizes[6:] == [10, 35]
        monkeypatch.undo()


def test_compressed_range_read_falls_back_to_the_member(tmp_path, monkeypatch):
    store = ZipStore(tmp_path / "data.zip", mode="w", compression=zipfile.ZIP_DEFLATED)
    assert not store.supports_range_reads
    store["k"] = bytes(range(200))
    sizes = []
    real_pread = os.pread

    def counting_pread(fd, size, offset):
        sizes.append(size)
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", counting_pread)
    assert store.get_range("k", 10, 5) == bytes(range(10, 15))
    monkeypatch.undo()
    assert sizes == [store._index["k"].compress_size]  # the whole compressed member
    store.close()


def test_stored_members_of_a_deflated_store_are_read_by_range(tmp_path):
    path = tmp_path / "data.zip"
    with ZipStore(path, mode="w") as store:
        store["stored"] = b"0123456789"
    with ZipStore(path, mode="a", compression=zipfile.ZIP_DEFLATED) as store:
        store["deflated"] = b"abcdefghij" * 10
        assert store.get_range("stored", 3, 2) == b"34"
        assert store.get_range("deflated", 3, 2) == b"de"
    with zipfile.ZipFile(path) as archive:
        types = {info.filename: info.compress_type for info in archive.infolist()}
    assert types == {"stored": zipfile.ZIP_STORED, "deflated": zipfile.ZIP_DEFLATED}


def test_append_mode_refuses_a_file_that_is_not_a_zip(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not an archive")
    for mode in ("a", "r+", "r"):
        with pytest.raises(CorruptValueError, match="not a readable zip archive"):
            ZipStore(path, mode=mode)
    assert path.read_bytes() == b"not an archive"


def test_readers_see_the_writers_last_flush(tmp_path):
    path = tmp_path / "data.zip"
    writer = ZipStore(path, mode="w")
    with ZipStore(path, mode="r") as reader:
        assert list(reader) == []  # a new archive is a valid, empty one at once
    writer["k"] = b"v"
    with ZipStore(path, mode="r") as reader:
        assert list(reader) == []  # not flushed yet
    writer.flush()
    writer["k2"] = b"v2"
    del writer["k"]
    with ZipStore(path, mode="r") as reader:
        assert dict(reader.items()) == {"k": b"v"}
    writer.close()
    with ZipStore(path, mode="r") as reader:
        assert dict(reader.items()) == {"k2": b"v2"}
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None


# --------------------------------------------------------------- zarr 2 compat
ZARR2_WRITE = """
import base64, zipfile, warnings
import numpy as np
import zarr
store = zarr.ZipStore(path, mode="w", compression=compression)
root = zarr.group(store=store)
root.attrs["title"] = "written by zarr 2"
array = root.create_dataset("sub/arr", shape=(10, 12), chunks=(4, 5), dtype="<i4")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # zarr 2 warns about its duplicate members
    array[:] = 7
    array[:] = np.arange(120, dtype="<i4").reshape(10, 12)
array.attrs["units"] = "m"
store.close()
with zipfile.ZipFile(path) as archive:
    result = {
        "names": archive.namelist(),
        "latest": {name: base64.b64encode(archive.read(name)).decode()
                   for name in archive.namelist()},
        "infos": sorted({
            (info.compress_type, info.external_attr, info.create_system)
            for info in archive.infolist()
        }),
    }
"""

ZARR2_READ = """
import base64, zipfile
import zarr
store = zarr.ZipStore(path, mode="r")
root = zarr.open_group(store=store, mode="r")
array = root["sub/arr"]
with zipfile.ZipFile(path) as archive:
    infos = {
        info.filename: [info.compress_type, info.external_attr, info.create_system]
        for info in archive.infolist()
    }
result = {
    "names": sorted(store.keys()),
    "values": {key: base64.b64encode(store[key]).decode() for key in store.keys()},
    "array": array[:].tolist(),
    "attrs": dict(root.attrs),
    "array_attrs": dict(array.attrs),
    "infos": infos,
}
store.close()
"""


def zarr3_read_array(values, path):
    import zarr
    from zarr.core.buffer import cpu

    memory = zarr.storage.MemoryStore({k: cpu.Buffer.from_bytes(v) for k, v in values.items()})
    return zarr.open_array(store=memory, path=path, zarr_format=2, mode="r")[:]


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_reads_zarr2_zipstore(tmp_path, zarr2, compression):
    path = tmp_path / "zarr2.zip"
    written = zarr2.run(ZARR2_WRITE, path=str(path), compression=compression)
    expected = {k: base64.b64decode(v) for k, v in written["latest"].items()}
    assert len(written["names"]) > len(expected)  # zarr 2 left duplicate members
    # The member attributes our writer copies (checked on our side below).
    assert written["infos"] == [[compression, 0o644 << 16, 3]]
    with ZipStore(path, mode="r") as store:
        got = dict(store.items())
        assert got == expected
        assert store.listdir() == [".zattrs", ".zgroup", "sub"]
        chunks = sorted(k.split("/")[-1] for k in expected if k.startswith("sub/arr/"))
        assert store.listdir("sub/arr") == chunks
    np.testing.assert_array_equal(zarr3_read_array(got, "sub/arr"), np.arange(120).reshape(10, 12))
    # A writer that changes the archive also drops zarr 2's stale duplicates.
    with ZipStore(path, mode="a") as store:
        store["extra"] = b"x"
    assert sorted(name for name, _ in members(path)) == sorted([*expected, "extra"])


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_zarr2_reads_our_zipstore(tmp_path, zarr2, compression):
    import zarr

    memory = {}
    group = zarr.open_group(store=zarr.storage.MemoryStore(memory), mode="w", zarr_format=2)
    group.attrs["title"] = "written by zstores"
    array = group.create_array("sub/arr", shape=(10, 12), chunks=(4, 5), dtype="<i4")
    array[:] = np.arange(120, dtype="<i4").reshape(10, 12)
    array.attrs["units"] = "m"
    values = {key: buf.to_bytes() for key, buf in memory.items()}

    path = tmp_path / "ours.zip"
    with ZipStore(path, mode="w", compression=compression) as store:
        store["sub/arr/0.0"] = b"stale chunk"  # overwritten below: compacted on close
        store["junk"] = b"deleted below"
        store.update(values)
        del store["junk"]
    seen = zarr2.run(ZARR2_READ, path=str(path))
    assert seen["names"] == sorted(values)
    assert {k: base64.b64decode(v) for k, v in seen["values"].items()} == values
    assert seen["array"] == np.arange(120).reshape(10, 12).tolist()
    assert seen["attrs"] == {"title": "written by zstores"}
    assert seen["array_attrs"] == {"units": "m"}
    # The member attributes zarr-python 2 writes: compression, rw-r--r--, Unix.
    assert set(map(tuple, seen["infos"].values())) == {(compression, 0o644 << 16, 3)}
    assert sorted(seen["infos"]) == sorted(values)


# ------------------------------------------------------------------ full disks
def _fill_disk(folder):
    """Fill the file system holding ``folder`` with a filler file; return its path."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as file:
        for block in (1 << 20, 4096, 1):
            try:
                while True:
                    file.write(b"\0" * block)
            except OSError as error:
                assert error.errno == errno.ENOSPC
    return filler


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_full_disk_keeps_every_flushed_value(tmp_path, kind):
    with small_filesystem(16, kind) as fs:
        path = fs / "data.zip"
        open_code = f"zstores.ZipStore({str(path)!r})"
        result = fill_until_full(open_code, tmp_path / "log", flush="flush")
        result.assert_store_full()
        assert str(path) in result.message
        assert result.overwrite == "failed"  # 4 x 64 KiB cannot fit any more
        assert result.close_error is None
        with ZipStore(path, mode="r") as store:
            check_acknowledged(store, result.acknowledged)
            assert len(store) == len(result.acknowledged)
        with zipfile.ZipFile(path) as archive:
            assert archive.testzip() is None
        delete_half_and_refill(open_code, lambda: ZipStore(path), result.acknowledged,
                               tmp_path / "again")
        with zipfile.ZipFile(path) as archive:
            assert archive.testzip() is None


def test_full_disk_error_is_typed_and_undone_in_the_same_process(small_fs):
    path = small_fs / "data.zip"
    store = ZipStore(path, mode="w")
    written = {}
    with pytest.raises(StoreFullError) as caught:
        for n in range(1000):
            key = f"k/{n}"
            store[key] = make_value(key, 1, 64 * 1024)
            written[key] = 1
            if n % 10 == 0:
                store.flush()
    error = caught.value
    assert error.errno == errno.ENOSPC and repr(store) in str(error)
    assert isinstance(error.__cause__, OSError) and error.__cause__.errno == errno.ENOSPC
    check_acknowledged(store, written)  # flushed or not, all readable here
    first = next(iter(written))
    with pytest.raises(StoreFullError):
        store[first] = make_value(first, 2, 1 << 20)
    assert check_value(first, store[first]) == 1
    flushed = {key: 1 for key in list(written)[: len(written) // 10 * 10 - 9]}
    try:
        store.close()  # may find no room for the directory of the unflushed values
    except StoreFullError:
        pass
    with ZipStore(path, mode="r") as reader:
        check_acknowledged(reader, flushed)


def test_failed_close_leaves_the_last_flushed_state(small_fs):
    path = small_fs / "data.zip"
    # Enough keys that the new directory needs a page the full tmpfs lacks.
    before = {f"a/{i}": make_value(f"a/{i}", 1, 4096) for i in range(120)}
    with ZipStore(path, mode="w") as store:
        store.update(before)
    store = ZipStore(path, mode="a")
    store["b/0"] = make_value("b/0", 1, 64 * 1024)
    store["a/1"] = make_value("a/1", 2, 64 * 1024)
    del store["a/2"]
    filler = _fill_disk(small_fs)
    with pytest.raises(StoreFullError, match="not saved") as caught:
        store.close()
    assert caught.value.errno == errno.ENOSPC
    with ZipStore(path, mode="r") as reader:
        assert dict(reader.items()) == before
    filler.unlink()
    with ZipStore(path, mode="a") as again:  # the writer lock was released
        assert dict(again.items()) == before
        again["b/0"] = b"now"
    with ZipStore(path, mode="r") as reader:
        assert reader["b/0"] == b"now" and len(reader) == 121


def test_a_crashed_writer_leaves_the_last_flush(tmp_path):
    path = tmp_path / "data.zip"
    code = (
        "import os, zstores\n"
        f"store = zstores.ZipStore({str(path)!r}, mode='w')\n"
        "store['kept'] = b'flushed'\n"
        "store.flush()\n"
        "store['lost'] = b'x' * 200_000\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with ZipStore(path, mode="r") as reader:
        assert dict(reader.items()) == {"kept": b"flushed"}
    with pytest.warns(RuntimeWarning, match="bytes after the archive's last central directory"):
        store = ZipStore(path, mode="a")
    store["new"] = b"1"
    store.close()
    with ZipStore(path, mode="r") as reader:
        assert dict(reader.items()) == {"kept": b"flushed", "new": b"1"}


def test_deletes_on_a_full_disk_are_saved_and_their_space_reused(small_fs):
    path = small_fs / "data.zip"
    with ZipStore(path, mode="w") as store:
        store.update({f"a/{i}": make_value(f"a/{i}", 1, 4096) for i in range(200)})
    filler = _fill_disk(small_fs)
    with ZipStore(path) as store:  # no room for a second directory: written over the first
        store.delitems([f"a/{i}" for i in range(0, 200, 2)])
    kept = {f"a/{i}": 1 for i in range(1, 200, 2)}
    with ZipStore(path, mode="r") as reader:
        assert sorted(reader) == sorted(kept)
    with ZipStore(path) as store:  # new members go where the deleted ones were
        for i in range(50):
            store[f"b/{i}"] = make_value(f"b/{i}", 1, 4000)
    kept.update({f"b/{i}": 1 for i in range(50)})
    with ZipStore(path, mode="r") as reader:
        assert len(reader) == len(kept)
        check_acknowledged(reader, kept)
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None
    assert filler.exists()


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_after_a_full_disk_deleting_half_makes_room_for_as_much_again(kind):
    """The issue's case: a writer fills the disk (flushing every 10 values), deletes
    every other key without flushing, and writes new values with longer names.  The
    writes save the deletes, gather the dead gaps (single members, each a little too
    small for a new one) and go on until nearly all the freed space is used; the
    archive then closes whole (the code before refused every new write)."""
    with small_filesystem(16, kind) as fs:
        path = fs / "data.zip"
        store = ZipStore(path, mode="w")
        written = []
        with pytest.raises(StoreFullError):
            for n in range(10_000):
                store[f"k/{n}"] = make_value(f"k/{n}", 1, 64 * 1024)
                written.append(f"k/{n}")
                if n % 10 == 9:
                    store.flush()
        doomed = written[::2]
        store.delitems(doomed)
        again = []
        with pytest.raises(StoreFullError, match="the disk is full"):
            for n in range(len(doomed) + 1):
                store[f"again/{n}"] = make_value(f"again/{n}", 2, 64 * 1024)
                again.append(f"again/{n}")
        assert len(again) >= 0.95 * len(doomed), (len(again), len(doomed))
        store.close()  # the last directory still fits: every write is saved
        with zipfile.ZipFile(path) as archive:
            assert archive.testzip() is None
        with ZipStore(path, mode="r") as reader:
            expected = {key: 1 for key in written[1::2]} | {key: 2 for key in again}
            assert sorted(reader) == sorted(expected)
            check_acknowledged(reader, expected)


def test_a_stored_set_writes_the_value_without_copying_it(tmp_path):
    """A 16 MiB set goes to the file as it is: no scratch archive holding copies.

    The member's bytes are still exactly what zipfile's writestr writes.
    """
    import io
    import tracemalloc

    value = os.urandom(16 << 20)
    with ZipStore(tmp_path / "data.zip", mode="w") as store:
        store["warm"] = b"x"  # first-use allocations out of the way
        tracemalloc.start()
        try:
            store["big"] = value
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < len(value) // 4, f"a set allocated {peak} bytes for {len(value)}"
        assert store["big"] == value
    with zipfile.ZipFile(tmp_path / "data.zip") as archive:
        assert archive.testzip() is None
        info = archive.getinfo("big")
    expected = zipfile.ZipInfo("big", date_time=info.date_time)
    expected.external_attr = info.external_attr
    scratch = io.BytesIO()
    with zipfile.ZipFile(scratch, "w") as writer:
        writer.writestr(expected, value)
    member = scratch.getvalue()[: expected.compress_size + len(expected.FileHeader())]
    with open(tmp_path / "data.zip", "rb") as raw:
        raw.seek(info.header_offset)
        assert raw.read(len(member)) == member



class _SlowReads(ZipStore):
    """A ZipStore whose reads of one key wait inside the read (lock let go) for ``go``."""

    slow_key: str | None = None

    def _pread(self, offset: int, size: int, key: str) -> bytes:
        if key == self.slow_key:
            self.reading.set()
            assert self.go.wait(30)
        return super()._pread(offset, size, key)


def _read_in_thread(store: ZipStore, key: str) -> tuple[threading.Thread, list]:
    """Start reading ``key`` in a thread; return once the read is under way."""
    outcome: list = []
    store.reading, store.go = threading.Event(), threading.Event()
    store.slow_key = key

    def read() -> None:
        try:
            outcome.append(store[key])
        except Exception as error:  # noqa: BLE001 - the test looks at it
            outcome.append(error)

    thread = threading.Thread(target=read)
    thread.start()
    assert store.reading.wait(10)
    return thread, outcome


@pytest.mark.parametrize("change", ["cut", "reuse", "close"])
def test_a_read_outside_the_lock_keeps_its_bytes_until_it_ends(change, tmp_path):
    """Reads pread with the lock let go (threads read the disk together); a change
    that would overwrite, cut or close what a read is reading waits for it."""
    store = _SlowReads(tmp_path / "a.zip", mode="w")
    old = b"o" * 100_000
    store["k"] = old
    store.flush()
    threading.Timer(0.3, lambda: store.go.set()).start()  # the read waits, then goes on
    if change == "cut":
        store["tail"] = b"t" * 50_000  # not flushed, at the end: deleting it cuts the file
        thread, outcome = _read_in_thread(store, "tail")
        del store["tail"]
        expected = b"t" * 50_000
    elif change == "reuse":
        thread, outcome = _read_in_thread(store, "k")
        store["k"] = b"n" * 10  # appended; the old value's space is dead after the flush
        store.flush()
        store["other"] = b"x" * 99_000  # goes into that dead space
        expected = old
    else:
        thread, outcome = _read_in_thread(store, "k")
        store.close()
        expected = old
    thread.join()
    assert outcome == [expected]
    store.close()


def test_reads_in_threads_reach_the_disk_together(tmp_path):
    store = _SlowReads(tmp_path / "a.zip", mode="w")
    store.setitems({"a": b"a" * 5000, "b": b"b" * 5000})
    store.flush()
    slow, slow_outcome = _read_in_thread(store, "a")  # holds its read open
    other: list = []
    quick = threading.Thread(target=lambda: other.append(store.get_range("b", 1, 10)))
    quick.start()
    quick.join(30)
    done_first = not quick.is_alive() and not slow_outcome
    store.go.set()
    slow.join()
    quick.join()
    assert done_first, "the second read waited for the first one"
    assert other == [b"b" * 10] and slow_outcome == [b"a" * 5000]
    store.close()


# ------------------------------------------------- a reader beside a writer process
def _writer(path, **options) -> WriterProcess:
    return WriterProcess(f"zstores.ZipStore({str(path)!r})", **options)


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_reader_opened_before_a_writer_rewrites_sees_each_flush(tmp_path, compression):
    """Each round deletes, rewrites in new sizes and rewrites again into the space the
    first rewrite left dead (an older directory's members): the reader, opened before,
    reads the directory again and serves every new value, whole and in ranges."""
    path = tmp_path / "data.zip"
    code = f"zstores.ZipStore({str(path)!r}, compression={compression})"
    with WriterProcess(code) as writer:
        with ZipStore(path, mode="r") as reader:
            check_sees(reader, writer.visible, writer.keys)
            for _ in range(6):
                check_sees(reader, writer.round(), writer.keys)
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None


def test_a_reader_sees_the_archive_a_closing_writer_moved_in_place(tmp_path):
    """close() compacts by moving a new archive over the old one: readers follow it."""
    path = tmp_path / "data.zip"
    with ZipStore(path, mode="w") as store:
        store.update({f"k{i}": make_value(f"k{i}", 0, 50_000) for i in range(12)})
    reader = ZipStore(path, mode="r")
    inode = os.stat(path).st_ino
    with ZipStore(path) as store:  # most of the archive dead: close() compacts
        store.update({f"k{i}": make_value(f"k{i}", 1, 60_000) for i in range(12)})
    assert os.stat(path).st_ino != inode
    check_sees(reader, {f"k{i}": 1 for i in range(12)}, 12)
    reader.close()


class _PausedReads(ZipStore):
    """A reader whose next read of ``pause_key`` stops inside its pread until ``go``."""

    pause_key: str | None = None

    coarse_clock = False

    def _pread(self, offset: int, size: int, key: str) -> bytes:
        if key == self.pause_key and size > 100:  # the value, not its local header
            self.pause_key = None
            self.reading.set()
            assert self.go.wait(60)
        return super()._pread(offset, size, key)

    def _current_stamp(self) -> tuple[int, ...]:
        if self.coarse_clock:
            # As if every change of the writer fell within the timestamp's tick and
            # left the size as it was: only the checks of the bytes are left.
            return self._stamp
        return super()._current_stamp()


@pytest.mark.parametrize("coarse_clock", [False, True], ids=["", "coarse-clock"])
@pytest.mark.parametrize("how", ["whole", "range"])
def test_a_read_the_writer_overtakes_returns_one_whole_version(tmp_path, how, coarse_clock):
    """A read stopped inside its pread while a whole writer round runs (the member's
    space given to other values): the old value, or, its bytes gone, the new one read
    again; never the bytes now there.  With a clock too coarse to show the change, the
    CRC-32 (whole) or the local header read again (range) still catches it."""
    path = tmp_path / "data.zip"
    outcomes = []
    with _writer(path) as writer:
        reader = _PausedReads(path, mode="r")
        reader.coarse_clock = coarse_clock
        for round_number in range(1, 10):
            before = dict(writer.visible)
            key = sorted(before)[round_number % len(before)]
            reader.reading, reader.go = threading.Event(), threading.Event()
            if coarse_clock:  # the reader's directory as of now: it cannot see changes
                with reader._lock:
                    reader._refresh_reader(force=True)
            reader.pause_key = key
            result: list = []

            def read(key=key, result=result):
                try:
                    if how == "whole":
                        result.append(reader[key])
                    else:
                        result.append(reader.get_range(key, 0, 400))
                except Exception as error:  # noqa: BLE001 - looked at below
                    result.append(error)

            thread = threading.Thread(target=read)
            thread.start()
            assert reader.reading.wait(30)
            after = writer.round()  # runs to completion while the read waits
            reader.go.set()
            thread.join(60)
            outcome = result[0]
            if isinstance(outcome, KeyError):
                assert key not in after
                outcomes.append("missing")
                continue
            assert not isinstance(outcome, Exception), outcome
            serial = int(outcome.split(b"|")[1])
            assert serial in (before[key], after.get(key))
            expected = make_value(key, serial, max(len(outcome), 400))
            if how == "whole":
                assert check_value(key, outcome) == serial
            else:
                assert outcome == expected[:400]
            outcomes.append("old" if serial == before[key] else "new")
        reader.close()
    # The rounds give some paused member's space to other values: read again, new.
    assert "new" in outcomes, outcomes


def test_readers_beside_a_busy_writer_never_get_wrong_bytes(tmp_path):
    """The stress variant: 40 rounds run on their own while this process reads."""
    path = tmp_path / "data.zip"
    seen = {"value": 0, "missing": 0, "stale": 0}
    with _writer(path, keys=8) as writer:
        reader = ZipStore(path, mode="r")
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
            seen[check_read(key, lambda key=key: _prefix(reader, key))] += 1
            reads += 1
        waiter.join()
        check_sees(reader, writer.visible, writer.keys)
        reader.close()
    assert seen["value"] > 0, seen


def _prefix(reader, key):
    """The first 200 bytes of ``key`` (a range read), checked; every value is longer."""
    head = reader.get_range(key, 0, 200)
    serial = int(head.split(b"|")[1])
    assert head == make_value(key, serial, 200), f"range of {key!r} is wrong bytes"
    return head


class _OvertakenEveryTime(ZipStore):
    """A reader whose every pread of the value lets ``writer`` give its space away first."""

    writer: ZipStore | None = None
    rounds = 0

    def _pread(self, offset: int, size: int, key: str) -> bytes:
        if self.writer is not None and size > 100:
            self.rounds += 1
            self.writer[key] = make_value(key, 10 + self.rounds, 9_000)  # appended
            self.writer.flush()  # the old value's space is dead now, and the only gap
            filler = f"filler{self.rounds}"  # where this fits: it goes there
            self.writer[filler] = make_value(filler, 1, 5_000)
            self.writer.flush()
        return super()._pread(offset, size, key)


def test_a_read_overtaken_at_every_attempt_raises_stale_store_error(tmp_path):
    """A writer that gives the member's space away during each of the 4 attempts: one
    StaleStoreError (ESTALE) naming the store and key, never the bytes now there."""
    path = tmp_path / "data.zip"
    writer = ZipStore(path, mode="w")
    writer["k"] = make_value("k", 1, 9_000)
    writer.flush()
    reader = _OvertakenEveryTime(path, mode="r")
    reader.writer = writer
    with pytest.raises(StaleStoreError) as caught:
        reader["k"]
    assert caught.value.errno == errno.ESTALE and reader.rounds == 4
    assert repr(reader) in str(caught.value) and "'k'" in str(caught.value)
    reader.writer = None
    assert check_value("k", reader["k"]) == 14  # the writer done: the newest value
    reader.close()
    writer.close()


_FULL_DISK_ROUNDS = r"""
import sys
sys.path.insert(0, sys.argv[2])
from full_disk import make_value
import zstores
from zstores.errors import StoreFullError

store = zstores.ZipStore(sys.argv[1], mode="w")
n = 0
try:
    while True:
        store[f"k/{n}"] = make_value(f"k/{n}", 1, 30_000 + (n % 7) * 5_000)
        n += 1
        if n % 5 == 0:
            store.flush()
except StoreFullError:
    pass
for round_number in range(3):
    store.delitems(sorted(store)[round_number % 2::2])
    m = 0
    try:
        while True:
            key = f"r{round_number}/{m}"
            store[key] = make_value(key, 2, 30_000 + (m % 5) * 7_000)
            m += 1
            if m % 7 == 0:
                store.flush()
    except StoreFullError:
        pass
    print(round_number, n, m, flush=True)
    store.flush()
store.close()
"""


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_a_reader_beside_a_writer_on_a_full_disk_never_gets_wrong_bytes(kind):
    """A writer process fills the disk, then three times deletes half its keys and
    writes until the disk is full again (directories written into dead gaps or over
    the old one, members moved to gather space), while this process reads: every
    value whole (or missing), every flush saved, the archive whole at the end."""
    with small_filesystem(16, kind) as fs:
        path = fs / "data.zip"
        with ZipStore(path, mode="w") as store:
            store["seed"] = make_value("seed", 0, 1000)
        writer = subprocess.Popen(
            [sys.executable, "-c", _FULL_DISK_ROUNDS, str(path), str(Path(__file__).parent)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        reader = ZipStore(path, mode="r")
        seen = {"value": 0, "missing": 0, "stale": 0}
        while writer.poll() is None:
            for key in list(reader)[-20:]:
                seen[check_read(key, lambda key=key: reader[key])] += 1
                seen[check_read(key, lambda key=key: _prefix(reader, key))] += 1
        out, err = writer.communicate()
        assert writer.returncode == 0, err[-3000:]
        rounds = [line.split() for line in out.splitlines()]
        assert [int(r[0]) for r in rounds] == [0, 1, 2]
        assert all(int(r[2]) > 0.8 * int(r[1]) / 2 for r in rounds), rounds  # most room reused
        for key in reader:
            check_value(key, reader[key])
        reader.close()
        with zipfile.ZipFile(path) as archive:
            assert archive.testzip() is None
    assert seen["value"] > 0, seen
