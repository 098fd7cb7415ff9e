"""http:// stores listed through consolidated metadata, on the real loopback HTTP server.

A static server (scripts/http_range_server.py) cannot list; a hierarchy
published with consolidated metadata names its nodes, and each array's
metadata its chunk grid, so ``HTTPStore`` lists the metadata keys and the
chunk keys that exist (asked with concurrent HEADs; chunks never written are
the fill value and are not listed).  Hierarchies written by zarr-python 3
(format 3: a sharded array, a 0-d array, an array with missing chunks) and
by zarr-python 2.18 (format 2, both dimension separators, missing chunks):

- the store lists exactly the files the writer left (a folder's URL, which
  the server answers with a page of links, is no key);
- ``zstores ls/info/du/verify`` work on the URL and ``zstores cp`` copies it
  to LMDB, where ``verify`` finds every value equal;
- ``zfuse mount`` (read-only without being told) shows it, and zarr reads it;
- listing the root asks no chunk, and an array's chunks are asked concurrently;
- with no consolidated metadata every command still refuses in one line,
  saying to consolidate.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import pytest

import zstores
from zstores.metadata import MetadataError
from zstores.stores.objectstore import HTTPStore

from cli_helpers import zstores_cmd
from conftest import require_module
from fuse_helpers import run_zfuse
from test_fuse_cli import _daemon_pid

pytestmark = pytest.mark.timeout(300)

require_module("obstore")
zarr = require_module("zarr", minversion="3")

DENSE = (np.arange(37 * 45, dtype="<i4").reshape(37, 45) * 7) % 1000 - 300


def files_under(root: Path) -> dict[str, bytes]:
    """Every file below ``root``, by its key (what the writer left)."""
    return {path.relative_to(root).as_posix(): path.read_bytes()
            for path in root.rglob("*") if path.is_file()}


def new_site(http_server: tuple[str, Path]) -> tuple[str, Path]:
    url, folder = http_server
    name = "published-" + uuid.uuid4().hex[:12]
    (folder / name).mkdir()
    return url + name, folder / name


def write_v3(root: Path) -> None:
    """A consolidated format 3 hierarchy by zarr-python 3 (LocalStore, as a site would hold it)."""
    group = zarr.open_group(zarr.storage.LocalStore(root), mode="w", zarr_format=3)
    group.attrs["source"] = "zarr 3"
    dense = group.create_array("dense", shape=DENSE.shape, chunks=(16, 20), dtype="<i4",
                               fill_value=0)
    dense[...] = DENSE
    sparse = group.create_array("sparse", shape=(100,), chunks=(10,), dtype="f8",
                                fill_value=-1.0)
    sparse[20:30] = 1.5  # chunk 2 only: nine chunks never written
    sharded = group.create_group("sub").create_array(
        "sharded", shape=(40, 12), chunks=(5, 4), shards=(20, 12), dtype="u2", fill_value=7)
    sharded[:20] = np.arange(20 * 12, dtype="u2").reshape(20, 12)  # shard 1 missing
    scalar = group.create_array("scalar", shape=(), dtype="i8", fill_value=0)
    scalar[()] = 42
    zarr.consolidate_metadata(zarr.storage.LocalStore(root))


def check_v3(group: object) -> None:
    np.testing.assert_array_equal(group["dense"][...], DENSE)
    expected = np.full(100, -1.0)
    expected[20:30] = 1.5
    np.testing.assert_array_equal(group["sparse"][...], expected)
    sharded = np.full((40, 12), 7, dtype="u2")
    sharded[:20] = np.arange(20 * 12, dtype="u2").reshape(20, 12)
    np.testing.assert_array_equal(group["sub/sharded"][...], sharded)
    assert group["scalar"][()] == 42 and dict(group.attrs) == {"source": "zarr 3"}


ZARR2_WRITE = """
import numpy as np, numcodecs, zarr
store = zarr.storage.DirectoryStore(root)
group = zarr.group(store=store, overwrite=True)
group.attrs["source"] = "zarr 2"
data = (np.arange(37 * 45, dtype="<i4").reshape(37, 45) * 7) % 1000 - 300
for name, separator in (("nested", "/"), ("flat", ".")):
    x = group.create_dataset(name, shape=(37, 45), chunks=(16, 20), dtype="<i4",
                             compressor=numcodecs.Blosc("zstd", 3), dimension_separator=separator,
                             fill_value=0)
    x[...] = data
gaps = group.create_group("g").create_dataset("gaps", shape=(50,), chunks=(10,), dtype="f4",
                                               fill_value=-1)
gaps[0:10] = 2.5  # chunk 0 only
gaps[40:50] = 3.5  # and chunk 4
zarr.consolidate_metadata(store)
"""


def check_v2(group: object) -> None:
    for name in ("nested", "flat"):
        np.testing.assert_array_equal(group[name][...], DENSE)
    expected = np.full(50, -1, dtype="f4")
    expected[0:10], expected[40:50] = 2.5, 3.5
    np.testing.assert_array_equal(group["g/gaps"][...], expected)
    assert dict(group.attrs) == {"source": "zarr 2"}


@pytest.fixture
def v3_site(http_server: tuple[str, Path]) -> tuple[str, Path]:
    url, root = new_site(http_server)
    write_v3(root)
    return url, root


@pytest.fixture
def v2_site(http_server: tuple[str, Path], zarr2) -> tuple[str, Path]:
    url, root = new_site(http_server)
    zarr2.run(ZARR2_WRITE, root=str(root))
    return url, root


# --------------------------------------------------------------- the store
@pytest.mark.parametrize("via", ["obstore", "fsspec"])
def test_v3_hierarchy_lists_what_zarr_3_wrote(v3_site: tuple[str, Path], via: str) -> None:
    url, root = v3_site
    on_disk = files_under(root)
    assert "sparse/c/3" not in on_disk and "sub/sharded/c/1/0" not in on_disk  # missing
    assert "sub/sharded/c/0/0" in on_disk and "scalar/c" in on_disk
    with HTTPStore(url, mode="r", via=via) as store:
        assert set(store) == set(on_disk)
        assert store.getitems(list(on_disk)) == on_disk
        assert store.listdir() == ["dense", "scalar", "sparse", "sub", "zarr.json"]
        assert store.listdir("sparse/c") == ["2"]
        assert store.listdir("sub/sharded/c") == ["0"]
        assert store.listdir("sub/sharded/c/0") == ["0"]
        assert store.getsize() == sum(map(len, on_disk.values())) and len(store) == len(on_disk)
        # The server answers a folder's URL with a page of links: never a key.
        for folder in ("dense", "sub", "sub/sharded/c", "dense/c/0"):
            assert store.stat(folder) is None and folder not in store
            with pytest.raises(KeyError):
                store[folder]
        check_v3(zarr.open_group(zstores.zarr_store(store), mode="r"))


def test_v2_hierarchy_lists_what_zarr_2_wrote(v2_site: tuple[str, Path]) -> None:
    url, root = v2_site
    on_disk = files_under(root)
    assert "nested/2/2" in on_disk and "flat/2.2" in on_disk
    assert {key for key in on_disk if key.startswith("g/gaps/")
            and not key.endswith((".zarray", ".zattrs"))} == {"g/gaps/0", "g/gaps/4"}
    with zstores.open_store(url, mode="r") as store:
        assert set(store) == set(on_disk)
        assert store.listdir("nested") == [".zarray", "0", "1", "2"]
        assert store.listdir("nested/2") == ["0", "1", "2"]
        assert store.stat("nested/2") is None and store.stat("nested/2/2") == len(
            on_disk["nested/2/2"])
        check_v2(zarr.open_group(zstores.zarr_store(store), mode="r"))


def test_the_root_listing_asks_no_chunk_and_an_array_is_asked_concurrently(
        private_http) -> None:
    """Counted by the server: listing the root costs the two consolidated reads and one
    HEAD per metadata key; listing an array of 200 chunks has many HEADs in flight."""
    server = private_http(delay_ms=20)
    group = zarr.open_group(zarr.storage.LocalStore(server.root), mode="w", zarr_format=2)
    array = group.create_array("x", shape=(200,), chunks=(1,), dtype="u1", fill_value=0)
    array[:150] = 1  # 50 chunks never written
    zarr.consolidate_metadata(zarr.storage.LocalStore(server.root), zarr_format=2)
    metadata = [key for key in files_under(server.root) if key.rpartition("/")[2][:2] == ".z"]
    with HTTPStore(server.url, mode="r", max_concurrency=16) as store:
        server.requests(reset=True)
        assert store.listdir() == sorted({key.partition("/")[0] for key in metadata})
        assert server.requests(reset=True)["total"] == 2 + len(metadata)
        assert len(store.listdir("x")) == 150 + len([k for k in metadata if k.startswith("x/")])
        probes = server.requests(reset=True)
        assert store.list_prefix("x") and server.requests()["total"] == 0  # learnt once
    assert probes["total"] == 200 and probes["peak"] >= 4, probes


def test_a_broken_consolidated_document_is_a_metadata_error(http_server) -> None:
    url, root = new_site(http_server)
    (root / ".zmetadata").write_bytes(b'{"zarr_consolidated_format": 7, "metadata": {}}')
    with HTTPStore(url, mode="r") as store, pytest.raises(MetadataError, match=".zmetadata"):
        store.listdir()


# ----------------------------------------------------------------- the CLI
def test_cli_lists_verifies_and_copies_a_published_hierarchy(
        v3_site: tuple[str, Path], v2_site: tuple[str, Path], tmp_path: Path) -> None:
    for (url, root), check in ((v3_site, check_v3), (v2_site, check_v2)):
        listed = zstores_cmd("ls", url)
        assert listed.code == 0, listed.err
        assert "dense" in listed.out or "nested" in listed.out
        for command in (("info", url), ("du", url), ("verify", url)):
            done = zstores_cmd(*command)
            assert done.code == 0, (command, done.err)
        target = f"lmdb://{tmp_path / (root.name + '.lmdb')}"
        copied = zstores_cmd("cp", url, target)
        assert copied.code == 0, copied.err
        verified = zstores_cmd("verify", target)
        assert verified.code == 0, verified.out + verified.err
        with zstores.open_store(target, mode="r") as copy:
            assert dict(copy.items()) == files_under(root)
            check(zarr.open_group(zstores.zarr_store(copy), mode="r"))


def test_without_consolidated_metadata_every_command_refuses_in_one_line(
        http_server) -> None:
    url, root = new_site(http_server)
    group = zarr.open_group(zarr.storage.LocalStore(root), mode="w", zarr_format=3)
    group.create_array("x", shape=(4,), chunks=(2,), dtype="u1")[...] = 1
    for command in (("ls", url), ("info", url), ("du", url), ("verify", url),
                    ("cp", url, "memory://")):
        done = zstores_cmd(*command)
        assert done.code != 0 and len(done.err_lines) == 1, (command, done.err)
        assert "no consolidated metadata" in done.err and "consolidate" in done.err


# ------------------------------------------------------------------- zfuse
@pytest.mark.parametrize("kind", ["v3", "v2"])
def test_zfuse_mounts_a_published_hierarchy_read_only_and_zarr_reads_it(
        request: pytest.FixtureRequest, kind: str, mountpoint: Path, zarr2) -> None:
    url, root = request.getfixturevalue(f"{kind}_site")
    done = run_zfuse("mount", url, str(mountpoint))  # no --read-only: http:// is read-only
    assert done.returncode == 0, done.stderr
    _daemon_pid(done.stdout)
    try:
        shown = {path.relative_to(mountpoint).as_posix() for path in mountpoint.rglob("*")
                 if path.is_file()}
        assert shown == set(files_under(root))
        local = zarr.storage.LocalStore(mountpoint, read_only=True)
        (check_v3 if kind == "v3" else check_v2)(zarr.open_group(local, mode="r"))
        if kind == "v2":
            seen = zarr2.run("""
import zarr
group = zarr.open_consolidated(zarr.storage.DirectoryStore(root), mode="r")
result = [int(group["nested"][...].sum()), int(group["flat"][...].sum()),
          float(group["g/gaps"][...].sum())]
""", root=str(mountpoint))
            assert seen[:2] == [int(DENSE.sum())] * 2 and seen[2] == 10 * 2.5 + 10 * 3.5 - 30
        with pytest.raises(OSError, match="Read-only"):
            (mountpoint / "new").write_bytes(b"x")
    finally:
        unmounted = run_zfuse("unmount", str(mountpoint), timeout=120)
        assert unmounted.returncode == 0, unmounted.stderr
    assert os.listdir(mountpoint) == []
