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
* ``ls`` of a directory of 100,000 keys (target < 2 s).

Sequential reads and ``ls`` use the default mount (read-write).  Small files
and zarr are measured through three kinds of mount: the default, ``--read-only``
(no file handles: libfuse answers ``close``) and ``--read-only -o kernel_cache
--attr-timeout 60`` (on libfuse 3 the kernel sends no open or close at all;
for data nobody else changes while mounted).  For them, "cold" is the median over the rounds of
the first pass through a fresh mount (or a freshly opened store, for the
direct zarr reads, and a fresh anchor), and "warm" the median of the passes
after the first one on one mount, when the kernel may still hold names,
attributes and unchanged pages.

Every number is the median of ``--rounds`` rounds.  ``--record`` writes the
table between ``<!-- bench_fuse:begin -->`` and ``<!-- bench_fuse:end -->`` in
docs/benchmarks.md (appending the markers if missing) and touches nothing else.

Usage::

    python scripts/bench_fuse.py [--rounds 5] [--backends lmdb directory] [--record]
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

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- bench_fuse:begin -->", "<!-- bench_fuse:end -->"
ZFUSE = [sys.executable, "-m", "zfuse"]
MIB = 1 << 20
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


def serve_anchor(mountpoint: str, files: int, file_kib: int) -> None:
    """A plain mfusepy filesystem serving ``small/0..files-1`` from memory (no zfuse code)."""
    import errno
    import stat

    import mfusepy

    small = os.urandom(file_kib << 10)
    contents = {f"/small/{i}": small for i in range(files)}

    class Plain(mfusepy.Operations):
        use_ns = True

        def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
            if path in ("/", "/small"):
                return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2}
            if path in contents:
                return {"st_mode": stat.S_IFREG | 0o644, "st_nlink": 1,
                        "st_size": len(contents[path])}
            raise mfusepy.FuseOSError(errno.ENOENT)

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", ".."] + ([p.rsplit("/", 1)[1] for p in contents]
                                  if path == "/small" else ["small"])

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return contents[path][offset:offset + size]

    mfusepy.FUSE(Plain(), mountpoint, foreground=True)


def start_anchor(mountpoint: Path, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    # mfusepy's own default library (libfuse 2), as plain fusepy would use.
    env = {k: v for k, v in os.environ.items() if k != "FUSE_LIBRARY_PATH"}
    process = subprocess.Popen([sys.executable, __file__, "--serve-anchor", str(mountpoint),
                                "--files", str(args.files), "--file-kib", str(args.file_kib)],
                               env=env)
    deadline = time.monotonic() + 60
    while not os.path.ismount(mountpoint):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the anchor filesystem did not mount")
        time.sleep(0.05)
    return process


# ------------------------------------------------------------------ measures
def read_file(path: Path, buffer: bytearray) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def drop_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


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
        "\"read-only\" is `--read-only` (no file handles: libfuse answers `close`), "
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


def record(text: str) -> None:
    path = ROOT / "docs" / "benchmarks.md"
    old = path.read_text() if path.exists() else ""
    section = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        new = head + section + rest.split(END, 1)[1]
    else:
        new = old + ("\n" if old and not old.endswith("\n") else "") + ("\n" if old else "") \
            + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backends", nargs="+", default=["lmdb", "directory"],
                        choices=["lmdb", "directory"])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--file-kib", type=int, default=64)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--dir", help="where to build the stores (default: a temporary folder)")
    parser.add_argument("--record", action="store_true", help="write docs/benchmarks.md")
    parser.add_argument("--serve-anchor", metavar="MOUNTPOINT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_anchor:
        serve_anchor(args.serve_anchor, args.files, args.file_kib)
        return
    args.load = os.getloadavg()[0]
    # A SIGTERM ends the run through the ``finally`` clauses: mounts are unmounted.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    work = Path(tempfile.mkdtemp(prefix="bench_fuse-", dir=args.dir))
    try:
        anchor_rates = bench_anchor(args, work)
        rows = []
        for kind in args.backends:
            rows += bench_backend(kind, args, work, anchor_rates)
    finally:
        with open("/proc/self/mounts") as table_file:
            left = [line.split(" ")[1] for line in table_file if f" {work}/" in line]
        for path in left:  # never delete through a mount left behind
            subprocess.run(["fusermount", "-u", "-z", path], capture_output=True, check=False)
        shutil.rmtree(work, ignore_errors=True)
    text = table(rows, args)
    print(text)
    if args.record:
        record(text)


if __name__ == "__main__":
    main()
