"""The hierarchy the round-trip tests write and read, and how to compute its data.

Imported by ``tests/test_roundtrips.py`` and by the code it runs in the
zarr-python 2.18 environment, so it needs nothing but numpy.
"""

from __future__ import annotations

import base64

import numpy as np

SEPARATORS = {"dot": ".", "slash": "/"}

# Every array of the hierarchy, as JSON both zarr versions read.  "written" is
# the region given values; chunks outside it stay missing and read as fill.
ARRAYS = {
    "g/temperature": {
        "shape": [7, 9], "chunks": [3, 4], "dtype": "<f8", "fill": "NaN",
        "compressor": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 1},
        "filters": None, "written": [[0, 4], [0, 5]],
        "attrs": {"units": "K", "nested": {"a": [1, 2]}},
    },
    "g/shuffled": {
        "shape": [6, 5], "chunks": [4, 2], "dtype": "<f4", "fill": "NaN",
        "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 2},
        "filters": [{"id": "shuffle", "elementsize": 4}], "written": [[1, 3], [0, 5]], "attrs": {},
    },
    "g/sub/counts": {
        "shape": [10], "chunks": [4], "dtype": "<i2", "fill": -1,
        "compressor": {"id": "zlib", "level": 1}, "filters": [{"id": "delta", "dtype": "<i2"}],
        "written": [[0, 6]], "attrs": {"kind": "counts"},
    },
    "g/sub/flags": {
        "shape": [6, 6], "chunks": [4, 4], "dtype": "<u2", "fill": 7,
        "compressor": {"id": "zlib", "level": 5}, "filters": None,
        "written": [[2, 6], [2, 6]], "attrs": {},
    },
    "names": {
        "shape": [5], "chunks": [2], "dtype": "|S4", "fill": base64.b64encode(b"abcd").decode(),
        "compressor": None, "filters": None, "written": [[1, 3]], "attrs": {"kind": "bytes"},
    },
}
GROUP_ATTRS = {"": {"title": "round trip"}, "g": {"level": 1}, "g/sub": {}}
#: Fixed-width byte strings are not a Zarr format 3 data type.
V3_ARRAYS = [path for path, spec in ARRAYS.items() if not spec["dtype"].startswith("|S")]


def fill_of(spec: dict):
    """The array's fill value as zarr takes it."""
    if spec["dtype"].startswith("|S"):
        return base64.b64decode(spec["fill"])
    return float("nan") if spec["fill"] == "NaN" else spec["fill"]


def region_of(spec: dict) -> tuple[slice, ...]:
    return tuple(slice(lo, hi) for lo, hi in spec["written"])


def values_of(spec: dict) -> np.ndarray:
    """The values written into the array's region (never the fill value)."""
    shape = [hi - lo for lo, hi in spec["written"]]
    count = int(np.prod(shape))
    if spec["dtype"].startswith("|S"):
        strings = [f"v{i}".encode() for i in range(count)]
        return np.array(strings, dtype=spec["dtype"]).reshape(shape)
    return (np.arange(count) * 1.5 + 1).astype(spec["dtype"]).reshape(shape)


def expected_of(spec: dict) -> np.ndarray:
    """The whole array as a reader must see it: fill outside the written region."""
    full = np.full(spec["shape"], fill_of(spec), dtype=spec["dtype"])
    full[region_of(spec)] = values_of(spec)
    return full


def chunks_touched(spec: dict) -> int:
    """How many chunks the written region touches: the chunks a store must hold."""
    count = 1
    for (lo, hi), size in zip(spec["written"], spec["chunks"], strict=True):
        count *= (hi - 1) // size - lo // size + 1
    return count


def summary_of(data: np.ndarray, stored_chunks: int) -> dict:
    """An array's data as JSON, to compare across interpreters."""
    return {"b64": base64.b64encode(np.ascontiguousarray(data).tobytes()).decode(),
            "dtype": data.dtype.str, "shape": list(data.shape), "chunks_stored": stored_chunks}
