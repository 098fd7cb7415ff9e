"""``zstores`` never reports success on data that is not right (issue 26).

Each case runs the command as a user types it (a subprocess, no terminal)
and checks its exit status and the exact first line it prints.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import pty
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import zstores
from zstores.cli import main as cli_main
from zstores.cli._common import INCOMPLETE_COPY
from zstores.cli._inflate import inflates_past
from zstores.cli._output import human_size, plural, visible
from zstores.metadata import METADATA_NAMES

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


# ------------------------------------------------------------ terminal safety
_NAMES = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="/\\\x00"),
                 min_size=1, max_size=12).filter(
    lambda name: name not in (".", "..", ".zstores", "meta", *METADATA_NAMES))


def _run_in_process(*argv: str) -> tuple[int, list[str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(list(argv))
    return code, out.getvalue().split("\n")[:-1]  # only "\n" ends a line on a terminal


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(_NAMES, min_size=1, max_size=6, unique=True))
def test_every_printed_line_is_one_key_whatever_its_name(names: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite://{folder}/keys.sqlite"
        with zstores.open_store(url, mode="w") as store:
            store.setitems({name: b"x" for name in names})
            keys = sorted(store)
        shown = [visible(key) for key in keys]
        width = max(len(name) for name in shown)
        assert _run_in_process("ls", url) == (0, [f"{name.ljust(width)}  no zarr metadata"
                                                   for name in shown])
        count_width = len(plural(len(keys), "key"))
        code, lines = _run_in_process("du", url)
        size_width = len(human_size(len(keys)))
        assert (code, lines[:-1]) == (0, [f"{'1 B'.rjust(size_width)}  "
                                          f"{'1 key'.ljust(count_width)}  {name}"
                                          for name in shown])
        code, lines = _run_in_process("verify", url)
        assert (code, lines[:-2]) == (1, [f"{name}: belongs to no array" for name in shown])
        assert lines[-1] == f"{plural(len(keys), 'problem')} found"


def test_a_key_cannot_forge_a_line_of_verify_or_ls(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'forged.sqlite'}"
    with zstores.open_store(url, mode="w") as store:
        zstores.init_group(store)
        store["evil\nno problems found\nx"] = b"1"
        store["\x1b[2Jwiped"] = b"2"
    checked = zstores_cmd("verify", url)
    assert checked.code == 1
    assert checked.out.splitlines()[:2] == ["\\x1b[2Jwiped: belongs to no array",
                                            "evil\\nno problems found\\nx: belongs to no array"]
    assert "no problems found" not in checked.out.splitlines()
    listed = zstores_cmd("ls", url, "-r")
    assert (listed.code, listed.out.splitlines()) == (0, [
        "/", "├── \\x1b[2Jwiped  no zarr metadata",
        "└── evil\\nno problems found\\nx  no zarr metadata"])
    as_json = zstores_cmd("ls", url, "--json").json()  # JSON keeps the names exact
    assert [entry["name"] for entry in as_json["entries"]] == ["\x1b[2Jwiped",
                                                               "evil\nno problems found\nx"]


# ------------------------------------------------- nothing created by accident
def test_cp_that_fails_before_copying_creates_no_destination(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), tmp_path / "copy2.lmdb"
    write_sample(src)
    done = zstores_cmd("cp", src, str(dst), "nosuch")
    assert (done.code, done.err) == (1, f"zstores cp: error: nothing at 'nosuch' in {src}\n")
    missing = zstores_cmd("cp", str(tmp_path / "nosuch.sqlite"), str(dst))
    assert missing.code == 1 and missing.err.startswith(
        f"zstores cp: error: no store at {tmp_path / 'nosuch.sqlite'}")
    assert not dst.exists()


def _rm_on_a_terminal(*args: str, answer: str) -> subprocess.CompletedProcess[str]:
    """``zstores rm ARGS`` with a terminal as its standard input, answering ``answer``."""
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen([*COMMAND, "rm", *args], stdin=follower, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.close(follower)
        os.write(leader, answer.encode() + b"\n")  # the terminal holds it until rm reads
        out, err = process.communicate(timeout=120)
    finally:
        os.close(leader)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_rm_says_what_will_go_and_asks_on_a_terminal(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'del.sqlite'}"
    written = write_sample(url)
    dry = zstores_cmd("rm", url, "g", "--dry-run")
    assert dry.code == 0 and dry.out.startswith("would remove 19 keys (")
    assert dry.out.endswith(" at g; nothing removed (--dry-run)\n")
    refused = _rm_on_a_terminal(url, "g", answer="n")
    assert (refused.returncode, refused.stderr) == (1, (
        f"remove {dry.out[len('would remove '):].split(';')[0]} from {url}? [y/N] "
        "zstores rm: error: nothing removed\n"))
    assert set(zstores.open_store(url, mode="r")) == set(written)
    accepted = _rm_on_a_terminal(url, "g", answer="y")
    assert accepted.returncode == 0 and accepted.stdout.startswith("removed 19 keys (")
    with zstores.open_store(url, mode="r") as store:
        assert not any(key.startswith("g/") for key in store)


# -------------------------------------------------------------------- migrate
def _zarray(**fields: object) -> bytes:
    document = {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<i4",
                "compressor": None, "fill_value": 0, "order": "C", "filters": None}
    document.update(fields)
    return json.dumps(document).encode()


def test_migrate_refuses_broken_documents_and_skips_them_only_when_asked(
        tmp_path: Path) -> None:
    url = str(tmp_path / "m.zarr")
    store = zstores.DirectoryStore(url)
    zstores.init_group(store)
    for name in ("a", "b", "c"):
        zstores.init_array(store, shape=(6,), chunks=(3,), dtype="<f8", path=name,
                           compressor=numcodecs.Zlib())
    store["bad/.zarray"] = _zarray(chunks=[0])
    store["worse/.zarray"] = _zarray(compressor="zlib")
    refused = zstores_cmd("migrate", url, "--to", "3")
    assert refused.code == 1
    worse = refused.out.splitlines()[-1]
    assert worse.startswith("worse/.zarray: breaks the spec: ") and "'zlib'" in worse
    assert refused.out.splitlines() == [
        "bad/.zarray: breaks the spec: 'chunks' entries must be >= 1, not [0]",
        worse]
    assert refused.err == ("zstores migrate: error: 2 metadata documents break the Zarr "
                           "specification; nothing was written (zstores verify shows them; "
                           "--skip-broken migrates the rest)\n")
    assert not [key for key in store if key.endswith("zarr.json")]
    skipped = zstores_cmd("migrate", url, "--to", "3", "--skip-broken")
    assert skipped.code == 0
    assert _first(skipped.out).startswith("skipped bad/.zarray: breaks the spec")
    group = zarr.open_group(zstores.zarr_store(zstores.DirectoryStore(url), mode="r"),
                            mode="r", zarr_format=3)
    assert sorted(name for name, _ in group.arrays()) == ["a", "b", "c"]
    for name in ("a", "b", "c"):  # every migrated array opens and reads in zarr-python 3
        assert zarr.open_array(group.store, path=name, mode="r")[:].tolist() == [0.0] * 6


def test_migrate_v1_checks_first_and_has_a_dry_run(tmp_path: Path) -> None:
    store = zstores.DirectoryStore(str(tmp_path / "old"))
    meta = {"zarr_format": 1, "shape": [4], "chunks": [2], "dtype": "<i4",
            "compression": "zlib", "compression_opts": 1, "fill_value": 0, "order": "C"}
    store["meta"] = json.dumps({**meta, "shape": [-100]}).encode()
    refused = zstores_cmd("migrate", store.path)
    assert refused.code == 1 and refused.err.startswith(
        "zstores migrate: error: 'meta' would become a .zarray that breaks the spec: ")
    store["meta"] = json.dumps(meta).encode()
    dry = zstores_cmd("migrate", store.path, "--dry-run")
    assert (dry.code, _first(dry.out)) == (0, "would write .zarray (237 bytes)")
    assert dry.out.splitlines()[-1] == "would remove meta" and sorted(store) == ["meta"]
    done = zstores_cmd("migrate", store.path)
    assert (done.code, sorted(store)) == (0, [".zarray"])
    assert zarr.open_array(zstores.zarr_store(store, mode="r"), mode="r", zarr_format=2).shape \
        == (4,)


_FIELD_VALUES = {
    "shape": [[4], [0], [-5], [4, 4], "x", [4.5], []],
    "chunks": [[2], [0], [-1], [2, 2], [5], None],
    "dtype": ["<i4", "|u1", "<f8", "nonsense", 5, "|O", "<U3"],
    "fill_value": [0, None, "abc", 1000, "NaN", 1.5, [1]],
    "compressor": [None, {"id": "zlib", "level": 1}, "zlib", {"id": "nosuch"}, {}],
    "order": ["C", "F", "x"],
    "filters": [None, [], "x", [{"id": "delta", "dtype": "<i4"}]],
    "dimension_separator": [".", "/", "x", 3],
    "zarr_format": [2, 3, "2"],
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.fixed_dictionaries({}, optional={
    name: st.sampled_from(values) for name, values in _FIELD_VALUES.items()}))
def test_malformed_zarray_never_gives_a_traceback_or_a_document_verify_rejects(
        changes: dict[str, object]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = zstores.DirectoryStore(folder)
        zstores.init_group(store)
        store["x/.zarray"] = _zarray(**changes)
        for command in (["verify", folder], ["info", folder, "x"]):
            code, _ = _run_in_process(*command)
            assert code in (0, 1)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code, _ = _run_in_process("migrate", folder, "--to", "3")
        assert code in (0, 1) and "Error: " not in err.getvalue(), err.getvalue()
        if code == 0:  # what it wrote, verify accepts
            del store["x/.zarray"], store[".zgroup"]
            verdict, lines = _run_in_process("verify", folder, "--json")
            problems = json.loads("\n".join(lines))["problems"]
            assert verdict == 0, problems


# ----------------------------------------------------------------------- info
@pytest.mark.parametrize(("grid", "expected"), [
    ({"name": "regular", "configuration": {"chunk_shape": [-1]}},
     "'chunk_shape' must hold integers >= 1, not [-1]"),
    ({"name": "irregular"}, "chunk grid 'irregular' is not read (only 'regular')")])
def test_info_reports_a_broken_v3_document_instead_of_its_values(
        tmp_path: Path, grid: dict[str, object], expected: str) -> None:
    store = zstores.DirectoryStore(str(tmp_path / "s"))
    store["t/zarr.json"] = json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": [100], "data_type": "uint8",
        "chunk_grid": grid, "chunk_key_encoding": {"name": "default"},
        "codecs": [{"name": "bytes"}], "fill_value": 0}).encode()
    done = zstores_cmd("info", store.path, "t")
    assert (done.code, done.out, done.err) == (
        1, "", f"zstores info: error: t: unreadable metadata: {expected}\n")


def test_info_of_a_chunk_key_shows_its_size_and_array(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'exp.sqlite'}"
    written = write_sample(url)
    done = zstores_cmd("info", url, "g/temp/1.2")
    assert (done.code, done.out.splitlines()) == (0, [
        "Name             : /g/temp/1.2", "Type             : chunk",
        "Array            : /g/temp", "Store type       : SQLiteStore",
        f"No. bytes stored : {len(written['g/temp/1.2'])}"])


# ---------------------------------------------------------------------- doors
def test_cp_takes_its_path_after_options(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "weather.sqlite"), str(tmp_path / "weather.zip")
    write_sample(src)
    done = zstores_cmd("cp", src, dst, "--if-exists", "overwrite", "g/temp")
    assert done.code == 0 and done.out.startswith("copied 17 keys (")
    extra = zstores_cmd("cp", src, dst, "--jobs", "2", "g", "more")
    assert (extra.code, extra.err) == (
        2, "zstores: error: unrecognized arguments: g more (see zstores --help)\n")


def test_a_key_the_destination_refuses_is_one_short_line_and_exit_1(tmp_path: Path) -> None:
    src = f"sqlite://{tmp_path / 'long.sqlite'}"
    with zstores.open_store(src, mode="w") as store:
        store["a/" + "x" * 400] = b"1"
    done = zstores_cmd("cp", src, str(tmp_path / "folder"))
    assert done.code == 1 and len(done.err_lines) == 1 and len(done.err_lines[0]) < 300
    said = "folder refuses a key of SRC: invalid key 'a/xxxxxxxxx"
    assert done.err.startswith("zstores cp: error: ") and said in done.err
    assert "may be at most 255 bytes" in done.err


def test_a_warning_is_one_line_without_a_source_path(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "s.sqlite"), tmp_path / "c.zip"
    write_sample(src)
    assert zstores_cmd("cp", src, str(dst)).code == 0
    with dst.open("ab") as archive:  # what a copy killed before close() leaves
        archive.write(b"x" * 23)
    done = zstores_cmd("cp", src, str(dst), "--if-exists", "overwrite")
    assert done.code == 0
    assert done.err_lines == [
        (f"zstores: warning: ZipStore({str(dst)!r}, mode='a'): 23 bytes after the archive's "
        "last central directory are ignored (a writer stopped before flush() or close(), or "
        "the file is damaged); the archive reads as that directory says")]


@pytest.fixture
def read_only_copy(tmp_path: Path):
    """A sample folder store, and the path of the same store on a read-only bind mount."""
    import shutil

    src, ro = tmp_path / "src", tmp_path / "ro"
    ro.mkdir()
    write_sample(str(src / "dir"))
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("needs root and mount(8) for a read-only bind mount")
    made = subprocess.run(["mount", "--bind", str(src), str(ro)], check=False,
                          capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"bind mount refused: {made.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True,
                       capture_output=True)
        yield ro / "dir"
    finally:
        subprocess.run(["umount", "--lazy", str(ro)], check=True, capture_output=True)


def test_a_read_only_error_names_the_whole_store_and_path(read_only_copy: Path) -> None:
    done = zstores_cmd("rm", str(read_only_copy), "g", "--yes")
    assert (done.code, done.err) == (1, (f"zstores rm: error: DirectoryStore("
                                        f"{str(read_only_copy)!r}, mode='r+'): cannot remove "
                                        "'g': Read-only file system\n"))
    done = zstores_cmd("rm", str(read_only_copy), "g/.zattrs", "--yes")
    assert (done.code, done.err) == (1, (f"zstores rm: error: DirectoryStore("
                                        f"{str(read_only_copy)!r}, mode='r+'): cannot delete "
                                        "key 'g/.zattrs': Read-only file system\n"))


def test_a_read_only_folder_store_names_the_whole_path_of_the_file(read_only_copy: Path) -> None:
    """The OS names a file relative to an open folder ('0'); the store's error names it whole."""
    import errno

    store = zstores.DirectoryStore(read_only_copy, mode="r+")
    root = str(read_only_copy)
    with pytest.raises(OSError) as removing:
        store.rmdir("g")
    failed = removing.value
    assert failed.errno == errno.EROFS and failed.filename.startswith(f"{root}/g/")
    assert os.path.relpath(failed.filename, root) in store  # a real key's file, named whole
    assert str(failed) == (f"[Errno 30] {store!r}: cannot remove 'g': Read-only file system: "
                           f"{failed.filename!r}")
    with pytest.raises(OSError) as renaming:
        store.rename("g", "h")
    assert (renaming.value.errno, renaming.value.filename, renaming.value.filename2) == (
        errno.EROFS, f"{root}/g", f"{root}/h")
    assert str(renaming.value).startswith(f"[Errno 30] {store!r}: cannot rename 'g' to 'h': ")
    with pytest.raises(OSError) as clearing:
        zstores.DirectoryStore(read_only_copy, mode="w")  # "w" clears the folder
    assert clearing.value.filename.startswith(f"{root}/")
    assert ": cannot clear the store: Read-only file system: " in str(clearing.value)
    assert set(store) == set(zstores.DirectoryStore(read_only_copy, mode="r"))


def test_du_shows_zstores_own_records_apart_from_the_data(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'du.sqlite'}"
    write_sample(url)
    plain = zstores_cmd("du", url, "--bytes", "--json").json()
    with zstores.open_store(url) as store:
        store[INCOMPLETE_COPY] = b'{"src": "a.zip"}'  # 16 bytes
    done = zstores_cmd("du", url, "--bytes")
    assert done.code == 0
    size_width, count_width = len(str(plain["bytes"])), len(plural(plain["keys"], "key"))
    assert done.out.splitlines()[-2:] == [
        f"{plain['bytes']}  {plural(plain['keys'], 'key')}  / (total)",
        (f"{'16'.rjust(size_width)}  {'1 key'.ljust(count_width)}  "
        ".zstores/ (zstores' own records, not in the total)")]
    as_json = zstores_cmd("du", url, "--json").json()
    assert as_json["children"] == plain["children"]
    assert (as_json["bytes"], as_json["keys"]) == (plain["bytes"], plain["keys"])
    assert as_json["reserved"] == {"path": ".zstores", "bytes": 16, "keys": 1}


# -------------------------------------------------------- what users expect
@pytest.mark.parametrize(("argv", "expected"), [
    (["lss", "x"], ("zstores: error: argument COMMAND: invalid choice: 'lss' (choose from 'ls', "
     "'info', 'attrs', 'cat', 'du', 'cp', 'verify', 'rm', 'consolidate', 'migrate'); "
     "did you mean 'ls'? (see zstores --help)")),
    (["ls", "x", "--jsno"], ("zstores: error: unrecognized arguments: --jsno; did you mean "
     "'--json'? (see zstores --help)")),
    (["cp", "a", "b", "--if-exists", "overwrit"], ("zstores cp: error: argument --if-exists: "
     "invalid choice: 'overwrit' (choose from 'skip', 'overwrite', 'error'); did you mean "
     "'overwrite'? (see zstores cp --help)")),
    (["frob"], ("zstores: error: argument COMMAND: invalid choice: 'frob' (choose from 'ls', "
     "'info', 'attrs', 'cat', 'du', 'cp', 'verify', 'rm', 'consolidate', 'migrate') "
     "(see zstores --help)")),
])
def test_a_mistyped_command_or_option_names_the_nearest(argv: list[str], expected: str) -> None:
    done = zstores_cmd(*argv)
    assert (done.code, done.out, done.err) == (2, "", expected + "\n")


def test_zfuse_names_the_nearest_command_and_option() -> None:
    zfuse = [str(Path(COMMAND[0]).with_name("zfuse"))] if len(COMMAND) == 1 else [
        sys.executable, "-m", "zfuse"]
    for argv, expected in [
            (["moutn", "a", "b"], ("zfuse: error: argument COMMAND: invalid choice: 'moutn' "
             "(choose from 'mount', 'unmount', 'list'); did you mean 'mount'? "
             "(see zfuse --help)")),
            (["list", "--jsn"], ("zfuse: error: unrecognized arguments: --jsn; did you mean "
             "'--json'? (see zfuse --help)"))]:
        done = subprocess.run([*zfuse, *argv], capture_output=True, text=True, check=False,
                              timeout=120)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", expected + "\n")


def test_every_subcommand_has_json() -> None:
    from zstores.cli import build_parser

    subcommands = next(action for action in build_parser()._actions
                       if isinstance(action, __import__("argparse")._SubParsersAction))
    missing = [name for name, parser in subcommands.choices.items()
               if "--json" not in parser._option_string_actions]
    assert missing == []


def test_json_of_cp_rm_consolidate_and_migrate_is_exact(tmp_path: Path) -> None:
    src, dst = f"sqlite://{tmp_path / 's.sqlite'}", str(tmp_path / "copy")
    written = write_sample(src)
    total = sum(map(len, written.values()))
    copied = zstores_cmd("cp", src, dst, "--json")
    assert (copied.code, copied.err) == (0, "")
    assert copied.json() == {
        "src": src, "dst": dst, "path": "", "keys": len(written),
        "copied": {"keys": len(written), "bytes": total}, "skipped": {"keys": 0, "bytes": 0},
        "verified": {"keys": len(written), "bytes": total}, "vanished": 0,
        "complete": True, "problems": []}
    with zstores.open_store(dst) as store:
        store["g/.zattrs"] = b'{"units": "C"}'
    again = zstores_cmd("cp", src, dst, "g", "--json")
    assert again.code == 1 and again.err == ""
    assert again.json()["problems"] == [{"key": "g/.zattrs", "problem": (
        "exists in DST with a different value; left alone (--if-exists overwrite replaces it)")}]
    consolidated = zstores_cmd("consolidate", dst, "--json")
    assert (consolidated.code, consolidated.json()) == (0, {"url": dst, "written": [
        {"key": ".zmetadata", "zarr_format": 2, "documents": 5}]})
    planned = zstores_cmd("migrate", dst, "--to", "3", "--dry-run", "--json")
    plan = planned.json()
    assert planned.code == 0 and sorted(plan["written"]) == [
        "counts/zarr.json", "g/temp/zarr.json", "g/zarr.json", "zarr.json"]
    assert plan["written"]["g/zarr.json"] == {
        "zarr_format": 3, "node_type": "group", "attributes": {"units": "C"}}
    assert (plan["arrays"], plan["groups"], plan["removed"]) == (2, 2, [])
    size = sum(len(value) for key, value in written.items() if key.startswith("g/")) \
        - len(written["g/.zattrs"]) + len(b'{"units": "C"}')
    for flag, removed in (["--dry-run"], False), ([], True):
        done = zstores_cmd("rm", dst, "g", "--json", *flag)
        assert (done.code, done.json()) == (0, {"url": dst, "path": "g",
                                                "keys": 19, "bytes": size,
                                                "removed": removed})


def _with_a_terminal(*argv: str, stream: str = "stdout") -> tuple[int, str, str]:
    """``zstores ARGV`` with ``stream`` (stdout or stderr) a terminal: status, that, the other.

    The terminal's text comes back with its line ends as written (``\\r\\n``
    turned back into ``\\n``).
    """
    import fcntl
    import struct
    import termios

    leader, follower = pty.openpty()
    # 24 rows of 80 columns, as a terminal window has (a new pty has 0 columns,
    # in which tqdm draws nothing)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, stream: follower}
    try:
        process = subprocess.Popen([*COMMAND, *argv], stdin=subprocess.DEVNULL, **streams)
        os.close(follower)
        seen = bytearray()
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the command closed the terminal (it exited)
                break
            if not data:
                break
            seen += data
        out, err = process.communicate(timeout=300)
    finally:
        os.close(leader)
    other = (err if stream == "stdout" else out).decode()
    return process.returncode, seen.decode().replace("\r\n", "\n"), other


def test_cat_writes_bytes_exactly_to_a_pipe_and_escapes_them_on_a_terminal(
        tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'cat.sqlite'}"
    with zstores.open_store(url, mode="w") as store:
        zstores.init_group(store)
        zstores.init_group(store, path="g")
        store["note"] = b"hello\x1b[2J\nsecond\n"
        store["g/0.0"] = b"\x00\xff\xfe"
    piped = subprocess.run([*COMMAND, "cat", url, "g/0.0"], capture_output=True, check=False,
                           timeout=300)
    assert (piped.returncode, piped.stdout, piped.stderr) == (0, b"\x00\xff\xfe", b"")
    assert _with_a_terminal("cat", url, "note") == (0, "hello\\x1b[2J\nsecond\n", "")
    assert _with_a_terminal("cat", url, "g/0.0") == (1, "", (
        "zstores cat: error: g/0.0 holds 3 B of binary data, not shown on a terminal; "
        "redirect it: zstores cat URL KEY > FILE\n"))
    node = zstores_cmd("cat", url, "g")  # a group: its metadata document
    assert (node.code, node.out) == (0, '{\n    "zarr_format": 2\n}')
    assert zstores_cmd("cat", url, "/").out == node.out  # the root's
    assert zstores_cmd("cat", url, "g", "--json").json() == {"zarr_format": 2}
    missing = zstores_cmd("cat", url, "nope")
    assert (missing.code, missing.err) == (
        1, f"zstores cat: error: no key and no array or group at 'nope' in {url}\n")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_attrs_prints_a_nodes_attributes_in_either_format(tmp_path: Path,
                                                         zarr_format: int) -> None:
    folder = str(tmp_path / "attrs")
    group = zarr.open_group(folder, mode="w", zarr_format=zarr_format)
    array = group.create_array("t", shape=(2,), dtype="i1")
    array.attrs.update({"units": "K", "note": "two\nlines \u202e"})
    done = zstores_cmd("attrs", folder, "t")
    assert (done.code, done.out) == (0, 'units: "K"\nnote: "two\\nlines \\u202e"\n')
    exact = zstores_cmd("attrs", folder, "t", "--json")
    assert exact.json() == {"units": "K", "note": "two\nlines \u202e"}
    assert zstores_cmd("attrs", folder).out == "(no attributes)\n"
    missing = zstores_cmd("attrs", folder, "nope")
    assert (missing.code, missing.err) == (
        1, f"zstores attrs: error: no array or group at 'nope' in {folder}\n")


def test_rm_and_du_show_progress_on_a_terminal_only(tmp_path: Path) -> None:
    from zstores.cli.rm import PROGRESS_FROM

    url = f"sqlite://{tmp_path / 'many.sqlite'}"
    count = PROGRESS_FROM + 200
    with zstores.open_store(url, mode="w") as store:
        store.setitems({f"big/{i}": b"x" for i in range(count)} | {"small/a": b"y"})
    code, bar, out = _with_a_terminal("du", url, stream="stderr")
    assert code == 0 and "sizing:" in bar and "/2 " in bar  # redrawn at most 10 times a second
    assert out.splitlines()[-1].endswith(f"{plural(count + 1, 'key')}  / (total)")
    assert zstores_cmd("du", url).err == ""  # not a terminal: no bar
    code, bar, out = _with_a_terminal("rm", url, "big", "--yes", stream="stderr")
    assert code == 0 and "removing:" in bar and f"/{count} " in bar
    assert out == f"removed {plural(count, 'key')} ({human_size(count)}) at big\n"
    with zstores.open_store(url, mode="r") as store:
        assert list(store) == ["small/a"]
    quiet = zstores_cmd("rm", url, "small", "--yes")
    assert (quiet.code, quiet.err) == (0, "")


def test_migrate_and_consolidate_show_progress_on_a_terminal_only(tmp_path: Path) -> None:
    count = 1_200  # two batches of documents
    zarray = _zarray()
    urls = [f"sqlite://{tmp_path / name}.sqlite" for name in ("tty", "pipe")]
    for url in urls:
        with zstores.open_store(url, mode="w") as store:
            store.setitems({".zgroup": b'{"zarr_format": 2}'}
                           | {f"a{index}/.zarray": zarray for index in range(count)})
    tty, pipe = urls
    code, bar, out = _with_a_terminal("migrate", tty, "--to", "3", stream="stderr")
    assert code == 0 and out.endswith("\n")
    for stage in ("listing keys:", "reading metadata:", "writing metadata:"):
        assert stage in bar
    assert f"/{count + 1} " in bar  # the documents read, then written
    code, bar, out = _with_a_terminal("consolidate", tty, stream="stderr")
    # both formats: .zarray and .zgroup documents, then every zarr.json but the root's
    assert code == 0 and "reading metadata:   0%| " in bar
    assert f" 0/{count + 1} " in bar and f" 0/{count} " in bar
    assert out.splitlines() == [
        f"wrote .zmetadata with {plural(count + 1, 'metadata document')}",
        f"wrote zarr.json (consolidated_metadata) with {plural(count, 'metadata document')}"]
    code, bar, _ = _with_a_terminal("migrate", tty, "--to", "3", "--no-progress", stream="stderr")
    assert (code, bar) == (0, "")
    for argv in (["migrate", pipe, "--to", "3"], ["consolidate", pipe]):
        done = zstores_cmd(*argv)
        assert (done.code, done.err) == (0, "")  # not a terminal: no bar
    with zstores.open_store(tty, mode="r") as store, zstores.open_store(pipe, mode="r") as other:
        assert dict(store.items()) == dict(other.items())  # the bar changed nothing written

    v1 = f"sqlite://{tmp_path / 'v1.sqlite'}"
    with zstores.open_store(v1, mode="w") as store:
        store["meta"] = (b'{"zarr_format": 1, "shape": [4], "chunks": [2], "dtype": "<i4", '
                         b'"compression": null, "compression_opts": null, "fill_value": 0, '
                         b'"order": "C"}')
    code, bar, _ = _with_a_terminal("migrate", v1, stream="stderr")
    assert code == 0 and "writing metadata:" in bar and "removing v1 metadata:" in bar


def _zarr_json(**fields: object) -> bytes:
    document: dict[str, object] = {
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "fill_value": 0, "attributes": {}}
    document.update(fields)
    return json.dumps(document).encode()


_V3_FIELD_VALUES = {
    "node_type": ["array", "group", "x", None],
    "shape": [[4], [0], [-100], [4, 4], "x", [4.5]],
    "data_type": ["int32", "uint8", "float64", "nonsense", 5, {"name": "x"}],
    "chunk_grid": [{"name": "regular", "configuration": {"chunk_shape": [-1]}},
                   {"name": "irregular"}, {"name": "regular", "configuration": {}},
                   {"name": "regular", "configuration": {"chunk_shape": [2, 2]}}, "x"],
    "chunk_key_encoding": [{"name": "v2"}, {"name": "nosuch"}, {"name": "default",
                           "configuration": {"separator": "x"}}, None],
    "codecs": [[], [{"name": "bytes"}], [{"name": "nosuch"}], "x",
               [{"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}]],
    "fill_value": [0, None, "abc", 1e300, "NaN", [1]],
    "attributes": [{}, [], "x"],
    "zarr_format": [3, 2, "3"],
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.fixed_dictionaries({}, optional={
    name: st.sampled_from(values) for name, values in _V3_FIELD_VALUES.items()}),
    text=st.one_of(st.none(), st.text(max_size=20)))
def test_malformed_zarr_json_never_gives_a_traceback(changes: dict[str, object],
                                                     text: str | None) -> None:
    """verify, info and migrate on a random broken zarr.json: a verdict, never a traceback.

    ``text``, when drawn, replaces the document with arbitrary text (often
    not JSON at all).  The store also holds a valid v2 ``.zarray`` beside
    it, as an interrupted ``migrate --to 3`` leaves: migrate either refuses
    (exit 1) or writes a ``zarr.json`` verify accepts.
    """
    with tempfile.TemporaryDirectory() as folder:
        store = zstores.DirectoryStore(folder)
        zstores.init_group(store)
        store["x/zarr.json"] = _zarr_json(**changes) if text is None else text.encode()
        for command in (["verify", folder], ["info", folder, "x"], ["ls", folder, "-r"],
                        ["attrs", folder, "x"]):
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                code, _ = _run_in_process(*command)
            assert code in (0, 1) and "Error: " not in err.getvalue(), (command, err.getvalue())
        store["x/.zarray"] = _zarray()
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code, _ = _run_in_process("migrate", folder, "--to", "3")
        assert code in (0, 1) and "Error: " not in err.getvalue(), err.getvalue()
        if code == 0:  # what it wrote, verify accepts
            del store["x/.zarray"], store[".zgroup"]
            verdict, lines = _run_in_process("verify", folder, "--json")
            problems = json.loads("\n".join(lines))["problems"]
            assert verdict == 0, problems
