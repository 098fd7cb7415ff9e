"""Full-disk tests for real: a small file system, a writer that fills it, checks after.

Each local backend's test module drives its store through the same three steps:

1. ``fill_until_full(open_store_code, log)`` runs a child process that writes
   self-checking values until a write fails, logging every key whose write was
   acknowledged (to a file on another file system, fsynced).  A SIGBUS, a hang
   or a bare backend exception shows in the returned ``FillResult``.
2. ``check_acknowledged(store, log)`` reopens and checks every logged value.
3. ``delete_half_and_refill(...)`` deletes every other key and writes again:
   freed space must be reusable, on every backend.

The file system is a ``tmpfs`` with ``size=`` (or an ext4 image on a loop
device), mounted by ``small_filesystem``; mounting needs root, which the test
command is.  Elsewhere the tests skip, or fail under ``ZSTORES_REQUIRE_PEERS=1``.

Examples
--------
A test module uses it like this (``small_fs`` needs no import: tests/conftest.py
registers this module as a pytest plugin)::

    def test_full_disk(small_fs):
        url = f"sqlite://{small_fs}/data.sqlite"
        result = fill_until_full(url, log=tmp_path / "log")
        result.assert_store_full()
        with zstores.open_store(url, mode="r") as store:
            check_acknowledged(store, result.acknowledged)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import missing_peer

#: The value header: ``key|serial|`` then a payload derived from both, so a
#: value read back under the wrong key, torn, or from another write is caught.
_SEPARATOR = b"|"


def make_value(key: str, serial: int, size: int) -> bytes:
    """A self-checking value of ``size`` bytes (at least the header) for ``key``.

    Examples
    --------
    >>> value = make_value("a/0.0", 3, 100)
    >>> len(value), check_value("a/0.0", value)
    (100, 3)
    """
    header = key.encode() + _SEPARATOR + str(serial).encode() + _SEPARATOR
    digest = hashlib.sha256(header).digest()
    body_size = max(size - len(header), 0)
    body = (digest * (body_size // len(digest) + 1))[:body_size]
    return header + body


def check_value(key: str, value: bytes) -> int:
    """The serial of a value ``make_value`` made for ``key``; AssertionError if damaged."""
    value = bytes(value)
    parts = value.split(_SEPARATOR, 2)
    assert len(parts) == 3, f"value of {key!r} has no header: {value[:40]!r}"
    assert parts[0] == key.encode(), f"value of {key!r} belongs to {parts[0]!r}"
    serial = int(parts[1])
    assert value == make_value(key, serial, len(value)), f"value of {key!r} is torn or damaged"
    return serial


@contextlib.contextmanager
def small_filesystem(size_mib: int = 16, kind: str = "tmpfs") -> Iterator[Path]:
    """Mount a file system of ``size_mib`` MiB on a fresh folder; unmount after.

    ``kind`` is ``"tmpfs"`` (fast, no block device) or ``"ext4"`` (an image on
    a loop device: real blocks, a journal and reserved space, as on a disk).
    """
    if os.geteuid() != 0:
        missing_peer("a full-disk test mounts a small file system, which needs root")
    where = Path(tempfile.mkdtemp(prefix=f"zstores-full-{kind}-"))
    mounted = where / "fs"
    mounted.mkdir()
    image = where / "image"
    if kind == "tmpfs":
        _run("mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mounted))
    elif kind == "ext4":
        with open(image, "wb") as file:
            file.truncate(size_mib * 1024 * 1024)
        _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
        _run("mount", "-o", "loop", str(image), str(mounted))
    else:
        raise ValueError(f"unknown file system kind {kind!r}: 'tmpfs' or 'ext4'")
    try:
        yield mounted
    finally:
        subprocess.run(["umount", "-l", str(mounted)], check=False, capture_output=True)
        shutil.rmtree(where, ignore_errors=True)


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        missing_peer(f"{' '.join(command)} failed: {done.stderr.strip()}")


@pytest.fixture
def small_fs() -> Iterator[Path]:
    """A 16 MiB tmpfs, mounted for one test."""
    with small_filesystem(16, "tmpfs") as path:
        yield path


@dataclass
class FillResult:
    """What the filling child process reported."""

    acknowledged: dict[str, int]            #: key -> serial of every acknowledged write
    error_type: str | None                  #: the failing write's exception, qualified name
    error_mro: list[str] = field(default_factory=list)
    errno: int | None = None
    message: str = ""
    overwrite: str = ""                     #: "failed" or "succeeded": the overwrite after full
    close_error: str | None = None
    returncode: int = 0
    stderr: str = ""

    def assert_store_full(self) -> None:
        """The child ended cleanly and its failing write raised ``StoreFullError``."""
        assert self.returncode == 0, (
            f"the writer died (exit {self.returncode}):\n{self.stderr[-3000:]}"
        )
        assert self.error_type is not None, "the disk never filled up"
        assert "zstores.errors.StoreFullError" in self.error_mro, (
            f"a full disk raised {self.error_type}: {self.message}"
        )
        assert self.errno == 28, f"StoreFullError.errno is {self.errno}, not ENOSPC"
        assert self.acknowledged, "no write succeeded before the disk was full"


_CHILD = r"""
import json, os, sys, traceback
sys.path.insert(0, TESTS)
from full_disk import make_value
import zstores

def qualified(cls):
    return f"{cls.__module__}.{cls.__qualname__}"

log = open(LOG, "a")
def acknowledge(keys, serial):
    for key in keys:
        log.write(json.dumps([key, serial]) + "\n")
    log.flush(); os.fsync(log.fileno())

report = {"error_type": None}
store = eval(OPEN)
first = None
try:
    for n in range(MAX_WRITES):
        keys = [f"{PREFIX}{n:06d}.{i}" for i in range(BATCH)]
        values = {key: make_value(key, SERIAL, SIZE) for key in keys}
        if BATCH == 1:
            store[keys[0]] = values[keys[0]]
        else:
            store.setitems(values)
        if FLUSH:
            getattr(store, FLUSH)()
        acknowledge(keys, SERIAL)
        first = first or keys[0]
except Exception as error:
    report.update(error_type=qualified(type(error)),
                  error_mro=[qualified(c) for c in type(error).__mro__],
                  errno=getattr(error, "errno", None), message=str(error)[:2000])
    traceback.print_exc()
    if first is not None:
        # Overwrite an acknowledged value with a bigger one on the full disk:
        # it either fails (and the old value must stay) or succeeds (and the
        # new one must be read back).
        bigger = make_value(first, SERIAL + 1, SIZE * 4)
        try:
            store[first] = bigger
            if FLUSH:
                getattr(store, FLUSH)()
        except Exception:
            report["overwrite"] = "failed"
        else:
            report["overwrite"] = "succeeded"
            acknowledge([first], SERIAL + 1)
try:
    store.close()
except Exception as error:
    report["close_error"] = f"{qualified(type(error))}: {error}"[:2000]
print("\n__REPORT__" + json.dumps(report))
"""


def fill_until_full(
    open_code: str,
    log: Path,
    *,
    size: int = 64 * 1024,
    batch: int = 1,
    serial: int = 1,
    prefix: str = "k/",
    flush: str | None = None,
    max_writes: int = 100_000,
    timeout: float = 120,
) -> FillResult:
    """Fill a store from a child process until a write fails; report what happened.

    Parameters
    ----------
    open_code : str
        A Python expression that opens the store in the child, e.g.
        ``"zstores.SQLiteStore('/mnt/x.sqlite')"``.
    log : Path
        Where the child logs acknowledged keys (keep it off the small file system).
    size, batch : int
        Bytes per value; keys per write (``setitems`` when above 1).
    serial : int
        Written into every value, so a later pass's values can be told apart.
    prefix : str
        Prefix of the keys written (``k/000012.0`` ...).
    flush : str or None
        A store method called after each write before it counts as acknowledged
        (for stores whose writes become durable only then).
    """
    tests = str(Path(__file__).resolve().parent)
    program = "\n".join([
        f"TESTS = {tests!r}", f"LOG = {str(log)!r}", f"OPEN = {open_code!r}",
        f"SIZE = {size}", f"BATCH = {batch}", f"SERIAL = {serial}", f"PREFIX = {prefix!r}",
        f"FLUSH = {flush!r}", f"MAX_WRITES = {max_writes}",
        textwrap.dedent(_CHILD),
    ])
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=timeout, check=False)  # the FillResult reports a failure
    report: dict = {}
    if "__REPORT__" in done.stdout:
        report = json.loads(done.stdout.rsplit("__REPORT__", 1)[1])
    return FillResult(acknowledged=read_log(log), returncode=done.returncode,
                      stderr=done.stderr, **report)


def read_log(log: Path) -> dict[str, int]:
    """Every acknowledged key with the serial of its last acknowledged write."""
    acknowledged: dict[str, int] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            key, serial = json.loads(line)
            acknowledged[key] = serial
    return acknowledged


def check_acknowledged(store, acknowledged: dict[str, int]) -> None:
    """Every acknowledged key holds an intact value of its acknowledged serial (or newer)."""
    missing = [key for key in acknowledged if key not in store]
    assert not missing, f"{len(missing)} acknowledged keys are lost, e.g. {missing[:3]}"
    for key, serial in acknowledged.items():
        got = check_value(key, store[key])
        assert got >= serial, f"{key!r} went back from serial {serial} to {got}"


def delete_half_and_refill(open_code: str, store_factory, acknowledged: dict[str, int],
                           log: Path, *, size: int = 64 * 1024, writes: int = 20) -> None:
    """Delete every other acknowledged key, then write ``writes`` new values.

    The new writes must succeed (freed space is reusable) and, with the kept
    half, survive a reopen.  ``store_factory()`` opens the store in this process.
    """
    keys = sorted(acknowledged)
    doomed, kept = keys[::2], {key: acknowledged[key] for key in keys[1::2]}
    with store_factory() as store:
        store.delitems(doomed)
    assert writes * size <= len(doomed) * size, "delete more than you write again"
    result = fill_until_full(open_code, log, size=size, serial=2, prefix="again/",
                             max_writes=writes)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.error_type is None, (
        f"writing after deleting half failed: {result.error_type}: {result.message}"
    )
    with store_factory() as store:
        check_acknowledged(store, kept)
        fresh = {k: s for k, s in read_log(log).items() if k.startswith("again/")}
        assert len(fresh) == writes
        check_acknowledged(store, fresh)
        assert not any(key in store for key in doomed)
