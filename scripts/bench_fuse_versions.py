"""What pinning a version per open file costs a zfuse mount, against the code before it.

Side by side in one run: the ``zfuse`` of this checkout and the ``zfuse`` of a
baseline commit (checked out into a temporary git worktree; default: the
last commit before versions were pinned) mount the same stores, in turn within
every round (the order alternating from round to round), and each is
measured the same way:

* open/read/close of 2,000 files of 64 KiB: "cold" the first pass through a
  fresh mount after dropping the page cache, "warm" the second pass on the
  same mount (within the attribute timeout);
* a sequential read of one 256 MiB value, cold (its pages dropped) and warm
  (read again at once).

For each mount kind (read-write, the default; ``--read-only``) and backend
(LMDB, Directory, SQLite, Zip: an archive written by Python's zipfile) the
table gives both medians, their ratio (current over baseline: above 1.0 the
current code is faster) and the daemon's CPU time per pass, which other jobs
on the machine inflate less than wall-clock time.

Usage::

    python scripts/bench_fuse_versions.py [--rounds 5] [--baseline REV] [--record]
    python scripts/bench_fuse_versions.py --smoke      # seconds: that it still runs
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench_fuse import open_read_close, read_file, timed_pass

from bench_common import (
    add_run_options,
    baseline_checkout,
    drop_cold,
    drop_page_cache,
    pythonpath_env,
    record_section,
)

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- bench_fuse_versions:begin -->", "<!-- bench_fuse_versions:end -->"
MIB = 1 << 20
#: The last commit before open files pinned their versions (issue 24).
BASELINE = "2560591"
MOUNTS = {"read-write": (), "read-only": ("--read-only",)}
CODES = ("current", "baseline")


def mount(url: str, mountpoint: Path, options: tuple[str, ...], env: dict[str, str]) -> int:
    """Mount with the ``zfuse`` command of ``env``; the daemon's pid."""
    done = subprocess.run([sys.executable, "-m", "zfuse", "mount", *options, url,
                           str(mountpoint)], capture_output=True, text=True, timeout=120,
                          env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"mount failed: {done.stderr}")
    listed = subprocess.run([sys.executable, "-m", "zfuse", "list", "--json"],
                            capture_output=True, text=True, env=env, check=True)
    import json

    for entry in json.loads(listed.stdout):
        if os.path.realpath(entry["mountpoint"]) == os.path.realpath(mountpoint):
            return int(entry["pid"])
    raise SystemExit(f"no daemon listed for {mountpoint}")


def unmount(mountpoint: Path, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-m", "zfuse", "unmount", str(mountpoint)],
                   capture_output=True, timeout=120, env=env, check=False)


def build(kind: str, folder: Path, files: int, big_mib: int) -> str:
    """The store of ``kind`` holding the small files and the big value; its URL."""
    small = os.urandom(64 << 10)
    values = {f"small/{i}": small[i % 64:] + small[:i % 64] for i in range(files)}
    if kind == "zip":
        return build_zip(folder / "data.zip", values, big_mib)
    from zstores import DirectoryStore, LMDBStore, SQLiteStore

    if kind == "lmdb":
        url, store = f"lmdb://{folder / 'data.lmdb'}", LMDBStore(folder / "data.lmdb",
                                                                map_size=1 << 30)
    elif kind == "sqlite":
        url, store = f"sqlite://{folder / 'data.sqlite'}", SQLiteStore(folder / "data.sqlite")
    else:
        url, store = f"file://{folder / 'data'}", DirectoryStore(folder / "data")
    store.setitems(values)
    store["big"] = os.urandom(MIB) * big_mib
    store.close()
    return url


def build_zip(path: Path, values: dict[str, bytes], big_mib: int) -> str:
    """A ZIP_STORED archive written by Python's zipfile (neither side's code)."""
    import zipfile

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, value in values.items():
            archive.writestr(name, value)
        with archive.open("big", "w", force_zip64=True) as member:
            block = os.urandom(MIB)
            for _ in range(big_mib):
                member.write(block)
    return f"zip://{path}"


def one_mount(url: str, mountpoint: Path, options: tuple[str, ...], env: dict[str, str],
              args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """Every measure through one fresh mount: name -> (wall seconds, daemon CPU seconds)."""
    drop_cold(mountpoint.parent)
    pid = mount(url, mountpoint, options, env)
    try:
        small = mountpoint / "small"
        found = {"small files, cold": timed_pass(lambda: open_read_close(small, args.files), pid)}
        found["small files, warm"] = timed_pass(lambda: open_read_close(small, args.files), pid)
        big, buffer = mountpoint / "big", bytearray(MIB)
        drop_page_cache(big)
        found["big value, cold"] = timed_pass(lambda: read_file(big, buffer), pid)
        found["big value, warm"] = timed_pass(lambda: read_file(big, buffer), pid)
        return found
    finally:
        unmount(mountpoint, env)


def run(args: argparse.Namespace, baseline: Path, work: Path) -> list[str]:
    envs = {"current": pythonpath_env(None), "baseline": pythonpath_env(baseline)}
    samples: dict[tuple[str, str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for kind in args.backends:
        folder = work / kind
        folder.mkdir()
        url = build(kind, folder, args.files, args.big_mib)
        mountpoint = folder / "mnt"
        mountpoint.mkdir()
        for round_ in range(args.rounds):
            order = CODES if round_ % 2 == 0 else CODES[::-1]
            for mount_kind, options in MOUNTS.items():
                for code in order:
                    print(f"[{kind}] round {round_ + 1}, {mount_kind}, {code}", file=sys.stderr)
                    for name, sample in one_mount(url, mountpoint, options, envs[code],
                                                  args).items():
                        samples[(kind, mount_kind, name, code)].append(sample)
    return rows(samples, args)


def rows(samples: dict[tuple[str, str, str, str], list[tuple[float, float]]],
         args: argparse.Namespace) -> list[str]:
    lines = []
    label = {"lmdb": "LMDB", "directory": "Directory", "sqlite": "SQLite", "zip": "Zip"}
    for kind in args.backends:
        for mount_kind in MOUNTS:
            for name in ("small files, cold", "small files, warm", "big value, cold",
                         "big value, warm"):
                medians = {}
                for code in CODES:
                    runs = samples[(kind, mount_kind, name, code)]
                    medians[code] = (statistics.median(wall for wall, _ in runs),
                                     statistics.median(cpu for _, cpu in runs))
                unit = (lambda s: f"{args.files / s:,.0f} files/s") if "small" in name else (
                    lambda s: f"{args.big_mib * MIB / s / MIB:,.0f} MiB/s")
                (cw, cc), (bw, bc) = medians["current"], medians["baseline"]
                lines.append(
                    f"| {label[kind]} | {mount_kind} | {name} | {unit(cw)} | {unit(bw)} | "
                    f"{bw / cw:.2f}x | {cc * 1e3:,.0f} / {bc * 1e3:,.0f} ms | "
                    f"{cpu_ratio(cc, bc)} |")
    return lines


def cpu_ratio(current: float, baseline: float) -> str:
    """Baseline's daemon CPU over current's (above 1.0 the current code costs less)."""
    if current < 0.005 or baseline < 0.005:
        return "-"  # a few ms of a page-cache pass: nothing to compare
    return f"{baseline / current:.2f}x"


def table(lines: list[str], args: argparse.Namespace, load: float) -> str:
    import zfuse

    major, minor = zfuse.libfuse_version()
    head = [
        ("## zfuse: one version per open file, against the code before "
         "(scripts/bench_fuse_versions.py)"),
        "",
        (f"{os.cpu_count()} cores (load average {load:.1f} at the start, shared with other "
         f"jobs), Linux {platform.release()}, Python {platform.python_version()}, libfuse "
         f"{major}.{minor}; medians of {args.rounds} rounds ({time.strftime('%Y-%m-%d')}).  "
         f"\"current\" is this checkout's `zfuse`, \"baseline\" the `zfuse` of commit "
         f"{args.baseline} (before open files pinned a version), each mounting the same "
         "store in turn within every round, the order alternating.  Small files: "
         f"{args.files:,} x 64 KiB opened, read and closed; cold is the first pass through "
         "a fresh mount after dropping the page cache, warm the second.  Big value: "
         f"{args.big_mib} MiB read sequentially, cold (its pages dropped) and warm.  "
         "Ratio: current's speed over baseline's (above 1.0 the current code is faster).  "
         "Daemon CPU: the daemon's CPU time for the pass, current / baseline, and their "
         "ratio (baseline's over current's: above 1.0 the current code costs less), "
         "which the load of other jobs inflates far less than wall-clock time."),
        "",
        "| backend | mount | measure | current | baseline | ratio | daemon CPU | CPU ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    return "\n".join(head + lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", default=BASELINE, help="the commit to compare with")
    parser.add_argument("--backends", nargs="+", default=["lmdb", "directory", "sqlite", "zip"],
                        choices=["lmdb", "directory", "sqlite", "zip"])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--big-mib", type=int, default=256)
    add_run_options(parser, smoke="seconds (against HEAD unless --baseline)", peers=None)
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.files, args.big_mib, args.backends = 1, 20, 2, ["lmdb"]
        if "--baseline" not in sys.argv:
            args.baseline = "HEAD"  # any history: a shallow clone has no older commit
    load = os.getloadavg()[0]
    with baseline_checkout(args.baseline) as baseline, \
            tempfile.TemporaryDirectory(prefix="bench-fuse-versions-") as work:
        text = table(run(args, baseline, Path(work)), args, load)
    print(text)
    if args.record and not args.smoke:
        record_section(BEGIN, END, text)


if __name__ == "__main__":
    main()
