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
# The skips a backend may show, each with the declared difference that explains it
# (the README's "Peer suites and what they skip" lists them).
_NESTED_SEPARATOR = "NestedDirectoryStore declares dimension_separator '/' for every array"
DECLARED_SKIPS = {
    "nested": {_NESTED_SEPARATOR},
    # zarr 2's own TestNestedDirectoryStore and TestZipStore, over the adapter
    "nested_own": {_NESTED_SEPARATOR,
                   "a key over a folder or below a key is a KeyConflictError"},
    "zip_own": {"ZipStore supports deletes", "a key ending in '/' is normalized"},
}
# Tests of zarr 2's own store classes that must pass through the adapter.
MUST_PASS = {
    "nested_own": {"test_listdir", "test_chunk_nesting", "test_pickle", "test_pickle_ext",
                   "test_normalize_keys", "test_init_array"},
    "zip_own": {"test_pickle", "test_flush", "test_mode", "test_context_manager",
                "test_store_and_retrieve_ndarray"},
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
    _check_skips(cases, DECLARED_SKIPS.get(backend, set()))
    assert sum(outcome == "passed" for _, outcome, _ in cases) >= 20


def _check_skips(cases: list[tuple[str, str, str]], allowed: set[str]) -> None:
    skipped = {message for _, outcome, message in cases if outcome == "skipped"}
    assert {m for m in skipped if not any(a in m for a in allowed)} == set()


@pytest.mark.parametrize("suite", sorted(MUST_PASS))
def test_zarr2_own_store_class_suites(suite_results, suite: str) -> None:
    """zarr 2's TestNestedDirectoryStore and TestZipStore, unmodified, through the adapter."""
    cases = suite_results.get(suite)
    assert cases, f"the zarr 2 suite ran no test for {suite}"
    broken = [case for case in cases if case[1] in ("failure", "error")]
    assert not broken, broken
    _check_skips(cases, DECLARED_SKIPS[suite])
    passed = {name.partition("[")[0] for name, outcome, _ in cases if outcome == "passed"}
    assert MUST_PASS[suite] <= passed, MUST_PASS[suite] - passed


def test_zarr2_pickled_array_on_a_zip_being_written_opens(zarr2, tmp_path) -> None:
    """zarr 2 pickles an array (dask, multiprocessing) while its zip is open for writing."""
    result = zarr2.run(
        """
        import pickle, zarr
        from zstores.adapters import zarr_store

        store = zarr_store(f"zip://{root}/a.zip", mode="w")
        z = zarr.zeros(100, chunks=10, dtype="i4", store=store)
        z[:] = 5
        copy = pickle.loads(pickle.dumps(z))   # the archive is completed first
        seen = copy[:].tolist()
        copy.store.close()
        z[:10] = 6                             # the original stays writable
        store.close()
        result = {"copy": seen[:3], "after": zarr.open_array(
            zarr_store(f"zip://{root}/a.zip", mode="r"), mode="r")[:12].tolist()}
        """,
        root=str(tmp_path),
    )
    assert result["copy"] == [5, 5, 5]
    assert result["after"] == [6] * 10 + [5, 5]


@pytest.mark.parametrize("kind", ["zip", "dbm"])
def test_zarr2_flush_of_a_store_the_adapter_does_not_own(zarr2, tmp_path, kind) -> None:
    """Flushed through the store's own flush(), else refused: never closed behind its owner."""
    result = zarr2.run(
        """
        from zstores import DBMStore, ZipStore
        from zstores.adapters.zarr2 import Zarr2Store
        from zstores.urls import open_store

        url = f"zip://{root}/a.zip" if kind == "zip" else f"dbm://{root}/a.dbm?open=dumb"
        with open_store(url, mode="w") as store:
            adapter = Zarr2Store(store)
            adapter["a"] = b"1"
            try:
                adapter.flush()
                with open_store(url, mode="r") as reader:  # a second handle sees it
                    result = ["flushed", reader["a"].decode(), store.closed,
                              callable(getattr(store, "flush", None))]
            except NotImplementedError as error:
                result = [type(error).__name__, str(error), store.closed,
                          callable(getattr(store, "flush", None))]
            adapter["b"] = b"2"                             # still open for writing
        """,
        root=str(tmp_path), kind=kind,
    )
    outcome, detail, closed, has_flush = result
    assert closed is False
    if has_flush:
        assert (outcome, detail) == ("flushed", "1")
    else:
        assert outcome == "UnsupportedOperationError"
        assert "close the store" in detail and "a." in detail


def test_zarr2_nested_listdir_names_chunk_keys_and_counts_chunks(zarr2, tmp_path) -> None:
    result = zarr2.run(
        """
        import zarr
        from zstores.adapters import zarr_store

        store = zarr_store(f"nested://{root}/n.zarr", mode="w")
        z = zarr.zeros((10, 10), chunks=(5, 5), store=store, path="g/a")
        z[:5, :] = 1
        result = {"listed": store.listdir("g/a"), "group": store.listdir("g"),
                  "initialized": z.nchunks_initialized}
        store.close()
        """,
        root=str(tmp_path),
    )
    assert result["listed"] == [".zarray", "0/0", "0/1"]
    assert result["group"] == [".zgroup", "a"]
    assert result["initialized"] == 2


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


def test_zarr2_writable_adapter_reads_lmdb_chunks_as_views(zarr2, tmp_path) -> None:
    # zarr 2 decodes or copies what getitems gives it; large LMDB values come
    # as read-only views of the map, as zarr 2's own LMDBStore hands buffers.
    result = zarr2.run(
        """
        import numpy as np, zarr
        from zstores.adapters import zarr_store

        store = zarr_store(f"lmdb://{root}/l", mode="w")
        z = zarr.open_array(store, mode="w", shape=(16384,), chunks=(8192,), dtype="i8",
                            compressor=None)
        z[:] = 1
        z[5:8197] = 2
        values = store.getitems(["0", "1"])
        result = [type(values["0"]).__name__, values["0"].readonly,
                  int(np.frombuffer(values["1"], "i8")[4]), z[:].tolist().count(2)]
        del values
        store.close()
        """,
        root=str(tmp_path),
    )
    assert result == ["memoryview", True, 2, 8192]
