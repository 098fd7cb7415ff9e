"""Tests of zstores.hierarchy: against plain dicts, MemoryStore and zarr-python 2.18.

The comparisons with zarr-python 2.18 run the same code strings in both
interpreters (ours and the ``zarr2`` fixture's) and compare every stored byte.
"""

from __future__ import annotations

import json
import random
import sys
import warnings
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest

from zstores import hierarchy
from zstores.errors import InvalidKeyError, ZStoresError
from zstores.hierarchy import (
    BadCompressorError,
    ContainsArrayError,
    ContainsGroupError,
    MetadataError,
    contains_array,
    contains_group,
    getsize,
    init_array,
    init_group,
    listdir,
    migrate_1to2,
    rename,
    rmdir,
)
from zstores.keys import prefix_of
from zstores.stores.memory import MemoryStore

# --------------------------------------------------------------------------
# Code run in both interpreters: names the cases may use, and the runner.
SHARED = '''
import base64
import numpy as np
import numcodecs
from numcodecs import BZ2, JSON, Blosc, Delta, VLenUTF8, Zlib


class SepDict(dict):
    """A plain mapping that declares a default dimension separator."""
    _dimension_separator = "/"


def dump(store):
    return {k: base64.b64encode(bytes(v)).decode("ascii") for k, v in store.items()}


def load(encoded, store=None):
    store = {} if store is None else store
    for k, v in encoded.items():
        store[k] = base64.b64decode(v)
    return store


def error_name(error):
    name = type(error).__name__
    if name in ("ContainsArrayError", "ContainsGroupError"):
        return name
    return "ValueError" if isinstance(error, ValueError) else name


def run_scenario(ops, api, new_store=dict):
    ns = dict(api, store=new_store(), chunk_store=new_store(), SepDict=SepDict)
    ns.update(np=np, numcodecs=numcodecs, BZ2=BZ2, JSON=JSON, Blosc=Blosc, Delta=Delta,
              VLenUTF8=VLenUTF8, Zlib=Zlib)
    outcomes = []
    for op in ops:
        try:
            exec(op, ns)
            outcomes.append("ok")
        except Exception as error:
            outcomes.append(error_name(error))
    return {"store": dump(ns["store"]), "chunk_store": dump(ns["chunk_store"]),
            "outcomes": outcomes}
'''

ZARR2_SCENARIOS = SHARED + '''
import warnings
warnings.simplefilter("ignore")
from zarr.storage import init_array, init_group
api = dict(init_array=init_array, init_group=init_group)
result = [run_scenario(ops, api) for ops in scenarios]
'''

_shared: dict[str, Any] = {}
exec(SHARED, _shared)  # noqa: S102 - the same code runs under zarr-python 2.18
run_scenario: Callable[..., dict[str, Any]] = _shared["run_scenario"]
dump, load = _shared["dump"], _shared["load"]
OUR_API = {"init_array": init_array, "init_group": init_group}

STORES = {"dict": dict, "MemoryStore": MemoryStore}


@pytest.fixture(params=list(STORES), ids=list(STORES))
def new_store(request: pytest.FixtureRequest) -> Callable[[], MutableMapping[str, Any]]:
    return STORES[request.param]


@pytest.fixture
def store(new_store: Callable[[], MutableMapping[str, Any]]) -> MutableMapping[str, Any]:
    return new_store()


def decoded(store: MutableMapping[str, Any], key: str) -> dict[str, Any]:
    return json.loads(bytes(store[key]))


# --------------------------------------------------------------------------
# The matrix: each case is the argument list of one init_array call.
MATRIX = [
    "shape=(10000, 10000), dtype='<f8', fill_value=float('nan')",
    "shape=(100,), chunks=10, dtype='<f8', fill_value=float('inf')",
    "shape=(5, 6), chunks=(2, None), dtype='<f8', fill_value=-float('inf')",
    "shape=(5, 6), chunks=(2, -1), dtype='<f8', fill_value='NaN'",
    "shape=1000, dtype='<f4', fill_value=0.1",
    "shape=1000, dtype='<f2', fill_value=0.1",
    "shape=1000, dtype='>f8', fill_value=1e300",
    "shape=10, dtype='<f8', fill_value=-0.0",
    "shape=10, dtype='<f8', fill_value=None",
    "shape=10, fill_value=0",
    "shape=10",
    "shape=(20,), chunks=5, dtype='|S5', fill_value=b'hello'",
    "shape=(20,), chunks=5, dtype='|S5', fill_value=b'ab'",
    "shape=(20,), chunks=5, dtype='|S5', fill_value=b'toolongvalue'",
    "shape=(20,), chunks=5, dtype='|S5', fill_value=0",
    "shape=(20,), dtype='<U3', fill_value='abc'",
    "shape=(20,), dtype='<U3', fill_value='\\u00e9t\\u00e9'",
    "shape=(20,), dtype='<U3', fill_value='abcdef'",
    "shape=(20,), dtype='<U3', fill_value=0",
    "shape=(20,), dtype='>U3', fill_value='x'",
    "shape=(30,), dtype=[('a', '<i4'), ('b', '<f8')], fill_value=(1, 2.5)",
    "shape=(30,), dtype=[('a', '<i4'), ('b', '<f8')], fill_value=0",
    "shape=(30,), dtype=[('a', '<i4'), ('b', '<f8')], fill_value=None",
    "shape=(30,), dtype=[('a', '<i4'), ('b', '(2,)<f4')], fill_value=0",
    "shape=(4,), dtype='|V4', fill_value=b'abcd'",
    "shape=(50,), dtype='M8[ns]', fill_value=0",
    "shape=(50,), dtype='M8[ns]', fill_value='NaT'",
    "shape=(50,), dtype='<M8[D]', fill_value='2020-01-02'",
    "shape=(50,), dtype='m8[s]', fill_value=5",
    "shape=(10, 10), dtype=bool, fill_value=True",
    "shape=(10, 10), dtype='|b1', fill_value=False",
    "shape=(10, 10), dtype='<c16', fill_value=1 + 2j",
    "shape=(10, 10), dtype='<c8', fill_value=0.1 + 0.2j",
    "shape=(10, 10), dtype='<c16', fill_value=complex(float('nan'), float('-inf'))",
    "shape=(10, 10), dtype='>i8', fill_value=-1",
    "shape=(10, 10), dtype='u1', fill_value=255",
    "shape=(10, 10), dtype='i2', fill_value=3.7",
    "shape=(10, 10), dtype=int, fill_value=7",
    "shape=(10, 10), dtype=float, fill_value=7",
    "shape=(100, 100), chunks=(10, 10), dtype='<i4', compressor=None, fill_value=0",
    "shape=(100, 100), chunks=(10, 10), dtype='<i4', compressor='none', fill_value=0",
    "shape=(100, 100), chunks=(10, 10), dtype='<i4', compressor=[], fill_value=0",
    "shape=(100, 100), chunks=(10, 10), dtype='<i4', compressor=Zlib(level=1), fill_value=0",
    ("shape=(100, 100), dtype='<i4', compressor=Blosc(cname='zstd', clevel=3, shuffle=2), "
    "fill_value=0"),
    "shape=(100, 100), dtype='<i4', compressor=BZ2(level=9), fill_value=0",
    "shape=(100,), dtype='<i4', filters=[Delta(dtype='<i4')], fill_value=0",
    ("shape=(100,), dtype='<i4', filters=[Delta(dtype='<i4'), Zlib(level=2)], compressor=None, "
    "fill_value=0"),
    "shape=(100, 100), chunks=(10, 20), dtype='<f8', order='F', fill_value=1.5",
    "shape=(100, 100), chunks=(10, 20), dtype='<f8', order='f', fill_value=1.5",
    "shape=(100, 100), chunks=(10, 20), dtype='<f8', dimension_separator='/', fill_value=0",
    "shape=(100, 100), chunks=(10, 20), dtype='<f8', dimension_separator='.', fill_value=0",
    "shape=(100, 100), chunks=(10, 20), dtype='<f8', path='foo/bar', fill_value=0",
    "shape=(100, 100), chunks=(10, 20), dtype='<f8', path='/foo//bar/', fill_value=0",
    ("shape=(100, 100), chunks=(10, 20), dtype='<f8', path='a/b/c', dimension_separator='/', "
    "fill_value=0"),
    "shape=(), dtype='<f8', fill_value=3.0",
    "shape=(), dtype='M8[ns]', fill_value='NaT'",
    "shape=(5,), dtype='(2,3)f4', fill_value=0.1",
    "shape=(0,), chunks=False, fill_value=0",
    "shape=(7, 9), chunks=False, fill_value=0",
    "shape=(7, 9), chunks=-1, fill_value=0",
    "shape=(7, 9), chunks=3, fill_value=0",
    "shape=(7, 9, 11), chunks=(3,), fill_value=0",
    "shape=(7, 9, 11), chunks=[3, None], fill_value=0",
    "shape=(np.int64(7), 9), chunks=(np.int32(2), np.int64(4)), fill_value=0",
    "shape=(7, 9), chunks=None, fill_value=0",
    "shape=10, dtype=str, fill_value=''",
    "shape=10, dtype='str', fill_value=None",
    "shape=10, dtype=bytes, fill_value=None",
    "shape=10, dtype='array:i4', fill_value=None",
    "shape=10, dtype=object, object_codec=JSON(), fill_value=0",
    "shape=10, dtype=object, object_codec=VLenUTF8(), filters=[Zlib(level=1)], fill_value='x'",
    # errors (an object array's fill value must be JSON-serializable: TypeError)
    "shape=10, dtype=bytes, fill_value=b''",
    "shape=10, dtype=object, fill_value=None",
    "shape=10, dtype='M8', fill_value=0",
    "shape=10, compressor='zlib', fill_value=0",
    "shape=10, compressor=42, fill_value=0",
    "shape=10, order='K', fill_value=0",
    "shape=10, dimension_separator='_', fill_value=0",
    "shape=10, chunks=(1, 2), fill_value=0",
    "shape=10, dtype='<U3', fill_value=5",
    "shape=10, dtype='u1', fill_value=300",
    "shape=10, dtype='<f8', fill_value='spam'",
]

# Chunk guessing over many shapes and item sizes (seeded, so reproducible).
_rng = random.Random(20240601)
_SIZES = [0, 1, 3, 17, 100, 1000, 4096, 12345, 10**6, 10**8]
_DTYPES = ["|u1", "<i2", "<f4", "<f8", "<c16", "|S100", "<U50"]


def _random_case() -> str:
    shape = tuple(_rng.choice(_SIZES) for _ in range(_rng.randint(1, 4)))
    return f"shape={shape}, dtype={_rng.choice(_DTYPES)!r}, fill_value=0"


GUESS = [_random_case() for _ in range(60)] + [
    "shape=(2**31,), dtype='|u1', fill_value=0",
    "shape=(10**5, 10**5, 10**3), dtype='<f8', fill_value=0",
    "shape=(3,), dtype='|S0', fill_value=0",
    "shape=(10,), dtype='|S100000000', fill_value=0",
]

ALL_CASES = MATRIX + GUESS


def call_of(case: str) -> str:
    return f"init_array(store, {case})"


@pytest.fixture(scope="module")
def zarr2_matrix(zarr2: Any) -> list[dict[str, Any]]:
    """zarr-python 2.18's stored bytes (or error) for every case, in one process."""
    scenarios = [[call_of(case)] for case in ALL_CASES]
    return zarr2.run(ZARR2_SCENARIOS, scenarios=scenarios)  # type: ignore[no-any-return]


@pytest.mark.parametrize("index", range(len(ALL_CASES)), ids=lambda i: ALL_CASES[i][:70])
def test_init_array_bytes_match_zarr2(
    index: int, zarr2_matrix: list[dict[str, Any]], new_store: Callable[[], Any]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = run_scenario([call_of(ALL_CASES[index])], OUR_API, new_store)
    theirs = zarr2_matrix[index]
    assert ours["outcomes"] == theirs["outcomes"]
    assert load(ours["store"]) == load(theirs["store"])


def test_matrix_covers_the_written_formats(zarr2_matrix: list[dict[str, Any]]) -> None:
    """Guard against a matrix that compares only empty stores or only errors."""
    written = [load(r["store"]) for r in zarr2_matrix if r["outcomes"] == ["ok"]]
    fills = {json.dumps(json.loads(s[k])["fill_value"]) for s in written for k in s
             if k.endswith(".zarray")}
    assert {'"NaN"', '"Infinity"', '"-Infinity"', '"aGVsbG8="', "[1.0, 2.0]"} <= fills
    assert sum(r["outcomes"] != ["ok"] for r in zarr2_matrix) == 11


def test_defaults_are_zarr2s(zarr2_matrix: list[dict[str, Any]]) -> None:
    store: dict[str, bytes] = {}
    init_array(store, shape=10)
    assert json.loads(store[".zarray"])["fill_value"] is None
    assert store == load(zarr2_matrix[MATRIX.index("shape=10")]["store"])


# --------------------------------------------------------------------------
# Sequences of calls: overwrite, parent groups, errors, chunk stores.
SCENARIOS = [
    ["init_group(store)", "init_group(store)", "init_group(store, overwrite=True)"],
    ["init_group(store, path='a/b/c')", "init_group(store, path='a/b')"],
    ["init_array(store, shape=5, path='a', fill_value=0)",
     "init_array(store, shape=5, path='a', fill_value=0)",
     "init_group(store, path='a')",
     "init_array(store, shape=6, path='a', overwrite=True, fill_value=1)"],
    ["init_array(store, shape=5, path='a', fill_value=0)",
     "store['a/0'] = b'chunk'", "store['ab/0'] = b'sibling'",
     "init_group(store, path='a', overwrite=True)"],
    ["init_array(store, shape=5, fill_value=0)",
     "init_array(store, shape=5, path='x/y', fill_value=0)",
     "init_group(store, path='x')",
     "init_array(store, shape=5, path='x/y', fill_value=0, overwrite=True)"],
    ["init_array(store, shape=5, path='a', fill_value=0)",
     "store['a/0'] = b'chunk'",
     "init_array(store, shape=5, path='a/b/c', fill_value=0, overwrite=True)"],
    ["init_group(store, path='g')",
     "init_array(store, shape=5, path='g', fill_value=0)",
     "init_array(store, shape=5, path='g', fill_value=0, overwrite=True)"],
    ["init_array(store, shape=(4, 4), chunks=2, path='a', fill_value=0, chunk_store=chunk_store)",
     "chunk_store['a/0.0'] = b'x'", "chunk_store['ab/0.0'] = b'y'", "store['other'] = b'z'",
     ("init_array(store, shape=(4, 4), chunks=2, path='a', fill_value=0, "
     "chunk_store=chunk_store, overwrite=True)")],
    ["chunk_store['0.0'] = b'x'", "store['k'] = b'v'",
     "init_array(store, shape=(4, 4), fill_value=0, chunk_store=chunk_store, overwrite=True)"],
    ["store['k'] = b'v'", "init_group(store, overwrite=True, chunk_store=chunk_store)"],
    ["store = SepDict()", "init_array(store, shape=(4, 4), chunks=2, path='p', fill_value=0)",
     ("init_array(store, shape=(4, 4), chunks=2, path='q', fill_value=0, "
     "dimension_separator='.')")],
    ["init_array(store, shape=5, path=b'bytes/path', fill_value=0)"],
    ["init_group(store, path='../escape')", "init_array(store, shape=5, path='a/./b')"],
]


@pytest.fixture(scope="module")
def zarr2_scenarios(zarr2: Any) -> list[dict[str, Any]]:
    return zarr2.run(ZARR2_SCENARIOS, scenarios=SCENARIOS)  # type: ignore[no-any-return]


SCENARIO_RUNS = [
    (index, name)
    for index, ops in enumerate(SCENARIOS)
    for name in STORES
    if name == "dict" or not ops[0].startswith("store =")  # brings its own store type
]


@pytest.mark.parametrize(("index", "store_name"), SCENARIO_RUNS)
def test_call_sequences_match_zarr2(
    index: int, store_name: str, zarr2_scenarios: list[dict[str, Any]]
) -> None:
    ops, new_store = SCENARIOS[index], STORES[store_name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = run_scenario(ops, OUR_API, new_store)
    theirs = zarr2_scenarios[index]
    assert ours["outcomes"] == theirs["outcomes"]
    assert load(ours["store"]) == load(theirs["store"])
    assert load(ours["chunk_store"]) == load(theirs["chunk_store"])
    assert any(o != "ok" for o in theirs["outcomes"]) or len(theirs["store"]) > 0


# --------------------------------------------------------------------------
# Interoperability: zarr 2.18 reads what we write, and we read what it writes.
READ_CASES = [
    # (init_array arguments, data written by zarr 2, repr of the fill value)
    ("shape=(4, 5), chunks=(2, 2), dtype='<f8', fill_value=float('nan')",
     "np.arange(20.0).reshape(4, 5)", "np.float64('nan')"),
    ("shape=(6,), chunks=4, dtype='|S5', fill_value=b'ab'",
     "np.array([b'a', b'bb', b'ccc', b'dddd', b'eeeee', b''])", "np.bytes_(b'ab')"),
    ("shape=(6,), chunks=4, dtype='<U3', fill_value='xyz'",
     "np.array(['a', 'bb', 'ccc', 'd', 'e', ''])", "np.str_('xyz')"),
    ("shape=(5,), chunks=2, dtype=[('a', '<i4'), ('b', '<f8')], fill_value=(1, 2.5)",
     "np.array([(i, i / 2) for i in range(5)], dtype=[('a', '<i4'), ('b', '<f8')])",
     "np.void((1, 2.5), dtype=[('a', '<i4'), ('b', '<f8')])"),
    ("shape=(5,), chunks=2, dtype='M8[ns]', fill_value='NaT'",
     "np.arange(5).astype('M8[ns]')", "np.datetime64('NaT')"),
    ("shape=(3, 3), chunks=2, dtype=bool, fill_value=True",
     "np.eye(3, dtype=bool)", "np.True_"),
    ("shape=(3, 3), chunks=2, dtype='<c16', fill_value=1 + 2j",
     "np.arange(9).reshape(3, 3) * (1 - 1j)", "np.complex128(1+2j)"),
    (("shape=(4, 6), chunks=(3, 4), dtype='<i4', order='F', compressor=Zlib(level=1), "
     "filters=[Delta(dtype='<i4')], dimension_separator='/', path='foo/bar', fill_value=-7"),
     "np.arange(24, dtype='<i4').reshape(4, 6)", "np.int32(-7)"),
    ("shape=(3,), chunks=2, dtype=str, fill_value='', compressor=None",
     "np.array(['x', 'yy', ''], dtype=object)", "''"),
]

ZARR2_READ = SHARED + '''
import zarr
result = []
for item in items:
    store = load(item["store"])
    z = zarr.open_array(store=store, path=item["path"], mode="r+")
    first = z[(0,) * z.ndim]
    fill = eval(item["fill"])
    if isinstance(fill, float) and np.isnan(fill):
        fill_ok = bool(np.isnan(first)) and bool(np.isnan(z.fill_value))
    elif isinstance(fill, np.datetime64) and np.isnat(fill):
        fill_ok = bool(np.isnat(first)) and bool(np.isnat(z.fill_value))
    else:
        fill_ok = repr(first) == repr(fill) and bool(z.fill_value == fill)
    data = eval(item["data"])
    z[...] = data
    back = z[...]
    result.append({
        "fill_ok": fill_ok,
        "roundtrip": back.tolist() == np.asarray(data, dtype=z.dtype).tolist(),
        "shape": list(z.shape), "chunks": list(z.chunks), "dtype": str(z.dtype),
        "order": z.order, "store": dump(store),
    })
'''


def test_zarr2_reads_and_writes_our_arrays(zarr2: Any, new_store: Callable[[], Any]) -> None:
    items, expected = [], []
    for args, data, fill in READ_CASES:
        store = new_store()
        kwargs = eval(f"dict({args})", dict(_shared))
        init_array(store, **kwargs)
        path = kwargs.get("path", "")
        items.append({"store": dump(store), "path": path, "data": data, "fill": fill})
        meta = decoded(store, prefix_of(path) + ".zarray")
        expected.append((path, meta, kwargs))
    results = zarr2.run(ZARR2_READ, items=items)
    for (path, meta, kwargs), result in zip(expected, results, strict=False):
        assert result["fill_ok"], (kwargs, result)
        assert result["roundtrip"], (kwargs, result)
        assert result["shape"] == meta["shape"] and result["chunks"] == meta["chunks"]
        assert result["order"] == kwargs.get("order", "C")
        written = load(result["store"], new_store())
        assert contains_array(written, path)
        chunk_names = [n for n in listdir(written, path) if not n.startswith(".")]
        assert chunk_names, "zarr 2 wrote no chunks"
        if kwargs.get("dimension_separator") == "/":
            assert set(chunk_names) == {"0", "1"}
            assert listdir(written, f"{path}/0") == ["0", "1"]
        assert getsize(written, path) == sum(
            len(v) for k, v in written.items() if k.startswith(path + "/" if path else "")
        )


ZARR2_WRITE = SHARED + '''
import warnings
warnings.simplefilter("ignore")
import zarr
result = []
for args, data in cases:
    store = {}
    kwargs = eval(f"dict({args})")
    z = zarr.create(store=store, **kwargs)
    z[...] = eval(data)
    result.append(dump(store))
'''

WRITE_CASES = [
    ("shape=(4, 5), chunks=(2, 3), dtype='<f8', fill_value=0",
     "np.arange(20.0).reshape(4, 5)"),
    (("shape=(4, 5), chunks=(2, 3), dtype='>i2', order='F', compressor=Zlib(level=3), "
     "filters=[Delta(dtype='>i2')], path='g/arr', dimension_separator='/', fill_value=3"),
     "np.arange(20, dtype='>i2').reshape(4, 5) * 3"),
    (("shape=(6,), chunks=(4,), dtype=[('a', '<i4'), ('b', '<f8')], compressor=None, "
     "fill_value=(1, 2.5)"),
     "np.array([(i, i / 4) for i in range(6)], dtype=[('a', '<i4'), ('b', '<f8')])"),
    ("shape=(6,), chunks=(4,), dtype='|S3', fill_value=b'zz'",
     "np.array([b'a', b'bc', b'def', b'', b'x', b'yy'])"),
]


def read_chunk(store: Any, path: str, index: tuple[int, ...]) -> np.ndarray:
    """Decode one chunk with numcodecs, following the array's .zarray only."""
    prefix = prefix_of(path)
    meta = decoded(store, prefix + ".zarray")
    separator = meta.get("dimension_separator", ".")
    data = bytes(store[prefix + separator.join(map(str, index))])
    if meta["compressor"] is not None:
        data = numcodecs.get_codec(meta["compressor"]).decode(data)
    for config in reversed(meta["filters"] or []):
        data = numcodecs.get_codec(config).decode(data)
    dtype = hierarchy._decode_dtype(meta["dtype"])
    return np.frombuffer(bytes(data), dtype=dtype).reshape(meta["chunks"], order=meta["order"])


def test_we_read_what_zarr2_writes(zarr2: Any, new_store: Callable[[], Any]) -> None:
    stores = zarr2.run(ZARR2_WRITE, cases=WRITE_CASES)
    for (args, data), encoded in zip(WRITE_CASES, stores, strict=False):
        theirs = load(encoded, new_store())
        kwargs = eval(f"dict({args})", dict(_shared))
        path = hierarchy.normalize_storage_path(kwargs.get("path"))
        expected = eval(data, dict(_shared))
        assert contains_array(theirs, path) and not contains_group(theirs, path)
        if path:
            assert contains_group(theirs, "") and not contains_array(theirs, "")
        ours: dict[str, bytes] = {}
        init_array(ours, **kwargs)
        key = prefix_of(path) + ".zarray"
        assert ours[key] == bytes(theirs[key])
        chunks = decoded(theirs, key)["chunks"]
        first = read_chunk(theirs, path, (0,) * len(chunks))
        region = tuple(slice(0, c) for c in chunks)
        np.testing.assert_array_equal(first, expected[region])


# --------------------------------------------------------------------------
# contains_*, listdir, rmdir, getsize, rename on dict and MemoryStore.
def test_contains_array_and_group(store: MutableMapping[str, Any]) -> None:
    assert not contains_array(store) and not contains_group(store)
    init_array(store, shape=10, path="g/a")
    assert contains_group(store) and contains_group(store, "g")
    assert not contains_array(store, "g") and not contains_group(store, "g/a")
    assert contains_array(store, "g/a") and contains_array(store, "/g//a/")
    assert contains_array(store, b"g/a") and contains_array(store, "g\\a")
    assert not contains_array(store, "g/a/b") and not contains_array(store, "g/ab")


def test_init_group_bytes(store: MutableMapping[str, Any]) -> None:
    init_group(store, path="x")
    assert bytes(store[".zgroup"]) == b'{\n    "zarr_format": 2\n}'
    assert bytes(store["x/.zgroup"]) == b'{\n    "zarr_format": 2\n}'
    assert sorted(store) == [".zgroup", "x/.zgroup"]


def test_init_errors_are_typed_and_leave_the_store_unchanged(
    store: MutableMapping[str, Any],
) -> None:
    init_array(store, shape=10, path="a")
    before = dict(store.items())
    with pytest.raises(ContainsArrayError, match="'a'"):
        init_array(store, shape=10, path="a")
    with pytest.raises(ContainsArrayError):
        init_group(store, path="a/b/c")
    with pytest.raises(ContainsGroupError, match="''"):
        init_group(store)
    assert dict(store.items()) == before
    for error in (ContainsArrayError, ContainsGroupError, BadCompressorError, MetadataError):
        assert issubclass(error, ZStoresError) and issubclass(error, ValueError)


def test_refused_call_creates_no_parent_groups(store: MutableMapping[str, Any]) -> None:
    """zarr 2 writes parent groups before refusing; we check first."""
    store["x/y/.zarray"] = b"{}"
    with pytest.raises(ContainsArrayError):
        init_array(store, shape=1, path="x/y")
    with pytest.raises(ValueError):
        init_array(store, shape=1, path="z", dtype="M8")
    assert list(store) == ["x/y/.zarray"]


def test_overwrite_is_limited_to_the_path(store: MutableMapping[str, Any]) -> None:
    chunk_store: dict[str, bytes] = {"c/0": b"old", "cc/0": b"keep", "c": b"key"}
    store.update({"c/.zarray": b"{}", "c/0": b"old", "cc/.zarray": b"{}"})
    init_array(store, shape=4, chunks=2, path="c", overwrite=True, chunk_store=chunk_store)
    assert sorted(store) == [".zgroup", "c/.zarray", "cc/.zarray"]
    assert decoded(store, "c/.zarray")["shape"] == [4]
    assert chunk_store == {"cc/0": b"keep", "c": b"key"}


def test_bad_arguments(store: MutableMapping[str, Any]) -> None:
    with pytest.raises(BadCompressorError, match="numcodecs"):
        init_array(store, shape=1, compressor="zlib")
    with pytest.raises(TypeError):
        init_array(store, shape=1, filters=["delta"])
    with pytest.raises(TypeError):
        init_array(store, shape=None)
    with pytest.raises(ValueError, match="object_codec"):
        init_array(store, shape=1, dtype=object)
    with pytest.warns(FutureWarning):
        init_array(store, shape=1, dtype=object, filters=[numcodecs.VLenUTF8()], path="o")
    with pytest.warns(UserWarning, match="only needed"):
        init_array(store, shape=1, dtype="i4", object_codec=numcodecs.JSON(), path="p")
    with pytest.warns(UserWarning, match="non-integer"):
        init_array(store, shape=(3.0,), path="q")
    assert contains_array(store, "o") and contains_array(store, "p") and contains_array(store, "q")


@pytest.fixture
def tree(store: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    store.update({
        "c": b"1",
        "c/0": b"22",
        "c/d/1": b"333",
        "c/d/e/2": b"4444",
        "cc/0": b"55555",
        "c0": b"666666",
        "top": b"7777777",
    })
    return store


def test_listdir(tree: MutableMapping[str, Any]) -> None:
    assert listdir(tree) == ["c", "c0", "cc", "top"]
    assert listdir(tree, "c") == ["0", "d"]
    assert listdir(tree, "/c/d/") == ["1", "e"]
    assert listdir(tree, "cc") == ["0"]
    assert listdir(tree, "top") == [] and listdir(tree, "missing") == []


def test_rmdir(tree: MutableMapping[str, Any]) -> None:
    rmdir(tree, "c/d")
    assert sorted(tree) == ["c", "c/0", "c0", "cc/0", "top"]
    rmdir(tree, "c")
    assert sorted(tree) == ["c", "c0", "cc/0", "top"]
    rmdir(tree, "missing")
    assert len(tree) == 4
    rmdir(tree)
    assert len(tree) == 0


def test_getsize(tree: MutableMapping[str, Any]) -> None:
    assert getsize(tree, "c/d/e/2") == 4
    assert getsize(tree, "c") == 1  # a key named exactly "c" wins over the prefix
    assert getsize(tree, "c/d") == 3 + 4
    assert getsize(tree, "cc") == 5
    assert getsize(tree, "missing") == 0
    assert getsize(tree) == sum(range(1, 8))
    del tree["c"]
    assert getsize(tree, "c") == 2 + 3 + 4


def test_getsize_counts_bytes_of_buffers() -> None:
    assert getsize({"a/x": np.zeros(3, dtype="<f8"), "a/y": memoryview(b"ab")}, "a") == 26
    with pytest.raises(TypeError, match="bytes-like"):
        getsize({"a/x": "text"}, "a")


def test_rename_prefix(tree: MutableMapping[str, Any]) -> None:
    rename(tree, "c", "z")
    assert sorted(tree) == ["c0", "cc/0", "top", "z", "z/0", "z/d/1", "z/d/e/2"]
    assert bytes(tree["z/d/e/2"]) == b"4444" and bytes(tree["z"]) == b"1"


def test_rename_does_not_strip_characters(store: MutableMapping[str, Any]) -> None:
    """zarr 2 built the new key with str.lstrip(prefix): 'c/cc0' became 'd/0'."""
    store.update({"c/cc0": b"a", "c/c/c": b"b"})
    rename(store, "c", "d")
    assert sorted(store) == ["d/c/c", "d/cc0"]


def test_rename_key_and_errors(tree: MutableMapping[str, Any]) -> None:
    rename(tree, "top", "g/top")
    assert bytes(tree["g/top"]) == b"7777777" and "top" not in tree
    rename(tree, "cc/0", "cc/0")
    assert bytes(tree["cc/0"]) == b"55555"
    with pytest.raises(KeyError):
        rename(tree, "missing", "x")
    with pytest.raises(InvalidKeyError):
        rename(tree, "c", "c/inside")
    with pytest.raises(InvalidKeyError):
        rename(tree, "", "x")
    rename(tree, "cc", "c0/moved")
    assert "c0/moved/0" in tree and "cc/0" not in tree and bytes(tree["c0"]) == b"666666"


class SpyStore(dict):  # type: ignore[type-arg]
    """A mapping with its own methods: the helpers must call them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, ...]] = []

    def listdir(self, path: str) -> list[str]:
        self.calls.append(("listdir", path))
        return ["own"]

    def rmdir(self, path: str) -> None:
        self.calls.append(("rmdir", path))

    def getsize(self, path: str) -> int:
        self.calls.append(("getsize", path))
        return 42

    def rename(self, src: str, dst: str) -> None:
        self.calls.append(("rename", src, dst))


def test_helpers_use_the_stores_own_methods() -> None:
    spy = SpyStore()
    spy["a/b"] = b"x"
    assert listdir(spy, "/a/") == ["own"]
    assert getsize(spy, "a") == 42
    rmdir(spy, "a//")
    rename(spy, "a", "b/")
    assert spy.calls == [("listdir", "a"), ("getsize", "a"), ("rmdir", "a"), ("rename", "a", "b")]
    assert dict(spy) == {"a/b": b"x"}


def test_memory_store_uses_store_methods(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore()
    called = []
    monkeypatch.setattr(store, "getsize", lambda path: called.append(path) or 7)
    assert getsize(store, "/x/") == 7 and called == ["x"]


def test_reexports_normalize_storage_path() -> None:
    from zstores import keys

    assert hierarchy.normalize_storage_path is keys.normalize_storage_path
    assert "normalize_storage_path" in hierarchy.__all__


def test_hierarchy_does_not_import_zarr() -> None:
    import subprocess

    code = (
        "import sys, zstores.hierarchy\n"
        "print(any(m.split('.')[0] == 'zarr' for m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert out.stdout.strip() == "False"


# --------------------------------------------------------------------------
# migrate_1to2
def v1_store(**overrides: Any) -> dict[str, bytes]:
    """A zarr v1 array as zarr-python 1.x wrote it (see zarr-v1-persistence.rst)."""
    meta = {
        "zarr_format": 1, "shape": [100, 100], "chunks": [10, 10], "dtype": "<i4",
        "compression": "blosc",
        "compression_opts": {"cname": "lz4", "clevel": 3, "shuffle": 1},
        "fill_value": 42, "order": "C",
    }
    meta.update(overrides)
    text = json.dumps(meta, indent=4, sort_keys=True, ensure_ascii=True)
    return {"meta": text.encode("ascii"), "attrs": b'{\n    "foo": 42\n}', "0.0": b"chunk"}


V1_CASES = [
    {},
    {"compression": "zlib", "compression_opts": 1, "dtype": "<f8", "fill_value": float("nan")},
    {"compression": "bz2", "compression_opts": 9, "fill_value": None, "order": "F"},
    {"compression": "none", "compression_opts": None, "dtype": "|b1", "fill_value": True},
    {"compression": None, "compression_opts": None, "dtype": "<f4", "fill_value": 0.1},
    {"compression": "zlib", "compression_opts": 5,
     "dtype": [["r", "|u1"], ["g", "|u1"], ["b", "|u1"]], "fill_value": None},
    {"compression": "blosc", "dtype": "<f8", "fill_value": float("-inf"),
     "compression_opts": {"cname": "zstd", "clevel": 9, "shuffle": 2}},
]

ZARR2_MIGRATE = SHARED + '''
from zarr.storage import migrate_1to2
result = []
for encoded in stores:
    store = load(encoded)
    migrate_1to2(store)
    result.append(dump(store))
'''


@pytest.fixture(scope="module")
def zarr2_migrated(zarr2: Any) -> list[dict[str, str]]:
    stores = [dump(v1_store(**case)) for case in V1_CASES]
    return zarr2.run(ZARR2_MIGRATE, stores=stores)  # type: ignore[no-any-return]


@pytest.mark.parametrize("index", range(len(V1_CASES)))
def test_migrate_1to2_matches_zarr2(
    index: int, zarr2_migrated: list[dict[str, str]], new_store: Callable[[], Any]
) -> None:
    store = load(dump(v1_store(**V1_CASES[index])), new_store())
    migrate_1to2(store)
    theirs = load(zarr2_migrated[index])
    assert dict(store.items()) == theirs
    assert sorted(theirs) == [".zarray", ".zattrs", "0.0"]


def test_migrate_1to2_result(store: MutableMapping[str, Any]) -> None:
    load(dump(v1_store()), store)
    migrate_1to2(store)
    meta = decoded(store, ".zarray")
    assert meta["zarr_format"] == 2 and meta["filters"] is None and meta["fill_value"] == 42
    assert meta["compressor"] == {
        "id": "blosc", "cname": "lz4", "clevel": 3, "shuffle": 1, "blocksize": 0
    }
    assert bytes(store[".zattrs"]) == b'{\n    "foo": 42\n}' and bytes(store["0.0"]) == b"chunk"
    assert "meta" not in store and "attrs" not in store


def test_migrate_1to2_errors(store: MutableMapping[str, Any]) -> None:
    with pytest.raises(KeyError):
        migrate_1to2(store)
    store["meta"] = v1_store(zarr_format=2)["meta"]
    with pytest.raises(MetadataError, match="format"):
        migrate_1to2(store)
    store["meta"] = b'{"zarr_format": 1}'
    with pytest.raises(MetadataError, match="shape"):
        migrate_1to2(store)
    store["meta"] = v1_store(compression="nosuchcodec", compression_opts=1)["meta"]
    with pytest.raises(MetadataError, match="nosuchcodec"):
        migrate_1to2(store)
    assert "meta" in store and ".zarray" not in store


def test_migrate_1to2_without_attrs(store: MutableMapping[str, Any]) -> None:
    store["meta"] = v1_store()["meta"]
    migrate_1to2(store)
    assert sorted(store) == [".zarray"]


@pytest.mark.parametrize(
    ("dtype", "fill_value", "expected"),
    [("|S3", 0, ""), ("|S3", "ab", "YWI="), ("<f8", "NaN", "NaN"), ("<i4", "7", 7)],
)
def test_migrate_1to2_normalizes_fill_values_zarr2_cannot_encode(
    dtype: str, fill_value: Any, expected: Any
) -> None:
    """zarr 2 raises TypeError for these; we convert them through the dtype."""
    store = v1_store(dtype=dtype, fill_value=fill_value)
    migrate_1to2(store)
    assert decoded(store, ".zarray")["fill_value"] == expected


def test_listdir_fallback_ignores_the_prefix_key_itself() -> None:
    assert listdir({"c/": b"", "c/x": b"", "": b"", "y": b""}, "c") == ["x"]
    assert listdir({"": b"", "y": b""}) == ["y"]
