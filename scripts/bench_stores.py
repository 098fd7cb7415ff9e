#!/usr/bin/env python
"""Store throughput side by side: zstores, zarr-python 2.18, and the raw library.

Every figure comes from fresh worker processes (``bench_worker.py``): zstores
and the raw library in this interpreter, zarr-python 2.18 in the interpreter
named by ``--zarr2-python`` (default ``.venv-zarr2/bin/python``).  The three
run in turn, round after round, a different one first each round and each
after an ``os.sync()``, so background load and write-back hit them alike.
Each run makes passes in one process, each on a fresh store, while they take
under 0.5 s (up to 5), repeats each read within a pass while it takes under
0.3 s (up to 15 times), and reports each operation's median (see
``bench_worker.py``), so that short timings are medians of many; the table
shows the median of the rounds and ratios of medians (above 1.0 = zstores is
faster).

    .venv/bin/python scripts/bench_stores.py              # print the table
    .venv/bin/python scripts/bench_stores.py --record     # and write docs/benchmarks.md
    .venv/bin/python scripts/bench_stores.py --backends redis mongodb --rounds 3

Redis and MongoDB use the servers named by ZSTORES_TEST_REDIS_URL and
ZSTORES_TEST_MONGODB_URL, or start their own with scripts/services.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench_common import BENCHMARKS_MD, add_run_options, missing_peers, record_section
from bench_worker import FLOOR_ROWS, remove_listing_data

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "scripts" / "bench_worker.py"
BACKENDS = ["memory", "directory", "nested", "zip", "dbm", "lmdb", "sqlite", "redis", "mongodb"]
IMPLS = ["zstores", "zarr2", "raw"]
# (value size, number of keys); size 1 is the listdir-of-many-tiny-keys figure,
# size 2 the listdir of a nested array folder (bench_worker.NESTED_FOLDER: that
# many folders of 10 chunk keys each).
TINY, NESTED = 1, 2
LISTINGS = [(TINY, 1000), (TINY, 100_000), (NESTED, 1000)]
WORKLOADS = [(64 << 10, 1000), (1 << 20, 100), *LISTINGS]
# Servers on loopback: small values, where round trips dominate, and large ones.
NETWORK_WORKLOADS = [(4 << 10, 1000), (1 << 20, 100), *LISTINGS]
# --smoke: a few keys of each kind, one round.
# (The nested folder's listing runs the tiny keys' code too.)
SMOKE_WORKLOADS = [(64 << 10, 20), (NESTED, 20)]
SMOKE_NETWORK_WORKLOADS = [(4 << 10, 20), (NESTED, 20)]
# Backends that need a server, and the variable naming its URL.
NETWORK = {"redis": "ZSTORES_TEST_REDIS_URL", "mongodb": "ZSTORES_TEST_MONGODB_URL"}
#: Runs whose worker failed (their cells show n/a); --smoke fails when there is one.
FAILED: list[str] = []
MARK_BEGIN = "<!-- bench_stores:begin -->"
MARK_END = "<!-- bench_stores:end -->"
#: Folder backends whose listings also get the floor (bench_worker.listing_floor),
#: and its samples: (backend, size, count, row) -> CPU seconds per listing, a round each.
FLOOR_BACKENDS = ("directory", "nested")
FLOOR: dict[tuple, list[float]] = {}
FLOOR_BEGIN = "<!-- bench_stores:listing-floor:begin -->"
FLOOR_END = "<!-- bench_stores:listing-floor:end -->"


#: Backends with the end-to-end figure: zarr-python 2.18 and 3 reading a whole
#: array through our adapters, against zarr 2.18 reading it with its own store.
ARRAY_BACKENDS = ("lmdb",)
#: Who reads the array: ours through zarr 3 (this interpreter) and through zarr
#: 2.18 (its interpreter), zarr 2.18's own store (default settings) and copying,
#: and zarr 3 from its own MemoryStore (the floor of any zarr 3 store: its
#: figure fills the "raw library" column of the zarr 3 row).
ARRAY_IMPLS = ["zstores", "zstores-zarr2", "zarr2", "zarr2-copy", "zarr3-memory"]
ARRAY_OPS = ("zarr 3 reads the array", "zarr 2.18 reads the array")
#: The table column each array reader's figure goes in (the others: their own name).
ARRAY_COLUMNS = {"zstores": "zstores", "zstores-zarr2": "zstores", "zarr3-memory": "raw"}


def impls_for(backend: str) -> list[str]:
    # zarr 2's LMDBStore hands out views of the map by default (buffers=True),
    # which the next write may overwrite; its copying mode is the like-for-like one.
    return [*IMPLS, "zarr2-copy"] if backend == "lmdb" else IMPLS


def run_worker(python: str, impl: str, backend: str, size: int, count: int,
               workdir: str | None = None, *extra: str) -> dict[str, float]:
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(dir=ROOT / ".bench"))
        done = subprocess.run(
            [python, str(WORKER), impl, backend, workdir, str(size), str(count), *extra],
            capture_output=True, text=True, cwd=ROOT, timeout=3600, check=False,
        )
    if done.returncode != 0:
        FAILED.append(f"{impl}/{backend}/{size_label(size)}")
        print(f"  {impl}/{backend}/{size} failed: {done.stderr.strip().splitlines()[-1:]}",
              file=sys.stderr)
        return {}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace) -> dict[tuple, float]:
    """Median seconds per (backend, size, op, impl)."""
    pythons = {"zstores": sys.executable, "raw": sys.executable,
               "zarr2": args.zarr2_python, "zarr2-copy": args.zarr2_python,
               "zstores-zarr2": args.zarr2_python, "zarr3-memory": sys.executable}
    samples: dict[tuple, list[float]] = {}
    for backend in args.backends:
        for size, count in workloads(backend, args):
            with contextlib.ExitStack() as stack:
                # The tiny keys are written once and listed by every run.
                shared = (stack.enter_context(tempfile.TemporaryDirectory(dir=ROOT / ".bench"))
                          if size in (TINY, NESTED) else None)
                if shared is not None:  # and a server's copy, filled once for every run
                    stack.callback(remove_listing_data, shared, backend)
                for round_ in range(args.rounds):
                    impls = [impl for impl in impls_for(backend) if Path(pythons[impl]).exists()]
                    # A different one goes first each round, and each starts with
                    # the disk's dirty pages written out: otherwise the first run
                    # of a round pays for the writes of the run before it.
                    for impl in impls[round_ % len(impls):] + impls[:round_ % len(impls)]:
                        os.sync()
                        results = run_worker(pythons[impl], impl, backend, size, count, shared)
                        for op, seconds in results.items():
                            samples.setdefault((backend, size, count, op, impl), []).append(seconds)
                    if shared is not None and backend in FLOOR_BACKENDS:
                        # The same folder, after the runs above filled it.
                        results = run_worker(sys.executable, "floor", backend, size, count, shared)
                        for row, seconds in results.items():
                            FLOOR.setdefault((backend, size, count, row), []).append(seconds)
                    print(f"  {backend} {size_label(size)} round {round_ + 1}/{args.rounds}",
                          file=sys.stderr, flush=True)
            if backend in ARRAY_BACKENDS and size not in (TINY, NESTED):
                measure_array_reads(args, pythons, backend, size, count, samples)
        medians = {key: statistics.median(values) for key, values in samples.items()}
        print(table(medians, args.rounds), file=sys.stderr, flush=True)  # so far
    return {key: statistics.median(values) for key, values in samples.items()}


def measure_array_reads(args: argparse.Namespace, pythons: dict[str, str], backend: str,
                        size: int, count: int, samples: dict[tuple, list[float]]) -> None:
    """The end-to-end rows: zarr 2.18 and 3 reading one whole array, each reader in turn.

    Ours through zarr 3 fills the zstores column of "zarr 3 reads the array",
    ours through zarr 2.18 that of "zarr 2.18 reads the array"; zarr 2.18 with
    its own store is the anchor of both.
    """
    with tempfile.TemporaryDirectory(dir=ROOT / ".bench") as shared:
        # A peer left out (missing interpreter, said at the start) leaves its column n/a.
        readers = [impl for impl in ARRAY_IMPLS if Path(pythons[impl]).exists()]
        for round_ in range(args.rounds):
            turn = round_ % len(readers)
            for impl in readers[turn:] + readers[:turn]:
                results = run_worker(pythons[impl], impl, backend, size, count, shared, "array")
                for op, seconds in results.items():
                    column = ARRAY_COLUMNS.get(impl, impl)
                    ops = [op] if column in ("zstores", "raw") else list(ARRAY_OPS)
                    for row in ops:
                        samples.setdefault((backend, size, count, row, column), []).append(seconds)
            print(f"  {backend} {size_label(size)} array reads round {round_ + 1}/{args.rounds}",
                  file=sys.stderr, flush=True)


def workloads(backend: str, args: argparse.Namespace) -> list[tuple[int, int]]:
    """(value size, keys) to measure on ``backend``: all, the listings only, or the smoke's."""
    if args.smoke:
        return SMOKE_NETWORK_WORKLOADS if backend in NETWORK else SMOKE_WORKLOADS
    chosen = NETWORK_WORKLOADS if backend in NETWORK else WORKLOADS
    if args.listings_only:
        return [workload for workload in chosen if workload in LISTINGS]
    return chosen


@contextlib.contextmanager
def servers(backends: list[str]) -> Iterator[None]:
    """Make sure the network backends have a server: the URLs set, or scripts/services."""
    if all(NETWORK[b] in os.environ for b in backends if b in NETWORK):
        yield
        return
    env = {**os.environ, "ZSTORES_SERVICES_DIR": str(ROOT / ".bench" / "services")}
    services = [str(ROOT / "scripts" / "services")]
    started = subprocess.run([*services, "start"], capture_output=True, text=True, env=env,
                             check=False)
    if started.returncode != 0:
        raise SystemExit(f"scripts/services start failed:\n{started.stderr}")
    urls = dict(line.removeprefix("export ").split("=", 1)
                for line in started.stdout.splitlines() if line.startswith("export "))
    added = {name: url for name, url in urls.items() if name not in os.environ}
    os.environ.update(added)  # the workers inherit them
    try:
        yield
    finally:
        for name in added:
            del os.environ[name]
        subprocess.run([*services, "stop"], capture_output=True, env=env, check=False)


def size_label(size: int) -> str:
    if size == TINY:
        return "tiny"
    if size == NESTED:
        return "tiny, nested folder"
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


HEADER = ("| backend | values | op | keys | zstores | zarr 2.18 | raw library | vs zarr 2.18 "
          "| vs raw | vs zarr 2.18 copying |")


def table(medians: dict[tuple, float], rounds: int) -> str:
    lines = [
        (f"Keys per second, median of {rounds} rounds, each round's figure the median of "
         "the timings in one process: passes on fresh stores while they take under 0.5 s "
         "(up to 5), each read repeated in a pass while it takes under 0.3 s (up to 15 "
         "times); ratios are zstores' speed over the other's (above 1.0: zstores is "
         "faster).  The raw library's `getitems` keeps every value, as a batch read must.  "
         "\"zarr 2.18 copying\" is zarr 2's LMDBStore with "
         "`buffers=False`: its default hands out views of the memory map that outlive the "
         "transaction (a later write can change them under the reader), which zstores "
         "refuses to do.  \"zarr 3/2.18 reads the array\": the end-to-end figure, "
         "zarr-python reading a whole uncompressed array of the row's keys as chunks into "
         "an existing output array, ours through `ZarrStore`/`Zarr2Store` against zarr "
         "2.18 with its own store (keys: chunks); in the zarr 3 row the raw-library column "
         "is zarr-python 3 reading the same chunks from its own `MemoryStore` (no I/O, no "
         "copy: the fastest any store lets zarr 3 read)."),
        "",
        HEADER,
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
        *table_rows(medians),
    ]
    return "\n".join(lines)


FLOOR_HEADER = ("| backend | values | keys | zarr 2.18's `sorted(os.listdir)` | "
                "scandir, links out, sorted | zstores `listdir` | floor vs zarr 2.18 | "
                "zstores vs zarr 2.18 | zstores vs floor |")


def floor_table(rounds: int) -> str:
    """The listing floor: CPU time per listing of the folders the listdir rows list.

    Empty when no folder backend's listing was measured.
    """
    if not FLOOR:
        return ""
    medians = {key: statistics.median(values) for key, values in FLOOR.items()}
    lines = [
        (f"Listing floor of the folder backends: CPU time per listing (µs) of the folders "
         f"listed above, one process timing the three in turn, median of 9 rounds in each "
         f"of {rounds} runs, then the median of the runs; ratios are speeds (above 1.0: "
         "the first named is faster).  zarr 2.18's `DirectoryStore.listdir` is "
         "`sorted(os.listdir(path))` after an `os.path.isdir`, names only.  \"scandir, "
         "links out, sorted\" is the cheapest listing that keeps the rule that listings "
         "leave links out without a system call per entry: the folder opened below the "
         "store's root with `O_NOFOLLOW`, `os.scandir` on it, the names of the entries "
         "that are not links, sorted.  zstores' `listdir` also leaves out FIFOs and other "
         "kinds, temporary files and names that are not UTF-8, and checks the path."),
        "",
        FLOOR_HEADER,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for backend, size, count in sorted({key[:3] for key in medians},
                                       key=lambda k: (BACKENDS.index(k[0]), -k[1], k[2])):
        zarr2, floor, ours = (medians.get((backend, size, count, row)) for row in FLOOR_ROWS)
        cells = [f"{s * 1e6:,.0f}" if s else "n/a" for s in (zarr2, floor, ours)]
        ratios = [f"{b / a:.2f}x" if a and b else "n/a"
                  for a, b in ((floor, zarr2), (ours, zarr2), (ours, floor))]
        lines.append(f"| {backend} | {size_label(size)} | {count:,} | {' | '.join(cells)} | "
                     f"{' | '.join(ratios)} |")
    return "\n".join(lines)


def table_rows(medians: dict[tuple, float]) -> list[str]:
    lines = []
    rows = sorted({key[:4] for key in medians},
                  key=lambda k: (BACKENDS.index(k[0]), -k[1], k[3], k[2]))
    for backend, size, count, op in rows:
        seconds = {impl: medians.get((backend, size, count, op, impl))
                   for impl in [*IMPLS, "zarr2-copy"]}
        rate = {impl: (count / s if s else None) for impl, s in seconds.items()}
        cells = [f"{rate[i]:,.0f}" if rate[i] else "n/a" for i in IMPLS]
        copying = ratio(seconds, "zarr2-copy") if backend == "lmdb" else ""
        lines.append(
            f"| {backend} | {size_label(size)} | {op} | {count:,} | {' | '.join(cells)} | "
            f"{ratio(seconds, 'zarr2')} | {ratio(seconds, 'raw')} | {copying} |"
        )
    return lines


def ratio(seconds: dict[str, float | None], other: str) -> str:
    """zstores' speed over ``other``'s (their seconds over ours), or n/a if either is missing."""
    ours, theirs = seconds["zstores"], seconds[other]
    return f"{theirs / ours:.2f}x" if ours and theirs else "n/a"


def row_key(line: str) -> tuple[str, ...]:
    """A table row's identity: backend, values, op, keys."""
    return tuple(cell.strip() for cell in line.split("|")[1:5])


def record(text: str, backends: list[str]) -> None:
    """Write the table between the markers, keeping the recorded rows not measured now.

    A run of some backends, or of the listings only, replaces just its own rows
    (same backend, values, op and keys); the others stay as recorded before.
    """
    path = ROOT / "docs" / "benchmarks.md"
    document = path.read_text() if path.exists() else f"# Benchmarks\n\n{MARK_BEGIN}\n{MARK_END}\n"
    if MARK_BEGIN not in document:
        document += f"\n{MARK_BEGIN}\n{MARK_END}\n"
    head, rest = document.split(MARK_BEGIN, 1)
    old, tail = rest.split(MARK_END, 1)
    lines = text.splitlines()
    new_rows = [line for line in lines if line.startswith("| ") and line != HEADER]
    measured = {row_key(line) for line in new_rows}
    kept = [line for line in old.splitlines()
            if line.startswith("| ") and not line.startswith("| backend")
            and line.count("|") == HEADER.count("|") and row_key(line) not in measured
            and not measured_no_more(line)]
    rows = sorted(new_rows + kept, key=row_order)
    lines = [line for line in lines if not line.startswith("| ") or line == HEADER] + rows
    notes = [line for line in old.splitlines() if line.startswith("Recorded ")]
    path.write_text(f"{head}{MARK_BEGIN}\n" + "\n".join(lines + ([""] + notes if notes else []))
                    + f"\n{MARK_END}{tail}")
    print(f"recorded in {path}", file=sys.stderr)


def record_floor(text: str) -> None:
    """Write the listing floor's table between its markers (after the main table's).

    Only a run that measured the floor replaces it; its note lines
    ("Recorded ...") stay, as the main table's do.
    """
    if not text:
        return
    document = BENCHMARKS_MD.read_text()
    if FLOOR_BEGIN not in document:  # its place: right after the main table's section
        document = document.replace(MARK_END, f"{MARK_END}\n\n{FLOOR_BEGIN}\n{FLOOR_END}", 1)
        BENCHMARKS_MD.write_text(document)
    old = document.split(FLOOR_BEGIN, 1)[1].split(FLOOR_END, 1)[0]
    notes = [line for line in old.splitlines() if line.startswith("Recorded ")]
    record_section(FLOOR_BEGIN, FLOOR_END, text + "".join(f"\n\n{note}" for note in notes))


def measured_no_more(line: str) -> bool:
    """A recorded row of a figure the bench dropped: ``listdir`` beside the writes and reads.

    The listings of tiny keys (1,000 and 100,000, and a nested folder) measure
    it instead, on data written once for every run.
    """
    _, values, op, _ = row_key(line)
    return op == "listdir" and not values.startswith("tiny")


def row_order(line: str) -> tuple:
    """Backends in BACKENDS' order, then larger values first, op, keys (as table_rows)."""
    backend, values, op, keys = row_key(line)
    sizes = {"tiny": 1, "tiny, nested folder": 2}
    size = sizes.get(values) or int(values.split()[0]) << (20 if "MiB" in values else 10)
    return BACKENDS.index(backend), -size, op, int(keys.replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=BACKENDS, choices=BACKENDS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--zarr2-python", default=os.environ.get(
        "ZSTORES_ZARR2_PYTHON", str(ROOT / ".venv-zarr2" / "bin" / "python")),
        help="zarr-python 2.18's interpreter (default: $ZSTORES_ZARR2_PYTHON, "
        "else .venv-zarr2/bin/python)")
    add_run_options(parser, smoke="a few keys of each kind, one round",
                    peers="zarr-python 2.18's interpreter")
    parser.add_argument("--listings-only", action="store_true",
                        help="only the listdir figures of 1,000 and 100,000 tiny keys and a nested "
                        "array folder")
    args = parser.parse_args()
    missing_peers({"zarr-python 2.18 (--zarr2-python)": Path(args.zarr2_python).exists()},
                  args.require_peers)
    if args.smoke:
        if args.record:
            parser.error("--smoke figures are not worth recording")
        args.rounds = 1
    (ROOT / ".bench").mkdir(exist_ok=True)
    with servers(args.backends):
        text = table(measure(args), args.rounds)
    floor = floor_table(args.rounds)
    print(text + (f"\n\n{floor}" if floor else ""))
    if args.smoke and FAILED:
        raise SystemExit(f"failed: {', '.join(FAILED)}")
    if args.record:
        record(text, args.backends)
        record_floor(floor)


if __name__ == "__main__":
    main()
