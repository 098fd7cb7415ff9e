"""The main job on the embedded default: an array in an SQLite store.

zarr-python writes a sample array into a ``zstores.SQLiteStore``; the store is
closed, reopened read-only, every stored key is listed with its size, and
zarr-python reads the array back and checks it.  Run by ``scripts/demo``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import zarr

import zstores


def sample() -> np.ndarray:
    y, x = np.mgrid[0:600, 0:800]
    return (np.sin(x / 40.0) * np.cos(y / 30.0)).astype("<f4")


def main(path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    data = sample()
    with zstores.SQLiteStore(path, mode="w") as store:
        array = zarr.open_array(store=store, mode="w", shape=data.shape, chunks=(200, 200),
                                dtype=data.dtype)
        array[:] = data
        array.attrs["title"] = "sample wave"

    with zstores.SQLiteStore(path, mode="r") as store:
        print(f"{store!r} holds {len(store)} keys, {store.getsize():,} bytes:")
        for key in sorted(store):
            print(f"  {key:10s} {store.getsize(key):>8,} bytes")
        array = zarr.open_array(store=store, mode="r")
        assert np.array_equal(array[:], data), "the array read back differs"
        print(f"read back {array.shape} {array.dtype} array, identical to what was written; "
              f"attrs {dict(array.attrs)}; zarr-python {zarr.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "demo/sample.sqlite")
