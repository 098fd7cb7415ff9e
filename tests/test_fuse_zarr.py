"""Zarr readers and writers through real mounts: zarr-python 2 and 3, tensorstore."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zfuse
from zstores.stores.lmdb import LMDBStore
from zstores.stores.sqlite import SQLiteStore

from conftest import missing_peer

pytestmark = pytest.mark.timeout(180)

zarr = pytest.importorskip("zarr", minversion="3")


def _tensorstore() -> Any:
    try:
        import tensorstore
    except ImportError:
        missing_peer("tensorstore is not installed")
    return tensorstore


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def test_cp_r_of_a_zarr_folder_into_a_mounted_lmdb_store(tmp_path: Path, mountpoint: Path,
                                                        zarr2: Any) -> None:
    data = np.arange(70 * 45, dtype="int32").reshape(70, 45)
    source = tmp_path / "source.zarr"
    group = zarr.open_group(zarr.storage.LocalStore(source), mode="w", zarr_format=2)
    array = group.create_array("temperature", shape=data.shape, chunks=(16, 16), dtype="int32")
    array[...] = data
    array.attrs["unit"] = "K"
    store = LMDBStore(tmp_path / "data.lmdb")
    try:
        with zfuse.mounted(store, mountpoint) as m:
            subprocess.run(["cp", "-r", str(source), f"{m}/copy.zarr"], check=True, timeout=60)
    finally:
        store.close()
    seen = zarr2.run(
        """
        import hashlib, numpy as np, zarr
        from zstores.stores.lmdb import LMDBStore
        store = LMDBStore(path, mode="r")
        a = zarr.open_array(store=store, path="copy.zarr/temperature", mode="r")
        result = [hashlib.sha256(np.ascontiguousarray(a[:]).tobytes()).hexdigest(),
                  list(a.shape), dict(a.attrs)]
        store.close()
        """,
        path=str(tmp_path / "data.lmdb"),
    )
    assert seen == [_digest(data), [70, 45], {"unit": "K"}]


# The store is opened read-only, so the mount is too (open files pin versions);
# with kernel_cache, libfuse answers open and close.
@pytest.mark.parametrize("options", [{}, {"kernel_cache": True}], ids=["ro", "ro-kernel_cache"])
def test_array_written_to_sqlite_reads_identically_through_the_mount(
        tmp_path: Path, mountpoint: Path, zarr2: Any, options: dict[str, Any]) -> None:
    ts = _tensorstore()
    path = tmp_path / "data.sqlite"
    zarr2.run(
        """
        import numpy as np, zarr
        from zstores.stores.sqlite import SQLiteStore
        store = SQLiteStore(path)
        z = zarr.open_array(store=store, path="grid", mode="w", shape=(90, 110),
                            chunks=(32, 32), dtype="f8")
        z[:] = np.arange(90 * 110).reshape(90, 110) * 0.5
        store.close()
        """,
        path=str(path),
    )
    expected = np.arange(90 * 110).reshape(90, 110) * 0.5
    store = SQLiteStore(path, mode="r")
    try:
        with zfuse.mounted(store, mountpoint, fuse_options_extra=options) as m:
            local = zarr.storage.LocalStore(m.path, read_only=True)
            via_zarr = zarr.open_array(store=local, path="grid", mode="r")[...]
            spec = {"driver": "zarr", "kvstore": {"driver": "file", "path": f"{m}/grid"}}
            via_tensorstore = ts.open(spec, open=True, read=True).result().read().result()
    finally:
        store.close()
    np.testing.assert_array_equal(via_zarr, expected)
    np.testing.assert_array_equal(via_tensorstore, expected)


def _write_with_zarr(root: Path, data: np.ndarray) -> None:
    array = zarr.create_array(store=zarr.storage.LocalStore(root), shape=data.shape,
                              chunks=(16, 16), dtype=data.dtype, zarr_format=3)
    array[...] = data
    array[:8, :8] = data[:8, :8] + 1  # rewrite a chunk: replaced, not added


def _write_with_tensorstore(root: Path, data: np.ndarray) -> None:
    ts = _tensorstore()
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root)}}
    array = ts.open(spec, create=True, dtype=ts.int32, shape=list(data.shape),
                    chunk_layout=ts.ChunkLayout(chunk_shape=[16, 16])).result()
    array[...] = data
    array[:8, :8] = data[:8, :8] + 1


@pytest.mark.parametrize("writer", [_write_with_zarr, _write_with_tensorstore],
                         ids=["zarr-python-3", "tensorstore"])
def test_writer_through_the_mount_leaves_exactly_the_array_keys(
        writer: Any, tmp_path: Path, mountpoint: Path) -> None:
    data = np.arange(50 * 40, dtype="int32").reshape(50, 40)
    writer(tmp_path / "local", data)  # the same writer on a local disk: the expected keys
    expected = _files(tmp_path / "local")
    store = LMDBStore(tmp_path / "data.lmdb")
    try:
        with zfuse.mounted(store, mountpoint) as m:
            writer(Path(m.path) / "array", data)
        written = {key.removeprefix("array/"): bytes(store[key]) for key in store}
    finally:
        store.close()
    assert set(written) == set(expected)  # no lock, temporary or hidden keys left
    assert written == expected


def test_zarr_python_2_writing_through_the_mount_leaves_exactly_the_array_keys(
        tmp_path: Path, mountpoint: Path, zarr2: Any) -> None:
    write = """
    import numpy as np, zarr
    z = zarr.open_array(zarr.DirectoryStore(root), mode="w", shape=(50, 40), chunks=(16, 16),
                        dtype="i4")
    z[:] = np.arange(2000, dtype="i4").reshape(50, 40)
    z[:8, :8] = 7
    z.attrs["written"] = "through a folder"
    """
    zarr2.run(write, root=str(tmp_path / "local"))
    expected = _files(tmp_path / "local")
    store = SQLiteStore(tmp_path / "data.sqlite")
    try:
        with zfuse.mounted(store, mountpoint) as m:
            zarr2.run(write, root=f"{m}/array")
        written = {key.removeprefix("array/"): bytes(store[key]) for key in store}
    finally:
        store.close()
    assert written == expected  # the .partial temporaries were all renamed away
