"""``zstores verify``, ``info`` and ``cp`` on Zarr v3 data, run for real in subprocesses.

The data is written by zarr-python 3 itself (and by xarray), into a folder
with zarr's own ``LocalStore``, then copied into LMDB and SQLite stores with
``zstores cp``; damage is done to stored values through the zstores API.
Runs under any zarr-python 3 (``.venv-zarr-latest/bin/python -m pytest
tests/test_cli_v3.py`` checks the newest).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import zstores

from cli_helpers import Result, contents, file_url, write_sample, zstores_cmd
from test_cli import NewStores

zarr = pytest.importorskip("zarr")
if int(zarr.__version__.split(".")[0]) < 3:  # pragma: no cover - the zarr2 venv
    pytest.skip("needs zarr-python 3 to write Zarr v3", allow_module_level=True)

from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec  # noqa: E402
from zarr.codecs.numcodecs import Delta, Zlib  # noqa: E402

BACKENDS = ["directory", "lmdb", "sqlite", "redis", "mongodb"]  # servers: scripts/services
INSTALL = "pip install 'zstores[zarr]'"

#: name: (create_array options, chunk keys written)
ARRAYS = {
    "plain": dict(shape=(10, 10), chunks=(5, 5), dtype="<f8", compressors=None),
    "blosc": dict(shape=(12, 12), chunks=(6, 6), dtype="<f4", compressors=BloscCodec()),
    "zstd": dict(shape=(20,), chunks=(8,), dtype="<i8", compressors=ZstdCodec(level=3)),
    "gzip": dict(shape=(9, 9), chunks=(3, 3), dtype="<u2", compressors=GzipCodec(level=1),
                 filters=TransposeCodec(order=(1, 0))),
    "crc": dict(shape=(16,), chunks=(4,), dtype="<i4",
                compressors=[ZstdCodec(level=1), Crc32cCodec()]),
    "sharded": dict(shape=(16, 16), shards=(8, 8), chunks=(4, 4), dtype="<f8",
                    compressors=GzipCodec(level=1)),
}
with warnings.catch_warnings():  # zarr warns writers that numcodecs codecs are no v3 standard
    warnings.simplefilter("ignore")
    ARRAYS["numcodecs"] = dict(shape=(30,), chunks=(10,), dtype="<i4",
                               filters=Delta(dtype="<i4"), compressors=Zlib(level=1))
CHUNKS = {"plain": 4, "blosc": 4, "zstd": 3, "gzip": 9, "crc": 4, "sharded": 4, "numcodecs": 3}


def _write_v3(path: Path) -> dict[str, np.ndarray]:
    """Every array of ARRAYS, filled with varied (compressible but not constant) data."""
    root = zarr.open_group(zarr.storage.LocalStore(str(path)), mode="w", zarr_format=3)
    root.attrs["title"] = "v3 sample"
    rng = np.random.default_rng(7)
    written = {}
    for name, options in ARRAYS.items():
        array = root.create_array(name, **options)
        data = (rng.integers(0, 50, size=options["shape"])).astype(options["dtype"])
        array[...] = data
        written[name] = data
    root.create_group("empty")
    return written


@pytest.fixture(scope="module")
def v3_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("v3") / "data"
    _write_v3(path)
    return path


@pytest.fixture(params=BACKENDS)
def v3_url(request: pytest.FixtureRequest, v3_folder: Path, tmp_path: Path) -> Iterator[str]:
    """A private copy of the v3 sample in each backend (copied by ``zstores cp``)."""
    stores = NewStores(request.param, tmp_path)  # skips a server backend with no server
    url = stores()
    copied = zstores_cmd("cp", v3_folder, url)
    assert copied.code == 0, copied.err
    yield url
    stores.close()


def _chunk_keys(url: str, name: str) -> list[str]:
    with zstores.open_store(url, mode="r") as store:
        return sorted(key for key in store if key.startswith(f"{name}/c/"))


def _problems(result: Result) -> dict[str, str]:
    return {p["key"]: p["kind"] for p in result.json()["problems"]}


# ----------------------------------------------------------------- verify
def test_verify_decodes_every_v3_codec(v3_url: str) -> None:
    assert {name: len(_chunk_keys(v3_url, name)) for name in ARRAYS} == CHUNKS
    report = zstores_cmd("verify", v3_url, "--json")
    assert report.code == 0, report.out
    found = report.json()
    total = sum(CHUNKS.values())
    assert (found["arrays"], found["groups"], found["chunks_checked"], found["chunks_ok"],
            found["chunks_bad"], found["chunks_missing"]) == (7, 2, total, total, 0, 0)
    assert all(a["decoded"] for a in found["array_details"])
    text = zstores_cmd("verify", v3_url)
    assert (text.code, text.err) == (0, "")
    assert text.out.splitlines()[-1] == "no problems found"
    assert f"checked 7 arrays and 2 groups: {total} of {total} chunks decoded" in text.out


def test_verify_reports_each_kind_of_v3_damage(v3_url: str) -> None:
    rng = np.random.default_rng(1)
    with zstores.open_store(v3_url, mode="r+") as store:
        blosc = store["blosc/c/0/0"]
        store["blosc/c/0/0"] = rng.bytes(len(blosc))  # overwritten with random bytes
        store["zstd/c/1"] = rng.bytes(len(store["zstd/c/1"]))
        store["gzip/c/2/2"] = rng.bytes(len(store["gzip/c/2/2"]))
        store["numcodecs/c/0"] = rng.bytes(len(store["numcodecs/c/0"]))
        cut = store["plain/c/1/1"]
        store["plain/c/1/1"] = cut[:len(cut) // 2]  # truncated
        crc = bytearray(store["crc/c/2"])
        crc[len(crc) // 2] ^= 0x01  # one bit flipped: only the checksum can tell
        store["crc/c/2"] = bytes(crc)
        shard = bytearray(store["sharded/c/0/0"])
        shard[-12] ^= 0xFF  # in the index (at the end of the shard)
        store["sharded/c/0/0"] = bytes(shard)
        inner = bytearray(store["sharded/c/1/1"])
        inner[12] ^= 0xFF  # inside the first inner chunk's gzip stream
        store["sharded/c/1/1"] = bytes(inner)
        del store["blosc/c/1/1"]  # missing: the fill value, no problem
    report = zstores_cmd("verify", v3_url, "--json")
    assert report.code == 1
    assert _problems(report) == {
        "blosc/c/0/0": "decode_error", "zstd/c/1": "decode_error",
        "gzip/c/2/2": "decode_error", "numcodecs/c/0": "decode_error",
        "plain/c/1/1": "wrong_size", "crc/c/2": "checksum",
        "sharded/c/0/0": "shard_index", "sharded/c/1/1": "decode_error",
    }
    messages = {p["key"]: p["message"] for p in report.json()["problems"]}
    assert messages["plain/c/1/1"] == ("decodes to 100 bytes; a chunk of shape (5, 5) and "
                                       "data type float64 is 200")
    assert messages["crc/c/2"] == "fails its crc32c checksum (overwritten or cut short)"
    assert messages["sharded/c/0/0"] == ("the shard index fails its crc32c checksum "
                                         "(overwritten or cut short)")
    assert messages["sharded/c/1/1"].startswith("inner chunk (0, 0) of the shard: gzip fails "
                                                "to decode")
    found = report.json()
    assert (found["chunks_bad"], found["chunks_missing"]) == (8, 1)
    text = zstores_cmd("verify", v3_url)
    assert text.code == 1 and text.out.splitlines()[-1] == "8 problems found"
    assert "1 chunk missing (read as the fill value)" in text.out


def test_a_missing_v3_chunk_is_counted_not_an_error(v3_url: str) -> None:
    with zstores.open_store(v3_url, mode="r+") as store:
        del store["sharded/c/1/0"]
        del store["crc/c/0"]
    report = zstores_cmd("verify", v3_url, "--json")
    assert report.code == 0 and report.json()["problems"] == []
    assert report.json()["chunks_missing"] == 2
    details = {a["path"]: a for a in report.json()["array_details"]}
    assert (details["sharded"]["chunks_found"], details["sharded"]["chunks_missing"]) == (3, 1)


def test_a_truncated_shard_and_an_index_pointing_past_the_end(tmp_path: Path) -> None:
    path = tmp_path / "shards"
    root = zarr.open_group(zarr.storage.LocalStore(str(path)), mode="w", zarr_format=3)
    # no crc32c on the index: the index's own offsets are all there is to check
    from zarr.codecs import BytesCodec, ShardingCodec

    sharding = ShardingCodec(chunk_shape=(4,), codecs=[BytesCodec()],
                             index_codecs=[BytesCodec()])
    array = root.create_array("a", shape=(16,), chunks=(16,), dtype="<i2",
                              serializer=sharding, compressors=None)
    array[:] = np.arange(16, dtype="<i2")
    second = root.create_array("b", shape=(16,), shards=(8,), chunks=(4,), dtype="<i2")
    second[:] = 1
    shard = (path / "a/c/0").read_bytes()
    (path / "a/c/0").write_bytes(shard[:-8] + (1000).to_bytes(8, "little"))  # last length
    (path / "b/c/1").write_bytes((path / "b/c/1").read_bytes()[:20])
    report = zstores_cmd("verify", path, "--json")
    assert report.code == 1
    messages = {p["key"]: (p["kind"], p["message"]) for p in report.json()["problems"]}
    assert messages["a/c/0"] == ("shard_index", ("the shard index points inner chunk (3,) of "
                                 "the shard past the end (24 + 1000 > 96 bytes)"))
    assert messages["b/c/1"] == ("shard_index", ("20 bytes, shorter than its shard index "
                                 "(36 bytes): cut short"))


def test_verify_v3_written_by_xarray(tmp_path: Path) -> None:
    xr = pytest.importorskip("xarray")
    path = tmp_path / "dataset.zarr"
    rng = np.random.default_rng(3)
    dataset = xr.Dataset(
        {"temperature": (("time", "x"), rng.normal(280, 5, (24, 30))),
         "flag": (("x",), np.arange(30, dtype="i2"))},
        coords={"time": np.arange(24), "x": np.linspace(0, 1, 30)})
    with warnings.catch_warnings():  # xarray consolidates by default; zarr warns about it
        warnings.simplefilter("ignore")
        dataset.chunk({"time": 6, "x": 10}).to_zarr(str(path), zarr_format=3, mode="w")
    url = file_url("sqlite", tmp_path, "xr")
    assert zstores_cmd("cp", path, url).code == 0
    clean = zstores_cmd("verify", url, "--json")
    assert clean.code == 0, clean.out
    assert clean.json()["arrays"] == 4 and clean.json()["chunks_ok"] > 12
    key = _chunk_keys(url, "temperature")[5]
    with zstores.open_store(url, mode="r+") as store:
        store[key] = rng.bytes(len(store[key]))
    damaged = zstores_cmd("verify", url, "--json")
    assert damaged.code == 1 and _problems(damaged) == {key: "decode_error"}


# ---------------------------------------------------------- without zarr
_NO_ZARR = textwrap.dedent("""
    import importlib.abc, sys
    class NoZarr(importlib.abc.MetaPathFinder):
        # as if zarr-python were not installed: every import of it fails
        def find_spec(self, name, path=None, target=None):
            if name == "zarr" or name.startswith("zarr."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, NoZarr())
    from zstores.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def _zstores_without_zarr(*args: str) -> Result:
    done = subprocess.run([sys.executable, "-c", _NO_ZARR, *map(str, args)],
                          capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, check=False)
    return Result(done.returncode, done.stdout, done.stderr)


def test_verify_without_zarr_python_refuses_v3_and_still_checks_v2(v3_folder: Path,
                                                                    tmp_path: Path) -> None:
    refused = _zstores_without_zarr("verify", v3_folder)
    assert (refused.code, refused.out) == (2, "")
    assert refused.err_lines == [
        ("zstores verify: error: the store holds 7 zarr v3 arrays (first: blosc) and "
        "zarr-python is not installed, so their chunks cannot be decoded; install it with: "
        f"{INSTALL}")]
    v2 = str(tmp_path / "v2")
    write_sample(v2)
    checked = _zstores_without_zarr("verify", v2)
    assert (checked.code, checked.err) == (0, "")
    assert "18 of 18 chunks decoded" in checked.out
    info = _zstores_without_zarr("info", v3_folder, "sharded", "--json")
    assert info.code == 0 and info.json()["shard_shape"] == [8, 8]


# ------------------------------------------------------------------- info
def test_info_shows_v3_arrays_as_fully_as_v2(v3_url: str) -> None:
    with zstores.open_store(v3_url, mode="r") as store:
        stored = {name: store.getsize(name) for name in ARRAYS}
    for name, options in ARRAYS.items():
        report = zstores_cmd("info", v3_url, name, "--json").json()
        nbytes = int(np.prod(options["shape"])) * np.dtype(options["dtype"]).itemsize
        assert (report["type"], report["nbytes"], report["nbytes_stored"]) == \
            ("zarr v3 array", nbytes, stored[name])
        assert report["storage_ratio"] == round(nbytes / stored[name], 1)
        assert report["codecs"] and report["data_type"] == np.dtype(options["dtype"]).name
    sharded = zstores_cmd("info", v3_url, "sharded", "--json").json()
    assert (sharded["shard_shape"], sharded["chunk_shape"], sharded["shards_initialized"],
            sharded["nshards"], sharded["nchunks"]) == ([8, 8], [4, 4], 4, 4, 16)
    text = zstores_cmd("info", v3_url, "sharded").out.splitlines()
    assert "Shard shape        : (8, 8)" in text and "Chunk shape        : (4, 4)" in text
    assert "Shards initialized : 4/4 (16 inner chunks in all)" in text
    assert "No. bytes          : 2048 (2.0 KiB)" in text
    assert any(line.startswith("Storage ratio      : ") for line in text)
    assert any(line.startswith("Codecs             : sharding_indexed(chunk_shape=[4, 4], "
                               "codecs=[bytes(endian='little'), gzip(level=1)]")
               for line in text)
    crc = zstores_cmd("info", v3_url, "crc").out.splitlines()
    assert "Chunks initialized : 4/4" in crc


def test_info_of_a_group_without_subgroups_prints_no_empty_line(v3_url: str) -> None:
    shown = zstores_cmd("info", v3_url, "empty")
    assert shown.code == 0
    assert shown.out.splitlines() == [
        "Name        : /empty", "Type        : zarr v3 group",
        f"Store type  : {shown.out.split('Store type  : ')[1].splitlines()[0]}",
        "No. members : 0", "No. arrays  : 0", "No. groups  : 0"]
    root = zstores_cmd("info", v3_url).out.splitlines()
    assert "Groups      : empty" in root and "No. arrays  : 7" in root
    assert all(line.rstrip() == line and not line.endswith(":") for line in root)


# -------------------------------------------------------- long problem lists
def test_verify_of_many_non_zarr_keys_prints_a_summary(tmp_path: Path) -> None:
    url = file_url("sqlite", tmp_path, "plain")
    with zstores.open_store(url, mode="w") as store:
        store.setitems({f"files/{i:05d}.txt": b"x" for i in range(20_000)})
    text = zstores_cmd("verify", url)
    assert text.code == 1 and text.err == ""
    lines = text.out.splitlines()
    assert len(lines) == 23
    assert lines[0] == "files/00000.txt: belongs to no array"
    assert lines[20] == ("... and 19,980 more (20,000 stray_key in all; --json lists every "
                         "one)")
    assert lines[-1] == "20,000 problems found"
    everything = zstores_cmd("verify", url, "--json").json()
    assert len(everything["problems"]) == 20_000


# --------------------------------------------------------------------- cp
def test_cp_refuses_to_mix_formats_unless_told(v3_folder: Path, tmp_path: Path) -> None:
    v2 = file_url("sqlite", tmp_path, "v2")
    write_sample(v2)
    v3 = file_url("lmdb", tmp_path, "v3")
    assert zstores_cmd("cp", v3_folder, v3).code == 0
    before_v2, before_v3 = contents(v2), contents(v3)
    for src, dst, ours, theirs in ((v2, v3, "v2", "v3"), (v3, v2, "v3", "v2")):
        for mode in ("skip", "error"):
            refused = zstores_cmd("cp", src, dst, "--if-exists", mode)
            assert (refused.code, refused.out) == (1, "")
            assert len(refused.err_lines) == 1
            assert refused.err_lines[0].startswith(
                f"zstores cp: error: refusing to copy: SRC holds zarr {ours} metadata (first: ")
            assert f"but DST already holds zarr {theirs} metadata" in refused.err_lines[0]
            assert refused.err_lines[0].endswith(
                "the merged hierarchy would mix formats zarr cannot read; nothing was copied "
                "(--if-exists overwrite copies anyway)")
    assert (contents(v2), contents(v3)) == (before_v2, before_v3)  # nothing written
    # into a group below the root: the v3 root group above it counts too
    sub = zstores_cmd("cp", v2, v3, "g")
    assert sub.code == 1 and "already holds zarr v3 metadata (first: '/')" in sub.err
    forced = zstores_cmd("cp", v2, v3, "--if-exists", "overwrite")
    assert forced.code == 0, forced.err
    assert contents(v3) == {**before_v3, **before_v2}


def test_cp_refuses_a_different_array_at_the_same_path(v3_folder: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    root = zarr.open_group(zarr.storage.LocalStore(str(other)), mode="w", zarr_format=3)
    root.create_array("zstd", shape=(40,), chunks=(8,), dtype="<i8")[:] = 5
    root.create_array("empty", shape=(3,), dtype="u1")  # an array where v3_folder has a group
    dst = file_url("sqlite", tmp_path, "dst")
    assert zstores_cmd("cp", v3_folder, dst).code == 0
    before = contents(dst)
    refused = zstores_cmd("cp", other, dst)
    assert refused.code == 1 and refused.err_lines == [
        ("zstores cp: error: refusing to copy: empty is a v3 array in SRC but a v3 group in "
        "DST; nothing was copied (--if-exists overwrite copies anyway)")]
    shutil.rmtree(other / "empty")
    refused = zstores_cmd("cp", other, dst)
    assert refused.code == 1 and refused.err_lines == [
        ("zstores cp: error: refusing to copy: a different array at zstd (shape (40,) in SRC, "
        "(20,) in DST): its chunks would be read with the wrong metadata; nothing was copied "
        "(--if-exists overwrite copies anyway)")]
    assert contents(dst) == before
    forced = zstores_cmd("cp", other, dst, "--if-exists", "overwrite")
    assert forced.code == 0
    assert json.loads(contents(dst)["zstd/zarr.json"])["shape"] == [40]


def test_verify_v3_strings_and_an_array_zarr_cannot_open(tmp_path: Path) -> None:
    path = tmp_path / "mixed"
    root = zarr.open_group(zarr.storage.LocalStore(str(path)), mode="w", zarr_format=3)
    root.create_array("words", shape=(6,), chunks=(3,), dtype=str)[:] = \
        ["a", "bb", "ccc", "", "ü", "xyz"]
    root.create_array("odd", shape=(4,), chunks=(2,), dtype="<i2")[:] = 1
    meta = json.loads((path / "odd/zarr.json").read_text())
    meta["codecs"].append({"name": "no-such-codec"})
    (path / "odd/zarr.json").write_text(json.dumps(meta))
    (path / "words/c/1").write_bytes((path / "words/c/1").read_bytes()[:-4])
    report = zstores_cmd("verify", path, "--json")
    assert report.code == 1
    problems = {p["key"]: (p["kind"], p["message"]) for p in report.json()["problems"]}
    assert problems.keys() == {"odd/zarr.json", "words/c/1"}
    assert problems["odd/zarr.json"][0] == "bad_metadata"
    assert problems["odd/zarr.json"][1].startswith("zarr-python cannot open it: ")
    assert "no-such-codec" in problems["odd/zarr.json"][1]
    assert problems["words/c/1"][0] == "decode_error"
    assert report.json()["chunks_ok"] == 1  # the good chunk of words; odd's are not judged
