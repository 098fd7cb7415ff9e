"""One whole version per open file: a mount beside a process writing the store directly (issue 24).

A writer process replaces one key directly in the store (values of 300 KB
to 1.2 MB that check themselves: ``version_workers``) while files are read
through a zfuse mount of the same store.  Every read must be one whole
version: the one current at ``open``.

* The deterministic cases place each write exactly (the writer process
  writes one version when told, and answers when the write returned):
  a rewrite between two reads of one open file, a rewrite of the same size
  after the kernel cached the old pages, a larger and a smaller one while
  the kernel still believes the old size, two files open on two versions at
  once.  Before versions were pinned each of these read a mix.
* The free-running case lets a writer rewrite the key as fast as it can
  while another process reads the file whole over and over: no torn read,
  and more than one version seen (else the race was not run).

Backends: SQLite, LMDB, Directory, Redis and S3 (moto), with the default
attribute timeout and ``attr_timeout=0``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from version_workers import make_value, read_loop, version_of

import zfuse
import zstores

from object_urls import new_s3_bucket, s3_store_url

pytestmark = pytest.mark.timeout(300)

WORKERS = str(Path(__file__).with_name("version_workers.py"))
BACKENDS = ["sqlite", "lmdb", "directory", "redis", "s3"]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    backend = request.param
    if backend == "redis":
        return f"{request.getfixturevalue('redis_url')}?prefix=versions-{uuid.uuid4().hex}"
    if backend == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        return s3_store_url(endpoint, new_s3_bucket(endpoint), "versions")
    return {"sqlite": f"sqlite://{tmp_path}/v.sqlite", "lmdb": f"lmdb://{tmp_path}/v.lmdb",
            "directory": f"file://{tmp_path}/v.d"}[backend]


class Writer:
    """A process writing versions of one key directly to the store, one when told."""

    def __init__(self, url: str, key: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, WORKERS, url, key], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)

    def write(self, version: int) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{version}\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == f"ok {version}"

    def write_key(self, key: str, version: int) -> None:
        """Write version ``version`` to ``key`` (another key than the one given at start)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{version} {key}\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == f"ok {version}"

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=60) == 0


def read_file(path: Path) -> int | None:
    with open(path, "rb") as f:
        return version_of(f.read())


def read_rest(fd: int, first: bytes) -> bytes:
    """``first`` and everything after it, read as a program reading to EOF would."""
    pieces = [first]
    offset = len(first)
    while piece := os.pread(fd, 128 << 10, offset):
        pieces.append(piece)
        offset += len(piece)
    return b"".join(pieces)


@pytest.mark.parametrize("attr_timeout", [1.0, 0.0], ids=["default", "attr0"])
def test_each_open_file_reads_one_whole_version(url: str, attr_timeout: float,
                                                mountpoint: Path) -> None:
    store = zstores.open_store(url)
    store["shared"] = make_value(1)
    writer = Writer(url, "shared")
    try:
        with zfuse.mounted(store, mountpoint, attr_timeout=attr_timeout) as m:
            path = Path(m.path) / "shared"
            assert read_file(path) == 1  # the kernel now holds version 1's pages and size

            # A rewrite (of another size) between two reads of one open file.
            fd = os.open(path, os.O_RDONLY)
            try:
                first = os.pread(fd, 64 << 10, 0)
                writer.write(2)
                assert version_of(read_rest(fd, first)) == 1
            finally:
                os.close(fd)
            assert read_file(path) == 2  # the next open sees the write, whole

            # The same size as the pages the kernel cached: they must go.
            same_size = next(v for v in range(3, 100)
                             if len(make_value(v)) == len(make_value(2)))
            writer.write(same_size)
            assert read_file(path) == same_size

            # Larger, then smaller, while the kernel may still believe the old size.
            larger = next(v for v in range(same_size + 1, 200)
                          if len(make_value(v)) > len(make_value(same_size)))
            writer.write(larger)
            assert read_file(path) == larger
            smaller = next(v for v in range(larger + 1, 300)
                           if len(make_value(v)) < len(make_value(larger)))
            writer.write(smaller)
            assert read_file(path) == smaller

            # Two files open on two versions at once, both read through the kernel.
            old = os.open(path, os.O_RDONLY)
            try:
                half = os.pread(old, len(make_value(smaller)) // 2, 0)
                newest = smaller + 1
                while len(make_value(newest)) <= len(make_value(smaller)):
                    newest += 1
                writer.write(newest)
                new = os.open(path, os.O_RDONLY)
                try:
                    assert version_of(read_rest(new, b"")) == newest
                    assert version_of(read_rest(old, half)) == smaller
                    assert version_of(read_rest(new, b"")) == newest
                finally:
                    os.close(new)
            finally:
                os.close(old)
            assert read_file(path) == newest
    finally:
        writer.close()
        if not url.startswith(("sqlite", "lmdb", "file")):
            store.clear()
        store.close()


@pytest.mark.parametrize("attr_timeout", [1.0, 0.0], ids=["default", "attr0"])
def test_reads_beside_a_free_running_writer_are_never_torn(url: str, attr_timeout: float,
                                                           mountpoint: Path) -> None:
    store = zstores.open_store(url)
    store["shared"] = make_value(1)
    try:
        with zfuse.mounted(store, mountpoint, attr_timeout=attr_timeout) as m:
            path = str(Path(m.path) / "shared")
            writer = subprocess.Popen([sys.executable, WORKERS, url, "shared", "--free", "400"])
            try:
                whole, torn, seen = 0, 0, set()
                # Read while the writer runs (bounded: at most 3,000 reads).
                while writer.poll() is None and whole + torn < 3000:
                    w, t, s = read_loop(path, 50)
                    whole, torn, seen = whole + w, torn + t, seen | s
            finally:
                assert writer.wait(timeout=120) == 0
            w, t, s = read_loop(path, 5)
            assert (torn + t, whole + w) == (0, whole + w) and 400 in s
            assert len(seen) > 1, "no write landed between the reads: the race did not run"
    finally:
        if not url.startswith(("sqlite", "lmdb", "file")):
            store.clear()
        store.close()


def _zarr_reader(path: str, reads: int, results) -> None:  # type: ignore[no-untyped-def]
    import zarr
    from version_workers import torn_chunks

    torn = errors = 0
    for _ in range(reads):
        try:
            data = zarr.open_array(zarr.storage.LocalStore(path, read_only=True),
                                   path="grid", mode="r")[...]
        except Exception:  # noqa: BLE001 - a chunk that fails to decode is a torn read too
            errors += 1
            continue
        torn += torn_chunks(data)
    results.put((torn, errors))


@pytest.mark.parametrize("backend", ["sqlite", "lmdb"])
def test_zarr_reading_through_the_mount_beside_a_chunk_writer_sees_whole_chunks(
        backend: str, tmp_path: Path, mountpoint: Path) -> None:
    import multiprocessing

    import numpy as np
    import zarr

    url = f"{backend}://{tmp_path}/grid.{backend}"
    store = zstores.open_store(url)
    zarr.create_array(zstores.zarr_store(store), name="grid", shape=(2048, 2048),
                      chunks=(1024, 1024), dtype="i4", fill_value=0, compressors=None)
    zarr.open_array(zstores.zarr_store(store), path="grid", mode="r+")[...] = np.zeros(
        (2048, 2048), dtype="i4")
    try:
        with zfuse.mounted(store, mountpoint) as m:
            spawn = multiprocessing.get_context("spawn")
            results = spawn.Queue()
            reader = spawn.Process(target=_zarr_reader, args=(m.path, 40, results))
            writer = spawn.Process(target=rewrite_chunks_process, args=(url, 40))
            writer.start()
            reader.start()
            torn, errors = results.get(timeout=240)
            reader.join(60)
            writer.join(240)
            assert writer.exitcode == 0 and reader.exitcode == 0
    finally:
        store.close()
    assert (torn, errors) == (0, 0)


def rewrite_chunks_process(url: str, rounds: int) -> None:
    from version_workers import rewrite_chunks

    rewrite_chunks(url, rounds)


def test_a_folder_file_rewritten_in_place_is_refused_not_mixed(tmp_path: Path,
                                                               mountpoint: Path) -> None:
    # Another program (zarr-python's LocalStore writes files in place) rewrites
    # the very file an open descriptor reads: the read fails with ESTALE
    # instead of returning half of each.
    import errno
    import time

    store = zstores.DirectoryStore(tmp_path / "d")
    store["big"] = bytes(8 << 20)
    with zfuse.mounted(store, mountpoint) as m:
        fd = os.open(Path(m.path) / "big", os.O_RDONLY)
        try:
            assert os.pread(fd, 128 << 10, 0) == bytes(128 << 10)
            time.sleep(0.02)  # past the file system's timestamp granularity
            with open(tmp_path / "d" / "big", "r+b") as f:  # in place, not by rename
                f.write(b"\xff" * (8 << 20))
            with pytest.raises(OSError) as raised:
                os.pread(fd, 128 << 10, 6 << 20)
            assert raised.value.errno == errno.ESTALE
        finally:
            os.close(fd)
        with open(Path(m.path) / "big", "rb") as f:  # opened again: the new bytes, whole
            assert f.read() == b"\xff" * (8 << 20)


def test_exclusive_create_through_the_mount_never_replaces_another_doors_write(
        url: str, mountpoint: Path) -> None:
    # The kernel last saw the name missing (stat: ENOENT); another process
    # then writes the key directly; O_CREAT|O_EXCL through the mount must say
    # EEXIST and keep that value.  A plain O_CREAT opens the value instead of
    # replacing it (appending here).
    store = zstores.open_store(url)
    writer = Writer(url, "")
    try:
        with zfuse.mounted(store, mountpoint) as m:
            for attempt in range(10):
                key = f"excl/{attempt}"
                writer.write_key(key, attempt)
                path = Path(m.path) / key
                os.unlink(path)  # through the mount: the kernel now knows it is gone
                assert not path.exists()
                writer.write_key(key, attempt)
                with pytest.raises(FileExistsError):
                    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                assert version_of(bytes(store[key])) == attempt
                os.unlink(path)
                assert not path.exists()
                writer.write_key(key, attempt)
                fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
                try:
                    os.write(fd, b"tail")
                finally:
                    os.close(fd)
                value = bytes(store[key])
                assert value.endswith(b"tail") and version_of(value[:-4]) == attempt
    finally:
        writer.close()
        if not url.startswith(("sqlite", "lmdb", "file")):
            store.clear()
        store.close()


def test_a_large_object_is_read_pinned_to_its_etag(s3_endpoint: str) -> None:
    # Above PIN_WHOLE_BELOW an object store reader keeps the first piece and
    # reads the rest with If-Match: a rewrite meanwhile is ESTALE, not a mix.
    import errno

    from zstores.stores.objectstore.store import PIN_WHOLE_BELOW

    url = s3_store_url(s3_endpoint, new_s3_bucket(s3_endpoint), "pinned")
    with zstores.open_store(url) as store:
        old, new = os.urandom(PIN_WHOLE_BELOW + (1 << 20)), os.urandom(PIN_WHOLE_BELOW + 5)
        store["big"] = old
        with store.open_reader("big") as reader:
            assert reader.size == len(old) and bytes(reader.read(0, 10)) == old[:10]
            assert bytes(reader.read(PIN_WHOLE_BELOW, 100)) == old[PIN_WHOLE_BELOW:][:100]
            store["big"] = new
            assert bytes(reader.read(5, 10)) == old[5:15]  # the piece it keeps
            with pytest.raises(OSError) as raised:
                reader.read(PIN_WHOLE_BELOW, 100)
            assert raised.value.errno == errno.ESTALE
        with store.open_reader("big") as reader:
            assert bytes(reader.read(0, reader.size)) == new
        store["small"] = b"abc"
        with store.open_reader("small") as reader, store.open_reader("small") as again:
            assert reader.version == again.version is not None  # the ETag
            store["small"] = b"xyz"
            assert bytes(reader.read(0, 3)) == b"abc"
        store["empty"] = b""
        with store.open_reader("empty") as reader:
            assert reader.size == 0 and bytes(reader.read(0, 10)) == b""


def test_a_large_zip_member_is_read_by_range_pinned_to_its_entry(tmp_path: Path,
                                                                 mountpoint: Path) -> None:
    # A stored member is not copied at open: ranges are read while its
    # key still names the same entry; replaced meanwhile, the read is ESTALE;
    # unlinked through the mount, the open file keeps reading its value.
    import errno

    store = zstores.ZipStore(tmp_path / "a.zip")
    old = os.urandom(8 << 20)
    store["big"] = old
    store["other"] = old
    with zfuse.mounted(store, mountpoint) as m:
        with open(Path(m.path) / "big", "rb") as f:
            assert f.read() == old
        with store.open_reader("big") as reader:
            assert type(reader).__name__ == "_MemberReader"
            store["big"] = b"new"
            with pytest.raises(OSError) as raised:
                reader.read(0, 10)
            assert raised.value.errno == errno.ESTALE
        fd = os.open(Path(m.path) / "other", os.O_RDONLY)
        try:
            first = os.pread(fd, 1 << 20, 0)
            os.unlink(Path(m.path) / "other")
            rest = os.pread(fd, 8 << 20, 1 << 20)
            assert first + rest == old
        finally:
            os.close(fd)
    store.close()
