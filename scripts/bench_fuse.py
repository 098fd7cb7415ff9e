"""Benchmark zfuse against its anchors, side by side in one run.

For each backend (LMDB and Directory by default) the store is built in a
temporary folder, mounted with the ``zfuse`` command (a daemon process, as a
user would) and measured against its reference in the same run:

* sequential read of one large value (256 MiB) through the mount, against
  ``store[key]`` in this process.  "cold" drops the mount's kernel page cache
  before every round (``posix_fadvise(DONTNEED)``), so every byte goes through
  the daemon; "warm" repeats the read within the attribute timeout, when the
  mount lets the kernel keep its page cache (target >= 0.5x);
* open/read/close of 2,000 files of 64 KiB, against a plain in-memory
  mfusepy filesystem serving the same files (the anchor; target >= 5,000/s);
* zarr-python 3 opening and reading a whole array through the mount
  (``LocalStore``) against doing the same on the store directly
  (``zstores.adapters.zarr3``) (target: within 2x);
* ``ls`` of a directory of 100,000 keys (target < 2 s);
* one ZIP_STORED archive (2,000 x 64 KiB + 256 MiB) mounted by zfuse (read-write
  and read-only) and by ratarmount, the peer: mount time, ``find``, small files
  cold and warm with one and 8 reader threads, the big file cold and warm, the
  daemon's peak RSS, and the daemon's CPU time for each pass, which other jobs
  on the machine do not inflate the way they do wall-clock time (``--parts
  archive``); every mount after dropping the page cache (``bench_common.drop_cold``).

Sequential reads and ``ls`` use the default mount (read-write).  Small files
and zarr are measured through three kinds of mount: the default, ``--read-only``
(libfuse answers ``flush``; open files pin a version each) and ``--read-only -o kernel_cache
--attr-timeout 60`` (on libfuse 3 the kernel sends no open or close at all;
for data nobody else changes while mounted).  For them, "cold" is the median over the rounds of
the first pass through a fresh mount (or a freshly opened store, for the
direct zarr reads, and a fresh anchor), and "warm" the median of the passes
after the first one on one mount, when the kernel may still hold names,
attributes and unchanged pages.

Every number is the median of ``--rounds`` rounds.  ``--record`` writes the
table between ``<!-- bench_fuse:begin -->`` and ``<!-- bench_fuse:end -->`` in
docs/benchmarks.md (appending the markers if missing) and touches nothing else;
the archive part goes between ``<!-- bench_fuse_archive:begin -->`` and
``<!-- bench_fuse_archive:end -->``, so either part is recorded alone.

Usage::

    python scripts/bench_fuse.py [--rounds 5] [--backends lmdb directory] [--record]
    python scripts/bench_fuse.py --parts archive --rounds 3     # zfuse against ratarmount
    python scripts/bench_fuse.py --smoke                        # seconds: that it still runs
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_common import add_run_options, drop_cold, drop_page_cache, missing_peers, record_section

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- bench_fuse:begin -->", "<!-- bench_fuse:end -->"
# The archive part (zfuse against ratarmount) has its own markers, so either part
# can be recorded alone without erasing the other's table.
ARCHIVE_BEGIN = "<!-- bench_fuse_archive:begin -->"
ARCHIVE_END = "<!-- bench_fuse_archive:end -->"
ZFUSE = [sys.executable, "-m", "zfuse"]
MIB = 1 << 20
PARTS = ("stores", "archive")
# Small files and zarr are read through each kind of mount (zfuse command
# options); every cold sample on a fresh mount.
MOUNTS = {
    "read-write": (),
    "read-only": ("--read-only",),
    "read-only kernel_cache": ("--read-only", "-o", "kernel_cache", "--attr-timeout", "60"),
}


@dataclass
class Row:
    backend: str
    measure: str
    mount: str
    reference: str
    ratio: str
    target: str


def times_of(work: Callable[[], Any], rounds: int, before: Callable[[], Any] | None = None
             ) -> list[float]:
    times = []
    for _ in range(rounds):
        if before is not None:
            before()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return times


def median_time(work: Callable[[], Any], rounds: int, before: Callable[[], Any] | None = None
                ) -> float:
    return statistics.median(times_of(work, rounds, before))


# ------------------------------------------------------------------ data
def build_store(kind: str, folder: Path, args: argparse.Namespace) -> tuple[str, Any]:
    """Fill a new store; return its URL and the store class reopening it."""
    from zstores import DirectoryStore
    from zstores.stores.lmdb import LMDBStore

    if kind == "lmdb":
        url, path = f"lmdb://{folder / 'data.lmdb'}", folder / "data.lmdb"
        store = LMDBStore(path, map_size=1 << 30)
        def reopen() -> Any:
            return LMDBStore(path, mode="r")
    else:
        url, path = f"file://{folder / 'data'}", folder / "data"
        store = DirectoryStore(path)
        def reopen() -> Any:
            return DirectoryStore(path, mode="r")
    store["big"] = os.urandom(MIB) * (args.size_mib)
    small = os.urandom(args.file_kib << 10)
    for start in range(0, args.files, 500):
        store.setitems({f"small/{i}": small[i % 64:] + small[:i % 64]
                        for i in range(start, min(start + 500, args.files))})
    for start in range(0, args.keys, 10_000):
        store.setitems({f"many/{i:06d}": b"x"
                        for i in range(start, min(start + 10_000, args.keys))})
    write_zarr_array(store)
    store.close()
    return url, reopen


def write_zarr_array(store: Any) -> None:
    import numpy as np
    import zarr

    from zstores.adapters.zarr3 import ZarrStore

    data = (np.arange(2048 * 2048, dtype="float32").reshape(2048, 2048) % 977) * 0.5
    array = zarr.create_array(store=ZarrStore(store), name="zarr/arr", shape=data.shape,
                              chunks=(128, 128), dtype="float32")
    array[...] = data


# ------------------------------------------------------------------ mounts
def mount(url: str, mountpoint: Path, options: tuple[str, ...] = ()) -> None:
    done = subprocess.run([*ZFUSE, "mount", *options, url, str(mountpoint)], capture_output=True,
                          text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise SystemExit(f"mount failed: {done.stderr}")


def unmount(mountpoint: Path) -> None:
    subprocess.run([*ZFUSE, "unmount", str(mountpoint)], capture_output=True, timeout=120,
                   check=False)


def memory_file_system(contents: dict[str, bytes], file_mode: int, folder_mode: int) -> Any:
    """Plain mfusepy operations (no zfuse code) serving ``/small/<name>`` from ``contents``.

    ``contents`` maps ``/small/<name>`` to the file's bytes; the anchor and the
    floors mount it, each with its own libfuse and options.
    """
    import errno
    import stat

    import mfusepy

    folder = {"st_mode": stat.S_IFDIR | folder_mode, "st_nlink": 2}
    attrs = {path: {"st_mode": stat.S_IFREG | file_mode, "st_nlink": 1, "st_size": len(value)}
             for path, value in contents.items()}
    names = [path.rsplit("/", 1)[1] for path in contents]

    class InMemory(mfusepy.Operations):
        use_ns = True

        def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
            if path in ("/", "/small"):
                return folder
            try:
                return attrs[path]
            except KeyError:
                raise mfusepy.FuseOSError(errno.ENOENT) from None

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *(names if path == "/small" else ["small"])]

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return contents[path][offset:offset + size]

    return InMemory


def serve_anchor(mountpoint: str, files: int, file_kib: int) -> None:
    """A plain mfusepy filesystem serving ``small/0..files-1`` from memory (no zfuse code)."""
    import mfusepy

    small = os.urandom(file_kib << 10)
    operations = memory_file_system({f"/small/{i}": small for i in range(files)}, 0o644, 0o755)
    mfusepy.FUSE(operations(), mountpoint, foreground=True)


def wait_for_mount(process: subprocess.Popen[bytes], mountpoint: Path, seconds: float,
                   what: str, poll: float = 0.005) -> None:
    """Return once ``mountpoint`` is mounted; exit naming ``what`` if ``process`` ends first
    or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while not os.path.ismount(mountpoint):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not mount")
        time.sleep(poll)


def start_anchor(mountpoint: Path, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    # mfusepy's own default library (libfuse 2), as plain fusepy would use.
    env = {k: v for k, v in os.environ.items() if k != "FUSE_LIBRARY_PATH"}
    process = subprocess.Popen([sys.executable, __file__, "--serve-anchor", str(mountpoint),
                                "--files", str(args.files), "--file-kib", str(args.file_kib)],
                               env=env)
    wait_for_mount(process, mountpoint, 60, "the anchor filesystem", poll=0.05)
    return process


# ------------------------------------------------------------------ measures
def read_file(path: Path, buffer: bytearray) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def open_read_close(folder: Path, files: int) -> None:
    for i in range(files):
        with open(folder / str(i), "rb", buffering=0) as f:
            f.read()


def bench_backend(kind: str, args: argparse.Namespace, work: Path,
                  anchor_rates: tuple[float, float]) -> list[Row]:
    label = {"lmdb": "LMDB", "directory": "Directory"}[kind]
    folder = work / kind
    folder.mkdir()
    print(f"[{label}] building the store ...", file=sys.stderr)
    url, reopen = build_store(kind, folder / "store", args)
    mountpoint = folder / "mnt"
    mountpoint.mkdir()
    rows = []
    store = reopen()
    try:
        mount(url, mountpoint)
        try:
            rows += sequential_and_ls(label, mountpoint, store, args)
        finally:
            unmount(mountpoint)
    finally:
        store.close()
    direct = zarr_direct(reopen, args.rounds)
    for mount_kind, options in MOUNTS.items():
        rows += files_and_zarr(label, mount_kind, url, mountpoint, options, direct, args,
                               anchor_rates)
    return rows


def sequential_and_ls(label: str, mountpoint: Path, store: Any, args: argparse.Namespace
                      ) -> list[Row]:
    rows = []
    rounds = args.rounds
    buffer = bytearray(MIB)
    size = args.size_mib * MIB
    big = mountpoint / "big"
    direct = median_time(lambda: store["big"], rounds)
    cold = median_time(lambda: read_file(big, buffer), rounds, lambda: drop_page_cache(big))
    read_file(big, buffer)  # load the page cache, then read again within the timeout
    warm = median_time(lambda: read_file(big, buffer), rounds)
    for name, seconds in (("cold", cold), ("warm", warm)):
        rows.append(Row(label, f"sequential read {args.size_mib} MiB, {name}",
                        f"{size / seconds / MIB:,.0f} MiB/s",
                        f"{size / direct / MIB:,.0f} MiB/s in-process",
                        f"{direct / seconds:.2f}x", ">= 0.5x"))
    print(f"[{label}] ls ...", file=sys.stderr)
    listing = median_time(lambda: subprocess.run(["ls", str(mountpoint / "many")],
                                                  stdout=subprocess.DEVNULL, check=True),
                          rounds)
    rows.append(Row(label, f"ls of {args.keys:,} keys", f"{listing:.2f} s", "", "", "< 2 s"))
    return rows


def read_array(store: Any) -> None:
    """Open the benchmark's array (read its metadata) and read all of it, as a reader would."""
    import zarr

    zarr.open_array(store=store, path="zarr/arr", mode="r")[...]


def cold_and_warm(fresh: Callable[[], AbstractContextManager[Any]],
                  works: Sequence[Callable[[], Any]], rounds: int) -> list[tuple[float, float]]:
    """Cold and warm seconds of each of ``works``.

    Cold: the median over ``rounds`` of the first pass inside a new ``fresh()``
    context (a fresh mount or store handle, nothing cached); warm: the median
    of ``rounds`` passes after it, inside the first context.
    """
    colds: list[list[float]] = [[] for _ in works]
    warms = [0.0] * len(works)
    for round_ in range(rounds):
        with fresh():
            for times, work in zip(colds, works, strict=True):
                times.append(median_time(work, 1))
            if round_ == 0:
                warms = [median_time(work, rounds) for work in works]
    return [(statistics.median(times), warm) for times, warm in zip(colds, warms, strict=True)]


def zarr_direct(reopen: Callable[[], Any], rounds: int) -> tuple[float, float]:
    """Cold and warm seconds to read the array through ``zstores.adapters.zarr3`` directly."""
    from zstores.adapters.zarr3 import ZarrStore

    stores = []

    @contextmanager
    def fresh_store() -> Iterator[None]:
        stores.append(reopen())
        try:
            yield
        finally:
            stores[-1].close()

    [direct] = cold_and_warm(fresh_store, [lambda: read_array(ZarrStore(stores[-1]))], rounds)
    return direct


def files_and_zarr(label: str, kind: str, url: str, mountpoint: Path, options: tuple[str, ...],
                   direct: tuple[float, float], args: argparse.Namespace,
                   anchor_rates: tuple[float, float]) -> list[Row]:
    """Many small files and a zarr array read through fresh mounts of one kind."""
    import zarr

    print(f"[{label}] small files and zarr, {kind} mount ...", file=sys.stderr)

    @contextmanager
    def fresh_mount() -> Iterator[None]:
        mount(url, mountpoint, options)
        try:
            yield
        finally:
            unmount(mountpoint)

    files, array = cold_and_warm(fresh_mount, [
        lambda: open_read_close(mountpoint / "small", args.files),
        lambda: read_array(zarr.storage.LocalStore(mountpoint, read_only=True)),
    ], args.rounds)
    rows = []
    for name, seconds, anchor in zip(("cold", "warm"), files, anchor_rates, strict=True):
        rate = args.files / seconds
        rows.append(Row(label, f"open/read/close {args.files:,} x {args.file_kib} KiB, "
                        f"{name}, {kind} mount", f"{rate:,.0f} files/s",
                        f"{anchor:,.0f} files/s plain mfusepy", f"{rate / anchor:.2f}x",
                        ">= 5,000 files/s"))
    for name, via_mount, via_store in zip(("cold", "warm"), array, direct, strict=True):
        rows.append(Row(label, f"zarr-python: whole 2048x2048 float32 array "
                        f"(256 chunks), {name}, {kind} mount", f"{via_mount * 1000:,.0f} ms",
                        f"{via_store * 1000:,.0f} ms store directly, {name}",
                        f"{via_mount / via_store:.2f}x slower", "within 2x"))
    return rows


def bench_anchor(args: argparse.Namespace, work: Path) -> tuple[float, float]:
    """Cold and warm open/read/close rates of the plain in-memory mfusepy filesystem."""
    mountpoint = work / "anchor"
    mountpoint.mkdir()

    @contextmanager
    def fresh_anchor() -> Iterator[None]:
        process = start_anchor(mountpoint, args)
        try:
            yield
        finally:
            subprocess.run(["fusermount", "-u", str(mountpoint)], capture_output=True,
                           check=False)
            process.wait(timeout=60)

    [(cold, warm)] = cold_and_warm(
        fresh_anchor, [lambda: open_read_close(mountpoint / "small", args.files)], args.rounds)
    return args.files / cold, args.files / warm


# ------------------------------------------------------- ratarmount, one archive
#: The mounts of one ZIP_STORED archive compared: zfuse (read-write, the default,
#: and --read-only) and ratarmount (read-only; it has no other way to a ZIP).
ARCHIVE_MOUNTS = ("zfuse read-write", "zfuse read-only", "ratarmount")
THREADS = 8
#: Minimal mfusepy file systems (no zstores, no zfuse code) on the libfuse and with
#: the mount options zfuse uses, serving the archive's small members from a dict:
#: the floor of the small-file figures.  Each file costs the kernel the same
#: requests as through zfuse (lookup, open, read, release), the data is already
#: in memory.  "bare": libfuse answers open and release itself (Python is called
#: for lookup and read, as on zfuse's read-only mount); "open/release": trivial
#: Python handlers for those too (the Python calls of zfuse's read-write mount).
FLOORS = {"mfusepy floor": "bare", "mfusepy floor, open/release": "open/release"}


@dataclass
class Mounted:
    """A mount of the archive being measured: where, its daemon's pid, how long it took."""

    path: Path
    pid: int
    seconds: float
    process: subprocess.Popen[bytes] | None = None


def serve_floor(mountpoint: str, archive: str, variant: str) -> None:
    """Serve ``archive``'s ``small/`` members from a dict with plain mfusepy (see ``FLOORS``)."""
    import zipfile

    from zfuse._libfuse import load_mfusepy
    from zfuse.options import fuse_options

    load_mfusepy()  # the libfuse zfuse mounts with (libfuse 3 where it can)
    import mfusepy

    with zipfile.ZipFile(archive) as opened:
        contents = {f"/{name}": opened.read(name) for name in opened.namelist()
                    if name.startswith("small/")}
    in_memory = memory_file_system(contents, 0o444, 0o555)

    class WithHandles(in_memory):  # type: ignore[misc, valid-type]
        def open(self, path: str, flags: int) -> int:
            return 0

        def release(self, path: str, fh: int) -> int:
            return 0

    operations = WithHandles() if variant == "open/release" else in_memory()
    mfusepy.FUSE(operations, mountpoint, foreground=True, **fuse_options(read_only=True))


def build_archive(path: Path, args: argparse.Namespace) -> None:
    """The ZIP_STORED archive both sides serve: ``small/0..`` and one ``big`` member.

    Written by Python's zipfile, neither side's code, member by member so that the
    256 MiB one is never held whole twice.
    """
    import zipfile

    small = os.urandom(args.file_kib << 10)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for i in range(args.files):
            archive.writestr(f"small/{i}", small[i % 64:] + small[:i % 64])
        with archive.open("big", "w", force_zip64=True) as member:
            for _ in range(args.size_mib):
                member.write(os.urandom(MIB))


def ratarmount_command() -> list[str] | None:
    """ratarmount beside this interpreter (the venv's), or on the PATH; None if missing."""
    beside = Path(sys.executable).with_name("ratarmount")
    found = str(beside) if beside.exists() else shutil.which("ratarmount")
    return [found] if found else None


def mount_archive(kind: str, archive: Path, mountpoint: Path, index: Path) -> Mounted:
    """Mount ``archive`` the ``kind`` way; the seconds until the mount answers."""
    start = time.perf_counter()
    if kind in FLOORS:
        process = subprocess.Popen([sys.executable, __file__, "--serve-floor", str(mountpoint),
                                    "--floor", FLOORS[kind], "--archive", str(archive)])
        wait_for_mount(process, mountpoint, 120, f"the {kind}")
        os.stat(mountpoint / "small")  # answers
        return Mounted(mountpoint, process.pid, time.perf_counter() - start, process)
    if kind == "ratarmount":
        command = ratarmount_command()
        assert command is not None
        # foreground (-f) so that the pid is the daemon's; the index in a folder of ours
        process = subprocess.Popen([*command, "-f", "--index-folders", str(index), str(archive),
                                    str(mountpoint)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        wait_for_mount(process, mountpoint, 300, "ratarmount (the archive)")
        os.stat(mountpoint / "big")  # answers
        return Mounted(mountpoint, process.pid, time.perf_counter() - start, process)
    options = ("--read-only",) if kind == "zfuse read-only" else ()
    done = subprocess.run([*ZFUSE, "mount", *options, f"zip://{archive}", str(mountpoint)],
                          capture_output=True, text=True, timeout=300, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"zfuse mount failed: {done.stderr}")
    pid = int(done.stdout.split("daemon pid ", 1)[1].split(")", 1)[0])
    return Mounted(mountpoint, pid, seconds)


def unmount_archive(mounted: Mounted) -> None:
    if mounted.process is None:
        unmount(mounted.path)
        return
    subprocess.run(["fusermount", "-u", str(mounted.path)], capture_output=True, check=False)
    mounted.process.wait(timeout=120)


def peak_rss_mib(pid: int) -> float:
    """The daemon's peak resident set (VmHWM) so far, in MiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def read_files(folder: Path, names: Sequence[int]) -> None:
    for i in names:
        with open(folder / str(i), "rb", buffering=0) as f:
            f.read()


def read_files_threaded(folder: Path, files: int, threads: int) -> None:
    """Open/read/close every file, ``threads`` readers each taking every n-th."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads) as pool:
        for result in [pool.submit(read_files, folder, range(t, files, threads))
                       for t in range(threads)]:
            result.result()


def walk(mountpoint: Path) -> None:
    done = subprocess.run(["find", str(mountpoint)], stdout=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        raise SystemExit(f"find failed in {mountpoint}")


def daemon_cpu_seconds(pid: int) -> float:
    """CPU seconds the threads of the daemon ``pid`` have run so far (nanosecond clock).

    The sum of each thread's ``schedstat`` run time: ``/proc/PID/stat`` counts in
    10 ms ticks, too coarse for a ``find`` that costs a few milliseconds.  Both
    daemons keep their serving threads for the whole mount, so none is missed.
    """
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                total += int(stat.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # the thread ended meanwhile
    return total / 1e9


def timed_pass(work: Callable[[], Any], pid: int) -> tuple[float, float]:
    """Wall seconds of ``work`` and the CPU seconds the daemon spent serving it."""
    cpu = daemon_cpu_seconds(pid)
    start = time.perf_counter()
    work()
    return time.perf_counter() - start, daemon_cpu_seconds(pid) - cpu


def archive_round(kind: str, archive: Path, mountpoint: Path, index: Path,
                  args: argparse.Namespace) -> dict[str, float]:
    """One round of every archive figure through fresh mounts of one kind.

    Three mounts, each after dropping the page cache (``drop_cold``): the first
    walks the tree (``find``) and reads the big member cold then warm; the
    second reads the small files with one thread, cold then warm; the third
    with ``THREADS`` threads (a floor, ``FLOORS``, only makes these two).  Returns
    seconds per figure, the daemon's CPU seconds per pass (``"daemon CPU, <figure>"``:
    independent of how loaded the machine is, unlike the wall time) and the peak
    RSS in MiB.
    """
    small = mountpoint / "small"
    buffer = bytearray(MIB)
    figures: dict[str, float] = {}
    mount_times, peaks = [], []
    passes: list[tuple[str, Callable[[], Any]]] = [
        ("find", lambda: walk(mountpoint)),
        ("big file", lambda: read_file(mountpoint / "big", buffer)),
    ]
    mounts = [passes,
              [("small files, 1 thread", lambda: read_files(small, range(args.files)))],
              [(f"small files, {THREADS} threads",
                lambda: read_files_threaded(small, args.files, THREADS))]]
    for first in mounts[1:] if kind in FLOORS else mounts:
        if args.smoke:  # not the whole machine's cache under the test suite
            drop_page_cache(archive)
        else:
            drop_cold(archive.parent)
        mounted = mount_archive(kind, archive, mountpoint, index)
        try:
            mount_times.append(mounted.seconds)
            for temperature in ("cold", "warm"):
                for name, work in first:
                    if name == "find" and temperature == "warm":
                        continue
                    figure = name if name == "find" else f"{name}, {temperature}"
                    figures[figure], figures[f"daemon CPU, {figure}"] = timed_pass(
                        work, mounted.pid)
            peaks.append(peak_rss_mib(mounted.pid))
        finally:
            unmount_archive(mounted)
    figures["mount"] = statistics.median(mount_times)
    figures["daemon peak RSS"] = max(peaks)
    return figures


#: How each archive figure is shown: unit, and the amount of work per second of it
#: (None: shown in seconds or MiB, lower is better).
def archive_units(args: argparse.Namespace) -> dict[str, tuple[str, float | None]]:
    files, big = float(args.files), float(args.size_mib)
    return {
        "mount": ("s", None),
        "find": ("s", None),
        "small files, 1 thread, cold": ("files/s", files),
        "small files, 1 thread, warm": ("files/s", files),
        f"small files, {THREADS} threads, cold": ("files/s", files),
        f"small files, {THREADS} threads, warm": ("files/s", files),
        "big file, cold": ("MiB/s", big),
        "big file, warm": ("MiB/s", big),
        "daemon peak RSS": ("MiB", None),
        **{f"daemon CPU, {name}": ("ms", None) for name in (
            "find", "small files, 1 thread, cold", "small files, 1 thread, warm",
            f"small files, {THREADS} threads, cold", f"small files, {THREADS} threads, warm",
            "big file, cold", "big file, warm")},
    }


def bench_archive(args: argparse.Namespace, work: Path) -> tuple[str, dict[str, float]]:
    """zfuse against ratarmount on one ZIP_STORED archive; the table and zfuse's ratios."""
    kinds = [k for k in ARCHIVE_MOUNTS if k != "ratarmount" or ratarmount_command()]
    missing_peers({"ratarmount": ratarmount_command() is not None}, args.require_peers)
    folder = work / "archive"
    folder.mkdir()
    archive = folder / "data.zip"
    print(f"[archive] building {args.files:,} x {args.file_kib} KiB + {args.size_mib} MiB ...",
          file=sys.stderr)
    build_archive(archive, args)
    mountpoint, index = folder / "mnt", folder / "index"
    mountpoint.mkdir()
    index.mkdir()
    measured = kinds + list(FLOORS)
    for kind in kinds:  # untimed: ratarmount builds its index on the first mount
        unmount_archive(mount_archive(kind, archive, mountpoint, index))
    samples: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        for kind in measured[round_ % len(measured):] + measured[:round_ % len(measured)]:
            print(f"[archive] {kind}, round {round_ + 1}/{args.rounds} ...", file=sys.stderr)
            for name, value in archive_round(kind, archive, mountpoint, index, args).items():
                samples.setdefault((name, kind), []).append(value)
    medians = {key: statistics.median(values) for key, values in samples.items()}
    return (archive_table(medians, kinds, args, samples) + "\n\n"
            + scaling_table(samples, measured, args), archive_ratios(medians, kinds, args))


def shown(value: float, unit: str, work: float | None) -> tuple[str, float]:
    """A figure's cell and its speed (higher is better) from seconds or MiB."""
    if work is not None:
        speed = work / value
        return f"{speed:,.0f}", speed
    if unit == "ms":  # measured in seconds
        return f"{value * 1000:,.1f}", 1 / max(value, 1e-6)
    return (f"{value:.2f}" if unit == "s" else f"{value:,.0f}"), 1 / value


def archive_ratios(medians: dict[tuple[str, str], float], kinds: list[str],
                   args: argparse.Namespace) -> dict[str, float]:
    """zfuse's ratio over ratarmount per (figure, mount), above 1.0 = zfuse better."""
    ratios = {}
    for name, (unit, work) in archive_units(args).items():
        if (name, "ratarmount") not in medians:
            continue
        _, theirs = shown(medians[name, "ratarmount"], unit, work)
        for kind in (k for k in kinds if k != "ratarmount"):
            _, ours = shown(medians[name, kind], unit, work)
            ratios[f"{name}|{kind}"] = ours / theirs
    return ratios


def round_ratios(samples: dict[tuple[str, str], list[float]], name: str, kind: str,
                 args: argparse.Namespace) -> list[float]:
    """zfuse's ratio over ratarmount's in each round of one figure (the spread of the median)."""
    unit, work = archive_units(args)[name]
    return [shown(ours, unit, work)[1] / shown(theirs, unit, work)[1]
            for ours, theirs in zip(samples[name, kind], samples[name, "ratarmount"],
                                    strict=True)]


def archive_table(medians: dict[tuple[str, str], float], kinds: list[str],
                  args: argparse.Namespace,
                  samples: dict[tuple[str, str], list[float]]) -> str:
    zfuse_kinds = [k for k in kinds if k != "ratarmount"]
    peer = "ratarmount" in kinds
    lines = [
        "### zfuse and ratarmount on one ZIP archive (scripts/bench_fuse.py --parts archive)",
        "",
        (f"One ZIP_STORED archive of {args.files:,} files of {args.file_kib} KiB and one of "
         f"{args.size_mib} MiB, written by Python's zipfile, mounted by `zfuse mount zip://...` "
         "(read-write, the default, and `--read-only`) and by `ratarmount -f` (its index built "
         "by an untimed first mount), medians of "
         f"{args.rounds} rounds ({time.strftime('%Y-%m-%d')}; {os.cpu_count()} cores, load "
         f"average {args.load:.1f} at the start and {os.getloadavg()[0]:.1f} at the end, "
         "shared with other jobs).  Each round makes three fresh mounts of each kind, each after "
         "dropping the page cache (root) so the archive comes from the disk: one for `find` "
         "over the tree and the big file, one for the small files with one reader thread, one "
         f"with {THREADS}; \"cold\" is the first pass through the mount, \"warm\" the second.  "
         "Mount time: from the command to a mount that answers.  Peak RSS: the daemon's "
         "VmHWM, the largest of the three mounts.  \"daemon CPU\": user and system time of "
         "the daemon process (all its threads) during the pass, which the load of other jobs "
         "does not inflate the way it does wall-clock time.  Ratios are zfuse's over "
         "ratarmount's (speed, or ratarmount's seconds, MiB or CPU over zfuse's; above 1.0: "
         "zfuse is better); \"rounds\" gives the lowest and highest ratio of single rounds."),
        "",
        ("| figure | unit | " + " | ".join(kinds) + " | "
         + " | ".join(f"{k} × | rounds" for k in zfuse_kinds if peer) + " |"),
        "|---|---|" + "---:|" * (len(kinds) + (2 * len(zfuse_kinds) if peer else 0)),
    ]
    ratios = archive_ratios(medians, kinds, args)
    for name, (unit, work) in archive_units(args).items():
        cells = [shown(medians[name, kind], unit, work)[0] for kind in kinds]
        for kind in zfuse_kinds if peer else ():
            each = round_ratios(samples, name, kind, args)
            cells += [f"{ratios[f'{name}|{kind}']:.2f}", f"{min(each):.2f}-{max(each):.2f}"]
        lines.append(f"| {name} | {unit} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scaling_table(samples: dict[tuple[str, str], list[float]], kinds: list[str],
                  args: argparse.Namespace) -> str:
    """Cold small files with one and ``THREADS`` reader threads, every mount and the floors."""
    one, many = "small files, 1 thread, cold", f"small files, {THREADS} threads, cold"
    lines = [
        (f"Cold small files with 1 and {THREADS} reader threads, the same rounds; the floors "
         "are minimal mfusepy file systems with zfuse's libfuse and mount options serving the "
         "small members from a dict (the same four requests per file, no disk): \"bare\" "
         "calls Python for lookup and read (libfuse answers open and release), "
         "\"open/release\" for those too.  Daemon CPU per file: the daemon's CPU time over "
         "the files read, medians."),
        "",
        (f"| mount | 1 thread, files/s | {THREADS} threads, files/s | {THREADS} / 1 | rounds | "
         f"daemon CPU per file, 1 thread, µs | {THREADS} threads, µs |"),
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in kinds:
        if (one, kind) not in samples:
            continue
        singles, multis = samples[one, kind], samples[many, kind]
        each = [single / multi for single, multi in zip(singles, multis, strict=True)]
        cpu = [statistics.median(samples[f"daemon CPU, {name}", kind]) / args.files * 1e6
               for name in (one, many)]
        lines.append(f"| {kind} | {args.files / statistics.median(singles):,.0f} | "
                     f"{args.files / statistics.median(multis):,.0f} | "
                     f"{statistics.median(singles) / statistics.median(multis):.2f} | "
                     f"{min(each):.2f}-{max(each):.2f} | {cpu[0]:,.0f} | {cpu[1]:,.0f} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ report
def table(rows: list[Row], args: argparse.Namespace) -> str:
    import zfuse

    major, minor = zfuse.libfuse_version()
    lines = [
        "## zfuse (scripts/bench_fuse.py)",
        "",
        (f"{os.cpu_count()} cores (load average {args.load:.1f} at the start, shared with other "
        f"jobs), Linux {platform.release()}, Python {platform.python_version()}, "
        f"libfuse {major}.{minor} (the anchor: plain mfusepy on libfuse 2, as fusepy); mounts "
        f"made with the `zfuse` command; medians of {args.rounds} rounds "
        f"({time.strftime('%Y-%m-%d')}).  \"cold\" drops the mount's page cache before each "
        "round (every byte through the daemon); \"warm\" reads again within the attribute "
        "timeout, when the mount lets the kernel keep the file's pages.  For many files and "
        "zarr, \"cold\" is the median over the rounds of the first pass through a fresh "
        "mount (for the direct zarr reads, a freshly opened store; for the anchor, a fresh "
        "mount of it) and \"warm\" the median of the passes after the first on one mount.  "
        "Both zarr sides open the array and read it.  The read-write mount is the default; "
        "\"read-only\" is `--read-only` (libfuse answers `flush`; open files pin a version each), "
        "\"read-only kernel_cache\" is `--read-only -o kernel_cache --attr-timeout 60` "
        "(on libfuse 3 the kernel is told once that there is no `open`, and sends no open "
        "or close at all; for data nobody else changes while mounted)."),
        "",
        "| backend | measurement | through the mount | reference | ratio | target |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {r.backend} | {r.measure} | {r.mount} | {r.reference} | {r.ratio} | {r.target} |"
              for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", nargs="+", default=["lmdb", "directory"],
                        choices=["lmdb", "directory"])
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=list(PARTS),
                        help="stores: each backend against its anchors; archive: zfuse "
                        "against ratarmount on one ZIP archive")
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--file-kib", type=int, default=64)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--dir", help="where to build the stores (default: a temporary folder)")
    add_run_options(parser, smoke="a few files, small values, one round", peers="ratarmount")
    parser.add_argument("--serve-anchor", metavar="MOUNTPOINT", help=argparse.SUPPRESS)
    parser.add_argument("--serve-floor", metavar="MOUNTPOINT", help=argparse.SUPPRESS)
    parser.add_argument("--floor", choices=list(FLOORS.values()), help=argparse.SUPPRESS)
    parser.add_argument("--archive", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_anchor:
        serve_anchor(args.serve_anchor, args.files, args.file_kib)
        return
    if args.serve_floor:
        serve_floor(args.serve_floor, args.archive, args.floor)
        return
    if args.smoke:
        args.rounds, args.size_mib, args.files, args.keys = 1, 2, 20, 200
        args.backends = args.backends[:1]  # the other runs the same code
        if args.record:
            parser.error("--smoke figures are not worth recording")
    args.load = os.getloadavg()[0]
    # A SIGTERM ends the run through the ``finally`` clauses: mounts are unmounted.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    work = Path(tempfile.mkdtemp(prefix="bench_fuse-", dir=args.dir))
    rows, archive_text = [], ""
    try:
        if "stores" in args.parts:
            anchor_rates = bench_anchor(args, work)
            for kind in args.backends:
                rows += bench_backend(kind, args, work, anchor_rates)
        if "archive" in args.parts:
            archive_text, _ = bench_archive(args, work)
    finally:
        with open("/proc/self/mounts") as table_file:
            left = [line.split(" ")[1] for line in table_file if f" {work}/" in line]
        for path in left:  # never delete through a mount left behind
            subprocess.run(["fusermount", "-u", "-z", path], capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)
    if rows:
        text = table(rows, args)
        print(text)
        if args.record:
            record_section(BEGIN, END, text)
    if archive_text:
        print(archive_text)
        if args.record:
            record_section(ARCHIVE_BEGIN, ARCHIVE_END, archive_text)

if __name__ == "__main__":
    main()
