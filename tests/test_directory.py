"""DirectoryStore and NestedDirectoryStore: the harness, file layout, atomicity,
pruning, conflicts, and compatibility with zarr-python 2.18 and 3."""

from __future__ import annotations

import base64
import errno
import json
import os
import pickle
import re
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from zstores.errors import (
    InvalidKeyError,
    KeyConflictError,
    StoreExistsError,
    StoreFullError,
    StoreNotFoundError,
    UnsafePathError,
    UnsupportedOperationError,
)
from zstores.keys import is_chunk_key_segment
from zstores.stores import directory
from zstores.stores.directory import DirectoryStore, NestedDirectoryStore, posixfs
from zstores.testing import StoreTests

from full_disk import (
    check_acknowledged,
    delete_half_and_refill,
    fill_until_full,
    make_value,
    small_filesystem,
)

STORES = [DirectoryStore, NestedDirectoryStore]
TEMP_NAME = re.compile(r"\.zstores-tmp\.[0-9a-f]{32}")
EXPECTED = np.arange(99, dtype="<i4").reshape(9, 11) + 1  # no zero: fill_value is 0


def nested(key: str) -> str:
    folder, _, last = key.rpartition("/")
    if is_chunk_key_segment(last):
        last = last.replace(".", "/")
    return f"{folder}/{last}" if folder else last


def disk_tree(root: Path) -> list[str]:
    """Every file and folder under ``root`` (temporary files included)."""
    found = []
    for folder, folders, files in os.walk(root):
        relative = os.path.relpath(folder, root)
        found += [os.path.normpath(os.path.join(relative, name)) for name in folders + files]
    return sorted(found)


def stray_temp_name(seed: int = 0) -> str:
    return f".zstores-tmp.{seed:032x}"


# ------------------------------------------------------------------ harness
class FolderHooks:
    """The harness's out-of-band hooks: each key is the file at its (mapped) path."""

    def raw_get(self, store, key):
        path = Path(store.path) / self.canonical_key(key)
        return path.read_bytes() if path.is_file() else None

    def raw_set(self, store, key, value):
        path = Path(store.path) / self.canonical_key(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value)


class TestDirectoryStore(FolderHooks, StoreTests):
    def open_store(self, location, mode="a"):
        return DirectoryStore(location, mode=mode)


class TestNestedDirectoryStore(FolderHooks, StoreTests):
    def open_store(self, location, mode="a"):
        return NestedDirectoryStore(location, mode=mode)

    def canonical_key(self, key):
        return nested(key)

    @pytest.mark.slow
    def test_100000_keys(self, store) -> None:
        # DirectoryStore runs the 100,000-key test on the same code; here the
        # scale test goes through the chunk-key mapping instead (10,000 keys).
        keys = [f"many/{i}.{j}" for i in range(100) for j in range(100)]
        store.setitems({key: b"x" for key in keys})
        assert len(store) == len(keys)
        assert store.listdir("many") == sorted(str(i) for i in range(100))
        assert store.listdir("many/7") == sorted(str(j) for j in range(100))
        assert store.getsize("many") == len(keys)
        assert store.getitems(["many/0.0", "many/99/99"]) == {"many/0.0": b"x", "many/99/99": b"x"}
        store.rmdir("many")
        assert len(store) == 0
        assert os.listdir(store.path) == []


# ------------------------------------------------------------------- layout
@pytest.fixture(params=STORES, ids=lambda cls: cls.__name__)
def cls(request):
    return request.param


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "data.zarr"


def test_keys_are_files_at_their_paths(cls, root: Path) -> None:
    store = cls(root)
    keys = [".zgroup", "arr/.zarray", "arr/1.2", "arr/7", "arr/c.d", "arr/1.x", "g/h/0.0.0"]
    for key in keys:
        store[key] = key.encode()
    mapped = [nested(key) for key in keys] if cls is NestedDirectoryStore else keys
    assert sorted(store) == sorted(mapped)
    for key, path in zip(keys, mapped, strict=True):
        assert (root / path).read_bytes() == key.encode()
    if cls is NestedDirectoryStore:
        assert (root / "arr/1/2").is_file() and (root / "g/h/0/0/0").is_file()
        assert store.listdir("arr") == [".zarray", "1", "1.x", "7", "c.d"]
    else:
        assert (root / "arr/1.2").is_file() and not (root / "arr/1").exists()


def test_nested_mapping_applies_to_every_operation(root: Path) -> None:
    store = NestedDirectoryStore(root)
    store["arr/0.1"] = b"0123456789"
    assert store["arr/0/1"] == store["arr/0.1"] == b"0123456789"
    assert "arr/0.1" in store and "arr/0/1" in store
    assert store.get_range("arr/0.1", -3) == b"789"
    assert store.getsize("arr/0.1") == store.getsize("arr/0/1") == 10
    assert store.getitems(["arr/0.1"]) == {"arr/0.1": b"0123456789"}
    store.rename("arr/0.1", "arr/2.3")
    assert list(store) == ["arr/2/3"]
    assert (root / "arr/2/3").is_file()
    store.setitems({"arr/4.5": b"a", "arr/4.6": b"b"})
    store.delitems(["arr/4.5"])
    del store["arr/2.3"]
    assert list(store) == ["arr/4/6"]
    assert store.listdir("arr") == ["4"]
    # An intermediate segment is a group name, not a chunk index: unchanged.
    store["arr/0.1/x"] = b"v"
    assert (root / "arr/0.1/x").is_file()


# ----------------------------------------------------------------- atomicity
def test_reader_never_sees_a_torn_value(cls, root: Path) -> None:
    store = cls(root)
    values = [bytes([n + 1]) * size for n, size in enumerate([1, 300_000, 3_000_000, 70_000])]
    valid = set(values)
    store["arr/0.0"] = values[0]
    stop = threading.Event()
    problems: list[str] = []
    reads = [0]

    def read() -> None:
        while not stop.is_set():
            value = store["arr/0.0"]
            if value not in valid:
                problems.append(f"torn value: {len(value)} bytes")
                return
            tail = store.get_range("arr/0.0", -5)
            if len(set(tail)) != 1:
                problems.append(f"torn range {tail!r}")
                return
            reads[0] += 1

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 1.0
    writes = 0
    try:
        while time.monotonic() < deadline and not problems:
            store["arr/0.0"] = values[writes % len(values)]
            writes += 1
    finally:
        stop.set()
        reader.join()
    assert not problems, problems[0]
    assert reads[0] > 10 and writes > 10
    assert [name for name in disk_tree(root) if TEMP_NAME.search(name)] == []


def test_write_goes_through_a_fixed_length_temp_file_in_the_same_folder(
    cls, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = cls(root)
    renamed: list[tuple[str, str, tuple[int, int], tuple[int, int]]] = []
    real_rename = os.rename

    def identity(fd: int) -> tuple[int, int]:
        info = os.fstat(fd)
        return info.st_dev, info.st_ino

    def spy(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        renamed.append((src, dst, identity(src_dir_fd), identity(dst_dir_fd)))
        return real_rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "rename", spy)
    long_name = "n" * 255
    store[f"deep/folder/{long_name}"] = b"v"
    (src, dst, src_folder, dst_folder), = renamed
    folder = os.stat(root / "deep/folder")
    assert src_folder == dst_folder == (folder.st_dev, folder.st_ino)
    assert TEMP_NAME.fullmatch(src) and dst == long_name
    assert store[f"deep/folder/{long_name}"] == b"v"


def test_failed_write_keeps_old_value_and_leaves_nothing(
    cls, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = cls(root)
    store["a/k"] = b"old value"
    before = disk_tree(root)
    real_write = os.write

    def write_half_then_fail(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", write_half_then_fail)
    with pytest.raises(OSError, match="No space"):
        store["a/k"] = b"a new value that will not fit"
    with pytest.raises(OSError, match="No space"):
        store["new/deep/k"] = b"another value"
    monkeypatch.undo()
    assert store["a/k"] == b"old value"
    assert disk_tree(root) == before  # no temporary file, no new folder


def test_stray_temp_files_are_invisible(cls, root: Path) -> None:
    store = cls(root)
    store["a/b"] = b"12345"
    store["c"] = b"1"
    for folder in ["", "a", "ghost", "ghost/deeper"]:
        (root / folder).mkdir(exist_ok=True)
        (root / folder / stray_temp_name(len(folder))).write_bytes(b"half-written")
    assert sorted(store) == ["a/b", "c"]
    assert len(store) == 2
    # listdir lists sub-folders without looking inside (one scandir, as
    # zarr-python 2 and 3 list a folder): "ghost", left by a crashed write,
    # shows as a name with no key below it, as in those libraries.
    assert store.listdir() == ["a", "c", "ghost"]
    assert store.listdir("a") == ["b"]
    assert store.listdir("ghost") == ["deeper"] and store.listdir("ghost/deeper") == []
    assert store.list_prefix("ghost") == [] and "ghost" not in store
    assert store.getsize() == 6 and store.getsize("a") == 5 and store.getsize("ghost") == 0
    assert store.getitems(["a/b", "ghost"]) == {"a/b": b"12345"}
    assert stray_temp_name(0) not in store
    with pytest.raises(InvalidKeyError, match="reserved"):
        store[stray_temp_name(0)]
    # A folder holding only temporary files is not a prefix: the key may take its place.
    store["ghost"] = b"key now"
    assert store["ghost"] == b"key now"
    store.rmdir("a")
    assert not (root / "a").exists()
    with cls(root, mode="r") as reader:
        assert sorted(reader) == ["c", "ghost"]
    store.clear()
    assert root.is_dir() and os.listdir(root) == []


def test_temp_file_names_are_reserved(cls, root: Path) -> None:
    store = cls(root)
    for key in [stray_temp_name(7), f"a/{stray_temp_name(1)}", f"a/{stray_temp_name(2)}/b"]:
        with pytest.raises(InvalidKeyError, match="reserved") as info:
            store[key] = b"v"
        assert repr(key) in str(info.value)
        assert key not in store
    allowed = [".zstores-tmp.short", ".zstores-tmp." + "A" * 32, ".zstores-tmp." + "0" * 33]
    for key in allowed:
        store[key] = b"ok"
    assert sorted(store) == sorted(allowed)
    assert len(os.listdir(root)) == 3


def test_segment_longer_than_name_max(cls, root: Path) -> None:
    store = cls(root)
    store["a" * 255] = b"fits"
    store["g/" + "é" * 127 + "x"] = b"fits"  # 255 bytes of UTF-8
    for key in ["b" * 256, "g/" + "é" * 128, "g/" + "c" * 300 + "/k"]:
        with pytest.raises(InvalidKeyError, match="255 bytes") as info:
            store[key] = b"v"
        assert repr(key) in str(info.value)
        assert key not in store
        with pytest.raises(InvalidKeyError):
            store[key]
    assert len(store) == 2


def test_long_segments_in_paths_and_renames(cls, root: Path) -> None:
    store = cls(root)
    store["g/k"] = b"1"
    long = "L" * 256
    # Paths with a long segment name nothing (no OSError leaks out); as keys
    # they break the rule.
    assert store.listdir(long) == [] and store.listdir(f"g/{long}/x") == []
    store.rmdir(f"g/{long}")
    assert f"g/{long}" not in store
    for read in (lambda: store.getsize(f"g/{long}"), lambda: store.getitems([long])):
        with pytest.raises(InvalidKeyError, match="255 bytes"):
            read()
    with pytest.raises(InvalidKeyError, match="255 bytes") as info:
        store.rename("g/k", f"g/{long}")
    assert f"'g/{long}'" in str(info.value)
    with pytest.raises(InvalidKeyError, match="255 bytes"):
        store.setitems({"fine": b"v", f"{long}/0.0": b"v"})
    assert dict(store.items()) == {"g/k": b"1"}  # setitems checked every key first
    # The nested mapping only shortens segments: 0.1 of a 255-byte group fits.
    store[("G" * 255) + "/0.1"] = b"2"
    assert store[("G" * 255) + "/0.1"] == b"2"


# -------------------------------------------------------------------- names
NOT_UTF8 = [b"caf\xe9", b"\xff\xfe-folder"]


def test_entries_whose_names_are_not_utf8_are_skipped_with_a_warning(
    cls, root: Path
) -> None:
    store = cls(root)
    store.update({"a/k": b"12", "top": b"1"})
    rootb = os.fsencode(root)
    with open(os.path.join(rootb, NOT_UTF8[0]), "wb") as file:
        file.write(b"latin-1 name")
    os.mkdir(os.path.join(rootb, NOT_UTF8[1]))
    with open(os.path.join(rootb, NOT_UTF8[1], b"inside"), "wb") as file:
        file.write(b"below a bad folder name")
    with open(os.path.join(rootb, b"a", NOT_UTF8[0]), "wb") as file:
        file.write(b"in a")
    for listing, expected in [
        (lambda: sorted(iter(store)), ["a/k", "top"]),  # sorted(store) also calls len
        (lambda: len(store), 2),
        (lambda: store.listdir(), ["a", "top"]),
        (lambda: store.listdir("a"), ["k"]),
        (lambda: store.getsize(), 3),
        (lambda: store.getsize("a"), 2),
    ]:
        with pytest.warns(UserWarning, match="not valid UTF-8") as caught:
            assert listing() == expected
        assert len(caught) == 1  # one warning per call, naming the entries
        message = str(caught[0].message)
        assert repr(store) in message and ("caf\\xe9" in message or "xff" in message)
    store.clear()  # they are removed with the rest
    assert os.listdir(root) == []


# --------------------------------------------------------------------- root
def test_a_root_deleted_and_made_again_is_reopened(cls, root: Path) -> None:
    store = cls(root)
    store["a/k"] = b"1"
    shutil.rmtree(root)  # as zarr-python 2's rmdir() of a whole store does
    root.mkdir()
    with cls(root) as other:
        other["a/k"] = b"written after"
    assert store["a/k"] == b"written after"
    shutil.rmtree(root)
    store["b/k"] = b"made again"  # the write creates the folder again
    assert (root / "b" / "k").read_bytes() == b"made again"
    assert sorted(store) == ["b/k"]


# ---------------------------------------------------------------- full disk
def store_code(cls, root: Path) -> str:
    return f"zstores.{cls.__name__}({str(root)!r})"


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_full_disk_keeps_every_acknowledged_value(cls, tmp_path: Path, kind: str) -> None:
    with small_filesystem(16, kind) as fs:
        root = fs / "data.zarr"
        result = fill_until_full(store_code(cls, root), tmp_path / "log")
        result.assert_store_full()
        assert str(root) in result.message and "k/" in result.message
        assert result.overwrite == "failed"
        assert result.close_error is None
        assert [name for name in disk_tree(root) if TEMP_NAME.search(name)] == []
        with cls(root, mode="r") as store:
            check_acknowledged(store, result.acknowledged)
            assert len(store) == len(result.acknowledged)
        delete_half_and_refill(store_code(cls, root), lambda: cls(root),
                               result.acknowledged, tmp_path / "again")


def test_full_disk_batches_and_errors_are_typed(cls, tmp_path: Path) -> None:
    with small_filesystem(4, "tmpfs") as fs:
        root = fs / "data.zarr"
        result = fill_until_full(store_code(cls, root), tmp_path / "log", batch=4)
        result.assert_store_full()
        store = cls(root)
        first = min(result.acknowledged)
        with pytest.raises(StoreFullError) as caught:
            store[first] = make_value(first, 9, 8 << 20)  # bigger than the disk
        error = caught.value
        assert error.errno == errno.ENOSPC and repr(store) in str(error)
        stored = nested(first) if cls is NestedDirectoryStore else first
        assert repr(stored) in str(error)
        assert isinstance(error.__cause__, OSError) and error.__cause__.errno == errno.ENOSPC
        check_acknowledged(store, result.acknowledged)  # the old value stayed
        with pytest.raises(StoreFullError):  # a new key in a new folder
            store["new/folder/0.0"] = make_value("new/folder/0.0", 1, 8 << 20)
        assert "new" not in store.listdir() and not (root / "new").exists()
        assert [name for name in disk_tree(root) if TEMP_NAME.search(name)] == []
        store.delitems(list(result.acknowledged)[: len(result.acknowledged) // 2])
        store["new/folder/0.0"] = make_value("new/folder/0.0", 1, 64 << 10)


# ------------------------------------------------------------------ pruning
def test_deleting_the_last_key_prunes_empty_folders(cls, root: Path) -> None:
    store = cls(root)
    store["a/b/c/d"] = b"1"
    store["a/x"] = b"2"
    del store["a/b/c/d"]
    assert disk_tree(root) == ["a", "a/x"]
    store.pop("a/x")
    assert root.is_dir() and os.listdir(root) == []

    store.setitems({"g/h/i/k1": b"1", "g/h/i/k2": b"2", "g/j": b"3"})
    store.delitems(["g/h/i/k1", "g/h/i/k2"])
    assert disk_tree(root) == ["g", "g/j"]
    store.rename("g/j", "p/q/r")
    assert disk_tree(root) == ["p", "p/q", "p/q/r"]
    store.rename("p/q", "s/t")
    assert disk_tree(root) == ["s", "s/t", "s/t/r"]
    store["u/v"] = b"4"
    store.rmdir("s/t")
    assert disk_tree(root) == ["u", "u/v"]
    assert store.listdir() == ["u"]


def test_listdir_reads_one_folder_only(cls, root: Path, monkeypatch) -> None:
    # A nested array's folder (here 300 chunk rows) lists with one scandir and
    # no open of a sub-folder: looking into each made it 50x slower than
    # zarr-python 2's one os.listdir.
    store = cls(root)
    store.setitems({f"arr/{i}/{j}": b"x" for i in range(300) for j in range(3)})
    store["arr/.zarray"] = b"{}"
    scans: list[object] = []
    real_scandir = os.scandir

    def counted_scandir(path):
        scans.append(path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", counted_scandir)
    names = store.listdir("arr")
    assert names == sorted([".zarray", *map(str, range(300))])
    assert len(scans) == 1
    assert store.listdir("arr/7") == ["0", "1", "2"] and len(scans) == 2


@pytest.mark.parametrize("kind", ["chunk files", "chunk folders"])
def test_listdir_leaves_out_links_fifos_and_temporary_files(cls, root: Path, kind: str) -> None:
    # listdir reads a folder of one kind with the type tests in the order of
    # its first entry (the folder's own order: a hash of the names here, so
    # eight folders with differently named intruders, which put a chunk first
    # in most): whichever comes first, links (to a file, to a folder,
    # dangling), a FIFO and a stray temporary file are never listed, and a
    # folder merely named like a temporary file is (only files are skipped).
    store = cls(root)
    below = "" if kind == "chunk files" else "/0"
    arrays = [f"arr{n}" for n in range(8)]
    store.setitems({f"{arr}/{i}{below}": b"x" for arr in arrays for i in range(40)})
    chunks = sorted(map(str, range(40)))
    for n, arr in enumerate(arrays):
        folder = root / arr
        os.symlink(folder / "3", folder / f"link-to-3-{n}")
        os.symlink(root, folder / f"link-to-root-{n}")
        os.symlink(root / "nowhere", folder / f"dangling-{n}")
        os.mkfifo(folder / f"fifo-{n}")
        assert store.listdir(arr) == chunks
        (folder / stray_temp_name(n)).write_bytes(b"a write under way")
        assert store.listdir(arr) == chunks
        os.mkdir(folder / stray_temp_name(100 + n))
        assert store.listdir(arr) == sorted([*chunks, stray_temp_name(100 + n)])
        keys = sorted(f"{arr}/{i}{below}" for i in range(40))
        assert sorted(store.list_prefix(f"{arr}/")) == keys


def test_a_folder_in_a_listing_holds_keys_after_deletes(cls, root: Path) -> None:
    # What lets listdir list sub-folders unseen: every way of removing keys
    # removes the folders it empties, so listdir agrees with the keys.
    store = cls(root)
    store.setitems({f"g/{i}/{j}/k": b"x" for i in range(4) for j in range(2)})
    del store["g/0/0/k"]
    store.delitems(["g/0/1/k", "g/1/0/k"])
    store.rename("g/2", "h/2")
    store.rmdir("g/3/1")
    keys = list(store)
    below = {key.split("/")[1] for key in keys if key.startswith("g/")}
    assert store.listdir("g") == sorted(below) == ["1", "3"]
    assert store.listdir() == ["g", "h"]


def test_a_folder_left_by_another_program_is_removed_only_while_keyless(
    cls, root: Path
) -> None:
    # listdir shows such a folder (as zarr-python does); remove_empty_folder
    # drops it like os.rmdir, and never a folder with a key or a foreign file.
    store = cls(root)
    store["k"] = b"1"
    os.makedirs(root / "left" / "behind")
    os.makedirs(root / "held")
    (root / "held" / "notes.txt").write_bytes(b"not a temporary file")
    os.symlink(root / "held", root / "left-link")
    assert store.listdir() == ["held", "k", "left"]
    assert not store.remove_empty_folder("held")
    assert (root / "held" / "notes.txt").read_bytes() == b"not a temporary file"
    assert not store.remove_empty_folder("left-link") and os.path.islink(root / "left-link")
    assert store.remove_empty_folder("left/behind") and os.listdir(root / "left") == []
    assert store.remove_empty_folder("left") and not (root / "left").exists()
    assert store.listdir() == ["held", "k"] and store["k"] == b"1"


def test_writer_and_pruner_race_in_the_same_folder(cls, root: Path) -> None:
    store = cls(root)
    errors: list[BaseException] = []
    deadline = time.monotonic() + 1.0

    def churn(name: str) -> None:
        index = 0
        try:
            while time.monotonic() < deadline:
                key = f"p/q/r/{name}{index}"
                value = f"{name}{index}".encode()
                store[key] = value
                assert store[key] == value
                del store[key]
                index += 1
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=churn, args=(name,)) for name in "abcd"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, repr(errors[0])
    assert len(store) == 0
    assert os.listdir(root) == []


def test_write_retries_when_a_prune_removes_its_folder(
    cls, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worst interleavings of the race above, made deterministic: a
    # concurrent delete prunes a folder right after the writer created it, or
    # after the writer opened it, and a concurrent clear removes the
    # temporary file before its rename.
    store = cls(root)
    real_mkdir, real_open, real_rename = os.mkdir, os.open, os.rename
    pruned, emptied, cleared = [], [], []

    def mkdir_then_pruned(path, mode=0o777, *, dir_fd=None):
        real_mkdir(path, mode, dir_fd=dir_fd)
        if not pruned:
            pruned.append(path)
            os.rmdir(path, dir_fd=dir_fd)

    def open_temp_after_prune(path, flags, mode=0o777, *, dir_fd=None):
        if directory.TEMP_PREFIX in str(path) and not emptied:
            emptied.append(path)
            os.rmdir(root / "p" / "q")  # the writer holds q open; q and p go
            os.rmdir(root / "p")
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def rename_after_clear(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
        if not cleared:
            cleared.append(src)
            os.unlink(src, dir_fd=src_dir_fd)
        return real_rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(os, "mkdir", mkdir_then_pruned)
    store["p/q/k"] = b"1"
    assert pruned and store["p/q/k"] == b"1"
    del store["p/q/k"]
    monkeypatch.setattr(os, "open", open_temp_after_prune)
    store["p/q/k"] = b"2"
    assert emptied and store["p/q/k"] == b"2"
    monkeypatch.setattr(os, "rename", rename_after_clear)
    store["p/q/k"] = b"3"
    assert cleared and store["p/q/k"] == b"3"
    monkeypatch.undo()
    assert [name for name in disk_tree(root) if TEMP_NAME.search(name)] == []
    assert disk_tree(root) == ["p", "p/q", "p/q/k"]


# ---------------------------------------------------------------- conflicts
def test_conflicts_name_both_keys_and_change_nothing(cls, root: Path) -> None:
    store = cls(root)
    store.setitems({"a": b"file", "x/y/z": b"deep", "k": b"v"})
    before = disk_tree(root)
    attempts = [
        (lambda: store.__setitem__("a/b/c", b"v"), ["'a/b/c'", "'a'"]),
        (lambda: store.__setitem__("x", b"v"), ["'x'", "'x/y/z'"]),
        (lambda: store.__setitem__("x/y", b"v"), ["'x/y'", "'x/y/z'"]),
        (lambda: store.setitems({"a/q": b"v"}), ["'a/q'", "'a'"]),
        (lambda: store.rename("k", "a/k"), ["'a/k'", "'a'"]),
        (lambda: store.rename("k", "x/y"), ["'x/y'", "'x/y/z'"]),
        (lambda: store.rename("x", "a"), ["'a'"]),
        (lambda: store.rename("x", "a/inner"), ["'a'"]),
    ]
    for attempt, names in attempts:
        with pytest.raises(KeyConflictError) as info:
            attempt()
        for name in names:
            assert name in str(info.value), (name, str(info.value))
        assert disk_tree(root) == before


def test_merging_rename_refuses_before_moving_anything(cls, root: Path) -> None:
    store = cls(root)
    store.setitems({"src/one": b"1", "src/two/x": b"2", "dst/two": b"3", "dst/other": b"4"})
    before = disk_tree(root)
    with pytest.raises(KeyConflictError, match="'dst/two'"):
        store.rename("src", "dst")
    assert disk_tree(root) == before
    del store["dst/two"]
    store.rename("src", "dst")
    assert dict(store.items()) == {"dst/one": b"1", "dst/two/x": b"2", "dst/other": b"4"}
    assert not (root / "src").exists()


def test_reading_a_folder_is_a_missing_key(cls, root: Path) -> None:
    store = cls(root)
    store["a/b"] = b"123"
    assert "a" not in store
    with pytest.raises(KeyError):
        store["a"]
    with pytest.raises(KeyError):
        store.get_range("a", 0, 1)
    with pytest.raises(KeyError):
        del store["a"]
    assert store.getitems(["a"]) == {}
    assert store.getsize("a") == 3
    assert store["a/b"] == b"123"


# -------------------------------------------------------------------- modes
def test_modes(cls, root: Path) -> None:
    for mode in ("r", "r+"):
        with pytest.raises(StoreNotFoundError, match="mode"):
            cls(root, mode=mode)
    assert not root.exists()
    root.mkdir()
    with cls(root, mode="r") as store:  # an empty folder is an empty store
        assert len(store) == 0
    (root / stray_temp_name()).write_bytes(b"")
    cls(root, mode="w-").close()  # no key yet: "w-" accepts it
    with cls(root, mode="a") as store:
        store["k"] = b"v"
    with pytest.raises(StoreExistsError, match="w-"):
        cls(root, mode="w-")
    (root / "not-a-key-dir").mkdir()
    with cls(root, mode="w") as store:
        assert len(store) == 0
    assert os.listdir(root) == []
    with cls(root / "new" / "deeper", mode="w-") as store:
        assert (root / "new" / "deeper").is_dir()

    a_file = root / "file"
    a_file.write_bytes(b"x")
    with pytest.raises(StoreNotFoundError, match="is a file"):
        cls(a_file, mode="r")
    with pytest.raises(StoreExistsError, match="is a file"):
        cls(a_file, mode="a")
    with pytest.raises(StoreExistsError, match="in the way"):
        cls(a_file / "inside", mode="a")
    with pytest.raises(StoreNotFoundError):
        cls(a_file / "inside", mode="r")


def test_normalize_keys(cls, root: Path) -> None:
    store = cls(root, normalize_keys=True)
    store["Foo/Bar/0.1"] = b"v"
    stored = nested("foo/bar/0.1") if cls is NestedDirectoryStore else "foo/bar/0.1"
    assert list(store) == [stored]
    assert (root / stored).is_file()
    assert store["FOO/BAR/0.1"] == b"v"
    assert "foo/bar/0.1" in store
    assert store.listdir("FOO") == ["bar"]
    assert store.getsize("FOO/BAR/0.1") == 1 and store.getsize("FOO") == 1
    store.rename("FOO/bar", "Other")
    assert list(store) == [stored.replace("foo/bar", "other")]
    clone = pickle.loads(pickle.dumps(store))
    assert clone["OTHER/0.1"] == b"v"
    store.rmdir("OTHER")
    assert len(store) == 0
    store["a"] = b"1"
    with pytest.raises(KeyConflictError, match="'a/b'"):
        store["A/b"] = b"2"


def test_identity_pickle_and_repr(cls, root: Path, tmp_path: Path) -> None:
    store = cls(root, fsync=True)
    store["k"] = b"v"
    link = tmp_path / "link"
    link.symlink_to(root)
    with cls(link, mode="r") as via_link:
        assert via_link == store and hash(via_link) == hash(store)
    assert str(root) in repr(store) and cls.__name__ in repr(store)
    assert store.path == str(root)
    clone = pickle.loads(pickle.dumps(cls(os.path.relpath(root), mode="r")))
    assert clone.path == str(root) and clone.read_only and clone["k"] == b"v"
    assert pickle.loads(pickle.dumps(store))._params()["fsync"] is True


def test_fsync_is_off_by_default_and_optional(cls, root: Path, monkeypatch) -> None:
    calls = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd)))
    cls(root)["a/k"] = b"v"
    assert calls == []
    cls(root, fsync=True)["a/k"] = b"w"
    assert len(calls) == 2  # the file, then its folder


def test_capabilities(cls, root: Path) -> None:
    store = cls(root)
    assert store.supports_range_reads and store.supports_process_writers
    assert store.persistent and store.hierarchical
    assert directory.NAME_MAX == 255


# ------------------------------------------------- zarr-python 2 and 3 peers
ZARR2_WRITE = """
import base64, json, warnings
import numpy as np
import zarr
warnings.simplefilter("ignore", FutureWarning)
store = getattr(zarr, store_class)(path)
root = zarr.group(store=store, overwrite=True)
root.attrs["title"] = "written by zarr 2"
arr = root.create_dataset("sub/arr", shape=(9, 11), chunks=(4, 5), dtype="<i4")
arr[:] = np.arange(99, dtype="<i4").reshape(9, 11) + 1
arr.attrs["units"] = "m"
if strip_separator:
    meta = json.loads(store["sub/arr/.zarray"])
    del meta["dimension_separator"]
    store["sub/arr/.zarray"] = json.dumps(meta).encode()
    assert (zarr.open_array(store, path="sub/arr", mode="r")[:] == arr[:]).all()
result = {key: base64.b64encode(store[key]).decode() for key in store.keys()}
"""

ZARR2_READ = """
import warnings
import zarr
warnings.simplefilter("ignore", FutureWarning)
store = getattr(zarr, store_class)(path)
group = zarr.open_group(store=store, mode="r")
arr = group["sub/arr"]
result = {
    "data": arr[:].tolist(),
    "attrs": group.attrs.asdict(),
    "arr_attrs": arr.attrs.asdict(),
    "keys": sorted(store.keys()),
}
"""

ZARR2_STORE = {DirectoryStore: "DirectoryStore", NestedDirectoryStore: "NestedDirectoryStore"}


def zarr3_decode(items: dict[str, bytes], path: str) -> np.ndarray:
    import zarr
    from zarr.core.buffer import cpu

    store = zarr.storage.MemoryStore({k: cpu.Buffer.from_bytes(v) for k, v in items.items()})
    return zarr.open_array(store=store, path=path, zarr_format=2, mode="r")[...]


def zarr3_encode(separator: str) -> dict[str, bytes]:
    """The keys zarr-python 3 writes for a group holding ``sub/arr``."""
    import zarr

    data: dict = {}
    group = zarr.open_group(store=zarr.storage.MemoryStore(data), zarr_format=2, mode="w")
    group.attrs["title"] = "written by zstores"
    arr = group.create_array(
        "sub/arr", shape=(9, 11), chunks=(4, 5), dtype="<i4",
        chunk_key_encoding={"name": "v2", "separator": separator},
    )
    arr[:] = EXPECTED
    arr.attrs["units"] = "m"
    return {key: value.to_bytes() for key, value in data.items()}


def test_reads_what_zarr2_wrote(zarr2, cls, root: Path) -> None:
    written = zarr2.run(ZARR2_WRITE, store_class=ZARR2_STORE[cls], path=str(root),
                        strip_separator=False)
    expected = {key: base64.b64decode(value) for key, value in written.items()}
    depth = 3 if cls is NestedDirectoryStore else 2
    assert any(key.startswith("sub/arr/") and key.count("/") == depth and key[-1].isdigit()
               for key in expected)
    with cls(root, mode="r") as store:
        assert dict(store.items()) == expected
        assert len(store) == len(expected)
        np.testing.assert_array_equal(zarr3_decode(dict(store.items()), "sub/arr"), EXPECTED)
        assert json.loads(store["sub/arr/.zattrs"]) == {"units": "m"}


def test_reads_zarr2_nested_array_without_dimension_separator(zarr2, root: Path) -> None:
    # Arrays written before zarr-python 2 recorded dimension_separator: a
    # reader asks for dotted chunk keys and the store maps them to folders.
    zarr2.run(ZARR2_WRITE, store_class="NestedDirectoryStore", path=str(root), strip_separator=True)
    with NestedDirectoryStore(root, mode="r") as store:
        assert "dimension_separator" not in json.loads(store["sub/arr/.zarray"])
        dotted = {key: store[key] for key in (".zgroup", "sub/arr/.zarray")}
        dotted.update({f"sub/arr/{i}.{j}": store[f"sub/arr/{i}.{j}"]
                       for i in range(3) for j in range(3)})
    np.testing.assert_array_equal(zarr3_decode(dotted, "sub/arr"), EXPECTED)


@pytest.mark.parametrize(
    "cls, strip_separator",
    [(DirectoryStore, False), (NestedDirectoryStore, False), (NestedDirectoryStore, True)],
    ids=["DirectoryStore", "NestedDirectoryStore", "NestedDirectoryStore-old-format"],
)
def test_zarr2_reads_what_we_wrote(zarr2, cls, root: Path, strip_separator: bool) -> None:
    items = zarr3_encode("/" if cls is NestedDirectoryStore and not strip_separator else ".")
    if strip_separator:
        # zarr-python 3 wrote dotted chunk keys; our store nests them, and an
        # old-format .zarray makes zarr-python 2 look for them nested.
        meta = json.loads(items["sub/arr/.zarray"])
        del meta["dimension_separator"]
        items["sub/arr/.zarray"] = json.dumps(meta).encode()
    with cls(root, mode="w") as store:
        store.update(items)
        ours = sorted(store)
    got = zarr2.run(ZARR2_READ, store_class=ZARR2_STORE[cls], path=str(root))
    assert got["keys"] == ours
    np.testing.assert_array_equal(np.array(got["data"], dtype="<i4"), EXPECTED)
    assert got["attrs"] == {"title": "written by zstores"}
    assert got["arr_attrs"] == {"units": "m"}


def test_zarr3_local_store_reads_nested_array_we_wrote(root: Path) -> None:
    import zarr

    items = zarr3_encode("/")
    # Write chunks under their dotted spelling: only the store's mapping puts
    # them where a "/"-separated array looks for them.
    dotted = {
        re.sub(r"/(\d+)/(\d+)$", r"/\1.\2", key): value for key, value in items.items()
    }
    assert "sub/arr/1.2" in dotted
    with NestedDirectoryStore(root, mode="w") as store:
        store.update(dotted)
        assert sorted(store) == sorted(items)
    array = zarr.open_array(store=zarr.storage.LocalStore(root, read_only=True), path="sub/arr",
                            zarr_format=2, mode="r")
    np.testing.assert_array_equal(array[...], EXPECTED)


def test_len_counts_afresh_whatever_came_just_before(cls, root: Path) -> None:
    # len() is the count at the moment it is asked, never a listing's count
    # remembered from iter(): another handle's write between the two (the
    # case a reused listing answered stale within its 50 ms window) counts.
    store = cls(root)
    keys = {f"a/{i}/b/{j}": b"x" for i in range(3) for j in range(4)}
    store.setitems(keys)
    for make in (list, sorted, tuple, lambda s: [*s]):
        assert sorted(make(store)) == sorted(keys), make
    other = cls(root)

    def call(function):
        return function(store)

    call(iter)
    other["a/new"] = b"x"
    assert call(len) == len(keys) + 1
    call(iter)
    store["a/newer"] = b"x"
    assert call(len) == len(keys) + 2
    it = iter(store)
    del other["a/new"]
    assert len(store) == len(keys) + 1 and len(list(it)) == len(keys) + 2


# ------------------------------------------------------------ create if absent
def test_set_if_not_exists_links_a_whole_file_and_leaves_no_temporary(cls, root: Path) -> None:
    store = cls(root)
    assert store.set_if_not_exists("a/b", b"first")
    assert not store.set_if_not_exists("a/b", b"second")
    assert (root / "a" / "b").read_bytes() == b"first"
    assert (root / "a" / "b").stat().st_nlink == 1  # the temporary name is gone
    assert sorted(os.listdir(root / "a")) == ["b"]


def test_set_if_not_exists_refuses_a_link_at_the_key(cls, root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"secret")
    store = cls(root)
    store["a/x"] = b"1"
    os.symlink(outside, root / "a" / "b")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        store.set_if_not_exists("a/b", b"x")
    assert outside.read_bytes() == b"secret"
    assert os.path.islink(root / "a" / "b")


def test_set_if_not_exists_removes_a_keyless_folder_in_the_way(root: Path) -> None:
    store = DirectoryStore(root)
    (root / "empty" / "deeper").mkdir(parents=True)
    assert store.set_if_not_exists("empty", b"v")
    assert store["empty"] == b"v"


@pytest.mark.skipif(posixfs._renameat2 is None, reason="no renameat2 on this system")
def test_set_if_not_exists_without_hard_links(root: Path, monkeypatch) -> None:
    """A file system without hard links (FAT, some FUSE mounts) answers link() with
    EPERM: renameat2(RENAME_NOREPLACE), a real system call, does the work."""
    def no_hard_links(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    store = DirectoryStore(root)
    monkeypatch.setattr(os, "link", no_hard_links)
    assert store.set_if_not_exists("a/b", b"first")
    assert not store.set_if_not_exists("a/b", b"second")
    assert store["a/b"] == b"first"
    assert sorted(os.listdir(root / "a")) == ["b"]


def test_directory_refuses_compare_and_swap_saying_why(root: Path) -> None:
    store = DirectoryStore(root)
    store["k"] = b"v"
    with pytest.raises(UnsupportedOperationError, match="rename.*LMDB, SQLite"):
        store.replace_if("k", b"v", b"w")
    assert store["k"] == b"v"
