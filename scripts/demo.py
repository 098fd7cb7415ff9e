"""The main job on the embedded default: an SQLite store mounted as a folder.

1. zarr-python writes a sample array into an SQLite store (``zstores.zarr_store``);
2. ``zfuse mount`` shows that store as a folder, read-only;
3. the folder is listed (``ls -la``, every file with its size);
4. zarr-python's own ``LocalStore`` reads the array back from the folder, as any
   folder-only tool would, and it is checked against what was written;
5. ``zfuse unmount`` releases the folder.

Run by ``scripts/demo``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import zarr

import zstores

ZFUSE = [sys.executable, "-m", "zfuse"]


def sample() -> np.ndarray:
    y, x = np.mgrid[0:600, 0:800]
    return (np.sin(x / 40.0) * np.cos(y / 30.0)).astype("<f4")


def write(url: str, data: np.ndarray) -> None:
    store = zstores.zarr_store(url, mode="w")
    array = zarr.create_array(store, shape=data.shape, chunks=(200, 200), dtype=data.dtype)
    array[:] = data
    array.attrs["title"] = "sample wave"
    store.close()


def show(mountpoint: Path) -> None:
    subprocess.run(["ls", "-la", str(mountpoint)], check=True)
    files = sorted(p for p in mountpoint.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    print(f"{len(files)} files, {total:,} bytes under {mountpoint}:")
    for path in files:
        print(f"  {path.relative_to(mountpoint)!s:12s} {path.stat().st_size:>8,} bytes")


def main(folder: str) -> None:
    root = Path(folder).resolve()
    mountpoint = root / "mnt"
    mountpoint.mkdir(parents=True, exist_ok=True)
    url = f"sqlite://{root / 'sample.sqlite'}"
    data = sample()
    write(url, data)
    subprocess.run([*ZFUSE, "mount", url, str(mountpoint), "--read-only"], check=True)
    try:
        show(mountpoint)
        array = zarr.open_array(zarr.storage.LocalStore(mountpoint, read_only=True), mode="r")
        assert np.array_equal(array[:], data), "the array read through the mount differs"
        print(f"read {array.shape} {array.dtype} back through the mount with zarr-python "
              f"{zarr.__version__}'s LocalStore: identical; attrs {dict(array.attrs)}")
    finally:
        subprocess.run([*ZFUSE, "unmount", str(mountpoint)], check=True)
    assert not os.path.ismount(mountpoint)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "demo")
