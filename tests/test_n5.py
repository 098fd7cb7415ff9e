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
from zstores.metadata import MetadataError
from zstores.metadata import n5 as n5_metadata
from zstores.stores.n5 import N5Store
from zstores.stores.n5_blocks import BlockSpec, decode_block, encode_block
from zstores.testing import StoreTests

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
