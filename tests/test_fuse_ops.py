"""Every file operation through a real FUSE mount, on every backend.

One mount per backend serves the whole module (``fs``); each test works in a
folder of its own inside it, made with ``mkdir`` through the mount.
"""

from __future__ import annotations

import concurrent.futures
import errno
import os
import shutil
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import zfuse

from conftest import missing_peer
from fuse_helpers import BACKENDS, keys_under, make_store, require_fuse

pytestmark = pytest.mark.timeout(120)


class Mounted:
    def __init__(self, kind: str, store: object, path: Path) -> None:
        self.kind, self.store, self.path = kind, store, path


@pytest.fixture(scope="module", params=BACKENDS)
def fs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    require_fuse()
    kind = request.param
    root = tmp_path_factory.mktemp(f"fuse-{kind}")
    store = make_store(kind, root / "store")
    mountpoint = root / "mnt"
    mountpoint.mkdir()
    try:
        with zfuse.mounted(store, mountpoint) as mount:
            yield Mounted(kind, store, Path(mount.path))
    finally:
        store.close()


@pytest.fixture
def d(fs: Mounted, request: pytest.FixtureRequest) -> Path:
    """A fresh folder for this test inside the mount (its name is the key prefix)."""
    folder = fs.path / f"{request.node.originalname}-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    return folder


def key(fs: Mounted, path: Path) -> str:
    return str(path.relative_to(fs.path))


def value(fs: Mounted, path: Path) -> bytes:
    return bytes(fs.store[key(fs, path)])


def run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, f"{command} failed: {done.stderr}"
    return done


# ---------------------------------------------------------------- contents
def test_write_then_read_through_mount_and_store(fs: Mounted, d: Path) -> None:
    data = os.urandom(300_001)
    (d / "a.bin").write_bytes(data)
    assert value(fs, d / "a.bin") == data
    assert (d / "a.bin").read_bytes() == data
    assert os.stat(d / "a.bin").st_size == len(data)
    fs.store[key(fs, d / "direct.bin")] = b"written to the store"
    assert os.stat(d / "direct.bin").st_size == 20
    assert (d / "direct.bin").read_bytes() == b"written to the store"
    (d / "empty").write_bytes(b"")
    assert value(fs, d / "empty") == b""
    assert os.stat(d / "empty").st_size == 0


def test_random_writes_sparse_files_truncate_and_append(fs: Mounted, d: Path,
                                                        tmp_path: Path) -> None:
    def exercise(folder: Path) -> bytes:
        path = folder / "f"
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        os.pwrite(fd, b"world", 6)
        os.pwrite(fd, b"hello ", 0)
        os.pwrite(fd, b"!", 40)  # a hole from 11 to 40
        os.ftruncate(fd, 30)
        os.pwrite(fd, b"tail", 26)
        os.close(fd)
        first = path.read_bytes()
        with open(path, "wb") as f:  # O_TRUNC
            f.write(b"new")
        with open(path, "ab") as f:  # O_APPEND
            f.write(b"+more")
        os.truncate(path, 6)
        os.truncate(path, 9)
        return first + b"|" + path.read_bytes()

    expected = exercise(tmp_path)
    assert exercise(d) == expected
    assert value(fs, d / "f") == expected.split(b"|")[1] == b"new+mo\0\0\0"


def test_value_reaches_the_store_whole_at_close_or_fsync(fs: Mounted, d: Path) -> None:
    path = d / "v"
    path.write_bytes(b"old value")
    with open(path, "r+b", buffering=0) as f:
        f.write(b"NEW")
        f.seek(1 << 20)
        f.write(b"END")
        assert value(fs, path) == b"old value"  # nothing half-written reaches the store
    assert value(fs, path) == b"NEW value" + bytes((1 << 20) - 9) + b"END"
    before = value(fs, path)
    with open(path, "wb", buffering=0) as f:  # O_TRUNC empties nothing in the store yet
        assert value(fs, path) == before
        f.write(b"synced")
        assert value(fs, path) == before
        os.fsync(f.fileno())
        assert value(fs, path) == b"synced"


def test_rewrite_is_seen_by_the_next_reader(fs: Mounted, d: Path) -> None:
    path = d / "cached"
    path.write_bytes(b"A" * 100_000)
    assert path.read_bytes() == b"A" * 100_000
    assert path.read_bytes() == b"A" * 100_000  # page cache kept
    path.write_bytes(b"B" * 100_000)
    assert path.read_bytes() == b"B" * 100_000


# ---------------------------------------------------------------- metadata
def test_stat_modes_owner_times_and_statfs(fs: Mounted, d: Path) -> None:
    (d / "f").write_bytes(b"12345")
    file_info, dir_info = os.stat(d / "f"), os.stat(d)
    assert stat.S_ISREG(file_info.st_mode) and stat.S_IMODE(file_info.st_mode) == 0o644
    assert stat.S_ISDIR(dir_info.st_mode) and stat.S_IMODE(dir_info.st_mode) == 0o755
    assert (file_info.st_uid, file_info.st_gid) == (os.getuid(), os.getgid())
    assert (dir_info.st_uid, dir_info.st_gid) == (os.getuid(), os.getgid())
    assert file_info.st_size == 5 and file_info.st_blocks == 1
    again = os.stat(d / "f")
    assert (again.st_ino, again.st_mtime_ns) == (file_info.st_ino, file_info.st_mtime_ns)
    info = os.statvfs(fs.path)
    assert info.f_bsize > 0 and info.f_blocks > 0 and info.f_namemax == 255


def test_ls_find_du_stat_and_cat(fs: Mounted, d: Path) -> None:
    os.makedirs(d / "a" / "b")
    (d / "a" / "one").write_bytes(b"x" * 10)
    (d / "a" / "b" / "two").write_bytes(b"y" * 2000)
    (d / "zero").write_bytes(b"")
    listing = run("ls", "-la", d / "a").stdout
    assert " one" in listing and " b" in listing and listing.startswith("total")
    found = set(run("find", d, "-type", "f").stdout.split())
    assert found == {str(d / "a" / "one"), str(d / "a" / "b" / "two"), str(d / "zero")}
    dirs = set(run("find", d, "-type", "d").stdout.split())
    assert dirs == {str(d), str(d / "a"), str(d / "a" / "b")}
    assert run("du", "-sb", "--apparent-size", d).stdout.split()[0] == "2010"
    assert run("stat", "-c", "%s %F", d / "a" / "b" / "two").stdout.strip() == "2000 regular file"
    assert run("cat", d / "a" / "one").stdout == "x" * 10


def test_mkdir_lives_without_keys_and_rmdir_rules(fs: Mounted, d: Path) -> None:
    (d / "empty").mkdir()
    assert os.listdir(d) == ["empty"] and keys_under(fs.store, key(fs, d)) == set()
    with pytest.raises(FileExistsError):
        (d / "empty").mkdir()
    os.makedirs(d / "x" / "y" / "z")
    assert os.path.isdir(d / "x" / "y" / "z")
    (d / "full").mkdir()
    (d / "full" / "f").write_bytes(b"1")
    with pytest.raises(OSError) as raised:
        os.rmdir(d / "full")
    assert raised.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as raised:
        os.rmdir(d / "x")
    assert raised.value.errno == errno.ENOTEMPTY  # only empty sub-directories, no keys
    os.rmdir(d / "empty")
    assert "empty" not in os.listdir(d)
    with pytest.raises(FileNotFoundError):
        os.rmdir(d / "missing")
    shutil.rmtree(d / "full")
    shutil.rmtree(d / "x")
    assert os.listdir(d) == [] and keys_under(fs.store, key(fs, d)) == set()


def test_rename_files_and_directories(fs: Mounted, d: Path) -> None:
    (d / "a").write_bytes(b"A")
    (d / "b").write_bytes(b"B")
    os.rename(d / "a", d / "c")
    os.replace(d / "b", d / "c")
    assert keys_under(fs.store, key(fs, d)) == {"c"} and value(fs, d / "c") == b"B"
    os.makedirs(d / "dir" / "sub")
    (d / "dir" / "x").write_bytes(b"x")
    (d / "dir" / "sub" / "y").write_bytes(b"y")
    os.rename(d / "dir", d / "moved")
    assert keys_under(fs.store, key(fs, d)) == {"c", "moved/x", "moved/sub/y"}
    assert (d / "moved" / "sub" / "y").read_bytes() == b"y"
    assert not (d / "dir").exists()
    (d / "other").mkdir()
    (d / "other" / "z").write_bytes(b"z")
    with pytest.raises(OSError) as raised:
        os.rename(d / "moved", d / "other")
    assert raised.value.errno == errno.ENOTEMPTY
    with pytest.raises(IsADirectoryError):
        os.rename(d / "c", d / "other")
    run("mv", d / "c", d / "moved" / "c2")
    assert value(fs, d / "moved" / "c2") == b"B"
    (d / "emptydir").mkdir()
    os.rename(d / "emptydir", d / "renamed-empty")
    assert os.path.isdir(d / "renamed-empty") and not (d / "emptydir").exists()


def test_write_temp_then_rename_leaves_only_the_keys(fs: Mounted, d: Path) -> None:
    for round_ in range(3):
        for name in ("0.0", "0.1", ".zarray"):
            temp = d / f".{name}.{uuid.uuid4().hex}.partial"
            temp.write_bytes(f"{name}:{round_}".encode())
            os.replace(temp, d / name)
    assert keys_under(fs.store, key(fs, d)) == {"0.0", "0.1", ".zarray"}
    assert value(fs, d / "0.1") == b"0.1:2"


def test_link_copies_the_value_and_refuses_an_existing_name(fs: Mounted, d: Path) -> None:
    (d / "src").write_bytes(b"payload")
    os.link(d / "src", d / "dst")
    with pytest.raises(FileExistsError):
        os.link(d / "src", d / "dst")
    os.unlink(d / "src")
    assert keys_under(fs.store, key(fs, d)) == {"dst"} and value(fs, d / "dst") == b"payload"


def test_links_devices_and_xattrs_refused_metadata_changes_accepted(fs: Mounted,
                                                                   d: Path) -> None:
    path = d / "f"
    path.write_bytes(b"data")
    with pytest.raises(PermissionError):
        os.symlink(path, d / "link")
    with pytest.raises(PermissionError):
        os.mkfifo(d / "fifo")
    with pytest.raises(PermissionError):
        os.mknod(d / "dev", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    for attempt in (lambda: os.setxattr(path, "user.x", b"1"),
                    lambda: os.getxattr(path, "user.x")):
        with pytest.raises(OSError) as raised:
            attempt()
        assert raised.value.errno == errno.EOPNOTSUPP
    os.chmod(path, 0o600)
    os.chown(path, os.getuid(), os.getgid())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # accepted, without effect
    os.utime(path, ns=(1_000_000_000, 1_600_000_000_123_456_789))
    assert os.stat(path).st_mtime_ns == 1_600_000_000_123_456_789
    assert keys_under(fs.store, key(fs, d)) == {"f"}


def test_unlinked_open_files_read_on_and_leave_no_hidden_keys(fs: Mounted, d: Path) -> None:
    (d / "r").write_bytes(b"still readable")
    with open(d / "r", "rb") as reader, open(d / "w", "wb") as writer:
        os.unlink(d / "r")
        writer.write(b"never stored")
        os.unlink(d / "w")
        assert os.listdir(d) == []  # while still open: no .fuse_hidden* entries or keys
        assert keys_under(fs.store, key(fs, d)) == set()
        assert reader.read() == b"still readable"
    assert os.listdir(d) == []
    assert keys_under(fs.store, key(fs, d)) == set()
    assert not any(".fuse_hidden" in k for k in fs.store)


def test_identity_changes_exactly_when_the_value_is_replaced(fs: Mounted, d: Path) -> None:
    def identity(path: Path) -> tuple[int, int]:
        info = os.stat(path)
        return info.st_ino, info.st_mtime_ns

    (d / "k").write_bytes(b"one")
    (d / "steady").write_bytes(b"same")
    first, steady = identity(d / "k"), identity(d / "steady")
    assert identity(d / "k") == first
    (d / "k").write_bytes(b"two")  # replaced in place: same inode, new mtime
    second = identity(d / "k")
    assert second[1] != first[1]
    temp = d / "k.tmp"
    temp.write_bytes(b"three")
    os.replace(temp, d / "k")  # replaced by rename
    assert identity(d / "k") not in (first, second)
    assert identity(d / "steady") == steady


def test_names_the_store_refuses_are_einval(fs: Mounted, d: Path) -> None:
    with pytest.raises(OSError) as raised:
        (d / "back\\slash").write_bytes(b"x")  # the store would keep it as back/slash
    assert raised.value.errno == errno.EINVAL
    assert keys_under(fs.store, key(fs, d)) == set()


# ---------------------------------------------------------------- tools
def test_cp_r_cp_a_rsync_and_mv_as_on_a_local_disk(fs: Mounted, d: Path,
                                                   tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "nested" / "deeper").mkdir(parents=True)
    (source / "empty.txt").write_bytes(b"")
    (source / "small.txt").write_text("hello")
    (source / "nested" / "big.bin").write_bytes(os.urandom(1_500_000))
    (source / "nested" / "deeper" / "x.json").write_text('{"a": 1}')
    os.utime(source / "small.txt", ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    run("cp", "-r", source, d / "cp-r")
    run("cp", "-a", source, d / "cp-a")
    run("diff", "-r", source, d / "cp-r")
    run("diff", "-r", source, d / "cp-a")
    assert os.stat(d / "cp-a" / "small.txt").st_mtime_ns == 1_500_000_000_000_000_000
    if shutil.which("rsync") is None:
        missing_peer("rsync is not installed")
    run("rsync", "-a", f"{source}/", f"{d / 'rsync'}/")
    run("diff", "-r", source, d / "rsync")
    again = run("rsync", "-ai", f"{source}/", f"{d / 'rsync'}/").stdout
    assert not [line for line in again.splitlines() if line.startswith(">f")]  # nothing re-sent
    outside = tmp_path / "outside.txt"
    outside.write_text("moved in")
    run("mv", outside, d / "moved.txt")
    assert not outside.exists() and value(fs, d / "moved.txt") == b"moved in"
    files = {"empty.txt", "small.txt", "nested/big.bin", "nested/deeper/x.json"}
    expected = {f"{copy}/{name}" for copy in ("cp-r", "cp-a", "rsync") for name in files}
    assert keys_under(fs.store, key(fs, d)) == expected | {"moved.txt"}


def test_concurrent_writers_from_threads_and_processes(fs: Mounted, d: Path) -> None:
    payloads = {f"t{i}": os.urandom(1000 + 7919 * i) for i in range(24)}

    def write(name: str) -> None:
        (d / name).write_bytes(payloads[name])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(write, payloads))
    script = (
        "import sys, hashlib\n"
        "for i in range(12):\n"
        "    data = hashlib.sha256(f'{sys.argv[2]}{i}'.encode()).digest() * (100 + i)\n"
        "    open(f'{sys.argv[1]}/{sys.argv[2]}{i}', 'wb').write(data)\n"
    )
    writers = [subprocess.Popen([sys.executable, "-c", script, str(d), f"p{n}-"])
               for n in range(3)]
    assert [w.wait(timeout=60) for w in writers] == [0, 0, 0]
    import hashlib

    for n in range(3):
        for i in range(12):
            payloads[f"p{n}-{i}"] = hashlib.sha256(f"p{n}-{i}".encode()).digest() * (100 + i)
    assert keys_under(fs.store, key(fs, d)) == set(payloads)
    for name, data in payloads.items():
        assert value(fs, d / name) == data
        assert (d / name).read_bytes() == data


def test_same_files_written_at_once_store_sees_only_whole_values(fs: Mounted, d: Path) -> None:
    import hashlib
    import random
    import threading

    def make(tag: str, repeat: int) -> bytes:
        return hashlib.sha256(tag.encode()).digest() * repeat

    names = [f"k{i}" for i in range(4)]
    finished = {name: {make(f"{name}-start", 500)} for name in names}
    for name in names:
        (d / name).write_bytes(make(f"{name}-start", 500))
    lock, seen_torn, failures, done = threading.Lock(), [], [], threading.Event()

    def rewrite(path: Path, data: bytes) -> None:
        # libfuse's path-based open answers ENOENT (libfuse 2) or ESTALE
        # (libfuse 3) for a file whose name another thread's rename replaced
        # between lookup and open: retry then, backing off so the renaming
        # threads get ahead.
        for attempt in range(200):
            try:
                with open(path, "wb") as f:
                    f.writelines(data[start:start + 7000] for start in range(0, len(data), 7000))
                return
            except OSError as error:
                if error.errno not in (errno.ENOENT, errno.ESTALE):
                    raise
                time.sleep(min(0.05, 0.001 * attempt))
        raise AssertionError(f"{path} could not be opened in 200 attempts")

    def writer(number: int) -> None:
        pick = random.Random(number)
        try:
            for round_ in range(10):
                name = pick.choice(names)
                data = make(f"{name}-{number}-{round_}", pick.choice([100, 500, 2000]))
                with lock:
                    finished[name].add(data)
                if round_ % 2:  # in place, in pieces
                    rewrite(d / name, data)
                else:  # temporary file, then rename
                    temp = d / f".{name}.{number}.{round_}.tmp"
                    temp.write_bytes(data)
                    os.replace(temp, d / name)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            failures.append(error)

    def store_reader() -> None:
        try:
            while not done.is_set():
                for name in names:
                    data = value(fs, d / name)
                    with lock:
                        if data not in finished[name]:
                            seen_torn.append((name, len(data)))
        except BaseException as error:  # noqa: BLE001 - reported by the test
            failures.append(error)

    reader = threading.Thread(target=store_reader)
    reader.start()
    writers = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    reader.join()
    assert failures == []
    assert seen_torn == []
    assert keys_under(fs.store, key(fs, d)) == set(names)
    for name in names:
        assert (d / name).read_bytes() == value(fs, d / name) in finished[name]


# ---------------------------------------------------------------- read-only
def test_read_only_mount_refuses_changes_with_erofs(fs: Mounted, d: Path,
                                                     tmp_path: Path) -> None:
    (d / "f").write_bytes(b"kept")
    other = tmp_path / "ro"
    other.mkdir()
    with zfuse.mounted(fs.store, other, read_only=True) as ro:
        inside = Path(ro.path) / d.name
        assert (inside / "f").read_bytes() == b"kept"
        assert stat.S_IMODE(os.stat(inside / "f").st_mode) == 0o444
        for change in (lambda: (inside / "f").write_bytes(b"x"),
                       lambda: (inside / "new").write_bytes(b"x"),
                       lambda: os.mkdir(inside / "dir"),
                       lambda: os.unlink(inside / "f"),
                       lambda: os.rename(inside / "f", inside / "g")):
            with pytest.raises(OSError) as raised:
                change()
            assert raised.value.errno == errno.EROFS
    assert keys_under(fs.store, key(fs, d)) == {"f"} and value(fs, d / "f") == b"kept"
