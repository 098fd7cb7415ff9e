"""``zstores migrate --to 3`` and ``zstores consolidate`` on Zarr v3, run for real in subprocesses.

Format 2 hierarchies are written by zarr-python 2.18 (the ``zarr2`` fixture),
by our own ``init_group``/``init_array`` and by xarray; format 3 ones by
zarr-python 3.  After each command, zarr-python 3 (this environment's, and the
other zarr-python 3 line through a subprocess: see ``OTHER``) must read every array
exactly as zarr-python 3 read the format 2 original (NaN positions included),
with the same attributes, and no chunk may have changed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest

import zstores
from zstores.metadata import v3 as metadata_v3

from cli_helpers import contents, file_url, zstores_cmd
from full_disk import small_fs  # noqa: F401 - a fixture

zarr = pytest.importorskip("zarr")
if int(zarr.__version__.split(".")[0]) < 3:  # pragma: no cover - the zarr2 venv
    pytest.skip("needs zarr-python 3 to read Zarr v3", allow_module_level=True)

pytestmark = pytest.mark.filterwarnings(
    "ignore:Consolidated metadata is currently not part",
    "ignore:Numcodecs codecs are not in the Zarr version 3",
)

BACKENDS = ["directory", "lmdb", "sqlite"]
_ROOT = Path(__file__).resolve().parents[1]
_NEWEST = _ROOT / ".venv-zarr-latest" / "bin" / "python"
#: The other zarr-python 3 line, which must read what this one migrated: the older one
#: (3.1.x, .venv's Python 3.11) under the newest (.venv-zarr-latest, where scripts/test
#: runs the suite), else the newest.
OTHER = (_ROOT / ".venv" / "bin" / "python"
         if Path(sys.prefix).resolve() == _NEWEST.parents[1].resolve() else _NEWEST)
V2_NAMES = (".zarray", ".zgroup", ".zattrs", ".zmetadata")

#: The arrays, built the same way by the zarr-python 2 writer and by the test.
DATA = """
import numpy as np
blosc_f = np.arange(35, dtype="<f8").reshape(7, 5)
blosc_f[1, 2] = blosc_f[5, 0] = np.nan
zlib_be = np.arange(10, dtype=">i4") * 3 - 7
delta = (np.arange(24, dtype="<i2") ** 2).reshape(4, 6)
"""

ZARR2_WRITER = DATA + """
import numcodecs, zarr, zstores
store = zstores.zarr_store(zstores.open_store(url, mode="w"))
root = zarr.group(store=store)
root.attrs.update({"title": "donn\\u00e9es", "values": [1, 2.5, None, "x"]})
a = root.create_dataset("blosc_f", shape=(9, 5), chunks=(3, 4), dtype="<f8", order="F",
                        fill_value=np.nan, dimension_separator="/",
                        compressor=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1))
a[:7] = blosc_f  # the last row of chunks is never written: it reads as the fill value
a.attrs["units"] = "K"
g = root.create_group("g")
g.attrs["history"] = "made by zarr 2"
z = g.create_dataset("zlib_be", shape=(12,), chunks=(4,), dtype=">i4", fill_value=-1,
                     compressor=numcodecs.Zlib(level=1))
z[:10] = zlib_be
h = g.create_group("h")
d = h.create_dataset("delta", data=delta, chunks=(3, 4), order="F",
                     filters=[numcodecs.Delta(dtype="<i2")], compressor=numcodecs.Zlib(1))
h.create_dataset("stamps", data=np.array(["2024-01-01", "NaT", "2024-03-01"],
                                         dtype="M8[s]"), chunks=(2,), fill_value=None)
h.create_dataset("names", data=np.array(["ab", "cde"], dtype="<U3"), chunks=(1,))
h.create_dataset("flags", data=np.array([True, False, True]), chunks=(2,))
root.create_group("empty")
if consolidate:
    zarr.consolidate_metadata(store)
store.close()
"""

ARRAY_PATHS = ["blosc_f", "g/h/delta", "g/h/flags", "g/h/names", "g/h/stamps", "g/zlib_be"]
GROUP_PATHS = ["", "empty", "g", "g/h"]


# ------------------------------------------------------------------ helpers
def open_store(url: str, mode: str = "r") -> zstores.Store:
    return zstores.open_store(url, mode=mode)


def read_hierarchy(url: str, zarr_format: int, **options: Any) -> dict[str, Any]:
    """Every node below the root as zarr-python 3 reads it: arrays' data and attributes."""
    with open_store(url) as store, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(zstores.zarr_store(store), mode="r", zarr_format=zarr_format,
                               **options)
        nodes: dict[str, Any] = {"": ("group", dict(root.attrs))}
        for path, node in root.members(max_depth=None):
            if isinstance(node, zarr.Array):
                nodes[path] = ("array", node[...], str(node.dtype), dict(node.attrs))
            else:
                nodes[path] = ("group", dict(node.attrs))
        return nodes


def assert_same_nodes(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert sorted(before) == sorted(after)
    for path, node in before.items():
        other = after[path]
        assert node[0] == other[0] and node[-1] == other[-1], path  # kind and attributes
        if node[0] == "array":
            # dtype, but for byte order: a big-endian format 3 array reads as native
            assert np.dtype(node[2]).newbyteorder("=") == np.dtype(other[2]).newbyteorder("="), path
            equal_nan = node[1].dtype.kind in "fcmM"
            assert np.array_equal(node[1], other[1], equal_nan=equal_nan), path


def v2_keys(snapshot: dict[str, bytes]) -> list[str]:
    return sorted(key for key in snapshot if key.rpartition("/")[2] in V2_NAMES)


def v3_keys(snapshot: dict[str, bytes]) -> list[str]:
    return sorted(key for key in snapshot if key.rpartition("/")[2] == "zarr.json")


def write_zarr2(zarr2: Any, url: str, consolidate: bool = True) -> None:
    zarr2.run(ZARR2_WRITER, url=url, consolidate=consolidate)


def other_zarr(code: str, **args: Any) -> Any:
    """Run ``code`` under the other zarr-python 3 line (``OTHER``); it assigns ``result`` (JSON)."""
    if not OTHER.exists():
        pytest.skip(f"{OTHER} is missing (scripts/setup-env makes it)")
    program = ("import json, sys, warnings\nwarnings.simplefilter('ignore')\n"
               "globals().update(json.loads(sys.argv[1]))\n" + textwrap.dedent(code)
               + "\nprint('__RESULT__' + json.dumps(result))\n")
    done = subprocess.run([str(OTHER), "-c", program, json.dumps(args)], capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.rsplit("__RESULT__", 1)[1])


#: Under the other zarr-python 3: each array's data (NaN as None) and attributes, via
#: consolidated metadata.
OTHER_READER = """
import math, zarr, zstores
with zstores.open_store(url, mode="r") as store:
    root = zarr.open_consolidated(zstores.zarr_store(store), mode="r", zarr_format=3)
    assert root.metadata.consolidated_metadata is not None
    result = {"version": zarr.__version__, "attrs": dict(root.attrs)}
    for path, node in root.members(max_depth=None):
        if isinstance(node, zarr.Array):
            values = node[...].astype(str).tolist() if node.dtype.kind in "MmU" else \\
                [None if isinstance(v, float) and math.isnan(v) else v
                 for v in node[...].ravel().tolist()]
            result[path] = [values, dict(node.attrs)]
"""


def as_other_reads(nodes: dict[str, Any]) -> dict[str, Any]:
    """What ``OTHER_READER`` should report for nodes read here."""
    expected: dict[str, Any] = {"attrs": nodes[""][1]}
    for path, node in nodes.items():
        if node[0] != "array":
            continue
        data = node[1]
        if data.dtype.kind in "MmU":
            values = data.astype(str).tolist()
        else:
            values = [None if isinstance(v, float) and np.isnan(v) else v
                      for v in data.ravel().tolist()]
        expected[path] = [values, node[3]]
    return expected


# ------------------------------------------------------- migrate --to 3
@pytest.mark.parametrize("backend", BACKENDS)
def test_migrate_a_zarr2_hierarchy(zarr2, tmp_path: Path, backend: str) -> None:
    url = file_url(backend, tmp_path, "h")
    write_zarr2(zarr2, url)
    before = contents(url)
    as_v2 = read_hierarchy(url, 2)
    assert sorted(as_v2) == sorted(ARRAY_PATHS + GROUP_PATHS)
    namespace: dict[str, Any] = {}
    exec(DATA, namespace)  # noqa: S102 - our own constant
    assert np.array_equal(as_v2["blosc_f"][1][:7], namespace["blosc_f"], equal_nan=True)
    assert np.isnan(as_v2["blosc_f"][1][7:]).all()

    done = zstores_cmd("migrate", url, "--to", "3")
    assert done.code == 0, done.err
    assert done.out.splitlines()[-1] == (f"migrated {url} to Zarr format 3: 6 arrays, 4 groups, "
                                         "consolidated metadata in 1 group")
    after = contents(url)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing else touched
    assert v3_keys(after) == sorted(f"{p}/zarr.json" if p else "zarr.json"
                                    for p in ARRAY_PATHS + GROUP_PATHS)
    assert set(after) - set(before) == set(v3_keys(after))

    assert_same_nodes(as_v2, read_hierarchy(url, 3))
    assert_same_nodes(as_v2, read_hierarchy(url, 3, use_consolidated=True))
    root = json.loads(after["zarr.json"])
    assert sorted(root["consolidated_metadata"]["metadata"]) == sorted(
        ARRAY_PATHS + GROUP_PATHS[1:])
    blosc = json.loads(after["blosc_f/zarr.json"])
    assert blosc["chunk_key_encoding"] == {"name": "v2", "configuration": {"separator": "/"}}
    assert [codec["name"] for codec in blosc["codecs"]] == ["transpose", "bytes", "blosc"]
    assert blosc["fill_value"] == "NaN"
    if backend == "sqlite":  # the other zarr-python 3 reads it too, by consolidated metadata
        found = other_zarr(OTHER_READER, url=url)
        assert found.pop("version") != zarr.__version__
        assert found == as_other_reads(as_v2)


def test_migrate_a_hierarchy_of_our_init_functions(tmp_path: Path) -> None:
    """init_group/init_array metadata, chunks written by zarr-python 3 in format 2, then
    --remove-v2-metadata: only format 3 is left and both zarr-pythons read it."""
    url = file_url("lmdb", tmp_path, "ours")
    data = np.arange(30, dtype="<f4").reshape(5, 6)
    data[2, 3] = np.nan
    with open_store(url, "w") as store:
        zstores.init_group(store)
        zstores.init_group(store, path="sub")
        store[".zattrs"] = b'{"source": "init_array"}'
        zstores.init_array(store, shape=(5, 6), chunks=(2, 4), dtype="<f4", order="F",
                           fill_value=np.nan, dimension_separator="/", path="sub/t",
                           compressor=numcodecs.Blosc(cname="zstd", clevel=3, shuffle=2))
        zstores.init_array(store, shape=(7,), chunks=(3,), dtype="|u1", fill_value=9,
                           compressor=numcodecs.Zlib(5), path="bytes")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            root = zarr.open_group(zstores.zarr_store(store), mode="r+", zarr_format=2)
            root["sub/t"][:4] = data[:4]
            root["bytes"][:5] = np.arange(5, dtype="u1")
    as_v2 = read_hierarchy(url, 2)
    assert np.isnan(as_v2["sub/t"][1][4]).all()
    before = contents(url)

    done = zstores_cmd("migrate", url, "--to", "3", "--remove-v2-metadata")
    assert done.code == 0, done.err
    assert "removed sub/t/.zarray" in done.out.splitlines()
    after = contents(url)
    assert v2_keys(after) == []
    assert {k: v for k, v in before.items() if k not in v2_keys(before)} == \
        {k: v for k, v in after.items() if k not in v3_keys(after)}  # chunks untouched
    assert_same_nodes(as_v2, read_hierarchy(url, 3))
    assert json.loads(after["sub/t/zarr.json"])["codecs"][-1]["configuration"]["shuffle"] \
        == "bitshuffle"
    assert "consolidated_metadata" not in json.loads(after["zarr.json"])  # none before
    # consolidating it is then `zstores consolidate`'s job, and the other zarr-python 3 reads that
    assert zstores_cmd("consolidate", url).out == \
        "wrote zarr.json (consolidated_metadata) with 3 metadata documents\n"
    assert other_zarr(OTHER_READER, url=url) == {"version": ANY_VERSION, **as_other_reads(as_v2)}


class _AnyVersion(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith("3.")

    __hash__ = str.__hash__


ANY_VERSION = _AnyVersion("3.x")


@pytest.mark.parametrize("backend", ["sqlite", "directory"])
def test_dry_run_writes_nothing(zarr2, tmp_path: Path, backend: str) -> None:
    url = file_url(backend, tmp_path, "dry")
    write_zarr2(zarr2, url)
    before = contents(url)
    done = zstores_cmd("migrate", url, "--to", "3", "--dry-run", "--remove-v2-metadata")
    assert done.code == 0, done.err
    assert contents(url) == before
    lines = done.out.splitlines()
    assert "would write g/h/delta/zarr.json" in " ".join(lines)
    assert "would remove .zmetadata" in lines and "would remove g/h/delta/.zarray" in lines
    assert lines[-1] == (f"would migrate {url} to Zarr format 3: 6 arrays, 4 groups, "
                         "consolidated metadata in 1 group")
    # the documents shown are the ones a real run writes
    zstores_cmd("migrate", url, "--to", "3")
    shown = done.out.split("would write zarr.json (")[1].split("\n", 1)[1]
    assert json.loads(shown.split("\nwould remove")[0]) == json.loads(contents(url)["zarr.json"])


def test_unsupported_dtypes_are_refused_and_nothing_is_written(zarr2, tmp_path: Path) -> None:
    url = file_url("sqlite", tmp_path, "objects")
    zarr2.run("""
        import numcodecs, numpy as np, zarr, zstores
        store = zstores.zarr_store(zstores.open_store(url, mode="w"))
        root = zarr.group(store=store)
        root.create_dataset("fine", data=np.arange(4))
        root.create_dataset("text", data=np.array(["a", "bc"], dtype=object),
                            object_codec=numcodecs.VLenUTF8())
        store.close()
        """, url=url)
    before = contents(url)
    done = zstores_cmd("migrate", url, "--to", "3")
    assert done.code == 1
    assert done.err_lines == [
        ("zstores migrate: error: 'text/.zarray' cannot be written as Zarr format 3: object "
        "dtype '|O' (variable-length Python objects) has no format 3 data type; nothing was "
        "written")]
    assert contents(url) == before
    with open_store(url, "r+") as store:
        del store["text/.zarray"]
        zstores.init_array(store, shape=(3,), dtype=[("x", "<i4"), ("y", "<f8")], path="rec")
    done = zstores_cmd("migrate", url, "--to", "3", "--remove-v2-metadata")
    assert done.code == 1 and len(done.err_lines) == 1
    assert "'rec/.zarray' cannot be written as Zarr format 3: structured dtype" in done.err
    assert v3_keys(contents(url)) == [] and ".zgroup" in contents(url)


def test_migrating_again(zarr2, tmp_path: Path) -> None:
    url = file_url("directory", tmp_path, "again")
    write_zarr2(zarr2, url, consolidate=False)
    assert zstores_cmd("migrate", url, "--to", "3").code == 0
    snapshot = contents(url)
    again = zstores_cmd("migrate", url, "--to", "3")
    assert again.code == 0 and "g/h/delta/zarr.json already up to date" in again.out
    assert contents(url) == snapshot
    with open_store(url, "r+") as store:  # the v2 attributes changed since: refuse
        store["g/.zattrs"] = b'{"history": "edited"}'
    refused = zstores_cmd("migrate", url, "--to", "3")
    assert refused.code == 1 and len(refused.err_lines) == 1
    assert "'g/zarr.json' already exists" in refused.err and "nothing was written" in refused.err
    assert {k: v for k, v in contents(url).items() if k != "g/.zattrs"} == \
        {k: v for k, v in snapshot.items() if k != "g/.zattrs"}


def test_options_of_the_v1_migration(tmp_path: Path) -> None:
    url = file_url("directory", tmp_path, "v1")
    with open_store(url, "w") as store:
        zstores.init_group(store)
    for extra in (["--skip-broken"], ["--to", "2", "--remove-v2-metadata"]):
        done = zstores_cmd("migrate", url, *extra)
        assert done.code == 1 and "apply to --to 3 only" in done.err
    dry = zstores_cmd("migrate", url, "--dry-run")  # v1 has a dry run too: nothing to do here
    assert dry.code == 1 and "no spec v1 array" in dry.err
    assert zstores_cmd("migrate", url, "--to", "4").code == 2
    empty = file_url("sqlite", tmp_path, "empty")
    open_store(empty, "w").close()
    done = zstores_cmd("migrate", empty, "--to", "3")
    assert done.code == 1 and "no Zarr format 2 metadata" in done.err


def test_migrate_an_xarray_dataset(tmp_path: Path) -> None:
    xr = pytest.importorskip("xarray")
    url = file_url("sqlite", tmp_path, "xr")
    rng = np.random.default_rng(0)
    temp = rng.random((6, 4))
    temp[0, 0] = np.nan
    ds = xr.Dataset({"temp": (("time", "x"), temp, {"units": "K"})},
                    coords={"time": np.arange(6), "x": [10.0, 20.0, 30.0, 40.0]},
                    attrs={"title": "t"})
    with open_store(url, "w") as store, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(zstores.zarr_store(store), zarr_format=2, consolidated=True)
    done = zstores_cmd("migrate", url, "--to", "3", "--remove-v2-metadata")
    assert done.code == 0, done.err
    assert json.loads(contents(url)["temp/zarr.json"])["dimension_names"] == ["time", "x"]
    with open_store(url) as store, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        back = xr.open_zarr(zstores.zarr_store(store), zarr_format=3, consolidated=True).load()
    xr.testing.assert_identical(back, ds)


# ------------------------------------------------------------ consolidate v3
def write_zarr3(url: str) -> dict[str, Any]:
    with open_store(url, "w") as store, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root = zarr.open_group(zstores.zarr_store(store), mode="w", zarr_format=3,
                               attributes={"title": "v3"})
        a = root.create_array("a", shape=(6, 5), chunks=(4, 2), dtype="<f4",
                              fill_value=np.nan, attributes={"units": "m"})
        a[:3] = np.arange(15, dtype="<f4").reshape(3, 5)
        g = root.create_group("g", attributes={"k": [1, 2]})
        g.create_array("b", shape=(4,), chunks=(4,), dtype="u2", fill_value=0)[:] = [1, 2, 3, 4]
        g.create_group("deeper").create_group("deepest")
    return read_hierarchy(url, 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_consolidate_v3(tmp_path: Path, backend: str) -> None:
    url = file_url(backend, tmp_path, "v3")
    nodes = write_zarr3(url)
    before = contents(url)
    done = zstores_cmd("consolidate", url)
    assert done.code == 0, done.err
    assert done.out == "wrote zarr.json (consolidated_metadata) with 5 metadata documents\n"
    after = contents(url)
    assert {k: v for k, v in after.items() if k != "zarr.json"} == \
        {k: v for k, v in before.items() if k != "zarr.json"}
    with open_store(url) as store:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            root = zarr.open_consolidated(zstores.zarr_store(store), mode="r")
            assert sorted(root.metadata.consolidated_metadata.flattened_metadata) == \
                ["a", "g", "g/b", "g/deeper", "g/deeper/deepest"]
        # ... and our wrapper serves the same hierarchy from the root's document
        wrapped = zstores.open_consolidated(store)
        assert wrapped.zarr_format == 3
        for key in ("a/zarr.json", "g/zarr.json", "g/deeper/deepest/zarr.json"):
            assert json.loads(wrapped[key]) == json.loads(before[key])
    assert_same_nodes(nodes, read_hierarchy(url, 3, use_consolidated=True))
    if backend == "lmdb":
        found = other_zarr(OTHER_READER, url=url)
        assert found.pop("version").startswith("3.")
        assert found == as_other_reads(nodes)


def test_consolidate_v3_root_array_and_empty_store(tmp_path: Path) -> None:
    url = file_url("directory", tmp_path, "arr")
    with open_store(url, "w") as store, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.create_array(zstores.zarr_store(store), shape=(2,), dtype="i1", zarr_format=3)
    done = zstores_cmd("consolidate", url)
    assert done.code == 1 and len(done.err_lines) == 1
    assert "'zarr.json'" in done.err and "not a Zarr format 3 group" in done.err
    empty = file_url("sqlite", tmp_path, "nothing")
    open_store(empty, "w").close()
    done = zstores_cmd("consolidate", empty)
    assert done.code == 1 and "no zarr group or array at the root" in done.err


def test_consolidate_after_migrate_keeps_both_formats(zarr2, tmp_path: Path) -> None:
    url = file_url("sqlite", tmp_path, "both")
    write_zarr2(zarr2, url, consolidate=False)
    assert zstores_cmd("migrate", url, "--to", "3").code == 0
    done = zstores_cmd("consolidate", url)
    assert done.out.splitlines() == [
        "wrote .zmetadata with 13 metadata documents",
        "wrote zarr.json (consolidated_metadata) with 9 metadata documents"]
    result = zarr2.run("""
        import zarr, zstores
        root = zarr.open_consolidated(zstores.zarr_store(zstores.open_store(url, mode="r")))
        result = root["g/zlib_be"][:].tolist()
        """, url=url)
    assert result == list(np.arange(10) * 3 - 7) + [-1, -1]
    assert_same_nodes(read_hierarchy(url, 2, use_consolidated=True),
                      read_hierarchy(url, 3, use_consolidated=True))


# ------------------------------------------- our conversion = zarr-python 3's
V2_ARRAYS = [
    dict(dtype="<f8", fill_value="NaN", compressor=None),
    dict(dtype="<i4", fill_value=7, order="F", filters=[{"id": "delta", "dtype": "<i4"}],
         compressor={"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}),
    dict(dtype="|u1", fill_value=0, compressor={"id": "zlib", "level": 1}),
    dict(dtype="|b1", fill_value=True),
    dict(dtype=">i2", fill_value=-1, compressor={"id": "gzip", "level": 5}),
    dict(dtype="<c16", fill_value=[1.0, "NaN"], compressor={"id": "zstd", "level": 3}),
    dict(dtype="<M8[s]", fill_value=0),
    dict(dtype="<m8[10ms]", fill_value=-9223372036854775808),
    dict(dtype="<U5", fill_value="ab"),
    dict(dtype="|S3", fill_value="YWI="),
    dict(dtype="|V4", fill_value="AAAAAA=="),
    dict(dtype="<f2", fill_value="-Infinity", dimension_separator="/"),
    dict(dtype="<f4", fill_value=0, order="F", compressor={"id": "lz4", "acceleration": 1}),
    dict(dtype="<u8", fill_value=3, compressor={"id": "bz2", "level": 9}),
]


@pytest.mark.parametrize("options", V2_ARRAYS, ids=lambda o: o["dtype"])
def test_array_documents_equal_zarr_pythons_own_migration(options: dict[str, Any]) -> None:
    """zarr-python 3's migrate_v3 (from which we learned the mapping) is the oracle: our
    format 3 document equals the one it builds, field for field and in order."""
    migrate = pytest.importorskip("zarr.metadata.migrate_v3")
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.metadata.v2 import ArrayV2Metadata

    zarray = {"zarr_format": 2, "shape": [6, 4], "chunks": [4, 3], "order": "C",
              "filters": None, "compressor": None, **options}
    theirs = migrate._convert_array_metadata(ArrayV2Metadata.from_dict(
        {**zarray, "attributes": {"a": 1}}))
    expected = theirs.to_buffer_dict(default_buffer_prototype())["zarr.json"].to_bytes()
    assert metadata_v3.encode(metadata_v3.array_from_v2(zarray, {"a": 1})) == expected


# ------------------------------------------- a removal stopped halfway
def test_a_removal_stopped_at_any_key_is_finished_by_running_again() -> None:
    """--remove-v2-metadata deletes key by key on stores without transactions (a
    folder): whichever key it stopped at, a second run reaches the same end state."""
    from zstores.migrate_v3 import migrate_2to3

    def hierarchy() -> zstores.MemoryStore:
        store = zstores.MemoryStore()
        zstores.init_group(store)
        store[".zattrs"] = b'{"title": "root"}'
        zstores.init_group(store, path="g/h")  # "g" is written by init_group too
        store["g/.zattrs"] = b'{"units": "K"}'
        zstores.init_array(store, shape=(4,), chunks=(2,), dtype="<f8", path="g/h/a",
                           fill_value=np.nan, order="F")
        store["g/h/a/.zattrs"] = b'{"long_name": "a"}'
        zstores.init_array(store, shape=(2, 2), chunks=(1, 2), dtype="<i2", path="b",
                           dimension_separator="/")
        zstores.consolidate_metadata(store)
        return store

    finished = hierarchy()
    removed = migrate_2to3(finished, remove_v2_metadata=True).removed
    assert removed[-1] == ".zmetadata" and len(removed) == 9
    assert v2_keys(dict(finished.items())) == []
    for stop in range(len(removed)):
        store = hierarchy()
        migrate_2to3(store)
        store.delitems(removed[:stop])  # what the first run got done
        again = migrate_2to3(store, remove_v2_metadata=True)
        assert again.written == {}, stop
        assert dict(store.items()) == dict(finished.items()), stop


# ------------------------------------------------------------ a full disk
def fill_disk(folder: Path) -> Path:
    """A file in ``folder`` grown until its file system has no byte left."""
    ballast = folder / "ballast"
    block = b"\0" * (64 << 10)
    with open(ballast, "wb", buffering=0) as file:
        try:
            while True:
                file.write(block)
        except OSError as error:
            assert error.errno == 28
        try:
            while True:
                file.write(b"\0" * 512)
        except OSError:
            pass
    return ballast


@pytest.mark.parametrize("backend", ["directory", "sqlite"])
def test_migrate_on_a_full_disk_fails_typed_and_finishes_later(
        small_fs: Path, tmp_path: Path, backend: str) -> None:  # noqa: F811 - the fixture
    url = file_url(backend, small_fs, "full")
    # 3 MiB of attributes, copied into the zarr.json documents: more than SQLite's 2 MiB
    # reserve (which an open on a full disk releases), so the migration cannot fit.
    notes = "n" * (75 << 10)
    with open_store(url, "w") as store:
        zstores.init_group(store)
        for index in range(40):
            zstores.init_array(store, shape=(8,), chunks=(4,), dtype="<f8", path=f"g/a{index}",
                               fill_value=np.nan, compressor=None)
            store[f"g/a{index}/0"] = np.full(4, float(index)).tobytes()
            store[f"g/a{index}/.zattrs"] = json.dumps({"index": index, "notes": notes}).encode()
    before = contents(url)
    as_v2 = read_hierarchy(url, 2)
    ballast = fill_disk(small_fs)

    failed = zstores_cmd("migrate", url, "--to", "3", "--remove-v2-metadata")
    assert failed.code == 1 and len(failed.err_lines) == 1, failed.err
    if backend == "directory":
        assert "StoreFullError" in failed.err and "run the same command again" in failed.err
    else:  # SQLite may already fail to open its -shm file: an EIO (the store's own message)
        assert "StoreFullError" in failed.err or "[Errno 5]" in failed.err, failed.err
    ballast.unlink()  # (SQLite cannot even open a store for reading on a full tmpfs)
    left = contents(url)
    assert {k: v for k, v in left.items() if k in before} == before  # nothing v2 removed
    if backend == "sqlite":  # one transaction (or not even opened): nothing of it stays
        assert left == before
    else:
        assert set(left) - set(before) <= set(v3_keys(left))  # at most some zarr.json
    assert_same_nodes(as_v2, read_hierarchy(url, 2))

    done = zstores_cmd("migrate", url, "--to", "3", "--remove-v2-metadata")
    assert done.code == 0, done.err
    assert v2_keys(contents(url)) == []
    assert_same_nodes(as_v2, read_hierarchy(url, 3))


# ------------------------------------------------------------------ progress
def _many_arrays(store: zstores.Store, count: int) -> None:
    """A format 2 group holding ``count`` small arrays (their documents only)."""
    zarray = json.dumps({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<i4",
                         "compressor": None, "fill_value": 0, "order": "C",
                         "filters": None}).encode()
    store.setitems({".zgroup": b'{"zarr_format": 2}'}
                   | {f"a{index}/.zarray": zarray for index in range(count)})


def _stages(calls: list[tuple[str, int, int | None]]) -> dict[str, list[tuple[int, int | None]]]:
    """Each stage's ``(done, total)`` reports, stages in their first order."""
    stages: dict[str, list[tuple[int, int | None]]] = {}
    for stage, done, total in calls:
        stages.setdefault(stage, []).append((done, total))
    return stages


def test_migrate_and_consolidate_report_progress_by_stage(tmp_path: Path) -> None:
    from zstores._progress import BATCH
    from zstores.migrate_v1 import migrate_1to2

    count = BATCH + 500  # two batches of documents
    store = zstores.open_store(f"sqlite://{tmp_path / 'many.sqlite'}", mode="w")
    _many_arrays(store, count)
    calls: list[tuple[str, int, int | None]] = []

    def progress(*call: object) -> None:
        calls.append(call)  # type: ignore[arg-type]

    result = zstores.migrate_2to3(store, remove_v2_metadata=True, progress=progress)
    stages = _stages(calls)
    assert list(stages) == ["listing keys", "reading metadata", "writing metadata",
                            "removing v2 metadata"]
    assert stages["listing keys"] == [(0, None), (BATCH, None), (count + 1, count + 1)]
    for stage in ("reading metadata", "removing v2 metadata"):
        assert stages[stage] == [(0, count + 1), (BATCH, count + 1), (count + 1, count + 1)]
    assert stages["writing metadata"][-1] == (count + 1, count + 1) == (len(result.written),) * 2
    assert sorted(store) == sorted(["zarr.json"] + [f"a{i}/zarr.json" for i in range(count)])
    assert list(result.written)[-1] == "zarr.json"  # the root last, as without progress

    calls.clear()
    consolidated = zstores.consolidate_metadata(store, progress=progress)
    assert len(consolidated.metadata["metadata"]) == count
    stages = _stages(calls)
    assert list(stages) == ["listing keys", "reading metadata"]
    assert stages["reading metadata"][-1] == (count, count)  # every node but the root
    store.close()

    calls.clear()
    v1 = {"meta": b'{"zarr_format": 1, "shape": [4], "chunks": [2], "dtype": "<i4", '
                  b'"compression": "zlib", "compression_opts": 1, "fill_value": 0, '
                  b'"order": "C"}', "attrs": b"{}"}
    migrate_1to2(v1, progress=progress)
    assert calls == [("writing metadata", 0, 2), ("writing metadata", 1, 2),
                     ("writing metadata", 2, 2), ("removing v1 metadata", 0, 2),
                     ("removing v1 metadata", 1, 2), ("removing v1 metadata", 2, 2)]
