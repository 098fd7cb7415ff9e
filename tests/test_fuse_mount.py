"""zfuse.mount/mounted and the mount's behaviour towards the store.

``CountingStore`` is a real MemoryStore that also counts what the mount asks
of it, so a test can see that a large value is read in pieces, not whole per
piece, and that missing keys probed again and again cost no round trip.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

import zfuse
import zstores
from zfuse.mount import READ_AHEAD_KIB
from zfuse.operations import ReadOnlyOperations
from zstores import DirectoryStore, MemoryStore, NestedDirectoryStore

from bench_common import drop_page_cache
from fuse_helpers import require_fuse, run_zfuse

pytestmark = pytest.mark.timeout(120)


class CountingStore(MemoryStore):
    """A MemoryStore that records the reads and probes reaching it."""

    def __init__(self, *, ranged: bool = True) -> None:
        super().__init__()
        self.supports_range_reads = ranged
        self.whole_reads: list[str] = []
        self.range_reads: list[tuple[str, int, int | None]] = []
        self.probes: list[str] = []

    def _get(self, key: str) -> bytes:
        self.whole_reads.append(key)
        return super()._get(key)

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        self.range_reads.append((key, start, length))
        return super()._get(key)[start:None if length is None else start + length]

    def _getsize_key(self, key: str) -> int:
        self.probes.append(key)
        return super()._getsize_key(key)

    def _stat(self, key: str) -> int | None:
        # Store.stat's fast path: the mount's "a key, and how big?" probe.
        self.probes.append(key)
        return super()._stat(key)

    def _listdir(self, prefix: str):  # type: ignore[override]
        self.probes.append(prefix)
        return super()._listdir(prefix)


# A read-only mount of a store others may change pins a version per open file too.
read_only_or_not = pytest.mark.parametrize("read_only", [False, True], ids=["rw", "ro"])


@read_only_or_not
def test_large_value_is_read_once_per_open_not_per_piece(mountpoint: Path,
                                                         read_only: bool) -> None:
    # A store with no cheaper way to pin a version (Memory, Redis, MongoDB)
    # pins it by reading it whole at open: one read per open file, never
    # one per 128 KiB request.
    store = CountingStore()
    data = os.urandom(24 << 20)
    store["big"] = data
    with zfuse.mounted(store, mountpoint, read_only=read_only) as m:
        for _ in range(2):  # a second open pins again
            drop_page_cache(Path(m.path) / "big")  # (which opens the file too)
            store.whole_reads.clear()
            fd = os.open(Path(m.path) / "big", os.O_RDONLY)
            try:
                pieces = [os.pread(fd, 128 << 10, offset)
                          for offset in range(0, len(data), 128 << 10)]
            finally:
                os.close(fd)
            assert b"".join(pieces) == data
            assert store.whole_reads == ["big"]
            assert store.range_reads == []


def test_a_folder_store_reads_a_pinned_file_in_growing_windows(mountpoint: Path,
                                                              tmp_path: Path) -> None:
    # A folder store pins by descriptor: reads are preads in windows that
    # grow, never the whole value per request.
    store = zstores.DirectoryStore(tmp_path / "d")
    data = os.urandom(24 << 20)
    store["big"] = data
    with zfuse.mounted(store, mountpoint) as m:
        ops = m.operations
        fetched: list[int] = []
        real = zfuse.handles.Handle._fetch

        def counting(self, store, size, offset):  # type: ignore[no-untyped-def]
            found = real(self, store, size, offset)
            fetched.append(len(found[0]))
            return found

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(zfuse.handles.Handle, "_fetch", counting)
            fd = os.open(Path(m.path) / "big", os.O_RDONLY)
            try:
                pieces = [os.pread(fd, 128 << 10, offset)
                          for offset in range(0, len(data), 128 << 10)]
            finally:
                os.close(fd)
        assert b"".join(pieces) == data and ops is m.operations
        assert len(data) <= sum(fetched) <= 2 * len(data)
        assert len(fetched) < len(pieces) // 4  # growing windows


@read_only_or_not
def test_store_without_range_reads_is_fetched_once_per_open(mountpoint: Path,
                                                            read_only: bool) -> None:
    store = CountingStore(ranged=False)
    store["v"] = os.urandom(3 << 20)
    with zfuse.mounted(store, mountpoint, attr_timeout=0, read_only=read_only) as m:
        for _ in range(2):
            with open(Path(m.path) / "v", "rb", buffering=0) as f:
                while f.read(128 << 10):
                    pass
    assert store.whole_reads == ["v", "v"] and store.range_reads == []


@read_only_or_not
def test_a_file_read_again_within_attr_timeout_comes_from_the_page_cache(
        mountpoint: Path, read_only: bool) -> None:
    # The second open pins the same version (a digest of the value says so),
    # so the kernel keeps its pages: no read reaches the daemon.
    store = CountingStore()
    store["k"] = os.urandom(1 << 20)
    with zfuse.mounted(store, mountpoint, attr_timeout=30, read_only=read_only) as m:
        ops = m.operations
        reads: list[int] = []
        real = ops.read_view

        def counting(*args):  # type: ignore[no-untyped-def]
            reads.append(args[2])
            return real(*args)

        ops.read_view = counting
        path = Path(m.path) / "k"
        assert path.read_bytes() == store["k"]
        first = len(reads)
        assert path.read_bytes() == store["k"]
        assert len(reads) == first > 0


def test_read_only_mount_with_kernel_cache_leaves_open_and_close_to_libfuse(
        mountpoint: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    declined: list[str] = []

    def decline_open(path: str, fi: object) -> int:
        declined.append(path)
        raise zfuse.operations.FuseOSError(errno.ENOSYS)

    monkeypatch.setattr(zfuse.operations, "_decline_open", decline_open)
    store = CountingStore()
    store.update({f"f/{i}": os.urandom(70_000) for i in range(20)})
    options = {"kernel_cache": True}
    with zfuse.mounted(store, mountpoint, attr_timeout=0, read_only=True,
                       fuse_options_extra=options) as m:
        ops = m.operations
        assert isinstance(ops, ReadOnlyOperations)
        assert ops.release is None and ops.flush is None
        # libfuse 2 answers open itself; libfuse 3 lets Python decline it
        # once, and the kernel then never sends it again.
        assert ops.open is (decline_open if zfuse.libfuse_version()[0] >= 3 else None)
        rounds = []
        for _ in range(2):  # the second round is served by the kernel alone
            for i in range(20):
                assert (Path(m.path) / "f" / str(i)).read_bytes() == store[f"f/{i}"]
            rounds.append(len(store.range_reads))
            store.range_reads.clear()
        assert rounds[0] >= 20 and rounds[1] == 0
        assert len(declined) <= 1
        with pytest.raises(OSError) as failed:
            os.open(Path(m.path) / "f" / "0", os.O_RDWR)
        assert failed.value.errno == errno.EROFS


def _read_ahead_kib(path: Path) -> int:
    device = os.stat(path).st_dev
    return int(Path(f"/sys/class/bdi/{os.major(device)}:{os.minor(device)}/read_ahead_kb")
               .read_text())


def test_mounts_ask_the_kernel_for_large_read_ahead(mountpoint: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root may raise a mount's read-ahead")
    with zfuse.mounted(MemoryStore(), mountpoint) as m:
        assert _read_ahead_kib(Path(m.path)) >= READ_AHEAD_KIB
    other = tmp_path / "cli"
    other.mkdir()
    done = run_zfuse("mount", "memory://", str(other))
    assert done.returncode == 0, done.stderr
    try:
        assert _read_ahead_kib(other) >= READ_AHEAD_KIB
    finally:
        zfuse.unmount(other)


def test_missing_keys_probed_again_cost_no_round_trip_until_created(mountpoint: Path) -> None:
    store = CountingStore()
    store["arr/0.0"] = b"chunk"
    with zfuse.mounted(store, mountpoint, attr_timeout=30) as m:
        probe = Path(m.path) / "arr" / ".zarray"
        for _ in range(50):
            assert not probe.exists()
        assert store.probes.count("arr/.zarray") <= 1
        probe.write_bytes(b"{}")
        assert probe.read_bytes() == b"{}"
        assert sorted(os.listdir(Path(m.path) / "arr")) == [".zarray", "0.0"]


def test_listing_classifies_children_and_serves_following_stats(mountpoint: Path) -> None:
    store = CountingStore()
    store.update({f"flat/{i}": b"x" * i for i in range(300)})  # big: one prefix scan
    store.update({"flat/sub/a": b"1", "flat/sub2/b/c": b"2"})
    store.update({"tree/a/x": b"1", "tree/b/y": b"2", "tree/f": b"3"})
    with zfuse.mounted(store, mountpoint, attr_timeout=30) as m:
        store.probes.clear()
        for folder, dirs in (("flat", {"sub", "sub2"}), ("tree", {"a", "b"})):
            with os.scandir(Path(m.path) / folder) as entries:
                kinds = {e.name: e.is_dir(follow_symlinks=False) for e in entries}
            assert {name for name, is_dir in kinds.items() if is_dir} == dirs
            assert len(kinds) == len(dirs) + (300 if folder == "flat" else 1)
        # The big folder costs a sample of probes and one scan, not a probe per name.
        assert len([p for p in store.probes if p.startswith("flat/") and p != "flat/"]) <= 16
        store.probes.clear()
        sizes = {e.name: e.stat().st_size for e in os.scandir(Path(m.path) / "tree")}
        assert sizes == {"a": 0, "b": 0, "f": 1}
        assert [p for p in store.probes if p.startswith("tree/") and p != "tree/"] == []


def test_a_key_that_is_also_a_prefix_shows_as_the_file(mountpoint: Path) -> None:
    store = MemoryStore()
    store.update({"a": b"key", "a/b": b"below"})
    with zfuse.mounted(store, mountpoint) as m:
        assert (Path(m.path) / "a").read_bytes() == b"key"
        assert stat.S_ISREG(os.stat(Path(m.path) / "a").st_mode)


def test_removing_the_last_key_keeps_its_folders_until_rmdir(mountpoint: Path) -> None:
    store = MemoryStore()
    store["a/b/c"] = b"1"
    with zfuse.mounted(store, mountpoint, attr_timeout=0) as m:  # nothing cached
        root = Path(m.path)
        os.unlink(root / "a" / "b" / "c")
        assert dict(store) == {}
        assert os.listdir(root / "a") == ["b"] and os.listdir(root / "a" / "b") == []
        os.rmdir(root / "a" / "b")
        os.rmdir(root / "a")
        assert os.listdir(root) == []


@pytest.mark.parametrize("nested", [False, True])
def test_rm_r_removes_folders_another_program_left_in_a_directory_store(
    mountpoint: Path, tmp_path: Path, nested: bool
) -> None:
    # A directory store lists a folder with no key in it (as zarr-python
    # does); rmdir through the mount must remove it from the disk too, or it
    # shows again and `rm -r` fails with "Directory not empty".
    root = tmp_path / "store"
    store = (NestedDirectoryStore if nested else DirectoryStore)(root)
    store["arr/.zarray"] = b"{}"
    os.makedirs(root / "arr" / "left" / "behind" / "deep")
    with zfuse.mounted(store, mountpoint) as m:
        shown = Path(m.path)
        assert sorted(os.listdir(shown / "arr")) == [".zarray", "left"]
        done = subprocess.run(["rm", "-r", str(shown / "arr" / "left")], capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert os.listdir(shown / "arr") == [".zarray"]
        assert os.listdir(root / "arr") == [".zarray"]
        os.makedirs(root / "arr" / "late")
        (root / "arr" / "late" / "0").write_bytes(b"a key written past the mount")
        with pytest.raises(OSError) as raised:
            os.rmdir(shown / "arr" / "late")
        assert raised.value.errno == errno.ENOTEMPTY
        assert store["arr/late/0"] == b"a key written past the mount"


@read_only_or_not
def test_changes_made_to_the_store_show_after_attr_timeout(mountpoint: Path,
                                                           read_only: bool) -> None:
    store = MemoryStore()
    store["k"] = b"first"
    with zfuse.mounted(store, mountpoint, attr_timeout=0.2, read_only=read_only) as m:
        path = Path(m.path) / "k"
        assert path.read_bytes() == b"first"
        store["k"] = b"FIRST"  # the same size: only the timeout can reveal it
        store["new"] = b"n"
        time.sleep(0.5)  # waits out the cache; nothing here is timed
        assert path.read_bytes() == b"FIRST"
        assert (Path(m.path) / "new").read_bytes() == b"n"


def test_backend_failure_is_eio_with_a_log_line(mountpoint: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore()
    store["k"] = b"value"
    with zfuse.mounted(store, mountpoint, attr_timeout=0) as m:
        writer = open(Path(m.path) / "w", "wb")  # noqa: SIM115 - closed below, to fail
        writer.write(b"unsaved")
        with caplog.at_level(logging.ERROR, logger="zfuse"):
            store.close()
            with pytest.raises(OSError) as raised:
                (Path(m.path) / "k").read_bytes()
            assert raised.value.errno == errno.EIO
            with pytest.raises(OSError) as raised:
                writer.close()  # the failed commit surfaces at close()
            assert raised.value.errno == errno.EIO
    assert any("StoreClosedError" in record.getMessage() for record in caplog.records)


def test_mount_point_problems_are_refused_before_mounting(tmp_path: Path) -> None:
    require_fuse()
    store = MemoryStore()
    with pytest.raises(zfuse.MountError, match="does not exist"):
        zfuse.mount(store, tmp_path / "missing", foreground=False)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(zfuse.MountError, match="not empty"):
        zfuse.mount(store, tmp_path / "full", foreground=False)
    (tmp_path / "mnt").mkdir()
    with (zfuse.mounted(store, tmp_path / "mnt"),
          pytest.raises(zfuse.MountError, match="already a mount point")):
        zfuse.mount(store, tmp_path / "mnt", foreground=False)
    assert not zfuse.is_mounted(tmp_path / "mnt")


def test_mounted_unmounts_when_the_body_fails_even_if_busy(mountpoint: Path) -> None:
    store = MemoryStore()
    store["f"] = b"x"
    busy = None
    try:
        with pytest.raises(RuntimeError, match="boom"), zfuse.mounted(store, mountpoint) as m:
            busy = subprocess.Popen(["sleep", "60"], cwd=m.path)
            raise RuntimeError("boom")
        assert not zfuse.is_mounted(mountpoint)  # detached although still in use
        assert m.active
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    m.unmount()  # already detached: waits for the thread to end
    assert not m.active


def test_unmount_of_something_not_mounted_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(zfuse.MountError, match="not mounted"):
        zfuse.unmount(tmp_path)


def test_an_unmounted_in_process_mount_leaves_sigpipe_ignored(mountpoint: Path) -> None:
    # libfuse resets SIGPIPE to its default (kill the process) when it lets go
    # of its signals; Python ignores it, so a write to a closed pipe must still
    # raise BrokenPipeError here rather than end the test process.
    with zfuse.mounted(MemoryStore(), mountpoint):
        pass
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        with pytest.raises(BrokenPipeError):
            os.write(write_end, b"x")
    finally:
        os.close(write_end)


def test_an_in_process_mount_keeps_the_working_directory(mountpoint: Path,
                                                          tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # libfuse 3 changes the working directory to / when it starts serving, even
    # in the foreground; relative paths of the program must keep working.
    monkeypatch.chdir(tmp_path)
    with zfuse.mounted(MemoryStore(), mountpoint):
        assert os.getcwd() == str(tmp_path)
        Path("relative.txt").write_text("here")
    assert os.getcwd() == str(tmp_path)
    assert (tmp_path / "relative.txt").read_text() == "here"
