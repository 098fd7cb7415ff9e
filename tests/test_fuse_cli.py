"""The ``zfuse`` command: daemon start, errors before mounting, kill -9, foreground signals."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import zfuse
from zstores import ZipStore
from zstores.stores.lmdb import LMDBStore
from zstores.stores.sqlite import SQLiteStore

from conftest import missing_peer
from fuse_helpers import ZFUSE, require_fuse, run_zfuse, zfuse_mounts

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def mountpoint(tmp_path: Path) -> Iterator[Path]:
    require_fuse()
    path = tmp_path / "mnt"
    path.mkdir()
    yield path
    if zfuse.is_mounted(path):  # a failed test: never leave the mount behind
        subprocess.run(["fusermount", "-u", "-z", str(path)], capture_output=True, check=False)


def _daemon_pid(output: str) -> int:
    found = re.search(r"daemon pid (\d+)", output)
    assert found, output
    return int(found.group(1))


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as info:
        return info.read().rpartition(")")[2].split()[0] == "Z"


def test_mount_goes_to_the_background_and_unmount_waits_for_the_store(tmp_path: Path,
                                                                     mountpoint: Path) -> None:
    archive = tmp_path / "data.zip"
    with ZipStore(archive) as store:
        store["arr/.zarray"] = b"{}"
    done = run_zfuse("mount", f"zip://{archive}", str(mountpoint))
    assert done.returncode == 0, done.stderr
    assert f"zfuse unmount {mountpoint}" in done.stdout
    pid = _daemon_pid(done.stdout)
    assert os.listdir(mountpoint / "arr") == [".zarray"]  # answers as soon as it returns
    (mountpoint / "arr" / "0.0").write_bytes(b"chunk")
    done = run_zfuse("unmount", str(mountpoint))
    assert done.returncode == 0, done.stderr
    assert not zfuse.is_mounted(mountpoint) and _gone(pid)
    with ZipStore(archive, mode="r") as store:  # complete: the daemon closed it first
        assert dict(store) == {"arr/.zarray": b"{}", "arr/0.0": b"chunk"}


def test_mount_options_reach_the_mount(tmp_path: Path, mountpoint: Path) -> None:
    store_path = tmp_path / "data.sqlite"
    with SQLiteStore(store_path) as store:
        store["f"] = b"x"
    done = run_zfuse("mount", f"sqlite://{store_path}", str(mountpoint), "--read-only",
                     "--allow-other", "--attr-timeout", "5", "-o", "max_read=65536")
    assert done.returncode == 0, done.stderr
    try:
        with open("/proc/self/mounts") as table:
            entry = next(line for line in table if f" {mountpoint} " in line)
        assert "allow_other" in entry and "max_read=65536" in entry and " ro," in entry
        assert (mountpoint / "f").read_bytes() == b"x"
        with pytest.raises(OSError, match="Read-only"):
            (mountpoint / "g").write_bytes(b"y")
    finally:
        assert run_zfuse("unmount", str(mountpoint)).returncode == 0


@pytest.mark.parametrize("problem", ["missing", "not-empty", "already-mounted", "bad-url",
                                     "no-such-store", "no-such-store-rw", "bad-fuse-option"])
def test_bad_input_is_one_line_and_mounts_nothing(problem: str, tmp_path: Path,
                                                  mountpoint: Path) -> None:
    url, target = f"lmdb://{tmp_path / 'data.lmdb'}", mountpoint
    if problem == "missing":
        target = tmp_path / "no-such-dir"
    elif problem == "not-empty":
        (mountpoint / "something").write_text("x")
    elif problem == "bad-url":
        url = "nosuchscheme://x"
    elif problem == "no-such-store":
        url = f"sqlite://{tmp_path / 'missing.sqlite'}"
    holder = None
    if problem == "already-mounted":
        other = SQLiteStore(tmp_path / "other.sqlite")
        holder = zfuse.mount(other, mountpoint, foreground=False)
    def ours() -> list[str]:  # other tests and workers mount elsewhere meanwhile
        return [path for path in zfuse_mounts() if path.startswith(str(tmp_path))]

    before = ours()
    try:
        extra = {"no-such-store": ["--read-only"], "no-such-store-rw": [],
                 "bad-fuse-option": ["--create", "-o", "no_such_option"]}
        args = ["mount", url, str(target), *extra.get(problem, ["--create"])]
        done = run_zfuse(*args)
    finally:
        after = ours()
        if holder is not None:
            holder.unmount()
            other.close()
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zfuse: error: "), done.stderr
    if problem == "bad-fuse-option":
        assert "no_such_option" in lines[0]  # libfuse's own reason, on the same line
    if problem == "no-such-store-rw":  # a mistyped path creates nothing
        assert lines == [f"zfuse: error: no store at {url}; use --create to make one"]
        assert not (tmp_path / "data.lmdb").exists()
    assert after == before


def test_killed_daemon_leaves_a_mount_unmount_clears_and_completed_writes(
        tmp_path: Path, mountpoint: Path) -> None:
    store_path = tmp_path / "data.lmdb"
    done = run_zfuse("mount", f"lmdb://{store_path}", str(mountpoint), "--create")
    assert done.returncode == 0, done.stderr
    pid = _daemon_pid(done.stdout)
    for i in range(20):
        (mountpoint / f"k{i}").write_bytes(f"value {i}".encode() * 1000)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(OSError):
        os.listdir(mountpoint)  # the dead mount: "Transport endpoint is not connected"
    assert zfuse.is_mounted(mountpoint)
    done = run_zfuse("unmount", str(mountpoint))
    assert done.returncode == 0, done.stderr
    assert not zfuse.is_mounted(mountpoint) and os.listdir(mountpoint) == []
    with LMDBStore(store_path, mode="r") as store:
        assert dict(store) == {f"k{i}": f"value {i}".encode() * 1000 for i in range(20)}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_foreground_mount_unmounts_cleanly_on_a_signal(signum: int, tmp_path: Path,
                                                      mountpoint: Path) -> None:
    store_path = tmp_path / "data.sqlite"
    process = subprocess.Popen([*ZFUSE, "mount", f"sqlite://{store_path}", str(mountpoint),
                                "--foreground", "--create"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not zfuse.is_mounted(mountpoint) and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.05)
        (mountpoint / "written").write_bytes(b"before the signal")
        process.send_signal(signum)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not zfuse.is_mounted(mountpoint)
    with SQLiteStore(store_path, mode="r") as store:
        assert dict(store) == {"written": b"before the signal"}


@pytest.mark.parametrize("major", ["2", "3"])
def test_each_libfuse_version_mounts_reads_and_writes(major: str, tmp_path: Path,
                                                     mountpoint: Path) -> None:
    """ZFUSE_LIBFUSE picks the library; both serve the same mount (the other is the fallback)."""
    env = {"ZFUSE_LIBFUSE": major}
    version = subprocess.run([sys.executable, "-c", "import zfuse; print(zfuse.libfuse_version())"],
                             capture_output=True, text=True, timeout=60, check=False,
                             env={**os.environ, **env})
    if version.returncode != 0 and "libfuse" in version.stderr.lower():
        missing_peer(f"libfuse {major} is not installed: {version.stderr.strip()[-200:]}")
    assert version.stdout.startswith(f"({major}, "), version.stderr
    store_path = tmp_path / "data.lmdb"
    with LMDBStore(store_path) as store:
        store["a/b"] = b"stored"
    done = run_zfuse("mount", f"lmdb://{store_path}", str(mountpoint), env=env)
    assert done.returncode == 0, done.stderr
    try:
        assert (mountpoint / "a" / "b").read_bytes() == b"stored"
        (mountpoint / "a" / "c").write_bytes(b"written")
        os.truncate(mountpoint / "a" / "c", 4)
        assert sorted(os.listdir(mountpoint / "a")) == ["b", "c"]
    finally:
        assert run_zfuse("unmount", str(mountpoint)).returncode == 0
    with LMDBStore(store_path, mode="r") as store:
        assert dict(store) == {"a/b": b"stored", "a/c": b"writ"}


def test_an_unknown_libfuse_version_is_a_clear_error() -> None:
    done = run_zfuse("--help", env={"ZFUSE_LIBFUSE": "4"})
    assert done.returncode != 0
    assert "ZFUSE_LIBFUSE must be 2 or 3" in done.stderr.strip().splitlines()[-1]


def test_python_dash_m_and_the_console_script_agree() -> None:
    via_module = subprocess.run([sys.executable, "-m", "zfuse", "--help"], capture_output=True,
                                text=True, timeout=60, check=False)
    assert via_module.returncode == 0 and "mount" in via_module.stdout
    assert run_zfuse("unmount", "/definitely/not/mounted").stderr.startswith("zfuse: error:")


def test_daemon_logs_refused_operations_to_the_log_file(tmp_path: Path,
                                                       mountpoint: Path) -> None:
    log = tmp_path / "logs" / "zfuse.log"
    log.parent.mkdir()
    done = run_zfuse("mount", "memory://", str(mountpoint), "--log-file", str(log))
    assert done.returncode == 0, done.stderr
    try:
        with pytest.raises(OSError):
            (mountpoint / "back\\slash").write_bytes(b"x")
    finally:
        assert run_zfuse("unmount", str(mountpoint)).returncode == 0
    logged = log.read_text()
    assert "WARNING refused name '/back" in logged and "back/slash" in logged


# ------------------------------------------------------------ first contact
def _listed(*extra: str) -> list[dict[str, object]]:
    done = run_zfuse("list", "--json", *extra)
    assert done.returncode == 0 and not done.stderr, done.stderr
    return json.loads(done.stdout)


def _password_url(tmp_path: Path) -> tuple[str, str]:
    """A store URL with a password that opens, and the password: Redis's default user
    takes any password when none is configured (``nopass``)."""
    base = os.environ.get("ZSTORES_TEST_REDIS_URL")
    if not base:
        missing_peer("ZSTORES_TEST_REDIS_URL is not set: no Redis to mount with a password")
    secret = f"s3cret{os.getpid()}"
    url = base.replace("redis://", f"redis://default:{secret}@", 1)
    return f"{url}?prefix=zfuse_list_{tmp_path.name}", secret


def test_list_shows_each_mount_with_its_redacted_url_and_daemon_and_forgets_it(
        tmp_path: Path, mountpoint: Path) -> None:
    second = tmp_path / "mnt2"
    second.mkdir()
    with_password, secret = _password_url(tmp_path)
    store_path = tmp_path / "data.sqlite"
    first = run_zfuse("mount", f"sqlite://{store_path}", str(mountpoint), "--read-only")
    assert first.returncode != 0  # read-only and missing: nothing mounted
    with SQLiteStore(store_path) as store:
        store["a"] = b"1"
    mounted = []
    try:
        for url, target, extra in [(f"sqlite://{store_path}", mountpoint, ["--read-only"]),
                                   (with_password, second, [])]:
            done = run_zfuse("mount", url, str(target), *extra)
            assert done.returncode == 0, done.stderr
            mounted.append((target, _daemon_pid(done.stdout)))
        ours = {entry["mountpoint"]: entry for entry in _listed()
                if str(entry["mountpoint"]).startswith(str(tmp_path))}
        assert ours == {
            str(mountpoint): {"mountpoint": str(mountpoint), "url": f"sqlite://{store_path}",
                              "pid": mounted[0][1], "read_only": True, "status": "running"},
            str(second): {"mountpoint": str(second), "url": with_password.replace(secret, "***"),
                          "pid": mounted[1][1], "read_only": False, "status": "running"},
        }
        table = run_zfuse("list")
        assert table.returncode == 0 and secret not in table.stdout
        row = next(line for line in table.stdout.splitlines() if line.startswith(f"{second} "))
        assert row.split()[1:3] == [str(mounted[1][1]), "rw"], row
        # A daemon killed with -9 cannot remove its record: the mount shows as gone.
        os.kill(mounted[1][1], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not _gone(mounted[1][1]) and time.monotonic() < deadline:
            time.sleep(0.05)
        gone = next(e for e in _listed() if e["mountpoint"] == str(second))
        assert gone["status"] == "daemon gone" and gone["pid"] is None
    finally:
        for target, _ in mounted:
            if zfuse.is_mounted(target):
                assert run_zfuse("unmount", str(target)).returncode == 0
    assert not [e for e in _listed() if str(e["mountpoint"]).startswith(str(tmp_path))]
    records = os.listdir(registry_dir()) if os.path.isdir(registry_dir()) else []
    for name in records:  # no record of ours is left behind, the killed daemon's included
        with open(os.path.join(registry_dir(), name)) as record:
            assert str(tmp_path) not in record.read()


def registry_dir() -> str:
    from zfuse.registry import runtime_dir

    return runtime_dir()


def test_versions_are_one_line_each() -> None:
    done = run_zfuse("--version")
    assert done.returncode == 0 and not done.stderr
    assert re.fullmatch(r"zfuse \d+\.\d+\S*, libfuse [23]\.\d+\n", done.stdout), done.stdout
    done = subprocess.run([sys.executable, "-m", "zstores", "--version"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and re.fullmatch(r"zstores \d+\.\d+\S*\n", done.stdout)


@pytest.mark.parametrize("command", [[], ["mount"], ["unmount"], ["list"]])
def test_every_help_has_examples(command: list[str]) -> None:
    done = run_zfuse(*command, "--help")
    assert done.returncode == 0, done.stderr
    examples = done.stdout.partition("\nexamples:\n")[2]
    lines = [line.strip() for line in examples.splitlines() if line.strip()]
    assert lines and all(line.startswith("zfuse ") for line in lines[:2]), done.stdout
    if command:
        assert all(line.startswith(f"zfuse {command[0]}") for line in lines[:2])


def test_a_busy_unmount_names_the_lazy_option(tmp_path: Path, mountpoint: Path) -> None:
    done = run_zfuse("mount", "memory://", str(mountpoint))
    assert done.returncode == 0, done.stderr
    try:
        (mountpoint / "held").write_bytes(b"x")
        with open(mountpoint / "held", "rb"):
            busy = run_zfuse("unmount", str(mountpoint))
            assert busy.returncode == 1 and zfuse.is_mounted(mountpoint)
            assert busy.stderr.strip().splitlines() == [
                (f"zfuse: error: cannot unmount {mountpoint}: {mountpoint} is busy (a process "
                 "has a file or its working directory in it); close what uses it or run "
                 f"`zfuse unmount --lazy {mountpoint}`")]
            lazy = run_zfuse("unmount", "--lazy", str(mountpoint))
            assert lazy.returncode == 0, lazy.stderr
            assert not zfuse.is_mounted(mountpoint)
    finally:
        if zfuse.is_mounted(mountpoint):
            run_zfuse("unmount", "--lazy", str(mountpoint))


@pytest.mark.parametrize("major", ["2", "3"])
def test_a_foreground_mount_says_only_where_it_mounted(major: str, tmp_path: Path,
                                                       mountpoint: Path) -> None:
    """No libfuse warning (libfuse 3.14 warned of 'invalid max threads value 4294967295')."""
    env = {**os.environ, "ZFUSE_LIBFUSE": major}
    process = subprocess.Popen([*ZFUSE, "mount", "memory://", str(mountpoint), "--foreground"],
                               stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while not zfuse.is_mounted(mountpoint) and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.05)
        (mountpoint / "f").write_bytes(b"x")  # served: libfuse is past its start-up
        listed = [e for e in _listed() if e["mountpoint"] == str(mountpoint)]
        assert [(e["pid"], e["url"]) for e in listed] == [(process.pid, "memory://")]
        process.send_signal(signal.SIGTERM)
        _, said = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    assert said.splitlines() == [f"zfuse: memory:// mounted at {mountpoint}; Ctrl-C unmounts"]


def test_list_shows_an_in_process_mount_by_its_store(tmp_path: Path, mountpoint: Path) -> None:
    store = SQLiteStore(tmp_path / "data.sqlite")
    try:
        with zfuse.mounted(store, mountpoint):
            listed = [e for e in _listed() if e["mountpoint"] == str(mountpoint)]
            assert listed == [{"mountpoint": str(mountpoint), "url": repr(store),
                               "pid": os.getpid(), "read_only": False, "status": "running"}]
        assert not [e for e in _listed() if e["mountpoint"] == str(mountpoint)]
    finally:
        store.close()


def test_a_runtime_folder_that_cannot_be_written_never_stops_a_mount(
        tmp_path: Path, mountpoint: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the runtime folder should be")
    env = {"ZFUSE_RUNTIME_DIR": str(blocked / "zfuse")}
    done = run_zfuse("mount", "memory://", str(mountpoint), env=env)
    assert done.returncode == 0, done.stderr
    try:
        listed = [e for e in _listed() if e["mountpoint"] == str(mountpoint)]
        done = run_zfuse("list", "--json", env=env)
        assert done.returncode == 0 and not done.stderr, done.stderr
        shown = [e for e in json.loads(done.stdout) if e["mountpoint"] == str(mountpoint)]
        # Found in the mount table all the same, with its daemon; only the URL is unknown.
        assert [(e["url"], e["status"]) for e in shown] == [(None, "running")]
        assert shown[0]["pid"] == listed[0]["pid"] is not None
    finally:
        assert run_zfuse("unmount", str(mountpoint)).returncode == 0


def test_list_shows_a_relative_store_path_absolute(tmp_path: Path, mountpoint: Path) -> None:
    with SQLiteStore(tmp_path / "rel.sqlite") as store:
        store["a"] = b"1"
    done = subprocess.run([*ZFUSE, "mount", "sqlite://rel.sqlite", str(mountpoint)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    try:
        [entry] = [e for e in _listed() if e["mountpoint"] == str(mountpoint)]
        assert entry["url"] == f"sqlite://{tmp_path}/rel.sqlite"  # usable from any folder
        assert (mountpoint / "a").read_bytes() == b"1"
    finally:
        assert run_zfuse("unmount", str(mountpoint)).returncode == 0
