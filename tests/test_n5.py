"""N5Store: the conformance harness, then N5 files read and written by other N5 readers."""

from __future__ import annotations

import json
import struct
import threading
from pathlib import Path

import numcodecs
import numpy as np
import pytest

from zstores import (
    CorruptValueError,
    DirectoryStore,
    InvalidKeyError,
    InvalidValueError,
    StoreNotFoundError,
    hierarchy,
    open_store,
)
from zstores.adapters import zarr_store
from zstores.metadata import MetadataError
from zstores.metadata import n5 as n5_metadata
from zstores.testing import StoreTests
from zstores.wrappers.n5 import N5Store
from zstores.wrappers.n5_blocks import BlockSpec, decode_block, encode_block

from cli_helpers import zstores_cmd
from conftest import missing_peer
from raw_access import DirectoryRawHooks


class TestN5Store(DirectoryRawHooks, StoreTests):
    """The harness's keys are plain keys outside any N5 array, so they pass through
    unchanged.  Its writes of ``.zgroup``, ``.zarray`` and ``.zattrs`` hold text
    that is not JSON: an N5 store must translate them into ``attributes.json``, so
    each such test must fail with MetadataError on that key and nothing else."""

    def open_store(self, location, mode="a"):
        return N5Store(DirectoryStore(location, mode=mode))

    @pytest.mark.parametrize(
        "key",
        [".zgroup", "foo/.zarray", "foo/bar/0.0", "a/b/c/d/e/f", "données/ü", "with space",
         "x-y_z"],
    )
    def test_set_get_delete(self, store, key):
        if key.rpartition("/")[2] in (".zgroup", ".zarray"):
            self.refused(super().test_set_get_delete, store, key, key=key)
            assert len(store) == 0
        else:
            super().test_set_get_delete(store, key)

    def refused(self, test, *args, key):
        with pytest.raises(MetadataError, match=repr(key)):
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

    def test_persistence(self, store, location):
        self.refused(super().test_persistence, store, location, key=".zgroup")

    def test_stateful_against_dict(self, tmp_path_factory):
        pytest.skip("its random keys end in .zarray with random bytes, which an N5 store "
                    "refuses (not JSON)")


# ------------------------------------------------------- the translation alone
DTYPES = ["|u1", "<u2", "<u4", "<u8", "|i1", "<i2", "<i4", "<i8", "<f4", "<f8"]
COMPRESSORS = {
    "raw": None,
    "gzip": {"id": "gzip", "level": 5},
    "zlib": {"id": "zlib", "level": 3},
    "bz2": {"id": "bz2", "level": 9},
    "lzma": {"id": "lzma", "format": 1, "check": -1, "preset": 4, "filters": None},
    "blosc": {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0},
    "zstd": {"id": "zstd", "level": 2},
}


def zarray(**fields):
    document = {"zarr_format": 2, "shape": [20, 30], "chunks": [7, 8], "dtype": "<i4",
                "compressor": None, "fill_value": 0, "order": "C", "filters": None,
                "dimension_separator": "."}
    return {**document, **fields}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compressor", sorted(COMPRESSORS))
def test_array_metadata_round_trips(dtype, compressor):
    written = zarray(dtype=dtype, compressor=COMPRESSORS[compressor])
    attributes = n5_metadata.array_to_n5(written, "a/.zarray")
    assert attributes["dimensions"] == [30, 20] and attributes["blockSize"] == [8, 7]
    assert attributes["dataType"] == np.dtype(dtype).name
    assert n5_metadata.array_to_zarr(attributes, "a/attributes.json") == written


@pytest.mark.parametrize("fields, rule", [
    ({"fill_value": 3}, "fill_value 3: N5 has no fill value"),
    ({"order": "F"}, "order 'F'"),
    ({"filters": [{"id": "delta", "dtype": "<i4"}]}, "N5 has no filters"),
    ({"dimension_separator": "/"}, "dimension_separator '/'"),
    ({"dtype": ">i4"}, "big-endian"),
    ({"dtype": "|b1", "fill_value": None}, "has no N5 dataType"),
    ({"dtype": "<c16", "fill_value": None}, "has no N5 dataType"),
    ({"compressor": {"id": "lz4", "acceleration": 1}}, "compressor 'lz4' has no N5 equivalent"),
    ({"compressor": {"id": "lzma", "format": 2, "check": -1, "preset": 1, "filters": None}},
     "plain xz format"),
    ({"shape": [], "chunks": []}, "0-dimensional"),
    ({"chunks": [7]}, "'chunks' has 1 entries"),
])
def test_arrays_n5_cannot_hold_are_refused(fields, rule):
    with pytest.raises(MetadataError, match=rule) as info:
        n5_metadata.array_to_n5(zarray(**fields), "grp/a/.zarray")
    assert "'grp/a/.zarray'" in str(info.value)


def test_zarr2_n5_wrapper_compressor_is_unwrapped():
    wrapped = {"id": "n5_wrapper", "compressor_config": {"id": "gzip", "level": 1},
               "dtype": "<i4", "chunk_shape": [7, 8]}
    attributes = n5_metadata.array_to_n5(zarray(compressor=wrapped), ".zarray")
    assert attributes["compression"] == {"type": "gzip", "level": 1, "useZlib": False}


@pytest.mark.parametrize("attributes, rule", [
    ({"dimensions": [4], "blockSize": [2], "dataType": "uint8"}, "lack compression"),
    ({"dimensions": [4], "blockSize": [2, 2], "dataType": "uint8",
      "compression": {"type": "raw"}}, "'blockSize' has 2 entries"),
    ({"dimensions": [4], "blockSize": [0], "dataType": "uint8",
      "compression": {"type": "raw"}}, "integers >= 1"),
    ({"dimensions": [4], "blockSize": [2], "dataType": "object",
      "compression": {"type": "raw"}}, "dataType 'object' is not supported"),
    ({"dimensions": [4], "blockSize": [2], "dataType": "uint8",
      "compression": {"type": "lz4", "blockSize": 65536}}, "compression 'lz4' is not supported"),
    ({"dimensions": [4], "blockSize": [2], "dataType": "uint8",
      "compression": {"type": "blosc"}}, "lacks or misspells a parameter"),
    ({"dimensions": [4], "blockSize": [2], "dataType": "uint8",
      "compression": "gzip"}, "must be an object with a 'type'"),
])
def test_bad_n5_attributes_name_the_file(attributes, rule):
    with pytest.raises(MetadataError, match=rule) as info:
        n5_metadata.array_to_zarr(attributes, "x/attributes.json")
    assert "'x/attributes.json'" in str(info.value)


def test_user_attributes_keep_n5_keywords_apart():
    attributes = {"n5": "2.0.0", "dimensions": [3], "blockSize": [3], "dataType": "int8",
                  "compression": {"type": "raw"}, "unit": "m"}
    assert n5_metadata.user_attributes(attributes) == {"unit": "m"}
    replaced = n5_metadata.with_user_attributes(attributes, {"scale": 2}, ".zattrs")
    assert replaced == {**{k: v for k, v in attributes.items() if k != "unit"}, "scale": 2}
    with pytest.raises(MetadataError, match="'dataType'"):
        n5_metadata.with_user_attributes(attributes, {"dataType": "x"}, "a/.zattrs")
    with pytest.raises(MetadataError, match="must be a JSON object"):
        n5_metadata.with_user_attributes(attributes, [1], "a/.zattrs")


SPEC_2D = {"dimensions": [5, 4], "blockSize": [3, 2], "dataType": "int16",
           "compression": {"type": "raw"}}


def block(mode, sizes, values, *, count=None):
    """An N5 block: header (sizes fastest-varying first) and big-endian values."""
    header = struct.pack(">HH", mode, len(sizes)) + struct.pack(f">{len(sizes)}I", *sizes)
    if count is not None:
        header += struct.pack(">I", count)
    return header + np.asarray(values, dtype=">i2").tobytes()


def test_default_mode_block_bytes():
    spec = BlockSpec.of(SPEC_2D, "a/attributes.json")
    values = np.arange(6, dtype="<i2")
    assert encode_block(values, spec, "a/0.0") == block(0, [3, 2], values)
    np.testing.assert_array_equal(decode_block(block(0, [3, 2], values), spec, "a/0.0"),
                                  values.reshape(2, 3))


def test_cropped_and_varlength_blocks_read_as_whole_chunks():
    spec = BlockSpec.of(SPEC_2D, "a/attributes.json")
    # An edge block as the N5 Java library writes it: 2 x 1 of a 3 x 2 block size.
    cropped = decode_block(block(0, [2, 1], [7, 8]), spec, "a/1.1")
    np.testing.assert_array_equal(cropped, [[7, 8, 0], [0, 0, 0]])
    varlength = decode_block(block(1, [3, 2], range(6), count=6), spec, "a/0.0")
    np.testing.assert_array_equal(varlength, np.arange(6).reshape(2, 3))


@pytest.mark.parametrize("data, rule", [
    (b"\x00", "shorter than its header"),
    (block(0, [3, 2, 1], range(6)), "says 3 dimensions, the dataset has 2"),
    (block(0, [4, 2], range(8)), r"shape \[4, 2\] exceeds the dataset's blockSize \[3, 2\]"),
    (block(0, [3, 2], range(5)), "holds 10 bytes of values, its shape"),
    (block(1, [3, 2], range(4), count=4), "varlength N5 block of shape"),
    (block(2, [3, 2], range(6)), "object-mode block"),
    (block(7, [3, 2], range(6)), "mode 7"),
    (struct.pack(">HH", 0, 2) + b"\x00\x00", "shorter than its 12-byte header"),
])
def test_corrupt_blocks_name_the_key(data, rule):
    spec = BlockSpec.of(SPEC_2D, "a/attributes.json")
    with pytest.raises(CorruptValueError, match=rule) as info:
        decode_block(data, spec, "grp/a/1.0")
    assert "'grp/a/1.0'" in str(info.value)


def test_block_that_does_not_decompress_names_key_and_compression():
    spec = BlockSpec.of({**SPEC_2D, "compression": {"type": "gzip", "level": 1}}, "a")
    with pytest.raises(CorruptValueError, match="'a/0.0': .* does not decompress as gzip"):
        decode_block(block(0, [3, 2], range(6)), spec, "a/0.0")


# -------------------------------------------------------- the store's view
@pytest.fixture
def n5(tmp_path):
    store = N5Store(tmp_path / "data.n5")
    yield store
    store.close()


def folder_of(store):
    return Path(store.store.path)


def test_open_store_picks_n5_by_scheme_and_ending(tmp_path):
    for url in (f"n5://{tmp_path}/a", str(tmp_path / "b.n5"), str(tmp_path / "C.N5/")):
        with open_store(url, mode="w") as store:
            assert type(store) is N5Store and type(store.store) is DirectoryStore
            store[".zgroup"] = b'{"zarr_format": 2}'
        name = url.rstrip("/").rpartition("/")[2]
        assert json.loads((tmp_path / name / "attributes.json").read_text()) == {"n5": "2.0.0"}
    with pytest.raises(StoreNotFoundError):
        open_store(f"n5://{tmp_path}/missing", mode="r")


def test_metadata_documents_share_one_attributes_file(n5):
    hierarchy.init_group(n5)
    n5[".zattrs"] = b'{"title": "cells"}'
    hierarchy.init_group(n5, path="g")
    hierarchy.init_array(n5, shape=(4, 6), chunks=(2, 3), dtype="<u2", path="g/a",
                         compressor=None)
    n5["g/a/.zattrs"] = b'{"unit": "nm"}'
    folder = folder_of(n5)
    assert json.loads((folder / "attributes.json").read_text()) == {"n5": "2.0.0",
                                                                   "title": "cells"}
    assert json.loads((folder / "g/attributes.json").read_text()) == {}
    assert json.loads((folder / "g/a/attributes.json").read_text()) == {
        "dimensions": [6, 4], "blockSize": [3, 2], "dataType": "uint16",
        "compression": {"type": "raw"}, "unit": "nm"}
    assert n5.listdir() == [".zattrs", ".zgroup", "g"]
    assert n5.listdir("g") == [".zgroup", "a"]
    assert n5.listdir("g/a") == [".zarray", ".zattrs"]
    assert json.loads(n5["g/a/.zarray"])["shape"] == [4, 6]
    assert "g/.zarray" not in n5 and "g/a/.zgroup" not in n5 and "g/.zattrs" not in n5
    # Deleting one document keeps the others of the same file.
    del n5["g/a/.zattrs"]
    assert "g/a/.zarray" in n5 and "g/a/.zattrs" not in n5
    n5["g/a/.zattrs"] = b'{"unit": "um"}'
    del n5["g/a/.zarray"]
    assert json.loads((folder / "g/a/attributes.json").read_text()) == {"unit": "um"}
    with pytest.raises(KeyError):
        del n5["g/a/.zarray"]


def test_chunks_are_reversed_blocks(n5):
    hierarchy.init_array(n5, shape=(5, 4, 3), chunks=(2, 3, 2), dtype="<i8", path="a",
                         compressor=None)
    n5["a/2.1.0"] = np.arange(12, dtype="<i8")
    block_file = folder_of(n5) / "a/0/1/2"
    assert block_file.read_bytes() == (
        struct.pack(">HH3I", 0, 3, 2, 3, 2) + np.arange(12, dtype=">i8").tobytes())
    assert sorted(n5) == [".zgroup", "a/.zarray", "a/2.1.0"]
    assert n5.listdir("a") == [".zarray", "2.1.0"]
    assert n5.listdir("a/0") == [] and n5.list_prefix("a/0") == []
    assert n5.getsize("a/2.1.0") == 96 and n5.stat("a/2.1.0") == 96
    with pytest.raises(InvalidKeyError, match="block of chunk 'a/2.1.0'"):
        n5["a/0/1/2"] = b"raw bytes would bypass the translation"
    assert "a/0/1/2" not in n5
    n5.rename("a/2.1.0", "a/0.0.0")
    assert (folder_of(n5) / "a/0/0/0").exists() and not block_file.exists()
    n5.rename("a", "moved")
    assert n5.listdir("moved") == [".zarray", "0.0.0"]


def test_attributes_file_is_not_a_key(n5):
    with pytest.raises(InvalidKeyError, match="attributes.json is N5's own file"):
        n5["g/attributes.json"] = b"{}"


def test_zarr_json_is_refused(n5):
    with pytest.raises(MetadataError, match="Zarr format 2 metadata only"):
        n5["zarr.json"] = b'{"zarr_format": 3, "node_type": "group"}'
    assert "zarr.json" not in n5 and len(n5) == 0


def test_bad_writes_leave_nothing(n5):
    hierarchy.init_array(n5, shape=(4,), chunks=(2,), dtype="<f4", path="a",
                         compressor=numcodecs.Zlib(1))
    before = sorted(folder_of(n5).rglob("*"))
    with pytest.raises(InvalidValueError, match="'a/0': the chunk written does not decompress"):
        n5["a/0"] = b"not zlib"
    with pytest.raises(InvalidValueError, match="holds 4 bytes of values"):
        n5["a/1"] = numcodecs.Zlib(1).encode(np.zeros(1, "<f4"))
    with pytest.raises(MetadataError, match="fill_value 1.5"):
        n5["b/.zarray"] = json.dumps(zarray(dtype="<f8", fill_value=1.5)).encode()
    with pytest.raises(MetadataError, match="'a/.zattrs': attribute name"):
        n5["a/.zattrs"] = b'{"compression": "none"}'
    with pytest.raises(MetadataError, match="is an N5 dataset"):
        n5["a/.zgroup"] = b'{"zarr_format": 2}'
    assert sorted(folder_of(n5).rglob("*")) == before


def test_corrupt_n5_reads_name_the_key(n5):
    hierarchy.init_array(n5, shape=(4, 4), chunks=(2, 2), dtype="<i2", path="a",
                         compressor=None)
    n5.store["a/0/0"] = block(0, [2, 2, 2], range(8))
    with pytest.raises(CorruptValueError, match="'a/0.0': the N5 block header says 3"):
        n5["a/0.0"]
    n5.store["b/attributes.json"] = json.dumps(
        {"dimensions": [4], "blockSize": [2], "dataType": "uint8",
         "compression": {"type": "lz4", "blockSize": 65536}}).encode()
    with pytest.raises(MetadataError, match="'b/attributes.json': N5 compression 'lz4'"):
        n5["b/.zarray"]
    with pytest.raises(MetadataError, match="'b/attributes.json'"):
        n5["b/0"]
    n5.store["c/attributes.json"] = b"{not json"
    assert n5.listdir("c") == [".zgroup"]  # listed, and reading it says what is wrong
    with pytest.raises(MetadataError, match="'c/attributes.json' is not JSON"):
        n5["c/.zgroup"]


def test_concurrent_metadata_writes_lose_nothing(n5):
    # zarr-python 3 writes .zarray and .zattrs of one array at once from threads:
    # both read, change and write back the same attributes.json.
    document = json.dumps(zarray()).encode()
    errors = []

    def write(index):
        try:
            for round_ in range(20):
                n5[f"a{round_}/.zarray" if index == 0 else f"a{round_}/.zattrs"] = (
                    document if index == 0 else json.dumps({f"k{index}": index}).encode())
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for round_ in range(20):
        assert json.loads(n5[f"a{round_}/.zattrs"]) == {"k1": 1}
        assert json.loads(n5[f"a{round_}/.zarray"])["shape"] == [20, 30]


# ------------------------------------------- other N5 readers and writers
# Shapes that chunks do not divide, so every array has cropped edge chunks.
ARRAYS = {1: ((11,), (4,)), 2: ((11, 7), (4, 3)), 3: ((5, 6, 7), (2, 4, 3)),
          4: ((3, 4, 5, 6), (2, 3, 2, 4))}
N5_COMPRESSIONS = {
    "raw": {"type": "raw"},
    "gzip": {"type": "gzip", "level": 5, "useZlib": False},
    "zlib": {"type": "gzip", "level": 3, "useZlib": True},
    "bzip2": {"type": "bzip2", "blockSize": 9},
    "xz": {"type": "xz", "preset": 4},
    "blosc": {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
    "zstd": {"type": "zstd", "level": 3},
}
ZARR_COMPRESSORS = {"raw": None, "gzip": "GZip(level=5)", "zlib": "Zlib(level=3)",
                    "bzip2": "BZ2(level=9)", "xz": "LZMA(preset=4)",
                    "blosc": "Blosc(cname='lz4', clevel=5, shuffle=1)", "zstd": "Zstd(level=3)"}


def sample(rank, dtype="<i4"):
    shape, _ = ARRAYS[rank]
    return (np.arange(int(np.prod(shape))) * 3 - 7).astype(dtype).reshape(shape)


def _tensorstore():
    try:
        import tensorstore
    except ImportError:
        missing_peer("tensorstore is not installed")
    return tensorstore


def _zarr3():
    return pytest.importorskip("zarr", minversion="3")


def write_with_zarr3(folder, rank, compression, dtype="<i4"):
    """An array written through our adapter by zarr-python 3, at ``folder``/arr."""
    zarr = _zarr3()
    shape, chunks = ARRAYS[rank]
    compressor = ZARR_COMPRESSORS[compression]
    with N5Store(folder) as store:
        root = zarr.open_group(zarr_store(store), mode="w", zarr_format=2)
        root.attrs["made by"] = "zstores"
        array = root.create_array(
            "arr", shape=shape, chunks=chunks, dtype=dtype,
            compressors=None if compressor is None else eval(f"numcodecs.{compressor}"))
        array[...] = sample(rank, dtype)
        array.attrs["rank"] = rank


def read_with_zarr3(folder, path="arr"):
    zarr = _zarr3()
    with N5Store(folder, mode="r") as store:
        return zarr.open_array(zarr_store(store), path=path, mode="r")[...]


@pytest.mark.parametrize("compression", sorted(N5_COMPRESSIONS))
@pytest.mark.parametrize("rank", sorted(ARRAYS))
def test_tensorstore_reads_what_we_write(tmp_path, rank, compression):
    ts = _tensorstore()
    write_with_zarr3(tmp_path / "data.n5", rank, compression)
    spec = {"driver": "n5", "kvstore": {"driver": "file", "path": str(tmp_path / "data.n5/arr")}}
    array = ts.open(spec, open=True, read=True).result()
    assert array.spec().to_json()["metadata"]["compression"]["type"] == \
        N5_COMPRESSIONS[compression]["type"]
    np.testing.assert_array_equal(array.read().result(), sample(rank).T)


@pytest.mark.parametrize("compression", sorted(N5_COMPRESSIONS))
@pytest.mark.parametrize("rank", sorted(ARRAYS))
def test_we_read_what_tensorstore_writes(tmp_path, rank, compression):
    ts = _tensorstore()
    shape, chunks = ARRAYS[rank]
    spec = {"driver": "n5", "kvstore": {"driver": "file", "path": str(tmp_path / "t.n5/arr")},
            "metadata": {"dimensions": list(shape[::-1]), "blockSize": list(chunks[::-1]),
                         "dataType": "int32", "compression": N5_COMPRESSIONS[compression]}}
    array = ts.open(spec, create=True).result()
    array[...] = sample(rank).T
    np.testing.assert_array_equal(read_with_zarr3(tmp_path / "t.n5"), sample(rank))


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_data_type_round_trips_through_tensorstore(tmp_path, dtype):
    ts = _tensorstore()
    write_with_zarr3(tmp_path / "d.n5", 2, "gzip", dtype)
    spec = {"driver": "n5", "kvstore": {"driver": "file", "path": str(tmp_path / "d.n5/arr")}}
    array = ts.open(spec, open=True).result()
    assert array.dtype.numpy_dtype == np.dtype(dtype)
    np.testing.assert_array_equal(array.read().result(), sample(2, dtype).T)
    array[0, 0] = 42  # tensorstore writes a block; we read it back
    assert read_with_zarr3(tmp_path / "d.n5")[0, 0] == 42


ZARR2_N5_WRITE = """
import warnings
warnings.simplefilter("ignore", FutureWarning)
import numcodecs, numpy as np, zarr
from zarr.n5 import N5Store
store = N5Store(folder)
root = zarr.group(store=store, overwrite=True)
root.attrs["made by"] = "zarr 2"
for name, (shape, chunks), compressor in arrays:
    data = (np.arange(int(np.prod(shape))) * 3 - 7).astype("<i4").reshape(shape)
    array = root.create_dataset(name, shape=shape, chunks=chunks, dtype="<i4",
                                compressor=None if compressor is None
                                else eval("numcodecs." + compressor))
    array[...] = data
    array.attrs["shape"] = list(shape)
"""

ZARR2_N5_READ = """
import warnings
warnings.simplefilter("ignore", FutureWarning)
import numpy as np, zarr
from zarr.n5 import N5Store
root = zarr.open_group(store=N5Store(folder), mode="r")
result = {"attrs": root.attrs.asdict(), "arrays": {}}
for name, (shape, chunks), compressor in arrays:
    array = root[name]
    result["arrays"][name] = {"data": array[...].tolist(), "attrs": array.attrs.asdict(),
                              "chunks": list(array.chunks)}
"""


def _zarr2_arrays():
    return [(f"g/{compression}_{rank}d", ARRAYS[rank], ZARR_COMPRESSORS[compression])
            for compression in sorted(ZARR_COMPRESSORS) for rank in sorted(ARRAYS)]


def test_we_read_what_zarr2_n5store_writes(tmp_path, zarr2):
    folder = tmp_path / "z2.n5"
    arrays = _zarr2_arrays()
    zarr2.run(ZARR2_N5_WRITE, folder=str(folder), arrays=arrays)
    zarr = _zarr3()
    with N5Store(folder, mode="r") as store:
        root = zarr.open_group(zarr_store(store), mode="r", zarr_format=2)
        assert root.attrs.asdict() == {"made by": "zarr 2"}
        for name, (shape, chunks), _ in arrays:
            rank = len(shape)
            np.testing.assert_array_equal(root[name][...], sample(rank), err_msg=name)
            assert root[name].attrs.asdict() == {"shape": list(shape)}
            assert root[name].chunks == chunks


def test_zarr2_n5store_reads_what_we_write(tmp_path, zarr2):
    folder = tmp_path / "ours.n5"
    arrays = _zarr2_arrays()
    zarr = _zarr3()
    with N5Store(folder, mode="w") as store:
        root = zarr.open_group(zarr_store(store), mode="w", zarr_format=2)
        root.attrs["made by"] = "zstores"
        for name, (shape, chunks), compressor in arrays:
            array = root.create_array(
                name, shape=shape, chunks=chunks, dtype="<i4",
                compressors=None if compressor is None else eval(f"numcodecs.{compressor}"))
            array[...] = sample(len(shape))
            array.attrs["shape"] = list(shape)
    result = zarr2.run(ZARR2_N5_READ, folder=str(folder), arrays=arrays)
    assert result["attrs"] == {"made by": "zstores"}
    for name, (shape, chunks), _ in arrays:
        read = result["arrays"][name]
        np.testing.assert_array_equal(np.array(read["data"]), sample(len(shape)), err_msg=name)
        assert read["attrs"] == {"shape": list(shape)} and read["chunks"] == list(chunks)


def test_zarr2_through_our_adapter_writes_what_its_n5store_writes(tmp_path, zarr2):
    """The same hierarchy through zarr-python 2's N5Store and through ours: the same
    attributes.json files (but for the version, which zarr 2 puts in every group) and
    the same block headers and values."""
    arrays = _zarr2_arrays()[:8]
    zarr2.run(ZARR2_N5_WRITE, folder=str(tmp_path / "theirs.n5"), arrays=arrays)
    zarr2.run(ZARR2_N5_WRITE.replace("N5Store(folder)", "zarr_store(N5Store(folder))")
              .replace("from zarr.n5 import N5Store",
                       "from zstores.wrappers.n5 import N5Store\n"
                       "from zstores.adapters import zarr_store"),
              folder=str(tmp_path / "ours.n5"), arrays=arrays)
    theirs = {p.relative_to(tmp_path / "theirs.n5"): p for p in
              (tmp_path / "theirs.n5").rglob("*") if p.is_file()}
    ours = {p.relative_to(tmp_path / "ours.n5"): p for p in
            (tmp_path / "ours.n5").rglob("*") if p.is_file()}
    assert sorted(ours) == sorted(theirs)
    for relative, path in theirs.items():
        if relative.name == "attributes.json":
            expected = json.loads(path.read_text())
            if relative.parent != Path("."):
                expected.pop("n5", None)
            assert json.loads(ours[relative].read_text()) == expected, relative
        else:
            mine, zarr2s = ours[relative].read_bytes(), path.read_bytes()
            rank = int(relative.parts[1].rsplit("_", 1)[1][0])
            header = 4 + 4 * rank
            assert mine[:header] == zarr2s[:header], relative
            if relative.parts[1].startswith("raw"):
                assert mine == zarr2s, relative


# ----------------------------------------------- the zstores command, zfuse
def test_cli_lists_describes_verifies_and_copies_n5(tmp_path):
    folder = tmp_path / "data.n5"
    write_with_zarr3(folder, 3, "zstd")
    listing = zstores_cmd("ls", "-r", folder)
    assert listing.code == 0 and "arr  (5, 6, 7) int32" in listing.out, listing
    info = zstores_cmd("info", folder, "arr")
    assert info.code == 0 and "N5Store" in info.out and "Zstd(level=3)" in info.out, info
    verified = zstores_cmd("verify", folder)
    assert verified.code == 0 and "no problems found" in verified.out, verified
    # N5 -> LMDB -> N5 gives the same files: the metadata of every array arrives
    # before its chunks (parallel batches of 64 keys split arrays), and chunks
    # translate the same both ways.
    with N5Store(folder) as store:
        for index in range(60):
            hierarchy.init_array(store, shape=(4, 4), chunks=(2, 2), dtype="<u1",
                                 path=f"many/a{index:02d}", compressor=None)
            store.setitems({f"many/a{index:02d}/{i}.{j}": bytes(4) for i in (0, 1)
                            for j in (0, 1)})
    for source, target in ((folder, tmp_path / "copy.lmdb"), (tmp_path / "copy.lmdb",
                                                              tmp_path / "again.n5")):
        copied = zstores_cmd("cp", "--jobs", "4", source, target)
        assert copied.code == 0, copied
    files = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    again = tmp_path / "again.n5"
    assert {p.relative_to(again): p.read_bytes()
            for p in again.rglob("*") if p.is_file()} == files


def test_cli_verify_names_a_damaged_block(tmp_path):
    folder = tmp_path / "data.n5"
    write_with_zarr3(folder, 2, "gzip")
    (folder / "arr/1/2").write_bytes(b"\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04junk")
    verified = zstores_cmd("verify", folder)
    assert verified.code == 1, verified
    assert "arr/2.1" in verified.out + verified.err, verified


def test_zfuse_shows_n5_as_zarr_and_takes_writes(tmp_path, mountpoint):
    zarr = _zarr3()
    ts = _tensorstore()
    import zfuse

    folder = tmp_path / "data.n5"
    write_with_zarr3(folder, 2, "blosc")
    with N5Store(folder) as store, zfuse.mounted(store, mountpoint) as mount:
        local = zarr.storage.LocalStore(mount.path)
        np.testing.assert_array_equal(zarr.open_array(local, path="arr", mode="r")[...],
                                      sample(2))
        root = zarr.open_group(local, mode="a", zarr_format=2)
        written = root.create_array("new", shape=(9, 5), chunks=(4, 4), dtype="<u2",
                                    compressors=numcodecs.Zlib(level=1))
        written[...] = np.arange(45, dtype="<u2").reshape(9, 5)
    spec = {"driver": "n5", "kvstore": {"driver": "file", "path": str(folder / "new")}}
    np.testing.assert_array_equal(ts.open(spec).result().read().result(),
                                  np.arange(45, dtype="<u2").reshape(9, 5).T)


def test_conditional_writes_of_chunks_reach_their_blocks(tmp_path):
    """A chunk's set_if_not_exists/replace_if are the inner store's, on its block."""
    import zstores

    inner = zstores.LMDBStore(str(tmp_path / "inner.lmdb"))
    store = N5Store(inner)
    zstores.init_array(store, shape=(4,), chunks=(2,), dtype="<u2", compressor=None, path="a")
    first, second = np.arange(2, dtype="<u2").tobytes(), np.arange(2, 4, dtype="<u2").tobytes()
    assert store.set_if_not_exists("a/1", first)
    assert not store.set_if_not_exists("a/1", second)
    assert store["a/1"] == first
    assert inner["a/1"] != first  # the block of chunk 1: an N5 header, big-endian values
    assert not store.replace_if("a/1", second, second)
    assert store.replace_if("a/1", first, second)
    value, version = store.get_with_version("a/1")
    assert value == second and version == inner.get_with_version("a/1")[1]
    assert store.replace_if("a/1", version, first)
    assert not store.replace_if("a/1", version, second)
    assert store["a/1"] == first
    assert not store.set_if_not_exists("a/.zarray", b"{}")  # the array's metadata exists
    store.close()
