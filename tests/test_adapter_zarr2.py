"""The zarr-python 2.18 adapter, driven by zarr-python 2.18 in its own environment.

zarr's own ``StoreTests`` run over every backend in ``zarr2_suite/suite_zarr2.py``
(one pytest process in the zarr 2 environment); the tests below check what
that suite does not: that zarr 2 talks to the adapter and its fast paths
directly instead of wrapping a mapping in ``KVStore``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest
from conftest import missing_peer
from zarr2_suite.backends import ALL, missing_server

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "zarr2_suite" / "suite_zarr2.py"
# The one skip a backend may show, with the capability it declares.
DECLARED_SKIPS = {
    "nested": "NestedDirectoryStore declares dimension_separator '/' for every array",
}


@pytest.fixture(scope="module")
def suite_results(zarr2, tmp_path_factory) -> dict[str, list[tuple[str, str, str]]]:
    """``backend -> [(test, outcome, message)]`` from one run of the zarr 2 suite."""
    report = tmp_path_factory.mktemp("zarr2_suite") / "report.xml"
    done = subprocess.run(
        [zarr2.python, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider",
         f"--junitxml={report}", "-o", "junit_family=xunit1"],
        capture_output=True, text=True, cwd=ROOT, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if not report.exists():
        raise AssertionError(f"the zarr 2 suite did not run:\n{done.stdout}\n{done.stderr}")
    results: dict[str, list[tuple[str, str, str]]] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        backend = case.get("classname", "").rpartition("TestZarr2Suite_")[2]
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, child.get("message", "")
        results.setdefault(backend, []).append((case.get("name", ""), outcome, message))
    return results


@pytest.mark.parametrize("backend", ALL)
def test_zarr2_store_suite(suite_results, backend: str) -> None:
    reason = missing_server(backend)
    if reason:
        missing_peer(reason)
    cases = suite_results.get(backend)
    assert cases, f"the zarr 2 suite ran no test for {backend}"
    broken = [(name, outcome, message) for name, outcome, message in cases
              if outcome in ("failure", "error")]
    assert not broken, broken
    skipped = {message for _, outcome, message in cases if outcome == "skipped"}
    allowed = {DECLARED_SKIPS[backend]} if backend in DECLARED_SKIPS else set()
    assert {m for m in skipped if not any(a in m for a in allowed)} == set()
    assert sum(outcome == "passed" for _, outcome, _ in cases) >= 20


def test_zarr_store_gives_zarr2_the_adapter_and_its_fast_paths(zarr2, tmp_path) -> None:
    result = zarr2.run(
        """
        import numpy as np, zarr
        import zstores
        from zstores.adapters import zarr_store
        from zstores.adapters.zarr2 import Zarr2Store
        from zstores.stores.memory import MemoryStore

        class CountingStore(MemoryStore):  # a real MemoryStore that counts its batch calls
            batches = {"get": 0, "set": 0}
            def _get_many(self, keys):
                self.batches["get"] += 1
                return super()._get_many(keys)
            def _set_many(self, items):
                self.batches["set"] += 1
                return super()._set_many(items)

        backend = CountingStore()
        adapter = zarr_store(backend)
        z = zarr.open_array(adapter, mode="w", shape=(8, 8), chunks=(2, 2), dtype="i4")
        z[:] = np.arange(64).reshape(8, 8)
        back = z[:]
        result = {
            "type": type(adapter).__name__,
            "store_is_adapter": z.store is adapter,
            "batches": CountingStore.batches,
            "chunks": len([k for k in backend if not k.startswith(".")]),
            "equal": bool((back == np.arange(64).reshape(8, 8)).all()),
        }
        """
    )
    assert result["type"] == "Zarr2Store"
    assert result["store_is_adapter"], "zarr 2 wrapped the adapter instead of using it"
    assert result["chunks"] == 16 and result["equal"]
    # zarr 2 hands all 16 chunks of a selection to getitems/setitems at once.
    assert result["batches"] == {"get": 1, "set": 1}


def test_zarr2_nested_directory_and_sizes(zarr2, tmp_path) -> None:
    result = zarr2.run(
        """
        import json, os, numpy as np, zarr
        from zstores.adapters import zarr_store

        store = zarr_store(f"nested://{root}/n.zarr", mode="w")
        z = zarr.open_array(store, mode="w", shape=(4, 4), chunks=(2, 2), dtype="u1",
                            compressor=None, path="a/b")
        z[:] = 7
        meta = json.loads(store["a/b/.zarray"])
        result = {
            "separator": store._dimension_separator,
            "recorded": meta.get("dimension_separator"),
            "file": os.path.isfile(f"{root}/n.zarr/a/b/1/1"),
            "nbytes_stored": z.nbytes_stored,
            "size_array": zarr.storage.getsize(store, "a/b"),
            "size_group": zarr.storage.getsize(store, "a"),
            "zgroup": len(store["a/.zgroup"]),
            "size_chunk": zarr.storage.getsize(store, "a/b/1/1"),
        }
        store.rename("a/b", "a/c")
        result["renamed"] = zarr.open_array(store, mode="r", path="a/c")[3, 3].item()
        store.rmdir("a")
        result["after_rmdir"] = list(store)
        store.close()
        """,
        root=str(tmp_path),
    )
    assert result["separator"] == "/" and result["recorded"] == "/" and result["file"]
    meta_size = result["size_array"] - 4 * 4  # four uncompressed 2x2 chunks of u1
    assert meta_size > 0 and result["nbytes_stored"] == result["size_array"]
    # zarr 2's getsize: the values directly under "a" (its .zgroup), not the array below
    assert result["size_group"] == result["zgroup"]
    assert result["size_chunk"] == 4
    assert result["renamed"] == 7 and result["after_rmdir"] == [".zgroup"]  # the root group stays


def test_zarr2_read_only_adapter_refuses_writes(zarr2, tmp_path) -> None:
    result = zarr2.run(
        """
        import zarr
        from zstores.adapters import zarr_store

        with zarr_store(f"sqlite://{root}/s.sqlite", mode="w") as store:
            zarr.open_group(store, mode="w").attrs["a"] = 1
        reader = zarr_store(f"sqlite://{root}/s.sqlite", mode="r")
        try:
            reader[".zattrs"] = b"{}"
            result = "written"
        except PermissionError as error:
            result = [type(error).__name__, zarr.open_group(reader, mode="r").attrs["a"],
                      reader.is_writeable()]
        reader.close()
        """,
        root=str(tmp_path),
    )
    assert result == ["ReadOnlyError", 1, False]


def test_zarr2_refuses_dotted_separator_on_nested(zarr2, tmp_path) -> None:
    result = zarr2.run(
        """
        from zstores.adapters.zarr2 import Zarr2Store
        from zstores.stores.directory import NestedDirectoryStore
        try:
            Zarr2Store(NestedDirectoryStore(f"{root}/n"), dimension_separator=".")
        except ValueError as error:
            result = str(error)
        """,
        root=str(tmp_path),
    )
    assert "dimension_separator '.' is not supported" in result
