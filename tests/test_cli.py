"""The ``zstores`` command, run for real in a subprocess, on several backends.

Every store here is written and checked in-process through the zstores API
and handed to the command by URL: directory, zip, LMDB and SQLite always,
Redis and MongoDB on the servers named by ZSTORES_TEST_REDIS_URL and
ZSTORES_TEST_MONGODB_URL (see scripts/services).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numcodecs
import numpy as np
import pytest

import zstores
from zstores.cli._common import INCOMPLETE_COPY
from zstores.cli._output import human_size

from cli_helpers import (
    COMMAND,
    ZLIB,
    contents,
    environment_url,
    file_url,
    remove_store,
    unique_name,
    with_option,
    write_rows,
    write_sample,
    zstores_cmd,
)
from conftest import missing_peer

FILE_BACKENDS = ["directory", "zip", "lmdb", "sqlite"]
SERVER_BACKENDS = {"redis": "ZSTORES_TEST_REDIS_URL", "mongodb": "ZSTORES_TEST_MONGODB_URL"}
SAMPLE_KEYS = 23  # what write_sample writes: 5 metadata documents and 18 chunks


# ----------------------------------------------------------------- fixtures
def _server_base(kind: str) -> str:
    variable = SERVER_BACKENDS[kind]
    url = environment_url(variable)
    if url is None:
        missing_peer(f"{variable} is not set: no {kind} server (see scripts/services)")
    probe = _server_url(kind, url)
    try:
        with zstores.open_store(probe, mode="a") as store:
            len(store)
    except zstores.StoreConnectionError as error:
        missing_peer(f"the {kind} server does not answer: {error}")
    return url


def _server_url(kind: str, base: str) -> str:
    if kind == "redis":
        return with_option(base, "prefix", unique_name())
    if "/" not in base.split("://", 1)[1]:
        base += "/"  # a MongoDB URI needs '/' between the hosts and the options
    return with_option(base, "database", unique_name())


class NewStores:
    """Makes fresh store URLs of one backend and removes server stores afterwards."""

    def __init__(self, kind: str, folder: Path) -> None:
        self.kind, self.folder, self.made = kind, folder, []
        self.base = _server_base(kind) if kind in SERVER_BACKENDS else None

    def __call__(self) -> str:
        name = f"s{len(self.made)}"
        url = _server_url(self.kind, self.base) if self.base else \
            file_url(self.kind, self.folder, name)
        self.made.append(url)
        return url

    def close(self) -> None:
        for url in self.made:
            remove_store(url)


@pytest.fixture(params=FILE_BACKENDS + list(SERVER_BACKENDS))
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[NewStores]:
    stores = NewStores(request.param, tmp_path)
    yield stores
    stores.close()


# ------------------------------------------------------------- ls, info, du
def test_ls_lists_members_and_the_tree(new_store: NewStores) -> None:
    url = new_store()
    write_sample(url)
    members = zstores_cmd("ls", url)
    assert (members.code, members.err) == (0, "")
    assert members.out.splitlines() == ["counts  (10,) int16", "g/"]
    tree = zstores_cmd("ls", url, "-r")
    assert tree.code == 0
    assert tree.out.splitlines() == [
        "/",
        "├── counts  (10,) int16",
        "└── g/",
        "    └── temp  (20, 20) float64",
    ]
    assert zstores_cmd("ls", url, "g/temp").out.splitlines() == ["g/temp  (20, 20) float64"]
    assert zstores_cmd("ls", url, "counts/0").out.splitlines() == ["counts/0  no zarr metadata"]
    entries = zstores_cmd("ls", url, "-r", "--json").json()["entries"]
    assert [(e["path"], e["type"], e.get("shape")) for e in entries] == [
        ("counts", "array", [10]), ("g", "group", None), ("g/temp", "array", [20, 20])]
    assert entries[2]["dtype"] == "float64" and entries[2]["chunks"] == [5, 5]


def test_info_shows_an_array_as_zarr_does_and_a_group_s_members(new_store: NewStores) -> None:
    url = new_store()
    written = write_sample(url)
    report = zstores_cmd("info", url, "counts", "--json").json()
    stored = sum(len(v) for k, v in written.items() if k.startswith("counts/"))
    assert report == {
        "name": "/counts", "type": "zarr v2 array", "data_type": "int16", "shape": [10],
        "chunk_shape": [4], "order": "C", "compressor": {"id": "zlib", "level": 1},
        "fill_value": 0, "store_type": report["store_type"], "nbytes": 20,
        "nbytes_stored": stored, "storage_ratio": round(20 / stored, 1),
        "chunks_initialized": 2, "nchunks": 3,
    }
    text = zstores_cmd("info", url, "g/temp").out
    assert "Compressor         : Blosc(cname='lz4', clevel=5, shuffle=SHUFFLE, blocksize=0)" \
        in text
    assert "Chunks initialized : 16/16" in text and "No. bytes          : 3200 (3.1 KiB)" in text
    group = zstores_cmd("info", url).out.splitlines()
    assert "No. arrays  : 1" in group and "Arrays      : counts" in group
    assert "Groups      : g" in group and "No. members : 2" in group


def test_du_adds_up_every_value(new_store: NewStores) -> None:
    url = new_store()
    written = write_sample(url)
    usage = zstores_cmd("du", url, "--json").json()
    assert usage["bytes"] == sum(map(len, written.values()))
    assert usage["keys"] == len(written) == SAMPLE_KEYS
    rows = {row["name"]: (row["type"], row["keys"]) for row in usage["children"]}
    assert rows == {".zgroup": ("key", 1), "counts": ("array", 3), "g": ("group", 19)}
    text = zstores_cmd("du", url, "g", "--bytes").out.splitlines()
    temp = sum(len(v) for k, v in written.items() if k.startswith("g/temp/"))
    assert re.fullmatch(rf"\s*{temp}  17 keys  temp/", text[-2])
    assert text[-1].endswith("19 keys  /g (total)")


# ----------------------------------------------------------------------- cp
def test_cp_copies_verifies_and_skips_what_is_already_there(new_store: NewStores,
                                                            tmp_path: Path) -> None:
    src = new_store()
    written = write_sample(src)
    other = file_url("directory" if new_store.kind == "sqlite" else "sqlite", tmp_path, "dst")
    copied = zstores_cmd("cp", src, other, "--verify")
    assert (copied.code, copied.err) == (0, "")
    assert copied.out.startswith(f"copied {SAMPLE_KEYS} keys (")
    assert f"{SAMPLE_KEYS} of {SAMPLE_KEYS} keys verified" in copied.out
    assert contents(other) == written
    again = zstores_cmd("cp", src, other)
    assert again.code == 0 and again.out.startswith(f"copied 0 keys (0 B), skipped "
                                                    f"{SAMPLE_KEYS} identical keys")
    back = new_store()  # and into this backend from another one
    assert zstores_cmd("cp", other, back, "--jobs", "3").code == 0
    assert contents(back) == written
    part = new_store()
    assert zstores_cmd("cp", src, part, "g").code == 0
    assert contents(part) == {k: v for k, v in written.items() if k.startswith("g/")}


def test_cp_if_exists_modes(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "src"), f"sqlite://{tmp_path}/dst.sqlite"
    written = write_sample(src)
    assert zstores_cmd("cp", src, dst).code == 0
    with zstores.open_store(dst) as store:
        store["counts/0"] = b"changed"
    kept = zstores_cmd("cp", src, dst)  # skip: a different value is reported, not replaced
    assert kept.code == 1
    assert kept.err_lines == [("zstores cp: counts/0: exists in DST with a different value; "
                              "left alone (--if-exists overwrite replaces it)")]
    assert f"skipped {SAMPLE_KEYS - 1} identical keys" in kept.out
    assert contents(dst)["counts/0"] == b"changed"
    refused = zstores_cmd("cp", src, dst, "--if-exists", "error")
    assert refused.code == 1 and refused.out == ""
    assert refused.err_lines == [(f"zstores cp: error: {SAMPLE_KEYS} keys already exist in "
                                 f"{dst} (first: '.zgroup'); nothing was copied "
                                 "(--if-exists error)")]
    replaced = zstores_cmd("cp", src, dst, "--if-exists", "overwrite")
    assert replaced.code == 0 and replaced.out.startswith(f"copied {SAMPLE_KEYS} keys")
    assert contents(dst) == written


ROWS = 100_000  # chunks in the store test_cp_interrupted_by_sigint_resumes_and_verifies copies


@pytest.fixture(scope="module")
def many_rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    """An SQLite store of 100,000 small chunks plus .zarray: a copy that takes a while.

    (20,000 chunks copied in about a second once SQLite reads got faster: on a loaded
    machine the whole copy ended before the test's SIGINT reached it.)
    """
    url = f"sqlite://{tmp_path_factory.mktemp('rows')}/rows.sqlite"
    write_rows(url, ROWS)
    return url, ROWS + 1


class _StderrWatcher(threading.Thread):
    """Collects a process's stderr and signals once the key bar shows chunks copied."""

    def __init__(self, process: subprocess.Popen[bytes], total: int) -> None:
        super().__init__(daemon=True)
        self.process, self.pattern = process, re.compile(rf"\b([0-9]+)/{total}\b")
        self.text, self.started = "", threading.Event()

    def run(self) -> None:
        assert self.process.stderr is not None
        while chunk := self.process.stderr.read1(4096):  # type: ignore[attr-defined]
            self.text += chunk.decode("utf-8", "replace")
            if any(int(n) > 1 for n in self.pattern.findall(self.text)):  # past .zarray
                self.started.set()
        self.started.set()  # the process ended: stop waiting either way


def _sigint_as_in_a_terminal() -> None:
    """Give the child Ctrl-C's default disposition, whatever this process inherited.

    A job started in the background of a non-interactive shell (as CI runners
    may start the test command) ignores SIGINT, and ignored signals are
    inherited across exec: Python then installs no KeyboardInterrupt handler,
    and the copy would run to the end as it rightly does under ``nohup``.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("kind", FILE_BACKENDS)
def test_cp_interrupted_by_sigint_resumes_and_verifies(kind: str, tmp_path: Path,
                                                        many_rows: tuple[str, int]) -> None:
    src, total = many_rows
    dst = file_url(kind, tmp_path, "copy")
    process = subprocess.Popen([*COMMAND, "cp", src, dst, "--jobs", "1", "--progress"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, preexec_fn=_sigint_as_in_a_terminal)
    watcher = _StderrWatcher(process, total)
    watcher.start()
    assert watcher.started.wait(timeout=300), "the copy never showed progress"
    assert process.poll() is None, ("the copy ended before it could be interrupted",
                                    watcher.text)
    process.send_signal(signal.SIGINT)
    process.wait(timeout=300)
    watcher.join(timeout=60)
    assert process.stdout is not None
    out = process.stdout.read()
    assert process.returncode == 130, (out, watcher.text)
    messages = [line.strip() for line in re.split(r"[\r\n]", watcher.text) if "zstores" in line]
    assert len(messages) == 1 and "Traceback" not in watcher.text
    assert re.fullmatch(r"zstores cp: interrupted: copied [0-9,]+ keys? \(.*\) and found 0 "
                        rf"identical keys of {total:,} before Ctrl-C; run the same command again "
                        r"to finish \(keys already copied are skipped\)", messages[0])
    source = contents(src)
    partial = contents(dst)  # only whole values, each exactly the source's
    assert json.loads(partial.pop(INCOMPLETE_COPY)) == {"src": src, "path": ""}
    unfinished = zstores_cmd("info", dst)
    said = f"{INCOMPLETE_COPY}: an unfinished copy: `zstores cp {src!r}` into this store"
    assert unfinished.code == 1 and said in unfinished.out
    assert 0 < len(partial) < total
    assert all(source[key] == value for key, value in partial.items())
    resumed = zstores_cmd("cp", src, dst)
    assert (resumed.code, resumed.err) == (0, "")
    assert f"skipped {len(partial):,} identical key" in resumed.out  # or keys
    assert f"copied {total - len(partial):,} key" in resumed.out
    assert f"{total:,} of {total:,} keys written or identical" in resumed.out  # no --verify
    assert contents(dst) == source
    checked = zstores_cmd("verify", dst, "--jobs", "2")
    assert checked.code == 0 and f"{ROWS:,} of {ROWS:,} chunks decoded" in checked.out


# ------------------------------------------------------------------- verify
def test_verify_reports_cut_and_garbage_chunks_and_counts_a_missing_one(
        new_store: NewStores) -> None:
    url = new_store()
    write_sample(url)
    clean = zstores_cmd("verify", url)
    assert (clean.code, clean.err) == (0, "")
    assert clean.out.splitlines() == [
        ("checked 2 arrays and 2 groups: 18 of 18 chunks decoded "
        f"({clean.out.split('(')[1].split(')')[0]}), 1 chunk missing (read as the fill value)"),
        "no problems found"]
    with zstores.open_store(url, mode="r+") as store:
        cut = store["g/temp/0.0"]
        store["g/temp/0.0"] = cut[:len(cut) // 2]
        store["g/temp/1.1"] = b"not a blosc chunk at all, just garbage bytes" * 3
        del store["g/temp/2.2"]
    report = zstores_cmd("verify", url, "--json")
    assert report.code == 1
    found = report.json()
    assert {p["key"]: p["kind"] for p in found["problems"]} == {
        "g/temp/0.0": "decode_error", "g/temp/1.1": "decode_error"}
    assert (found["chunks_ok"], found["chunks_bad"], found["chunks_missing"]) == (15, 2, 2)
    assert found["ok"] is False and found["arrays"] == 2
    text = zstores_cmd("verify", url)
    assert text.code == 1 and text.err == ""
    lines = text.out.splitlines()
    assert lines[0].startswith("g/temp/0.0: fails to decode: the value is ")
    assert "its blosc header says" in lines[0]
    assert lines[1].startswith("g/temp/1.1: fails to decode")
    assert "2 chunks missing (read as the fill value)" in lines[2]
    assert lines[3] == "2 problems found"


def test_verify_reports_wrong_sizes_stray_keys_and_bad_metadata(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    write_sample(url)
    with zstores.open_store(url) as store:
        store["counts/1"] = ZLIB.encode(np.arange(3, dtype="<i2"))  # 6 bytes, not 8
        store["g/notes.txt"] = b"hello"
        store["g/temp/9.9"] = store["g/temp/0.0"]
        store["loose/.zattrs"] = b"{}"
        store["bad/.zarray"] = json.dumps({
            "zarr_format": 2, "shape": [4, 4], "chunks": [2], "dtype": "<q9",
            "compressor": {"id": "no-such-codec"}, "fill_value": "x", "order": "K",
            "filters": None}).encode()
        store["bad/0.0"] = b"unjudged: its array's metadata is broken"
    found = zstores_cmd("verify", url, "--json")
    assert found.code == 1
    problems = [(p["key"], p["kind"]) for p in found.json()["problems"]]
    assert problems == [
        ("bad/.zarray", "bad_metadata"),  # chunks/shape lengths
        ("bad/.zarray", "bad_metadata"),  # dtype
        ("bad/.zarray", "bad_metadata"),  # order
        ("bad/.zarray", "bad_metadata"),  # compressor
        ("counts/1", "wrong_size"),
        ("g/notes.txt", "stray_key"),
        ("g/temp/9.9", "stray_key"),
        ("loose/.zattrs", "stray_key"),
    ]
    messages = {p["key"]: p["message"] for p in found.json()["problems"]}
    assert messages["counts/1"] == ("decodes to 6 bytes; a chunk of shape (4,) and dtype int16 "
                                    "is 8")
    assert messages["g/temp/9.9"].startswith("is no chunk of the array g/temp (grid (4, 4)")
    assert messages["g/notes.txt"] == "belongs to no array"


def test_verify_decodes_what_zarr_python_2_wrote_and_info_agrees(zarr2, tmp_path: Path) -> None:
    path = str(tmp_path / "z2")
    facts = zarr2.run(
        """
        import numcodecs, numpy as np, zarr
        root = zarr.open_group(zarr.DirectoryStore(path), mode="w")
        made = []
        def add(name, data, **options):
            options.setdefault("dtype", np.asarray(data).dtype)
            array = root.create_dataset(name, shape=np.shape(data), **options)
            array[...] = data
            made.append(array)
        add("blosc", np.random.default_rng(0).random((30, 17)), chunks=(7, 5))
        add("zstd_delta", np.arange(100, dtype="i4"), chunks=(30,),
            compressor=numcodecs.Zstd(level=3), filters=[numcodecs.Delta(dtype="i4")])
        add("scaled", np.linspace(0, 1, 50), chunks=(20,), compressor=None,
            filters=[numcodecs.FixedScaleOffset(offset=0, scale=100, dtype="f8", astype="u1")])
        add("strings", np.array([f"s{i}" * i for i in range(10)], dtype=object), chunks=(4,),
            dtype=str)
        add("fortran", np.arange(81, dtype="u2").reshape(9, 9), chunks=(4, 4), order="F",
            compressor=numcodecs.GZip(level=1))
        add("records", np.zeros(5, dtype=[("x", "<i4"), ("y", "<f8")]), chunks=(2,))
        add("scalar", np.float32(1.5), dtype="f4")
        add("slashes", np.ones((6, 6), dtype="i8"), chunks=(3, 3), dimension_separator="/")
        partial = root.create_group("sub").create_dataset(
            "partial", shape=(10, 10), chunks=(5, 5), fill_value=np.nan)
        partial[:5, :5] = 1
        made.append(partial)
        result = {a.path: {"nbytes": a.nbytes, "nbytes_stored": a.nbytes_stored,
                           "chunks_initialized": a.nchunks_initialized, "nchunks": a.nchunks,
                           "order": a.order, "compressor": repr(a.compressor)} for a in made}
        """, path=path)
    checked = zstores_cmd("verify", path, "--json")
    assert checked.code == 0, checked.out
    report = checked.json()
    assert report["arrays"] == 9 and report["chunks_bad"] == 0
    assert report["chunks_missing"] == 3  # sub/partial: 3 of its 4 chunks never written
    for name, expected in facts.items():
        info = zstores_cmd("info", path, name, "--json").json()
        shown = zstores_cmd("info", path, name).out
        assert f"Compressor         : {expected['compressor']}" in shown
        assert (info["nbytes"], info["nchunks"], info["order"]) == \
            (expected["nbytes"], expected["nchunks"], expected["order"])
        if name not in ("slashes", "scalar"):  # zarr 2.18 miscounts those (non-recursive)
            assert info["nbytes_stored"] == expected["nbytes_stored"], name
            assert info["chunks_initialized"] == expected["chunks_initialized"], name


def test_ls_du_cp_recognise_zarr_v3(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    if int(zarr.__version__.split(".")[0]) < 3:
        pytest.skip("needs zarr-python 3 to write a v3 hierarchy")
    path = tmp_path / "v3"
    root = zarr.open_group(zarr.storage.LocalStore(str(path)), mode="w", zarr_format=3)
    array = root.create_array("temp", shape=(10, 10), chunks=(5, 5), dtype="float32")
    array[:] = np.arange(100, dtype="float32").reshape(10, 10)
    root.create_group("empty")
    assert zstores_cmd("ls", path, "-r").out.splitlines() == [
        "/", "├── empty/", "└── temp  (10, 10) float32"]
    info = zstores_cmd("info", path, "temp", "--json").json()
    assert (info["type"], info["chunks_initialized"], info["nchunks"]) == \
        ("zarr v3 array", 4, 4)
    usage = zstores_cmd("du", path, "--json").json()
    on_disk = [p for p in path.rglob("*") if p.is_file()]
    assert usage["keys"] == len(on_disk)
    assert usage["bytes"] == sum(p.stat().st_size for p in on_disk)
    copy = f"sqlite://{tmp_path}/v3.sqlite"
    assert zstores_cmd("cp", path, copy).code == 0
    assert contents(copy) == contents(str(path))
    checked = zstores_cmd("verify", copy)
    assert checked.code == 0
    assert "checked 1 array and 2 groups: 4 of 4 chunks decoded" in checked.out


# ---------------------------------------------------- rm, consolidate, migrate
def test_rm_deletes_a_node_with_everything_below(new_store: NewStores) -> None:
    url = new_store()
    written = write_sample(url)
    removed = zstores_cmd("rm", url, "g")
    size = sum(len(v) for k, v in written.items() if k.startswith("g/"))
    assert removed.code == 0
    assert removed.out == f"removed 19 keys ({human_size(size)}) at g\n"
    assert sorted(contents(url)) == [".zgroup", "counts/.zarray", "counts/0", "counts/1"]
    assert zstores_cmd("rm", url, "counts/0").code == 0
    assert sorted(contents(url)) == [".zgroup", "counts/.zarray", "counts/1"]
    missing = zstores_cmd("rm", url, "g")
    assert missing.code == 1 and missing.err_lines == [
        f"zstores rm: error: nothing at 'g' in {zstores.urls.redact_url(url)}"]


def test_consolidate_gathers_every_document_and_verify_sees_it_go_stale(
        new_store: NewStores) -> None:
    url = new_store()
    written = write_sample(url)
    done = zstores_cmd("consolidate", url)
    assert done.code == 0 and done.out == "wrote .zmetadata with 5 metadata documents\n"
    document = json.loads(contents(url)[".zmetadata"])
    assert document == {"zarr_consolidated_format": 1, "metadata": {
        key: json.loads(value) for key, value in written.items()
        if key.rpartition("/")[2] in (".zarray", ".zgroup", ".zattrs")}}
    assert zstores_cmd("verify", url).code == 0
    with zstores.open_store(url, mode="r+") as store:
        store["g/.zattrs"] = b'{"units": "C"}'
    stale = zstores_cmd("verify", url, "--json")
    assert stale.code == 1
    assert [(p["key"], p["kind"]) for p in stale.json()["problems"]] == [
        (".zmetadata", "stale_consolidated")]


def test_consolidate_writes_what_zarr_python_2_writes(zarr2, tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    zarr2.run(
        """
        import numpy as np, zarr
        root = zarr.open_group(zarr.DirectoryStore(path), mode="w")
        root.attrs["title"] = "ünïcode and numbers"
        root.create_dataset("a/b", data=np.arange(10), chunks=(5,)).attrs["n"] = 1.5
        root.create_group("c").create_dataset("d", shape=(2, 2), dtype="f4", fill_value=np.nan)
        """, path=str(ours))
    shutil.copytree(ours, theirs)
    zarr2.run("import zarr\nzarr.consolidate_metadata(zarr.DirectoryStore(path))",
              path=str(theirs))
    assert zstores_cmd("consolidate", ours).code == 0
    assert (ours / ".zmetadata").read_bytes() == (theirs / ".zmetadata").read_bytes()


def _write_v1_array(url: str) -> np.ndarray:
    data = np.arange(10, dtype="<i4")
    meta = {"zarr_format": 1, "shape": [10], "chunks": [4], "dtype": "<i4",
            "compression": "zlib", "compression_opts": 1, "fill_value": 0, "order": "C"}
    with zstores.open_store(url, mode="w") as store:
        store["meta"] = json.dumps(meta).encode()
        store["attrs"] = b'{"origin": "v1"}'
        for i in range(3):
            chunk = np.zeros(4, dtype="<i4")
            part = data[4 * i:4 * i + 4]
            chunk[:len(part)] = part
            store[str(i)] = numcodecs.Zlib(1).encode(chunk)
    return data


def test_migrate_turns_a_v1_array_into_v2(new_store: NewStores) -> None:
    url = new_store()
    _write_v1_array(url)
    migrated = zstores_cmd("migrate", url)
    assert migrated.code == 0
    assert migrated.out.endswith("to spec v2: meta -> .zarray, attrs -> .zattrs\n")
    assert sorted(contents(url)) == [".zarray", ".zattrs", "0", "1", "2"]
    info = zstores_cmd("info", url, "--json").json()
    assert (info["compressor"], info["shape"], info["chunks_initialized"]) == \
        ({"id": "zlib", "level": 1}, [10], 3)
    assert zstores_cmd("verify", url).code == 0
    again = zstores_cmd("migrate", url)
    assert again.code == 0 and "already holds a spec v2 array" in again.out


def test_migrate_without_a_v1_array_is_an_error(tmp_path: Path) -> None:
    url = str(tmp_path / "plain")
    write_sample(url)
    failed = zstores_cmd("migrate", url)
    assert failed.code == 1 and failed.err_lines == [
        (f"zstores migrate: error: no spec v1 array in {url}: there is no 'meta' key at the "
        "root")]


# ------------------------------------------------------ usage, errors, help
SUBCOMMANDS = ["ls", "info", "du", "cp", "verify", "rm", "consolidate", "migrate"]


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_help_of_each_subcommand_shows_an_example(name: str) -> None:
    shown = zstores_cmd(name, "--help")
    assert shown.code == 0 and shown.err == ""
    assert "Examples:\n" in shown.out and f"\n  zstores {name} " in shown.out


def test_python_dash_m_runs_the_same_command(tmp_path: Path) -> None:
    write_sample(str(tmp_path / "s"))
    done = subprocess.run([sys.executable, "-m", "zstores", "ls", str(tmp_path / "s")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (0, zstores_cmd("ls", tmp_path / "s").out)


@pytest.mark.parametrize(("args", "message"), [
    ([], "zstores: error: the following arguments are required: COMMAND"),
    (["ls"], "zstores ls: error: the following arguments are required: URL"),
    (["cp", "a", "b", "--jobs", "0"], ("zstores cp: error: argument -j/--jobs: must be at "
                                      "least 1, not 0")),
    (["cp", "a", "b", "--if-exists", "merge"], ("zstores cp: error: argument --if-exists: "
                                               "invalid choice: 'merge'")),
    (["ls", "nosuch://x"], "zstores ls: error: unknown scheme 'nosuch'"),
    (["rm", "{tmp}", ""], "zstores rm: error: PATH is the root"),
    (["ls", "{tmp}", "a/../b"], "zstores ls: error: bad PATH: invalid key 'a/../b'"),
])
def test_usage_errors_exit_2_on_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    failed = zstores_cmd(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert failed.code == 2 and failed.out == ""
    assert len(failed.err_lines) == 1 and failed.err_lines[0].startswith(message)


@pytest.mark.parametrize("args", [
    ["ls", "{tmp}/none"], ["info", "{tmp}/store", "nothing/here"], ["du", "{tmp}/store", "x"],
    ["verify", "{tmp}/store", "g/temp/sub"], ["cp", "{tmp}/store", "{tmp}/store"],
])
def test_failures_exit_1_on_one_line_and_debug_adds_the_traceback(
        args: list[str], tmp_path: Path) -> None:
    write_sample(str(tmp_path / "store"))
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    failed = zstores_cmd(*args)
    assert failed.code in (1, 2) and len(failed.err_lines) == 1
    assert failed.err_lines[0].startswith(f"zstores {args[0]}: error: ")
    debug = zstores_cmd(*args, "--debug")
    assert debug.code == failed.code and "Traceback (most recent call last)" in debug.err
    assert debug.err_lines[-1] == failed.err_lines[0]


def test_no_progress_output_without_a_terminal(tmp_path: Path) -> None:
    src = str(tmp_path / "src")
    write_sample(src)
    for args in (["cp", src, str(tmp_path / "dst")], ["verify", src]):
        done = zstores_cmd(*args)
        assert (done.code, done.err) == (0, "")


def test_info_and_ls_json_parse_for_a_broken_array(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    write_sample(url)
    with zstores.open_store(url) as store:
        store["counts/.zarray"] = b"{not json"
    listed = zstores_cmd("ls", url, "--json")
    assert listed.code == 1
    assert listed.json()["entries"][0]["problem"].startswith("not JSON")
    described = zstores_cmd("info", url, "counts")
    assert described.code == 1 and described.err_lines[0].startswith(
        "zstores info: error: counts: unreadable array metadata: not JSON")
