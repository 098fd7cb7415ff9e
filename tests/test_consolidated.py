"""Consolidated metadata: the conformance harness over the wrapper, its read-only
metadata, and interoperability with zarr-python 2.18 and 3 (byte-identical output)."""

from __future__ import annotations

import doctest
import json
import pickle
import shutil

import numpy as np
import pytest

import zstores
from zstores import (
    DirectoryStore,
    MemoryStore,
    ReadOnlyError,
    SQLiteStore,
    consolidate_metadata,
    open_consolidated,
)
from zstores.hierarchy import MetadataError
from zstores.testing import StoreTests
from zstores.wrappers import ConsolidatedStore
from zstores.wrappers import consolidated as consolidated_module

from raw_access import MemoryRawHooks, SQLiteRawHooks

EMPTY = {"metadata": {}, "zarr_consolidated_format": 1}


class TestConsolidatedSubgroupOverSQLite(SQLiteRawHooks, StoreTests):
    """The harness's keys lie outside the consolidated group "cons": the wrapper
    passes them through, so this checks that every operation is delegated."""

    def open_store(self, location, mode="a"):
        return ConsolidatedStore(SQLiteStore(location, mode=mode), EMPTY, path="cons", mode=None)


class TestConsolidatedRootOverMemory(MemoryRawHooks, StoreTests):
    """Consolidated at the root: the harness's writes of ``.zgroup``, ``.zarray`` and
    ``.zattrs`` are refused, by design; each such test must fail with ReadOnlyError
    on that key and nothing else.  Every other test runs unchanged."""

    def open_store(self, location, mode="a"):
        return ConsolidatedStore(MemoryStore(mode=mode), EMPTY, mode=None)

    @pytest.mark.parametrize(
        "key",
        [".zgroup", "foo/.zarray", "foo/bar/0.0", "a/b/c/d/e/f", "données/ü", "with space",
         "x-y_z"],
    )
    def test_set_get_delete(self, store, key):
        if key.rpartition("/")[2] in (".zgroup", ".zarray"):
            with pytest.raises(ReadOnlyError, match=repr(key)):
                super().test_set_get_delete(store, key)
            assert len(store) == 0
        else:
            super().test_set_get_delete(store, key)

    def refused(self, test, *args, key):
        with pytest.raises(ReadOnlyError, match=repr(key)):
            test(*args)

    def test_iteration_and_len(self, store):
        self.refused(super().test_iteration_and_len, store, key=".zattrs")

    def test_listdir(self, store):
        self.refused(super().test_listdir, store, key=".zgroup")

    def test_rmdir(self, store):
        self.refused(super().test_rmdir, store, key=".zgroup")

    def test_getsize(self, store):
        self.refused(super().test_getsize, store, key=".zgroup")

    def test_clear(self, store):
        self.refused(super().test_clear, store, key=".zgroup")

    def test_pickle(self, store, location):
        self.refused(super().test_pickle, store, location, key=".zgroup")

    def test_zarr_hierarchy_functions(self, store):
        self.refused(super().test_zarr_hierarchy_functions, store, key=".zgroup")

    def test_stateful_against_dict(self, tmp_path_factory):
        pytest.skip("its random keys end in .zarray, read-only here: "
                    "TestConsolidatedSubgroupOverSQLite runs it")


EMPTY_V3 = {"kind": "inline", "must_understand": False, "metadata": {}}


class TestConsolidatedV3RootOverMemory(MemoryRawHooks, StoreTests):
    """Format 3 consolidated at the root: only ``zarr.json`` keys are served, and the
    harness writes none, so every test (``.zgroup`` writes included) runs unchanged."""

    def open_store(self, location, mode="a"):
        return ConsolidatedStore(MemoryStore(mode=mode), EMPTY_V3, mode=None)


# ------------------------------------------------------------------ helpers
class CountingStore(MemoryStore):
    """A real MemoryStore that counts the values read from it."""

    reads = 0

    def _get(self, key):
        self.reads += 1
        return super()._get(key)

    def _get_many(self, keys):
        self.reads += len(keys)
        return {key: self._data[key] for key in keys if key in self._data}


def zarr2_json(document):
    """JSON as zarr-python 2 writes metadata (and so as the wrapper serves it)."""
    return json.dumps(document, indent=4, sort_keys=True, ensure_ascii=True,
                      separators=(",", ": ")).encode("ascii")


def hierarchy(store, path=""):
    """A small format 2 hierarchy with chunks, written by our init functions."""
    prefix = f"{path}/" if path else ""
    zstores.init_group(store, path=path)
    zstores.init_array(store, shape=(4,), chunks=(2,), dtype="<i4", compressor=None,
                       path=prefix + "a")
    zstores.init_group(store, path=prefix + "g")
    store[prefix + "g/.zattrs"] = zarr2_json({"title": "données"})
    store[prefix + "a/0"] = np.arange(2, dtype="<i4").tobytes()
    store[prefix + "a/1"] = np.arange(2, 4, dtype="<i4").tobytes()


@pytest.fixture
def counted():
    inner = CountingStore()
    hierarchy(inner)
    consolidate_metadata(inner)
    return inner, open_consolidated(inner, mode="r+")


# ------------------------------------------------------- metadata in memory
def test_metadata_is_read_from_memory(counted):
    inner, store = counted
    for key in (".zgroup", "a/.zarray", "g/.zgroup", "g/.zattrs"):
        assert store[key] == inner[key]  # our encoder matches init_array's byte for byte
        assert key in store and store.getsize(key) == len(inner[key])
    assert store.getitems([".zgroup", "g/.zattrs"]) == {
        ".zgroup": inner[".zgroup"], "g/.zattrs": inner["g/.zattrs"]}
    assert store.get_range("a/.zarray", 0, 1) == b"{"
    inner.reads = 0
    store[".zgroup"], store.getitems(["a/.zarray", "g/.zattrs"])
    assert inner.reads == 0
    assert store["a/1"] == np.arange(2, 4, dtype="<i4").tobytes()
    assert inner.reads == 1  # chunks come from the store


def test_document_is_the_source_of_truth(counted):
    inner, store = counted
    inner["late/.zarray"] = b"{}"  # written after consolidation: not in the document
    inner["g/.zattrs"] = b'{"changed": true}'
    assert "late/.zarray" not in store
    with pytest.raises(KeyError, match="late/.zarray"):
        store["late/.zarray"]
    assert json.loads(store["g/.zattrs"]) == {"title": "données"}
    listed = dict(store.items())
    assert "late/.zarray" not in listed
    assert store.getsize() == sum(len(v) for v in listed.values())
    assert len(store) == len(listed)
    assert store.listdir("late") == []


def test_listing_and_sizes_agree_with_values(counted):
    _, store = counted
    listed = dict(store.items())
    assert sorted(listed) == [".zgroup", ".zmetadata", "a/.zarray", "a/0", "a/1",
                              "g/.zattrs", "g/.zgroup"]
    assert store.listdir() == [".zgroup", ".zmetadata", "a", "g"]
    assert store.listdir("g") == [".zattrs", ".zgroup"]
    assert store.getsize("a") == sum(len(v) for k, v in listed.items() if k.startswith("a/"))
    assert store.getsize() == sum(map(len, listed.values()))
    assert len(store) == 7


@pytest.mark.parametrize("write, key", [
    (lambda s: s.__setitem__(".zattrs", b"{}"), ".zattrs"),
    (lambda s: s.__setitem__("g/.zgroup", b"{}"), "g/.zgroup"),
    (lambda s: s.__setitem__(".zmetadata", b"{}"), ".zmetadata"),
    (lambda s: s.__delitem__("a/.zarray"), "a/.zarray"),
    (lambda s: s.__delitem__("new/.zarray"), "new/.zarray"),
    (lambda s: s.setitems({"a/2": b"x", "b/.zarray": b"{}"}), "b/.zarray"),
    (lambda s: s.delitems(["a/0", "g/.zattrs"]), "g/.zattrs"),
    (lambda s: s.rmdir("g"), "g/.zattrs"),
    (lambda s: s.rmdir(), ".zgroup"),
    (lambda s: s.clear(), ".zgroup"),
    (lambda s: s.rename("g", "h"), "g/.zattrs"),
    (lambda s: s.rename("a/0", "x/.zarray"), "x/.zarray"),
])
def test_metadata_writes_are_refused(counted, write, key):
    inner, store = counted
    before = dict(inner.items())
    with pytest.raises(ReadOnlyError, match=repr(key)) as info:
        write(store)
    assert isinstance(info.value, PermissionError)
    assert "consolidate_metadata" in str(info.value)
    assert dict(inner.items()) == before


def test_chunk_writes_pass_through(counted):
    inner, store = counted
    store["a/2"] = b"new chunk"
    store.setitems({"a/3": b"x", "a/4": b"y"})
    store.delitems(["a/4"])
    store.rename("a/3", "a/5")
    assert inner["a/2"] == b"new chunk" and inner["a/5"] == b"x" and "a/3" not in inner
    store.rmdir("a/x")  # nothing there, nothing refused


def test_moving_keys_into_the_consolidated_group_is_refused():
    inner = MemoryStore()
    hierarchy(inner, path="cons")
    inner["other/.zarray"] = b"{}"  # outside the consolidated group: plain data
    store = consolidate_metadata(inner, path="cons", mode="r+")
    store["other/.zattrs"] = b"{}"  # writable outside the group
    with pytest.raises(ReadOnlyError, match="'cons/x/.zarray'"):
        store.rename("other", "cons/x")
    assert sorted(inner) == sorted(set(inner))
    assert "other/.zarray" in store and inner["other/.zattrs"] == b"{}"


def test_read_only_mode_refuses_chunk_writes(counted):
    inner, _ = counted
    store = open_consolidated(inner)
    assert store.read_only and store.mode == "r"
    with pytest.raises(ReadOnlyError, match="read-only"):
        store["a/0"] = b"x"


# ------------------------------------------------------------ open and write
def test_consolidated_document_layout():
    store = MemoryStore()
    hierarchy(store)
    store["a/.zattrs"] = b'{"fill": NaN, "name": "\xc3\xbc"}'
    consolidate_metadata(store)
    raw = store[".zmetadata"]
    document = json.loads(raw)
    assert set(document) == {"metadata", "zarr_consolidated_format"}
    assert document["zarr_consolidated_format"] == 1
    assert sorted(document["metadata"]) == [".zgroup", "a/.zarray", "a/.zattrs", "g/.zattrs",
                                            "g/.zgroup"]
    assert raw == zarr2_json(document)
    assert b"NaN" in raw and b"\\u00fc" in raw


def test_consolidate_a_subgroup():
    store = MemoryStore()
    hierarchy(store, path="x/y")
    store["x/.zgroup"] = b'{"zarr_format": 2}'
    consolidated = consolidate_metadata(store, path="/x/y/")
    assert consolidated.path == "x/y" and ".zmetadata" not in store
    document = json.loads(store["x/y/.zmetadata"])
    assert sorted(document["metadata"]) == [".zgroup", "a/.zarray", "g/.zattrs", "g/.zgroup"]
    assert consolidated["x/.zgroup"] == store["x/.zgroup"]  # outside the group: from the store
    assert open_consolidated(store, path="x/y")["x/y/g/.zattrs"] == store["x/y/g/.zattrs"]


def test_missing_consolidated_metadata_names_the_key():
    store = MemoryStore()
    zstores.init_group(store, path="g")
    with pytest.raises(KeyError, match=r"'g/\.zmetadata' is missing in MemoryStore"):
        open_consolidated(store, path="g")


@pytest.mark.parametrize("raw, message", [
    (b"not json", "is not JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"metadata": {}, "zarr_consolidated_format": 2}', "zarr_consolidated_format 2"),
    (b'{"zarr_consolidated_format": 1}', "'metadata'"),
    (b'{"metadata": {"a/0": 1}, "zarr_consolidated_format": 1}', "'a/0'"),
])
def test_malformed_consolidated_metadata(raw, message):
    store = MemoryStore()
    store[".zmetadata"] = raw
    with pytest.raises(MetadataError, match=message) as info:
        open_consolidated(store)
    assert "'.zmetadata'" in str(info.value)


def test_metadata_that_is_not_json_is_named():
    store = MemoryStore()
    store["a/.zarray"] = b"\xff garbage"
    with pytest.raises(MetadataError, match="'a/.zarray'"):
        consolidate_metadata(store)


def test_invalid_modes():
    store = MemoryStore()
    consolidate_metadata(store)
    for call in (lambda: open_consolidated(store, mode="a"),
                 lambda: consolidate_metadata(store, mode="w")):
        with pytest.raises(ValueError, match="'r' .* or 'r\\+'"):
            call()
    with pytest.raises(ValueError, match="read-only"):
        ConsolidatedStore(MemoryStore(mode="r"), EMPTY, mode="r+")
    with pytest.raises(TypeError, match="zstores.Store"):
        open_consolidated({".zmetadata": b"{}"})


# ------------------------------------------------------------------ format 3
def zarr3_hierarchy(store):
    """A format 3 hierarchy written by zarr-python 3: nested groups, attributes, NaN fill."""
    zarr = pytest.importorskip("zarr")
    root = zarr.open_group(zstores.zarr_store(store), mode="w", zarr_format=3,
                           attributes={"title": "données"})
    g = root.create_group("g", attributes={"units": "K"})
    g.create_group("h").create_array("b", shape=(3,), dtype="i2", fill_value=-1)[:2] = [5, 6]
    a = root.create_array("a", shape=(5, 4), chunks=(2, 3), dtype="f8", fill_value=np.nan)
    a[:3] = np.arange(12.0).reshape(3, 4)
    root.create_group("empty")
    return zarr


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part")
def test_format_3_is_what_zarr_python_3_writes(tmp_path):
    ours, theirs = SQLiteStore(tmp_path / "ours.sqlite"), SQLiteStore(tmp_path / "theirs.sqlite")
    zarr = zarr3_hierarchy(ours)
    zarr3_hierarchy(theirs)
    zarr.consolidate_metadata(zstores.zarr_store(theirs))
    consolidated = consolidate_metadata(ours)
    assert consolidated.zarr_format == 3
    assert sorted(consolidated.metadata["metadata"]) == ["a", "empty", "g", "g/h", "g/h/b"]
    assert dict(ours.items()) == dict(theirs.items())  # every key, byte for byte
    root = zarr.open_consolidated(zstores.zarr_store(ours))
    assert root.metadata.consolidated_metadata is not None
    np.testing.assert_array_equal(root["g/h/b"][:], [5, 6, -1])
    ours.close(), theirs.close()


def test_format_3_wrapper_serves_each_node_from_the_root(tmp_path):
    inner = CountingStore()
    zarr = zarr3_hierarchy(inner)
    before = dict(inner.items())
    consolidate_metadata(inner)
    root_json = inner["zarr.json"]
    store = open_consolidated(inner, mode="r+")
    assert store.zarr_format == 3 and store["zarr.json"] == root_json  # the root is real
    inner.reads = 0
    for key in ("g/zarr.json", "a/zarr.json", "g/h/b/zarr.json", "empty/zarr.json"):
        assert json.loads(store[key]) == json.loads(before[key])  # no consolidated_metadata
        assert store[key] == before[key]  # encoded as zarr-python 3 encodes it
    assert inner.reads == 0
    with pytest.raises(KeyError):
        store["nothing/zarr.json"]
    for write, key in [(lambda: store.__setitem__("g/zarr.json", b"{}"), "g/zarr.json"),
                       (lambda: store.__setitem__("zarr.json", b"{}"), "zarr.json"),
                       (lambda: store.rmdir("g"), "g/h/b/zarr.json"),
                       (lambda: store.__delitem__("a/zarr.json"), "a/zarr.json")]:
        with pytest.raises(ReadOnlyError, match=repr(key)):
            write()
    store[".zattrs"] = b"{}"  # v2 names are plain keys in a format 3 wrapper
    del store[".zattrs"]
    # zarr-python 3 reads and writes chunks through the wrapper, metadata from memory
    root = zarr.open_group(zstores.zarr_store(store), mode="r+")
    root["a"][4] = 7.0
    assert sorted(root.group_keys()) == ["empty", "g"]
    assert sorted(root["g"].group_keys()) == ["h"]  # the sub-group's members are found
    expected = np.full((5, 4), np.nan)
    expected[:3] = np.arange(12.0).reshape(3, 4)
    expected[4] = 7
    np.testing.assert_array_equal(zarr.open_consolidated(zstores.zarr_store(inner))["a"][:],
                                  expected)
    assert dict(root["g"].attrs) == {"units": "K"}
    assert store.listdir("g") == ["h", "zarr.json"]


def test_format_3_pickle_and_subgroup(tmp_path):
    inner = SQLiteStore(tmp_path / "p.sqlite")
    zarr3_hierarchy(inner)
    store = consolidate_metadata(inner, path="g", mode="r+")
    assert sorted(store.metadata["metadata"]) == ["h", "h/b"]
    assert "consolidated_metadata" not in json.loads(inner["zarr.json"])
    clone = pickle.loads(pickle.dumps(store))
    assert clone == store and clone.metadata == store.metadata and clone.zarr_format == 3
    assert clone["g/h/b/zarr.json"] == inner["g/h/b/zarr.json"]
    assert repr(clone) == f"ConsolidatedStore({inner!r}, path='g', mode='r+')"
    clone.close(), store.close()


def test_format_3_missing_or_malformed_consolidated_metadata():
    store = MemoryStore()
    store["zarr.json"] = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'
    with pytest.raises(KeyError, match="'zarr.json' has no consolidated_metadata"):
        open_consolidated(store)
    with pytest.raises(KeyError, match="'.zmetadata' is missing"):
        open_consolidated(store, zarr_format=2)
    store["zarr.json"] = json.dumps({"zarr_format": 3, "node_type": "group",
                                     "consolidated_metadata": {"kind": "remote"}}).encode()
    with pytest.raises(MetadataError, match="kind 'remote'"):
        open_consolidated(store)
    store["zarr.json"] = json.dumps({"zarr_format": 3, "node_type": "array"}).encode()
    with pytest.raises(MetadataError, match="not a Zarr format 3 group"):
        consolidate_metadata(store)
    with pytest.raises(ValueError, match="invalid zarr_format 4"):
        consolidate_metadata(store, zarr_format=4)


def test_both_formats_side_by_side():
    """After ``zstores migrate --to 3`` both sets of metadata exist: each consolidates."""
    from zstores.migrate_v3 import migrate_2to3

    store = MemoryStore()
    hierarchy(store)
    migrate_2to3(store)
    assert consolidate_metadata(store).zarr_format == 2  # .zgroup present: format 2 first
    v3 = consolidate_metadata(store, zarr_format=3)
    assert sorted(v3.metadata["metadata"]) == ["a", "g"]
    assert open_consolidated(store).zarr_format == 2
    assert open_consolidated(store, zarr_format=3).metadata == v3.metadata


def test_urls_are_opened_and_owned(tmp_path):
    url = f"sqlite://{tmp_path}/u.sqlite"
    with zstores.open_store(url, mode="w") as store:
        hierarchy(store)
    consolidated = consolidate_metadata(url)
    assert consolidated.read_only and not consolidated.store.read_only
    consolidated.close()
    assert consolidated.store.closed
    with open_consolidated(url) as store:
        assert store.store.read_only and json.loads(store["g/.zattrs"]) == {"title": "données"}
    with pytest.raises(KeyError, match="'missing/.zmetadata'"):
        open_consolidated(url, path="missing")


def test_repr_pickle_equality(tmp_path):
    inner = SQLiteStore(tmp_path / "p.sqlite")
    hierarchy(inner)
    store = consolidate_metadata(inner, mode="r+")
    assert repr(store) == f"ConsolidatedStore({inner!r}, path='', mode='r+')"
    clone = pickle.loads(pickle.dumps(store))
    assert clone == store and hash(clone) == hash(store)
    assert clone.metadata == store.metadata and clone.mode == "r+"
    assert clone["a/.zarray"] == store["a/.zarray"]
    other = ConsolidatedStore(inner, EMPTY, mode="r+")
    assert other != store
    memory = MemoryStore()
    hierarchy(memory)
    copy = pickle.loads(pickle.dumps(consolidate_metadata(memory)))
    assert dict(copy.items()) == dict(open_consolidated(memory).items())
    clone.close()
    store.close()
    assert inner.closed


# ------------------------------------------------------------ zarr-python 2.18
ZARR2_HIERARCHY = """
import numcodecs, numpy as np, zarr
store = zarr.DirectoryStore(path)
root = zarr.group(store=store)
root.attrs["title"] = "donn\\u00e9es \\u00fc"
root.attrs["values"] = [1, 2.5, None, "x", float("nan")]
a = root.create_dataset("a", data=np.arange(20, dtype="<f4").reshape(4, 5), chunks=(2, 3),
                        fill_value=np.nan)
a.attrs["units"] = "m"
h = root.create_group("g/h")
h.create_dataset("b", shape=(10,), chunks=(4,), dtype=[("x", "<i4"), ("y", "<f8")])
root.create_dataset("c", data=np.arange(6, dtype="i2"), filters=[numcodecs.Delta(dtype="i2")],
                    compressor=numcodecs.Zlib(1))
root.create_group("empty")
"""


def test_zarr2_writes_the_same_bytes_and_reads_ours(zarr2, tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    zarr2.run(ZARR2_HIERARCHY, path=str(ours))
    shutil.copytree(ours, theirs)
    zarr2.run("import zarr\nzarr.consolidate_metadata(zarr.DirectoryStore(path))",
              path=str(theirs))
    store = consolidate_metadata(DirectoryStore(ours))
    expected = (theirs / ".zmetadata").read_bytes()
    assert (ours / ".zmetadata").read_bytes() == expected
    assert len(json.loads(expected)["metadata"]) == 9
    store.close()
    # Prove zarr 2 reads our document: drop the array's own .zarray first.
    (ours / "a" / ".zarray").unlink()
    result = zarr2.run(
        """
        import math, zarr
        root = zarr.open_consolidated(zarr.DirectoryStore(path), mode="r")
        a = root["a"]
        result = {
            "a": a[:].tolist(), "fill": str(a.fill_value), "units": a.attrs["units"],
            "title": root.attrs["title"], "members": sorted(root.group_keys()),
            "b": str(root["g/h/b"].dtype), "c": root["c"][:].tolist(),
        }
        """,
        path=str(ours),
    )
    assert result == {
        "a": np.arange(20, dtype="<f4").reshape(4, 5).tolist(), "fill": "nan", "units": "m",
        "title": "données ü", "members": ["empty", "g"], "b": "[('x', '<i4'), ('y', '<f8')]",
        "c": list(range(6)),
    }


def test_zarr2_reads_through_the_consolidated_store(zarr2, tmp_path):
    zarr2.run(ZARR2_HIERARCHY, path=str(tmp_path / "h"))
    consolidate_metadata(DirectoryStore(tmp_path / "h")).close()
    result = zarr2.run(
        """
        import zarr, zstores
        store = zstores.zarr_store(zstores.open_consolidated(path, mode="r+"))
        root = zarr.open_group(store, mode="r+")
        root["c"][0] = 100
        try:
            root.attrs["new"] = 1
            refused = None
        except PermissionError as error:
            refused = type(error).__name__
        result = [root["c"][:].tolist(), root["a"][1, 1].item(), refused]
        """,
        path=str(tmp_path / "h"),
    )
    assert result == [[100, 1, 2, 3, 4, 5], 6.0, "ReadOnlyError"]


# ------------------------------------------------------------- zarr-python 3
def test_zarr3_reads_our_consolidated_metadata(zarr2, tmp_path):
    zarr = pytest.importorskip("zarr")
    zarr2.run(ZARR2_HIERARCHY, path=str(tmp_path / "h"))
    backend = SQLiteStore(tmp_path / "h.sqlite")
    backend.update(DirectoryStore(tmp_path / "h", mode="r"))
    consolidate_metadata(backend)
    consolidate_metadata(backend, path="g")
    del backend["a/.zarray"]  # zarr 3 must take it from .zmetadata
    root = zarr.open_consolidated(zstores.zarr_store(backend), zarr_format=2)
    assert root.metadata.consolidated_metadata is not None
    assert root.attrs["title"] == "données ü"
    np.testing.assert_array_equal(root["a"][:], np.arange(20, dtype="<f4").reshape(4, 5))
    assert sorted(root.group_keys()) == ["empty", "g"]
    sub = zarr.open_consolidated(zstores.zarr_store(backend), path="g", zarr_format=2)
    assert sub.metadata.consolidated_metadata is not None
    assert sub["h/b"].shape == (10,)
    backend.close()


def test_zarr3_through_the_consolidated_store(tmp_path):
    zarr = pytest.importorskip("zarr")
    inner = SQLiteStore(tmp_path / "z.sqlite")
    root = zarr.open_group(zstores.zarr_store(inner), mode="w", zarr_format=2)
    root.attrs["kind"] = "demo"
    values = np.arange(36).reshape(6, 6)
    root.create_array("a", shape=(6, 6), chunks=(3, 3), dtype="<i8")[:] = values
    store = consolidate_metadata(inner, mode="r+")
    group = zarr.open_consolidated(zstores.zarr_store(store), zarr_format=2)
    np.testing.assert_array_equal(group["a"][:], np.arange(36).reshape(6, 6))
    group["a"][0, 0] = -5  # chunks are writable with mode "r+"
    assert zarr.open_array(zstores.zarr_store(inner), path="a", mode="r")[0, 0] == -5
    with pytest.raises(PermissionError, match="is Zarr metadata"):
        group.attrs["kind"] = "changed"
    store.close()


def test_docstring_examples_run():
    results = doctest.testmod(consolidated_module)
    assert results.attempted > 0 and results.failed == 0
