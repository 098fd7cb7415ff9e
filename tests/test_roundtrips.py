"""Round trips through every backend: zarr-python 2.18, zarr-python 3, tensorstore, xarray, dask.

zarr-python 2.18 runs in its own environment (the ``zarr2`` fixture): one
process writes every backend's hierarchies, one reads what zarr-python 3
wrote.  zarr-python 2.18 reads only Zarr format 2, so format 3 data, which
zarr-python 3 writes too, is read back by zarr-python 3 through a fresh handle
and by tensorstore's ``zarr3`` driver.  An in-memory store cannot be shared
between processes; its keys and values travel between the two zarr versions
as a JSON dump, which checks the same layout.
"""

from __future__ import annotations

import base64
import math
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr

import zstores
from zstores.adapters import zarr_store
from zstores.urls import open_store

from conftest import missing_peer
from zarr2_suite.backends import ALL, backend_url, missing_server
from zarr2_suite.roundtrip_data import (
    ARRAYS,
    GROUP_ATTRS,
    SEPARATORS,
    V3_ARRAYS,
    chunks_touched,
    expected_of,
    fill_of,
    region_of,
    summary_of,
    values_of,
)

# What tensorstore reads of Zarr format 2: no filters (it has none) and no byte
# strings (its "char" arrays do not convert to numpy).
TENSORSTORE_V2 = [path for path in V3_ARRAYS if not ARRAYS[path]["filters"]]
DATA_MODULE_FOLDER = str(Path(__file__).resolve().parent / "zarr2_suite")
IMPORT_DATA = """
import base64, math, sys
import numpy as np
sys.path.insert(0, data_folder)
from roundtrip_data import fill_of, region_of, values_of, summary_of
"""

# zarr-python 2.18 writes every hierarchy of ``targets`` ({case: {"url", "sep"}}).
ZARR2_WRITE = IMPORT_DATA + '''
import zarr, numcodecs
from zstores.adapters import zarr_store
from zstores.stores.memory import MemoryStore

result = {}
for case, target in targets.items():
    store = zarr_store(MemoryStore() if target["url"] == "memory://" else target["url"], mode="w")
    root = zarr.group(store, overwrite=True)
    for path, attrs in group_attrs.items():
        (root if not path else root.require_group(path)).attrs.update(attrs)
    for path, spec in arrays.items():
        z = zarr.create(shape=spec["shape"], chunks=spec["chunks"], dtype=spec["dtype"],
                        fill_value=fill_of(spec), store=store, path=path,
                        compressor=spec["compressor"] and numcodecs.get_codec(spec["compressor"]),
                        filters=[numcodecs.get_codec(f) for f in spec["filters"] or ()] or None,
                        dimension_separator=target["sep"])
        z[region_of(spec)] = values_of(spec)
        z.attrs.update(spec["attrs"])
    dump = None
    if target["url"] == "memory://":
        dump = {k: base64.b64encode(store.store[k]).decode() for k in store.store}
    store.close()
    result[case] = dump
'''

# zarr-python 2.18 reads every hierarchy of ``targets`` and describes what it found.
ZARR2_READ = IMPORT_DATA + '''
import zarr
from zstores.adapters import zarr_store
from zstores.stores.memory import MemoryStore

result = {}
for case, target in targets.items():
    if target["url"] == "memory://":
        backend = MemoryStore()
        backend.update({k: base64.b64decode(v) for k, v in target["dump"].items()})
    else:
        backend = target["url"]
    store = zarr_store(backend, mode="r")
    root = zarr.open_group(store, mode="r")
    found = {"groups": {p: dict((root[p] if p else root).attrs) for p in group_attrs}, "arrays": {}}
    for path in arrays:
        z = root[path]
        # zarr 2's nchunks_initialized counts only the first level of nested keys
        chunks = sum(1 for k in store
                     if k.startswith(path + "/") and not k.rsplit("/", 1)[1].startswith("."))
        found["arrays"][path] = {
            **summary_of(z[...], chunks),
            "attrs": dict(z.attrs),
            "fill_is_nan": isinstance(z.fill_value, float) and math.isnan(z.fill_value),
            "fill": None if isinstance(z.fill_value, float)
            else base64.b64encode(np.asarray(z.fill_value).tobytes()).decode(),
            "compressor": z.compressor and z.compressor.get_config(),
            "filters": z.filters and [f.get_config() for f in z.filters],
            "separator": z._dimension_separator,
        }
    store.close()
    result[case] = found
'''


# zarr-python 2 refuses "." on a nested store, which keeps every chunk key nested.
ZARR2_CASES = [(b, sep) for b in ALL for sep in SEPARATORS if (b, sep) != ("nested", "dot")]


def available(backends: list[str]) -> list[str]:
    return [b for b in backends if missing_server(b) is None]


def case_id(backend: str, sep: str) -> str:
    return f"{backend}-{sep}"


def check_summary(path: str, found: dict) -> None:
    spec = ARRAYS[path]
    data = np.frombuffer(base64.b64decode(found["b64"]), dtype=found["dtype"])
    data = data.reshape(found["shape"])
    assert np.array_equal(data, expected_of(spec), equal_nan=data.dtype.kind == "f"), path
    assert found["chunks_stored"] == chunks_touched(spec), f"{path}: missing chunks stay missing"


def empty_when_done(url: str) -> None:
    """Network stores outlive the test: empty them."""
    if url.startswith(("redis", "mongodb")):
        with open_store(url) as store:
            store.clear()


# --------------------------------------------------------- zarr 2 -> zarr 3
@pytest.fixture(scope="module")
def zarr2_written(zarr2, tmp_path_factory) -> dict[str, dict]:
    """``case -> {"url", "dump"}`` for the hierarchies zarr-python 2.18 wrote."""
    root = tmp_path_factory.mktemp("by_zarr2")
    targets = {
        case_id(backend, name): {"url": backend_url(backend, root / backend / name),
                                 "sep": SEPARATORS[name]}
        for backend, name in ZARR2_CASES if missing_server(backend) is None
    }
    dumps = zarr2.run(ZARR2_WRITE, targets=targets, arrays=ARRAYS, group_attrs=GROUP_ATTRS,
                      data_folder=DATA_MODULE_FOLDER)
    yield {case: {**target, "dump": dumps[case]} for case, target in targets.items()}
    for target in targets.values():
        empty_when_done(target["url"])


def open_written(target: dict):
    """A read-only zarr 3 adapter on what the other side wrote (a dump for memory)."""
    if target["url"] != "memory://":
        return zarr_store(target["url"], mode="r")
    backend = zstores.MemoryStore()
    backend.update({k: base64.b64decode(v) for k, v in target["dump"].items()})
    return zarr_store(backend, mode="r")


@pytest.mark.parametrize(("backend", "sep"), ZARR2_CASES)
def test_zarr3_reads_what_zarr2_wrote(zarr2_written, backend, sep):
    if missing_server(backend):
        missing_peer(missing_server(backend))
    store = open_written(zarr2_written[case_id(backend, sep)])
    root = zarr.open_group(store, mode="r", zarr_format=2)
    for path, attrs in GROUP_ATTRS.items():
        assert dict((root[path] if path else root).attrs) == attrs
    for path, spec in ARRAYS.items():
        array = root[path]
        check_summary(path, summary_of(array[...], array.nchunks_initialized))
        assert dict(array.attrs) == spec["attrs"]
        metadata = array.metadata
        assert metadata.dimension_separator == SEPARATORS[sep]
        assert (metadata.compressor.get_config() if metadata.compressor else None) == (
            numcodecs.get_codec(spec["compressor"]).get_config() if spec["compressor"] else None)
        filters = [f["id"] for f in spec["filters"] or ()]
        assert [f.codec_id for f in metadata.filters or ()] == filters
        if spec["dtype"].startswith("|S"):
            assert np.asarray(metadata.fill_value).tobytes() == base64.b64decode(spec["fill"])
        elif spec["fill"] == "NaN":
            assert math.isnan(metadata.fill_value)
    store.close()


# --------------------------------------------------------- zarr 3 -> others
def write_with_zarr3(store, zarr_format: int, sep: str) -> None:
    root = zarr.open_group(store, mode="w", zarr_format=zarr_format)
    for path, attrs in GROUP_ATTRS.items():
        group = root if not path else root.require_group(path)
        group.attrs.update(attrs)
    for path in ARRAYS if zarr_format == 2 else V3_ARRAYS:
        spec = ARRAYS[path]
        if zarr_format == 2:
            codecs = {
                "compressors": spec["compressor"] and numcodecs.get_codec(spec["compressor"]),
                "filters": [numcodecs.get_codec(f) for f in spec["filters"] or ()] or None,
                "chunk_key_encoding": {"name": "v2", "separator": sep},
            }
        else:
            codecs = {
                "compressors": v3_compressor(spec["compressor"]),
                # Delta has no Zarr 3 codec; transposing is a filter every v3 reader has.
                "filters": [transposed(len(spec["shape"]))] if spec["filters"] else None,
                "chunk_key_encoding": {"name": "default", "separator": sep},
            }
        array = root.create_array(path, shape=spec["shape"], chunks=spec["chunks"],
                                  dtype=spec["dtype"], fill_value=fill_of(spec),
                                  attributes=spec["attrs"], **codecs)
        array[region_of(spec)] = values_of(spec)


def transposed(dimensions: int):
    return zarr.codecs.TransposeCodec(order=tuple(reversed(range(dimensions))))


def v3_compressor(config: dict | None):
    if config is None:
        return None
    if config["id"] == "blosc":
        shuffle = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}[config["shuffle"]]
        return zarr.codecs.BloscCodec(cname=config["cname"], clevel=config["clevel"],
                                      shuffle=shuffle)
    return zarr.codecs.GzipCodec(level=config["level"])


@pytest.fixture(scope="module")
def zarr3_written(tmp_path_factory) -> dict[tuple[str, int, str], dict]:
    """``(backend, format, sep) -> {"url", "dump", "store"}`` for what zarr-python 3 wrote."""
    root = tmp_path_factory.mktemp("by_zarr3")
    written = {}
    for backend in available(ALL):
        for zarr_format in (2, 3):
            for name, sep in SEPARATORS.items():
                url = backend_url(backend, root / backend / f"v{zarr_format}-{name}")
                store = zarr_store(url, mode="w")
                write_with_zarr3(store, zarr_format, sep)
                dump = None
                if url == "memory://":
                    dump = {k: base64.b64encode(store.store[k]).decode() for k in store.store}
                store.close()
                written[(backend, zarr_format, name)] = {"url": url, "dump": dump, "sep": sep,
                                                         "store": store}
    yield written
    for target in written.values():
        empty_when_done(target["url"])


@pytest.fixture(scope="module")
def zarr2_read(zarr2, zarr3_written) -> dict[str, dict]:
    """What zarr-python 2.18 found in every Zarr format 2 hierarchy zarr-python 3 wrote."""
    targets = {
        case_id(backend, name): {"url": target["url"], "dump": target["dump"]}
        for (backend, zarr_format, name), target in zarr3_written.items() if zarr_format == 2
    }
    return zarr2.run(ZARR2_READ, targets=targets, arrays=ARRAYS, group_attrs=GROUP_ATTRS,
                      data_folder=DATA_MODULE_FOLDER)


@pytest.mark.parametrize("sep", SEPARATORS)
@pytest.mark.parametrize("backend", ALL)
def test_zarr2_reads_what_zarr3_wrote(zarr2_read, backend, sep):
    if missing_server(backend):
        missing_peer(missing_server(backend))
    found = zarr2_read[case_id(backend, sep)]
    assert found["groups"] == GROUP_ATTRS
    for path, spec in ARRAYS.items():
        array = found["arrays"][path]
        check_summary(path, array)
        assert array["attrs"] == spec["attrs"]
        assert array["separator"] == SEPARATORS[sep]
        assert array["compressor"] == (numcodecs.get_codec(spec["compressor"]).get_config()
                                       if spec["compressor"] else None)
        assert [f["id"] for f in array["filters"] or ()] == [f["id"] for f in spec["filters"] or ()]
        if spec["fill"] == "NaN":
            assert array["fill_is_nan"]
        elif spec["dtype"].startswith("|S"):
            assert base64.b64decode(array["fill"]) == base64.b64decode(spec["fill"])


@pytest.mark.parametrize("sep", SEPARATORS)
@pytest.mark.parametrize("backend", ALL)
def test_zarr3_format3_reads_back_through_a_new_handle(zarr3_written, backend, sep):
    if missing_server(backend):
        missing_peer(missing_server(backend))
    target = zarr3_written[(backend, 3, sep)]
    store = open_written(target)
    root = zarr.open_group(store, mode="r", zarr_format=3)
    assert dict(root["g"].attrs) == GROUP_ATTRS["g"] and dict(root.attrs) == GROUP_ATTRS[""]
    for path in V3_ARRAYS:
        spec = ARRAYS[path]
        array = root[path]
        check_summary(path, summary_of(array[...], array.nchunks_initialized))
        assert dict(array.attrs) == spec["attrs"]
        encoding = array.metadata.chunk_key_encoding
        assert encoding.separator == SEPARATORS[sep]
        assert bool(array.filters) == bool(spec["filters"])
    chunk_key = "g/sub/counts/c" + SEPARATORS[sep] + "0"
    assert chunk_key in store.store  # the layout the format prescribes
    store.close()


# ---------------------------------------------------------------- tensorstore
def tensorstore_read(folder: Path, driver: str) -> np.ndarray:
    import tensorstore

    spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(folder)}}
    return tensorstore.open(spec, read=True).result().read().result()


# tensorstore reads a folder as it is on disk.  A NestedDirectoryStore keeps
# chunk "0.1" as the file 0/1, which readers of a "." array do not look for.
FOLDERS = [("directory", "dot"), ("directory", "slash"), ("nested", "slash")]


@pytest.mark.parametrize(("backend", "sep"), FOLDERS)
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_tensorstore_reads_folders_zarr3_wrote(zarr3_written, backend, sep, zarr_format):
    target = zarr3_written[(backend, zarr_format, sep)]
    folder = Path(target["store"].store.path)
    driver = "zarr" if zarr_format == 2 else "zarr3"
    paths = TENSORSTORE_V2 if zarr_format == 2 else V3_ARRAYS  # see TENSORSTORE_V2
    for path in paths:
        data = tensorstore_read(folder / path, driver)
        expected = expected_of(ARRAYS[path])
        assert np.array_equal(data, expected, equal_nan=expected.dtype.kind == "f"), path


@pytest.mark.parametrize(("backend", "sep"), FOLDERS)
def test_tensorstore_reads_folders_zarr2_wrote(zarr2_written, backend, sep):
    folder = Path(open_store(zarr2_written[case_id(backend, sep)]["url"], mode="r").path)
    for path in TENSORSTORE_V2:
        data = tensorstore_read(folder / path, "zarr")
        expected = expected_of(ARRAYS[path])
        assert np.array_equal(data, expected, equal_nan=expected.dtype.kind == "f"), path


# ---------------------------------------------------------- xarray and dask
@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part")
@pytest.mark.parametrize("backend", ALL)
def test_xarray_dataset_through_zarr_store(tmp_path, backend):
    if missing_server(backend):
        missing_peer(missing_server(backend))
    import xarray as xr

    dataset = xr.Dataset(
        {"temperature": (("time", "x"), np.arange(24, dtype="f4").reshape(6, 4))},
        coords={"time": np.arange(6), "x": [10.0, 20.0, 30.0, 40.0]},
        attrs={"title": "through zstores"},
    )
    dataset["temperature"].encoding["chunks"] = (3, 2)
    url = backend_url(backend, tmp_path)
    writer = zarr_store(url, mode="w")
    dataset.to_zarr(writer, mode="w")
    writer.close()
    reader = zarr_store(writer.store if url == "memory://" else url, mode="r")
    opened = xr.open_zarr(reader)
    xr.testing.assert_identical(opened.load(), dataset)
    assert opened["temperature"].encoding["chunks"] == (3, 2)
    opened.close()
    reader.close()
    empty_when_done(url)


@pytest.mark.parametrize("backend", ["directory", "sqlite", "lmdb"])
def test_dask_writes_from_worker_processes(tmp_path, backend):
    import dask
    import dask.array as da

    url = backend_url(backend, tmp_path)
    source = da.from_array(np.arange(400, dtype="i8").reshape(20, 20), chunks=(5, 10))
    with dask.config.set(scheduler="processes", num_workers=2):
        da.to_zarr(source, zarr_store(url, mode="w"), component="a")  # the store travels by pickle
    with zarr_store(url, mode="r") as store:
        assert np.array_equal(zarr.open_array(store, path="a", mode="r")[:],
                              np.arange(400).reshape(20, 20))
        assert sum(1 for key in store.store if "/c/" in key) == 8
