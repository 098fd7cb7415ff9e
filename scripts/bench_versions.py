#!/usr/bin/env python
"""This checkout's zstores against a baseline commit's, side by side in one run.

What ``bench_stores.py`` and ``bench_zarr.py`` exercise, on the local engines
(LMDB, SQLite, Directory; Memory and Zip as controls), measured for the code
of this checkout ("after") and of a baseline commit ("before", default
0722a84: main before issue 27 split the engines into packages and put every
public method behind one gate), checked out into a temporary git worktree:

* single keys: get, set and ``in`` of a 16-byte and a 64 KiB value (100 keys,
  the figure per key);
* batches: ``getitems``/``setitems`` of 100 keys of each size;
* ``listdir`` of a folder of 1,000 keys, ``len(store)`` and ``list(store)``;
* zarr-python 3 through ``zstores.adapters.zarr_store(store)``: a 64 x 64 KiB
  chunk array (uint8) written whole, then read whole.

Each measurement is a fresh child process with ``PYTHONPATH`` set to one
checkout or the other (the child checks that ``zstores`` comes from it); the
two codes take turns, the order alternating from one round and one backend to
the next.  The child measures **CPU time** (``time.process_time``: every
thread of the process, no waiting for a core, which on this shared machine
sways wall time by a third): each operation is looped until a pass takes
``--target`` seconds of CPU (or a quarter second of wall time), and the
figure is the fastest of ``--repeats`` passes, as ``timeit`` reports.  The
table gives the medians over ``--rounds`` rounds and the speed ratio after
over before (above 1.0: the code now is faster).

    python scripts/bench_versions.py [--rounds 5] [--baseline REV] [--record]
    python scripts/bench_versions.py --backends lmdb --ops "get 16 B" --rounds 15
    python scripts/bench_versions.py --smoke      # seconds: that it still runs
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_common import (
    add_run_options,
    baseline_checkout,
    load_average,
    median,
    pythonpath_env,
    record_section,
)

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- bench_versions:begin -->", "<!-- bench_versions:end -->"
#: main before issue 27's commits (engines as packages, one gate, no frame trick).
BASELINE = "0722a84"
CODES = ("before", "after")
BACKENDS = {"lmdb": "LMDB", "sqlite": "SQLite", "directory": "Directory",
            "memory": "Memory", "zip": "Zip"}
SIZES = {"16 B": 16, "64 KiB": 64 << 10}
KEYS = 100  # keys of each size; the batches take all of them
LISTED = 1000  # keys in the folder listdir lists
CHUNK, CHUNKS = 64 << 10, 64  # the zarr array
#: Every operation, in the table's order: name -> (group, what one call does).
KEY_OPS = [f"{op} {size}" for size in SIZES for op in ("get", "set", "contains")] + [
    f"{op} {KEYS} x {size}" for size in SIZES for op in ("getitems", "setitems")] + [
    f"listdir of {LISTED:,} keys", "len(store)", "list(store)"]
ZARR_OPS = [f"zarr 3: write {CHUNKS} x 64 KiB chunks", f"zarr 3: read {CHUNKS} x 64 KiB chunks"]
OPS = KEY_OPS + ZARR_OPS
#: What one call of each operation counts as, for the per-item figure.
PER_KEY = {f"{op} {size}" for size in SIZES for op in ("get", "set", "contains")}


# ------------------------------------------------------------------ the child
def open_store(backend: str, folder: Path) -> Any:
    """A new, empty store of ``backend`` under ``folder``, by the public names alone."""
    import zstores

    if backend == "lmdb":
        return zstores.LMDBStore(folder / "data.lmdb", map_size=1 << 30)
    if backend == "sqlite":
        return zstores.SQLiteStore(folder / "data.sqlite")
    if backend == "directory":
        return zstores.DirectoryStore(folder / "data")
    if backend == "zip":
        return zstores.ZipStore(folder / "data.zip")
    return zstores.MemoryStore()


def cpu_per_call(function: Callable[[], Any], target: float, repeats: int) -> float:
    """CPU seconds of one call of ``function``: the fastest of ``repeats`` passes.

    A pass loops the call ``number`` times, ``number`` grown (1, 2, 5, 10, ...)
    until a pass takes ``target`` CPU seconds or a quarter second of wall time
    (writes that wait for the disk), as ``timeit.Timer.autorange`` does; the
    garbage collector is off during a pass, as in ``timeit``.
    """
    def one_pass(number: int) -> tuple[float, float]:
        gc.collect()
        gc.disable()
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(number):
                function()
            return time.process_time() - cpu, time.perf_counter() - wall
        finally:
            gc.enable()

    number, steps = 1, (1, 2, 5)
    for exponent in range(12):
        for step in steps:
            number = step * 10**exponent
            cpu, wall = one_pass(number)
            if cpu >= target or wall >= 0.25:
                break
        else:
            continue
        break
    best = cpu
    for _ in range(repeats - 1):
        best = min(best, one_pass(number)[0])
    return best / number


def key_operations(store: Any) -> dict[str, Callable[[], Any]]:
    """The key-value operations on a store holding the keys they read."""
    operations: dict[str, Callable[[], Any]] = {}
    for label, size in SIZES.items():
        value = os.urandom(size)
        keys = [f"{size}/{i}" for i in range(KEYS)]
        store.setitems(dict.fromkeys(keys, value))
        batch = dict.fromkeys(keys, value)

        def get_each(keys: list[str] = keys) -> None:
            for key in keys:
                store[key]

        def set_each(keys: list[str] = keys, value: bytes = value) -> None:
            for key in keys:
                store[key] = value

        def contains_each(keys: list[str] = keys) -> None:
            for key in keys:
                key in store  # noqa: B015 - the call is what is measured

        operations[f"get {label}"] = get_each
        operations[f"set {label}"] = set_each
        operations[f"contains {label}"] = contains_each
        operations[f"getitems {KEYS} x {label}"] = lambda keys=keys: store.getitems(keys)
        operations[f"setitems {KEYS} x {label}"] = lambda batch=batch: store.setitems(batch)
    store.setitems({f"listed/{i}": b"x" for i in range(LISTED)})
    operations[f"listdir of {LISTED:,} keys"] = lambda: store.listdir("listed")
    operations["len(store)"] = lambda: len(store)
    operations["list(store)"] = lambda: list(store)
    return operations


def zarr_operations(store: Any) -> dict[str, Callable[[], Any]]:
    """Writing and reading a whole zarr 3 array through ``zarr_store(store)``."""
    import numpy as np
    import zarr

    from zstores.adapters import zarr_store

    data = np.frombuffer(os.urandom(CHUNK * CHUNKS), dtype="uint8")
    array = zarr.create_array(zarr_store(store), name="a", shape=data.shape, chunks=(CHUNK,),
                              dtype=data.dtype, compressors=None, fill_value=0)
    array[:] = data
    if not np.array_equal(array[:], data):
        raise SystemExit("zarr read back other bytes")

    def write() -> None:
        array[:] = data

    return {ZARR_OPS[0]: write, ZARR_OPS[1]: lambda: array[:]}


def child(spec: dict[str, Any]) -> None:
    """Measure ``spec["ops"]`` on one backend with the zstores of ``spec["tree"]``; JSON out."""
    import zstores

    tree = Path(spec["tree"]).resolve()
    if not Path(zstores.__file__).resolve().is_relative_to(tree):
        raise SystemExit(f"zstores came from {zstores.__file__}, not from {tree}")
    with tempfile.TemporaryDirectory(prefix="bench-versions-", dir=spec["dir"]) as folder:
        store = open_store(spec["backend"], Path(folder))
        try:
            wanted = set(spec["ops"])
            operations = key_operations(store) if wanted & set(KEY_OPS) else {}
            if wanted & set(ZARR_OPS):
                operations |= zarr_operations(store)
            found = {op: cpu_per_call(operations[op], spec["target"], spec["repeats"])
                     / (KEYS if op in PER_KEY else 1) for op in spec["ops"]}
        finally:
            store.close()
    print(json.dumps(found))


# ----------------------------------------------------------------- the parent
def run_child(tree: Path, backend: str, ops: list[str], args: argparse.Namespace
              ) -> dict[str, float]:
    """One child process measuring ``ops`` with the zstores of ``tree``."""
    spec = {"tree": str(tree), "backend": backend, "ops": ops, "target": args.target,
            "repeats": args.repeats, "dir": args.dir}
    script = str(Path(__file__).resolve())
    done = subprocess.run([sys.executable, script, "--child", json.dumps(spec)],
                          capture_output=True, text=True, env=pythonpath_env(tree),
                          timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{backend} with {tree} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args: argparse.Namespace, baseline: Path) -> dict[tuple[str, str, str], list[float]]:
    """CPU seconds per call: (backend, op, code) -> one figure a round."""
    trees = {"before": baseline, "after": ROOT}
    samples: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    groups = [ops for ops in ([op for op in KEY_OPS if op in args.ops],
                              [op for op in ZARR_OPS if op in args.ops]) if ops]
    turn = 0
    for round_ in range(args.rounds):
        for backend in args.backends:
            for ops in groups:
                order = CODES if turn % 2 == 0 else CODES[::-1]
                turn += 1
                for code in order:
                    for op, seconds in run_child(trees[code], backend, ops, args).items():
                        samples[(backend, op, code)].append(seconds)
            print(f"round {round_ + 1}/{args.rounds}: {BACKENDS[backend]} done", file=sys.stderr,
                  flush=True)
        if turn % 2 == 1:
            turn += 1  # the next round starts the other way round
    return samples


def cell(seconds: float) -> str:
    """CPU time per call, in the unit that reads best."""
    if seconds >= 1e-3:
        return f"{seconds * 1e3:,.2f} ms"
    return f"{seconds * 1e6:,.2f} µs"


def rows(samples: dict[tuple[str, str, str], list[float]], args: argparse.Namespace
         ) -> list[tuple[str, str, float, float, float]]:
    """(backend, op, before, after, speed after/before), medians of the rounds."""
    found = []
    for backend in args.backends:
        for op in OPS:
            if (backend, op, "after") not in samples:
                continue
            before = median(samples[(backend, op, "before")])
            after = median(samples[(backend, op, "after")])
            found.append((BACKENDS[backend], op, before, after, before / after))
    return found


def table(found: list[tuple[str, str, float, float, float]], args: argparse.Namespace,
          load: tuple[float, float]) -> str:
    lines = [
        "## zstores against the code before issue 27 (scripts/bench_versions.py)",
        "",
        (f"{os.cpu_count()} cores (load average {load[0]:.1f} at the start, {load[1]:.1f} at "
         f"the end, shared with other jobs), Linux {platform.release()}, Python "
         f"{platform.python_version()}; {time.strftime('%Y-%m-%d')}.  \"before\" is the "
         f"zstores of commit {args.baseline}, \"after\" this checkout's, each in a fresh "
         "process per backend and round, taking turns (the order alternating).  CPU time "
         f"per call (`time.process_time`, the fastest of {args.repeats} timeit-style "
         f"passes of at least {args.target * 1e3:.0f} ms of CPU in the process), median of "
         f"{args.rounds} rounds; single-key rows per key (of {KEYS}), batch rows per batch "
         f"of {KEYS} keys, listdir of a folder of {LISTED:,} keys, `len`/`list` of the "
         f"store's {2 * KEYS + LISTED:,} keys, zarr 3 through `zarr_store(store)` per whole "
         f"array ({CHUNKS} uncompressed chunks of 64 KiB).  Speed: before's time over "
         "after's (above 1.0: the code now is faster)."),
        "",
        "| backend | operation | before | after | speed after/before |",
        "|---|---|---:|---:|---:|",
    ]
    for backend, op, before, after, speed in found:
        lines.append(f"| {backend} | {op} | {cell(before)} | {cell(after)} | {speed:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", default=BASELINE, help="the commit to compare with")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--ops", nargs="+", default=OPS, choices=OPS, metavar="OP",
                        help="the operations to measure (default: all; e.g. \"get 16 B\")")
    parser.add_argument("--repeats", type=int, default=5, help="passes per figure in a child")
    parser.add_argument("--target", type=float, default=0.04,
                        help="CPU seconds a pass takes at least (default 0.04)")
    parser.add_argument("--dir", default=None, help="where the stores go (default: /tmp)")
    parser.add_argument("--note", default="", help="a paragraph recorded under the table")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    add_run_options(parser, smoke="seconds (against HEAD unless --baseline)", peers=None)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.smoke:
        args.rounds, args.repeats, args.target = 1, 1, 0.001
        if "--baseline" not in sys.argv:
            args.baseline = "HEAD"  # any history: a shallow clone has no older commit
    start = load_average()
    with baseline_checkout(args.baseline) as baseline:
        found = rows(measure(args, baseline), args)
    text = table(found, args, (start, load_average()))
    slow = [f"{backend} {op} ({speed:.2f}x)" for backend, op, _, _, speed in found
            if speed < 0.95]
    print(text)
    print(f"below 0.95x: {', '.join(slow) if slow else 'none'}", file=sys.stderr)
    if args.record and not args.smoke:
        record_section(BEGIN, END, text + (f"\n\n{args.note}" if args.note else ""))


if __name__ == "__main__":
    main()
