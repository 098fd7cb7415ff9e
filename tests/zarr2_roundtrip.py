"""One hierarchy written by zarr-python 2.18 and read by a zstores store, and the reverse.

The backend test modules call these with their own store: the file, table or
key layout must be the one zarr-python 2.18's store of that backend uses.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ZARR2_WRITE = """
import zarr, numpy as np
store = {store}
root = zarr.group(store=store)
root.attrs["title"] = "written by zarr 2"
arr = root.create_dataset("grp/arr", shape=(20, 30), chunks=(7, 8), dtype="<i4")
arr[:] = np.arange(600, dtype="<i4").reshape(20, 30)
arr.attrs["unit"] = "m"
root.create_dataset("a_b", shape=(3,), dtype="u1", fill_value=7)
result = {{key: bytes(store[key]).hex() for key in list(store.keys())}}
store.close()
"""

ZARR2_READ = """
import zarr
store = {store}
root = zarr.open_group(store=store, mode="r")
result = {{
    "data": root["grp/arr"][:].tolist(),
    "attrs": root.attrs.asdict(),
    "array_attrs": root["grp/arr"].attrs.asdict(),
    "items": {{key: bytes(store[key]).hex() for key in list(store.keys())}},
}}
store.close()
"""


def decode_array(contents: dict[str, bytes], path: str) -> np.ndarray:
    """Decode a zarr v2 array from a dict of keys and values with zarr-python 3."""
    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import MemoryStore

    prototype = default_buffer_prototype()
    memory = MemoryStore({k: prototype.buffer.from_bytes(v) for k, v in contents.items()})
    return zarr.open_array(store=memory, path=path, zarr_format=2, mode="r")[:]


def check_reads_what_zarr2_wrote(zarr2: Any, path: Path, zarr2_store: str,
                                 open_ours: Callable[..., Any]) -> None:
    """zarr 2.18 writes with ``zarr2_store`` (code using ``path``); ``open_ours`` reads.

    ``open_ours(path, mode="r")`` opens our store on what zarr 2 wrote.
    """
    written = {k: bytes.fromhex(v)
               for k, v in zarr2.run(ZARR2_WRITE.format(store=zarr2_store), path=str(path)).items()}
    with open_ours(path, mode="r") as store:
        contents = {key: store[key] for key in store}
        assert contents == written
        assert store.listdir() == [".zattrs", ".zgroup", "a_b", "grp"]
        assert store.listdir("grp/arr")[:2] == [".zarray", ".zattrs"]
    assert json.loads(contents[".zattrs"]) == {"title": "written by zarr 2"}
    np.testing.assert_array_equal(
        decode_array(contents, "grp/arr"), np.arange(600, dtype="<i4").reshape(20, 30)
    )


def check_zarr2_reads_what_we_wrote(zarr2: Any, path: Path, zarr2_store: str,
                                    open_ours: Callable[..., Any]) -> dict[str, bytes]:
    """``open_ours(path)`` writes a hierarchy made by zarr-python 3; zarr 2.18 reads it."""
    import zarr

    memory: dict = {}
    root = zarr.open_group(store=memory, zarr_format=2, mode="w")
    root.attrs["title"] = "written by zstores"
    arr = root.create_array("grp/arr", shape=(20, 30), chunks=(7, 8), dtype="<f8")
    arr[:] = np.linspace(0, 1, 600).reshape(20, 30)
    arr.attrs["unit"] = "s"
    contents = {key: value.to_bytes() for key, value in memory.items()}
    with open_ours(path) as store:
        store.setitems(contents)
    seen = zarr2.run(ZARR2_READ.format(store=zarr2_store), path=str(path))
    assert {k: bytes.fromhex(v) for k, v in seen["items"].items()} == contents
    np.testing.assert_array_equal(np.array(seen["data"]), np.linspace(0, 1, 600).reshape(20, 30))
    assert seen["attrs"] == {"title": "written by zstores"}
    assert seen["array_attrs"] == {"unit": "s"}
    return contents
