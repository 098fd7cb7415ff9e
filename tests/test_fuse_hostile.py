"""zfuse under hostile conditions: names a disk would refuse, full disks, typed store errors.

Names: a mount creates what a local disk would (UTF-8, segments of at most
255 bytes), refuses the rest with the errno a local disk gives, and shows in
a listing only names it can also look up, whoever stored them.

Full disks: a store on a small tmpfs or ext4, mounted by the ``zfuse`` daemon (a
SIGBUS or crash of a backend takes the daemon down, not the test), filled by
a child process writing plain files through the mount until the writer gets
an error.  That error must be ENOSPC, every file whose ``close`` succeeded
must read back intact through the mount and from the store after unmount,
and deleting half through the mount must make room for new files.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from mfusepy import FuseOSError

import zfuse
import zstores
from zfuse.operations import StoreOperations, errno_for, name_error
from zstores.errors import (
    CorruptValueError,
    InvalidKeyError,
    ReadOnlyError,
    StoreClosedError,
    StoreConnectionError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
    UnsafePathError,
)

from full_disk import check_acknowledged, check_value, read_log, small_filesystem
from fuse_helpers import make_store, require_fuse, run_zfuse

pytestmark = pytest.mark.timeout(180)

LONGEST = "n" * 255
TOO_LONG = ["n" * 256, "n" * 600, "é" * 128]  # 256, 600 and 256 (two-byte) bytes
NOT_UTF8 = b"caf\xe9"  # Latin-1 "café": not UTF-8


# ---------------------------------------------------------------- errno table
@pytest.mark.parametrize(
    ("error", "code"),
    [
        (StoreFullError("SQLiteStore('x'): the disk is full"), errno.ENOSPC),
        (UnsafePathError("DirectoryStore('d'): 'a' is a symbolic link"), errno.EACCES),
        (StoreIOError("LMDBStore('x'): read failed"), errno.EIO),
        (CorruptValueError("ZipStore('x'): bad CRC"), errno.EIO),
        (StoreConnectionError("RedisStore('redis://h'): refused"), errno.EIO),
        (StoreClosedError("SQLiteStore('x') is closed"), errno.EIO),
        (StoreLockedError("ZipStore('x') is open for writing elsewhere"), errno.EAGAIN),
        (ReadOnlyError("read-only"), errno.EROFS),
        (InvalidKeyError("bad key"), errno.EINVAL),
        (OSError(errno.EDQUOT, "quota"), errno.EDQUOT),
        (PermissionError(errno.EPERM, "immutable"), errno.EPERM),
        (OSError(errno.EMFILE, "the daemon's own descriptors"), None),  # not the user's: EIO
        (RuntimeError("a bug"), None),
    ],
    ids=lambda item: type(item).__name__ if isinstance(item, BaseException) else str(item),
)
def test_typed_store_errors_map_to_deliberate_errnos(error: BaseException,
                                                     code: int | None) -> None:
    assert errno_for(error) == code


def test_name_error_rules() -> None:
    assert name_error("a/" + LONGEST) is None
    assert name_error("é" * 127) is None  # 254 bytes
    for name in TOO_LONG:
        assert name_error(f"a/{name}/b") == errno.ENAMETOOLONG
    assert name_error("a/" + NOT_UTF8.decode("utf-8", "surrogateescape")) == errno.EILSEQ


# ---------------------------------------------------------------- names
def test_every_operation_that_makes_a_name_checks_it_itself() -> None:
    # Through a mount the kernel's lookup answers first; the operations must
    # refuse on their own too (libfuse may skip the lookup, e.g. a cached
    # negative entry, and callers of StoreOperations have no kernel).
    store = zstores.MemoryStore()
    store["src"] = b"value"
    ops = StoreOperations(store, attr_timeout=0)
    fi = SimpleNamespace(flags=os.O_WRONLY | os.O_CREAT, fh=0, keep_cache=0)
    for bad, code in [("/" + TOO_LONG[0], errno.ENAMETOOLONG),
                      ("/" + TOO_LONG[2], errno.ENAMETOOLONG),
                      ("/" + NOT_UTF8.decode("utf-8", "surrogateescape"), errno.EILSEQ)]:
        attempts = {  # bad=bad: each call sees this round's name
            "create": lambda bad=bad: ops.create(bad, 0o644, fi),
            "mknod": lambda bad=bad: ops.mknod(bad, 0o100644, 0),
            "mkdir": lambda bad=bad: ops.mkdir(bad, 0o755),
            "rename": lambda bad=bad: ops.rename("/src", bad),
            "link": lambda bad=bad: ops.link(bad, "/src"),
        }
        for name, attempt in attempts.items():
            with pytest.raises(FuseOSError) as raised:
                attempt()
            assert raised.value.errno == code, (name, bad)
    assert dict(store) == {"src": b"value"}


@pytest.fixture(params=["memory", "directory", "sqlite", "lmdb", "redis", "mongodb"])
def mounted_store(request: pytest.FixtureRequest, tmp_path: Path,
                  mountpoint: Path) -> Iterator[tuple[zstores.Store, Path]]:
    store = make_store(request.param, tmp_path / "store")
    try:
        with zfuse.mounted(store, mountpoint, attr_timeout=0) as mount:
            yield store, Path(mount.path)
    finally:
        store.close()


def _errno_of(call, *args) -> int | None:
    try:
        call(*args)
    except OSError as error:
        return error.errno
    return None


def _create(path: Path | bytes) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))


def test_names_longer_than_255_bytes_are_refused_where_names_are_made(
        mounted_store: tuple[zstores.Store, Path]) -> None:
    store, root = mounted_store
    folder = root / "d"
    folder.mkdir()
    (folder / "src").write_bytes(b"value")
    (folder / LONGEST).write_bytes(b"longest")  # 255 bytes is a name like any other
    for name in TOO_LONG:
        long = folder / name
        assert _errno_of(_create, long) == errno.ENAMETOOLONG
        assert _errno_of(long.write_bytes, b"x") == errno.ENAMETOOLONG
        assert _errno_of(os.mkdir, long) == errno.ENAMETOOLONG
        assert _errno_of(os.mknod, long, 0o644 | 0o100000) == errno.ENAMETOOLONG
        assert _errno_of(os.rename, folder / "src", long) == errno.ENAMETOOLONG
        assert _errno_of(os.link, folder / "src", long) == errno.ENAMETOOLONG
        assert _errno_of(os.mkdir, folder / name / "below") == errno.ENAMETOOLONG
    assert sorted(os.listdir(folder)) == sorted(["src", LONGEST])
    assert sorted(store.listdir("d")) == sorted(["src", LONGEST])
    assert store["d/" + LONGEST] == b"longest"


def test_names_that_are_not_utf8_are_refused_never_stored(
        mounted_store: tuple[zstores.Store, Path]) -> None:
    store, root = mounted_store
    (root / "d").mkdir()
    (root / "d" / "src").write_bytes(b"value")
    folder = os.fsencode(root / "d")
    bad = folder + b"/" + NOT_UTF8
    assert _errno_of(_create, bad) == errno.EILSEQ
    assert _errno_of(os.mkdir, bad) == errno.EILSEQ
    assert _errno_of(os.mknod, bad, 0o644 | 0o100000) == errno.EILSEQ
    assert _errno_of(os.rename, folder + b"/src", bad) == errno.EILSEQ
    assert _errno_of(os.link, folder + b"/src", bad) == errno.EILSEQ
    assert _errno_of(os.stat, bad) == errno.ENOENT
    assert os.listdir(folder) == [b"src"]
    assert list(store.keys()) == ["d/src"]


def test_keys_stored_with_long_segments_are_reachable_by_the_library_not_the_mount(
        mounted_store: tuple[zstores.Store, Path]) -> None:
    store, root = mounted_store
    long = "x" * 300
    try:
        store[f"d/{long}"] = b"file with a long name"
        store[f"d/{long}2/k"] = b"below a folder with a long name"
    except InvalidKeyError:
        pytest.skip(f"{type(store).__name__} refuses segments longer than 255 bytes itself")
    store["d/ok"] = b"ok"
    assert os.listdir(root / "d") == ["ok"]  # the listing shows only what open can reach
    assert _errno_of(os.stat, root / "d" / long) == errno.ENAMETOOLONG
    assert _errno_of(os.stat, root / "d" / f"{long}2") == errno.ENAMETOOLONG
    assert store[f"d/{long}"] == b"file with a long name"  # the library still reads them
    assert store[f"d/{long}2/k"] == b"below a folder with a long name"


def test_a_big_folder_of_keys_lists_without_the_names_the_mount_cannot_reach(
        mounted_store: tuple[zstores.Store, Path]) -> None:
    # Past 256 names a folder of keys is listed by one prefix scan, and names
    # are checked all at once; one long name among them must still be left out.
    store, root = mounted_store
    for folder, name in (("ascii", "x" * 300), ("utf8", "é" * 128)):  # 300 and 256 bytes
        store.setitems({f"{folder}/{i}": b"k" for i in range(300)})
        try:
            store[f"{folder}/{name}"] = b"a name longer than 255 bytes"
        except InvalidKeyError:
            pytest.skip(f"{type(store).__name__} refuses segments longer than 255 bytes itself")
        assert sorted(os.listdir(root / folder)) == sorted(str(i) for i in range(300))
        with os.scandir(root / folder) as entries:
            for entry in entries:
                assert entry.inode() == entry.stat(follow_symlinks=False).st_ino


@pytest.mark.filterwarnings("ignore:.*not valid UTF-8:UserWarning")  # the store's own note
def test_stray_names_in_a_folder_store_that_are_not_utf8_are_not_listed(
        tmp_path: Path, mountpoint: Path) -> None:
    store = zstores.DirectoryStore(tmp_path / "data")
    store["d/ok"] = b"ok"
    # Another program leaves a file whose name is Latin-1 in the store's folder.
    with open(os.fsencode(tmp_path / "data" / "d") + b"/" + NOT_UTF8, "wb") as stray:
        stray.write(b"stray")
    with zfuse.mounted(store, mountpoint, attr_timeout=0) as mount:
        assert os.listdir(os.fsencode(Path(mount.path) / "d")) == [b"ok"]
    store.close()


# ---------------------------------------------------------------- full disks
# The writer: plain file I/O through the mount, one file per value, until an
# operation fails; each file whose close succeeded is logged (fsynced, on
# another file system) before the next one starts.
_WRITER = r"""
import json, os, sys
sys.path.insert(0, TESTS)
from full_disk import make_value

log = open(LOG, "a")
report = {"errno": None, "step": None, "message": ""}
first = None
for n in range(MAX_FILES):
    key = f"{PREFIX}{n:06d}"
    path = os.path.join(MOUNT, key)
    step = "open"
    try:
        with open(path, "wb") as file:
            step = "write"
            file.write(make_value(key, SERIAL, SIZE))
            step = "close"
    except OSError as error:
        report.update(errno=error.errno, step=step, message=str(error))
        break
    log.write(json.dumps([key, SERIAL]) + "\n")
    log.flush(); os.fsync(log.fileno())
    first = first or key
if report["errno"] is not None and first is not None:
    # Overwrite a file whose close succeeded with a bigger value on the full
    # disk: it fails (the old value must stay) or succeeds (the new one must read back).
    try:
        with open(os.path.join(MOUNT, first), "wb") as file:
            file.write(make_value(first, SERIAL + 1, SIZE * 4))
    except OSError as error:
        report["overwrite"] = f"failed: {error.errno}"
    else:
        report["overwrite"] = "succeeded"
        log.write(json.dumps([first, SERIAL + 1]) + "\n")
        log.flush(); os.fsync(log.fileno())
print("__REPORT__" + json.dumps(report))
"""


def write_through_mount(mount: Path, log: Path, *, prefix: str, serial: int = 1,
                        size: int = 64 << 10, max_files: int = 100_000) -> dict:
    """Run the writer in a child process; its report (errno, step, overwrite)."""
    program = "\n".join([
        f"TESTS = {str(Path(__file__).parent)!r}", f"LOG = {str(log)!r}",
        f"MOUNT = {str(mount)!r}", f"PREFIX = {prefix!r}", f"SERIAL = {serial}",
        f"SIZE = {size}", f"MAX_FILES = {max_files}", textwrap.dedent(_WRITER),
    ])
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0 and "__REPORT__" in done.stdout, done.stderr[-3000:]
    return json.loads(done.stdout.rsplit("__REPORT__", 1)[1])


@pytest.fixture
def daemon_mount(mountpoint: Path, tmp_path: Path) -> Iterator[Callable[[str, Path], Path]]:
    """Start ``zfuse mount URL`` daemons; every one is unmounted after the test."""
    mounted: list[Path] = []

    def start(url: str, where: Path) -> Path:
        done = run_zfuse("mount", url, str(where), "--create", "--attr-timeout", "0",
                         "--log-file", str(tmp_path / "zfuse.log"))
        assert done.returncode == 0, done.stderr
        mounted.append(where)
        return where

    yield start
    for where in mounted:
        if zfuse.is_mounted(where):
            done = run_zfuse("unmount", str(where))
            if done.returncode != 0:
                subprocess.run(["fusermount", "-u", "-z", str(where)], capture_output=True,
                               check=False)


def _stop(mount: Path) -> None:
    done = run_zfuse("unmount", str(mount))
    assert done.returncode == 0, f"unmount failed: {done.stderr}"


FULL_DISK_STORES = {
    "directory": ("file://{fs}/data", lambda fs: zstores.DirectoryStore(fs / "data")),
    "sqlite": ("sqlite://{fs}/data.sqlite",
               lambda fs: zstores.open_store(f"sqlite://{fs}/data.sqlite")),
    "lmdb": ("lmdb://{fs}/data.lmdb", lambda fs: zstores.open_store(f"lmdb://{fs}/data.lmdb")),
}


@pytest.mark.parametrize("filesystem", ["tmpfs", "ext4"])
@pytest.mark.parametrize("kind", sorted(FULL_DISK_STORES))
def test_full_disk_through_a_mount_is_enospc_and_loses_nothing(
        kind: str, filesystem: str, mountpoint: Path, tmp_path: Path, daemon_mount) -> None:
    require_fuse()
    url_pattern, open_store = FULL_DISK_STORES[kind]
    log = tmp_path / "acknowledged.jsonl"
    with small_filesystem(16, filesystem) as fs:
        url = url_pattern.format(fs=fs)
        mount = daemon_mount(url, mountpoint)
        os.mkdir(mount / "k")
        report = write_through_mount(mount, log, prefix="k/")
        acknowledged = read_log(log)
        daemon_log = tmp_path / "zfuse.log"
        daemon_log = daemon_log.read_text() if daemon_log.exists() else ""
        assert report["errno"] is not None, "the disk never filled up"
        assert report["errno"] == errno.ENOSPC, (
            f"a full disk reached the writer as {errno.errorcode.get(report['errno'])} "
            f"at {report['step']}: {report['message']}\n{daemon_log[-2000:]}"
        )
        assert report["step"] == "close", report  # the value is committed at flush (close)
        assert re.search(r"WARNING flush /k/\d+ \(open file\) failed: ", daemon_log), (
            f"the daemon's log does not name the file that did not fit:\n{daemon_log[-2000:]}"
        )
        assert len(acknowledged) > 10, "hardly anything was written before the disk was full"

        # Every file whose close succeeded reads back intact through the mount;
        # an overwrite whose close failed left the old value.
        for key, serial in acknowledged.items():
            assert check_value(key, (mount / key).read_bytes()) >= serial
        assert report.get("overwrite") in ("succeeded", f"failed: {errno.ENOSPC}"), report
        if report["overwrite"] != "succeeded":
            first = min(acknowledged)
            assert check_value(first, (mount / first).read_bytes()) == 1

        # Delete half through the mount: the freed room takes new files.
        keys = sorted(acknowledged)
        doomed, kept = keys[::2], {key: acknowledged[key] for key in keys[1::2]}
        for key in doomed:
            os.unlink(mount / key)
        os.mkdir(mount / "again")
        again_log = tmp_path / "again.jsonl"
        again = write_through_mount(mount, again_log, prefix="again/", serial=2,
                                    max_files=min(20, len(doomed)))
        assert again["errno"] is None, f"writing after deleting half failed: {again}"
        fresh = read_log(again_log)
        assert len(fresh) == min(20, len(doomed))
        _stop(mount)

        # And directly from the store, after the daemon closed it.
        with open_store(fs) as store:
            check_acknowledged(store, kept)
            check_acknowledged(store, fresh)
            assert not any(key in store for key in doomed)
