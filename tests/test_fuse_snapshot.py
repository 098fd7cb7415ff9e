"""``zfuse mount --snapshot`` and ``mount(..., snapshot=True)``: one version for the mount's life.

Real FUSE mounts; a writer thread (or process) changes the store while tools
read the folder: files, listings and a zarr array read through zarr's own
LocalStore must show the version of the moment the mount started.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import zarr

import zfuse
import zstores

from fuse_helpers import make_store, run_zfuse

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=["memory", "lmdb", "sqlite"])
def snapshot_store(request, tmp_path):
    store = make_store(request.param, tmp_path / "store")
    assert store.supports_snapshots, store
    yield store
    store.close()


def write_array(store: zstores.Store, value: int) -> zarr.Array:
    array = zarr.create_array(zstores.zarr_store(store), name="temperature", shape=(64, 64),
                              chunks=(16, 16), dtype="i4", fill_value=0, overwrite=True)
    array[:] = value
    return array


def test_snapshot_mount_shows_one_version_while_a_writer_goes_on(snapshot_store, mountpoint):
    store = snapshot_store
    array = write_array(store, 1)
    store["notes.txt"] = b"version 1"
    stop = threading.Event()

    def writer() -> None:
        value = 2
        while not stop.is_set():
            array[:] = value
            store["notes.txt"] = b"version %d" % value
            store[f"new/{value % 5}"] = b"x"
            value += 1

    with zfuse.mounted(store, mountpoint, snapshot=True) as mounted:
        view = mounted.store
        assert view is not store and view.read_only
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            for _ in range(10):
                local = zarr.open_array(zarr.storage.LocalStore(mountpoint, read_only=True),
                                        path="temperature", mode="r")
                np.testing.assert_array_equal(local[:], np.ones((64, 64), dtype="i4"))
                assert (mountpoint / "notes.txt").read_bytes() == b"version 1"
                assert sorted(os.listdir(mountpoint)) == ["notes.txt", "temperature", "zarr.json"]
        finally:
            stop.set()
            thread.join()
        assert store["notes.txt"] != b"version 1"  # the writer did change the store
        with pytest.raises(OSError) as refused:
            (mountpoint / "notes.txt").write_bytes(b"through the mount")
        assert refused.value.errno == errno.EROFS
    assert view.closed  # the mount closed its snapshot at unmount
    assert not store.closed


def test_a_store_without_snapshots_is_refused_before_mounting(tmp_path, mountpoint):
    store = zstores.DirectoryStore(tmp_path / "folder")
    with pytest.raises(zfuse.MountError, match="supports_snapshots=False"):
        zfuse.mount(store, mountpoint, snapshot=True, foreground=False)
    assert not zfuse.is_mounted(mountpoint)


def test_cli_snapshot_of_a_store_without_snapshots_is_one_line(tmp_path, mountpoint):
    (tmp_path / "folder").mkdir()
    done = run_zfuse("mount", f"file://{tmp_path / 'folder'}", str(mountpoint), "--snapshot")
    assert done.returncode == 1
    assert done.stderr.startswith("zfuse: error: cannot mount a snapshot of DirectoryStore(")
    assert "supports_snapshots=False" in done.stderr and len(done.stderr.splitlines()) == 1
    assert not zfuse.is_mounted(mountpoint)


@pytest.mark.parametrize("kind", ["lmdb", "sqlite"])
def test_cli_snapshot_mount_keeps_its_version(kind, tmp_path, mountpoint):
    store = make_store(kind, tmp_path / "store")
    assert store.supports_snapshots, store
    url = f"{kind}://{store.path}"
    array = write_array(store, 1)
    done = run_zfuse("mount", url, str(mountpoint), "--snapshot")
    assert done.returncode == 0, done.stderr
    try:
        array[:] = 2  # another process (this one) writes after the mount began
        store["added"] = b"new"
        local = zarr.open_array(zarr.storage.LocalStore(mountpoint, read_only=True),
                                path="temperature", mode="r")
        assert (local[:] == 1).all()
        assert "added" not in os.listdir(mountpoint)
        assert (zarr.open_array(zstores.zarr_store(store), path="temperature")[:] == 2).all()
    finally:
        assert run_zfuse("unmount", str(mountpoint)).returncode == 0
        store.close()


def test_mounted_passes_snapshot_on(tmp_path: Path, mountpoint):
    store = zstores.MemoryStore()
    store["a"] = b"1"
    with zfuse.mounted(store, mountpoint, snapshot=True):
        store["a"] = b"2"
        assert (mountpoint / "a").read_bytes() == b"1"
    assert store["a"] == b"2"
