"""``zstores`` never reports success on data that is not right (issue 26).

Each case runs the command as a user types it (a subprocess, no terminal)
and checks its exit status and the exact first line it prints.
"""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import zlib
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr

import zstores
from zstores.cli._common import INCOMPLETE_COPY
from zstores.cli._inflate import inflates_past

from cli_helpers import COMMAND, write_sample, zstores_cmd

BOMB = 256 << 20  # bytes a bomb inflates to: far above what verify may hold
RSS_LIMIT = 200 << 20  # verify of a bomb stays below this (it starts at about 60 MiB)


def _first(text: str) -> str:
    return text.splitlines()[0] if text else ""


# ------------------------------------------------ stale consolidated metadata
def test_verify_reports_stale_v3_consolidated_metadata(tmp_path: Path) -> None:
    url = str(tmp_path / "c.zarr")
    group = zarr.open_group(zstores.zarr_store(zstores.DirectoryStore(url)), mode="w",
                            zarr_format=3)
    group.create_array("a", shape=(4,), chunks=(2,), dtype="i4")
    with pytest.warns(UserWarning, match="Consolidated metadata"):
        zarr.consolidate_metadata(zstores.zarr_store(zstores.DirectoryStore(url)))
    clean = zstores_cmd("verify", url)
    assert (clean.code, clean.out.splitlines()[-1]) == (0, "no problems found")
    group = zarr.open_group(zstores.zarr_store(zstores.DirectoryStore(url)), mode="a",
                            use_consolidated=False)
    group.create_array("b", shape=(4,), chunks=(2,), dtype="i4")
    stale = zstores_cmd("verify", url)
    assert stale.code == 1
    assert _first(stale.out) == ("zarr.json: stale: documents 1 not in it (first: "
                                 "b/zarr.json); run zstores consolidate")


# -------------------------------------------------------------------- spec v1
def test_verify_recognises_spec_v1_and_says_to_migrate(tmp_path: Path) -> None:
    store = zstores.DirectoryStore(str(tmp_path / "old"))
    store["meta"] = json.dumps({"zarr_format": 1, "shape": [4], "chunks": [2], "dtype": "<i4",
                                "compression": "zlib", "compression_opts": 1,
                                "fill_value": 0, "order": "C"}).encode()
    store["attrs"] = b"{}"
    store["0"] = zlib.compress(np.arange(2, dtype="<i4").tobytes())
    found = zstores_cmd("verify", store.path)
    assert found.code == 1
    assert _first(found.out) == ("meta: a Zarr spec v1 array, which zarr-python 2 and 3 "
                                 "cannot read; run `zstores migrate` on it to convert it to "
                                 "spec v2")
    assert found.out.splitlines()[-1] == "1 problem found"  # no stray-key reports


# --------------------------------------------------------- decompression bombs
def _zlib_bomb(size: int, wbits: int = 15) -> bytes:
    """``size`` zero bytes compressed, never all held in memory at once."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, wbits)
    block = bytes(1 << 22)
    return b"".join([compressor.compress(block) for _ in range(size // len(block))]
                    + [compressor.flush()])


def _verify_with_peak_rss(url: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run ``zstores verify URL`` from a parent of its own: its children's peak RSS is verify's."""
    parent = ("import resource, subprocess, sys\n"
              "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
              "sys.stderr.write(done.stderr)\n"
              "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
              "print(done.stdout, end='')\n"
              "sys.exit(done.returncode)\n")
    done = subprocess.run([sys.executable, "-c", parent, *COMMAND, "verify", url],
                          capture_output=True, text=True, check=False, timeout=300)
    peak, _, out = done.stdout.partition("\n")
    return subprocess.CompletedProcess(done.args, done.returncode, out, done.stderr), \
        int(peak) * 1024


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_verify_reports_a_bomb_without_inflating_it(tmp_path: Path, zarr_format: int) -> None:
    url = str(tmp_path / "bomb.zarr")
    store = zstores.DirectoryStore(url)
    if zarr_format == 2:
        zstores.init_array(store, shape=(800,), chunks=(800,), dtype="u1",
                           compressor=numcodecs.Zlib(), fill_value=0)
        key, bomb = "0", _zlib_bomb(BOMB)
    else:
        zarr.create_array(zstores.zarr_store(store), shape=(800,), chunks=(800,), dtype="u1",
                          compressors=zarr.codecs.GzipCodec())
        key, bomb = "c/0", _zlib_bomb(BOMB, wbits=31)
    store[key] = bomb
    done, peak = _verify_with_peak_rss(url)
    assert done.returncode == 1, done.stderr
    expected = (f"{key}: inflates to more than 800 bytes; a chunk of shape (800,) and dtype "
                "uint8 is 800: not decoded (a decompression bomb, or a value of another array)"
                if zarr_format == 2 else
                f"{key}: gzip inflates it to more than {2 * 800 + 65536:,} bytes, past what a "
                "chunk of this array can hold: not decoded (a decompression bomb, or a value "
                "of another array)")
    assert _first(done.stdout) == expected
    assert peak < RSS_LIMIT, f"verify peaked at {peak >> 20} MiB"


def test_verify_trusts_no_blosc_header_past_the_chunk_size(tmp_path: Path) -> None:
    store = zstores.DirectoryStore(str(tmp_path / "b.zarr"))
    blosc = numcodecs.Blosc(cname="lz4")
    zstores.init_array(store, shape=(100,), chunks=(100,), dtype="u1", compressor=blosc,
                       fill_value=0)
    chunk = bytearray(blosc.encode(np.arange(100, dtype="u1")))
    chunk[4:8] = (1 << 30).to_bytes(4, "little")  # says: 1 GiB once decompressed
    store["0"] = bytes(chunk)
    done = zstores_cmd("verify", store.path)
    assert done.code == 1
    assert _first(done.out).startswith("0: inflates to more than 100 bytes; a chunk of shape")


@pytest.mark.parametrize("codec", ["zstd", "lz4", "bz2", "lzma", "gzip", "blosc"])
def test_inflates_past_bounds_every_compressor_that_can_be_asked(codec: str) -> None:
    encoded = numcodecs.get_codec({"id": codec}).encode(bytes(1 << 20))
    assert inflates_past(codec, encoded, 800) > 800
    assert inflates_past(codec, encoded, 1 << 20) is None  # exactly its size is fine


def test_inflates_past_stops_early_on_streams() -> None:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as stream:
        stream.write(bytes(1 << 20))
    assert 800 < inflates_past("numcodecs.gzip", buffer.getvalue(), 800) <= 800 + (1 << 16)


# ---------------------------------------------------------- unfinished copies
def test_a_failed_copy_is_reported_until_it_completes(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), f"sqlite://{tmp_path / 'dst.sqlite'}"
    written = write_sample(src)
    with zstores.open_store(dst, mode="w") as store:
        store["counts/0"] = b"another value"  # a conflict: skip mode leaves it, exit 1
    failed = zstores_cmd("cp", src, dst)
    assert failed.code == 1
    marker = (f"an unfinished copy: `zstores cp {src!r}` into this store was interrupted or "
              "failed; run it again to finish it")
    checked = zstores_cmd("verify", dst)
    assert (checked.code, _first(checked.out)) == (1, f"{INCOMPLETE_COPY}: {marker}")
    listed = zstores_cmd("ls", dst)
    assert (listed.code, listed.out.split(), listed.err) == (
        0, ["counts", "(10,)", "int16", "g/"], f"zstores ls: warning: {marker}\n")
    described = zstores_cmd("info", dst)
    assert described.code == 1 and f"{INCOMPLETE_COPY}: {marker}" in described.out
    finished = zstores_cmd("cp", src, dst, "--if-exists", "overwrite")
    assert finished.code == 0
    with zstores.open_store(dst, mode="r") as store:
        assert INCOMPLETE_COPY not in store and {k: bytes(store[k]) for k in store} == written
    against = zstores_cmd("verify", dst, "--against", src)
    assert (against.code, against.out.splitlines()[-1]) == (0, "no problems found")
    assert f"; {len(written)} keys compared with the source" in against.out


def test_verify_against_names_every_key_that_differs(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    write_sample(src)
    assert zstores_cmd("cp", src, dst).code == 0
    with zstores.open_store(dst, mode="r+") as store:
        store["counts/0"] = store["counts/1"]  # decodes fine: only a comparison finds it
        del store["g/temp/0.0"]  # reads as the fill value: only a comparison finds it
    found = zstores_cmd("verify", dst, "--against", src, "--json").json()
    assert {(p["key"], p["kind"]) for p in found["problems"]} == {
        ("counts/0", "differs_from_source"), ("g/temp/0.0", "missing_from_copy")}
    text = zstores_cmd("verify", dst, "--against", src)
    assert (text.code, _first(text.out)) == (1, f"counts/0: holds other bytes than in {src}")
