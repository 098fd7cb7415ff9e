#!/usr/bin/env python
"""Atomic region writes side by side: zstores transactions, plain writes, locks, icechunk.

A zarr-python 3 array of 16 x 16 chunks (128 x 128 float64, 128 KiB each,
uncompressed, Zarr format 3) gets region writes of 1, 4, 16 and 64 whole
chunks, each region written ``--writes`` times at different places, every
write one commit, on each backend (LMDB, SQLite, Redis):

* ``plain``: ``array[region] = data`` through ``zstores.zarr_store(store)``:
  each chunk its own backend write; readers can see half a region (the anchor);
* ``transaction``: the same inside ``with zs.transaction():`` on an adapter made
  with ``zarr_store(store, transaction=True)``: one backend commit per region;
* ``atomic``: ``synchronized(array, sync, atomic=True)[region] = data``, a
  transaction whose commit holds the chunks' locks (``ProcessSynchronizer``
  file locks; ``RedisSynchronizer`` on Redis);

and, once per round (it has its own storage), icechunk on a local-filesystem
repository: ``array[region] = data`` and ``session.commit()`` per region, both
timed; the writable session and the array are opened before the clock starts
(favouring icechunk: a writer needs a new session after each commit).

Every contender runs in a fresh process (icechunk's in the interpreter named by
``--icechunk-python``, by default this one if it has icechunk, else
``$ZSTORES_ZARR_LATEST_PYTHON`` or ``.venv-zarr-latest``) on a fresh store,
pre-filled untimed, with one untimed warm-up write per size.  Each round runs
every contender once, a different one first each round, so background load
favours none.  Tables show the median of
the rounds of each contender's median milliseconds per commit, and MiB/s
(region bytes over the mean commit time); ratios are speeds (above 1.0: the
first is faster).

    .venv-zarr-latest/bin/python scripts/bench_txn.py            # print the tables
    .venv-zarr-latest/bin/python scripts/bench_txn.py --record   # and write docs/benchmarks.md
    .venv/bin/python scripts/bench_txn.py --smoke                # seconds: that it still runs

Redis uses the server named by ``ZSTORES_TEST_REDIS_URL`` (or ``--redis-url``),
else one started with ``scripts/services`` for the run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench_common import add_run_options, load_average, missing_peers, record_section, verdict

ROOT = Path(__file__).resolve().parents[1]
MARK_BEGIN = "<!-- bench_txn:begin -->"
MARK_END = "<!-- bench_txn:end -->"
#: The newest zarr-python's environment, where icechunk is installed (scripts/setup-env).
ZARR_LATEST_PYTHON = os.environ.get("ZSTORES_ZARR_LATEST_PYTHON",
                                    str(ROOT / ".venv-zarr-latest" / "bin" / "python"))

BACKENDS = ("lmdb", "sqlite", "redis")
BACKEND_NAMES = {"lmdb": "LMDB", "sqlite": "SQLite", "redis": "Redis"}
#: Our contenders, on every backend; icechunk runs once per round on its own storage.
OURS = ("plain", "transaction", "atomic")
ICECHUNK = "icechunk"
#: Region sizes in chunks -> the region's side in chunks (square regions).
SIZES = {1: 1, 4: 2, 16: 4, 64: 8}
GRID = 16  # chunks per side of the array
CHUNK = 128  # elements per side of a chunk: 128 x 128 float64 = 128 KiB
CHUNK_BYTES = CHUNK * CHUNK * 8
#: The figure the issue's targets name, and the targets.
TARGET_SIZE, TARGET_VS_PLAIN = 16, 0.8


# ================================================================== worker
def regions(side: int, writes: int) -> list[tuple[slice, slice]]:
    """``writes`` chunk-aligned square regions of ``side`` chunks a side, at different places.

    >>> regions(8, 3)[:2]
    [(slice(0, 1024, None), slice(0, 1024, None)), (slice(0, 1024, None), slice(1024, 2048, None))]
    """
    places = [(row, column) for row in range(0, GRID - side + 1, side)
              for column in range(0, GRID - side + 1, side)]
    chosen = [places[index % len(places)] for index in range(writes)]
    return [(slice(row * CHUNK, (row + side) * CHUNK),
             slice(column * CHUNK, (column + side) * CHUNK)) for row, column in chosen]


def timed_writes(write: Callable[[Any, Any], None], sizes: list[int], writes: int,
                 after: Callable[[], None] = lambda: None) -> dict[str, list[float]]:
    """Seconds of each of ``writes`` region writes per size, after one untimed warm-up write.

    ``after()`` runs after every write, outside the clock (icechunk: a new session).
    """
    import numpy as np

    figures = {}
    for size in sizes:
        side = SIZES[size]
        places = regions(side, writes + 1)
        data = np.full((side * CHUNK, side * CHUNK), 2.0)
        write(places[-1], data)  # warm-up: thread pools, connections, code paths
        after()
        seconds = []
        for number, region in enumerate(places[:-1]):
            data[0, 0] = number + 3.0  # every write a new value
            gc.collect()
            start = time.perf_counter()
            write(region, data)
            seconds.append(time.perf_counter() - start)
            after()
        figures[str(size)] = seconds
    return figures


def create_array(zs: Any) -> Any:
    """The benchmark's array on the zarr store ``zs``, every chunk written (untimed)."""
    import zarr

    array = zarr.create_array(zs, name="bench", shape=(GRID * CHUNK, GRID * CHUNK),
                              chunks=(CHUNK, CHUNK), dtype="f8", fill_value=0.0,
                              compressors=None, filters=None, zarr_format=3)
    array[:] = 1.0  # the writes overwrite existing chunks, as updates do
    return array


def open_backend(backend: str, folder: Path, redis_url: str | None) -> Any:
    import zstores

    if backend == "redis":
        return zstores.RedisStore(redis_url, prefix=f"bench-txn-{uuid.uuid4().hex}", mode="w")
    return zstores.open_store(f"{backend}://{folder / ('data.' + backend)}", mode="w")


def our_worker(contender: str, backend: str, folder: Path, redis_url: str | None,
               sizes: list[int], writes: int) -> dict[str, list[float]]:
    """Time ``contender``'s region writes on a fresh store of ``backend``."""
    import zstores

    store = open_backend(backend, folder, redis_url)
    try:
        zs = zstores.zarr_store(store, transaction=contender != "plain")
        array = create_array(zs)
        if contender == "plain":
            def write(region: Any, data: Any) -> None:
                array[region] = data
        elif contender == "transaction":
            def write(region: Any, data: Any) -> None:
                with zs.transaction():
                    array[region] = data
        else:
            proxy = zstores.synchronized(array, synchronizer(backend, folder, redis_url),
                                         atomic=True)
            if not proxy.transactional:
                raise SystemExit(f"{store!r}: synchronized(atomic=True) is not transactional")
            write = proxy.__setitem__
        return timed_writes(write, sizes, writes)
    finally:
        if backend == "redis":
            store.clear()  # the run's keys go with it
        store.close()


def synchronizer(backend: str, folder: Path, redis_url: str | None) -> Any:
    import zstores

    if backend == "redis":
        return zstores.RedisSynchronizer(redis_url, prefix=f"bench-txn-locks-{uuid.uuid4().hex}:")
    return zstores.ProcessSynchronizer(folder / "locks")


def icechunk_worker(folder: Path, sizes: list[int], writes: int) -> dict[str, list[float]]:
    """Time region writes each committed by icechunk on a local-filesystem repository."""
    import icechunk
    import zarr

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(folder / "repo")))
    session = repo.writable_session("main")
    create_array(session.store)
    session.commit("the array")
    opened: list[Any] = []

    def open_session() -> None:
        # A commit ends its session: the next write needs a new one (untimed).
        session = repo.writable_session("main")
        opened[:] = [session, zarr.open_array(session.store, path="bench", mode="r+")]

    def write(region: Any, data: Any) -> None:
        session, array = opened
        array[region] = data
        session.commit("a region")

    open_session()
    return timed_writes(write, sizes, writes, after=open_session)


def worker(args: argparse.Namespace) -> None:
    folder = Path(args.folder)
    if args.worker == ICECHUNK:
        figures = icechunk_worker(folder, args.sizes, args.writes)
    else:
        figures = our_worker(args.worker, args.backend, folder, args.redis_url, args.sizes,
                             args.writes)
    print(json.dumps(figures))


# ============================================================ orchestrator
Job = tuple[str, str]  # (contender, backend); icechunk's backend is "local"


def run_job(args: argparse.Namespace, job: Job) -> dict[str, list[float]]:
    """One contender on one backend in a fresh process and folder; seconds per write."""
    contender, backend = job
    python = args.icechunk_python if contender == ICECHUNK else sys.executable
    (ROOT / ".bench").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir or ROOT / ".bench",
                                     prefix="bench_txn-") as folder:
        command = [python, __file__, "--worker", contender, "--backend", backend,
                   "--folder", folder, "--writes", str(args.writes),
                   "--sizes", *map(str, args.sizes)]
        if args.redis_url:
            command += ["--redis-url", args.redis_url]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False,
                              timeout=3600,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  [str(ROOT), str(ROOT / "scripts")])})
    if done.returncode != 0:
        raise SystemExit(f"{contender} on {backend} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def rotated(jobs: list[Job], round_: int) -> list[Job]:
    """Each round starts with the next job, so none always runs first."""
    shift = round_ % len(jobs)
    return jobs[shift:] + jobs[:shift]


Samples = dict[tuple[str, str, int], list[list[float]]]


def measure(args: argparse.Namespace) -> Samples:
    """Every job once per round; per (contender, backend, size) each round's seconds per write."""
    jobs: list[Job] = [(contender, backend) for backend in args.backends for contender in OURS]
    if args.icechunk:
        jobs.append((ICECHUNK, "local"))
    samples: Samples = {}
    for round_ in range(args.rounds):
        for job in rotated(jobs, round_):
            began = time.monotonic()
            figures = run_job(args, job)
            print(f"  {' on '.join(job)}: {time.monotonic() - began:.0f} s", file=sys.stderr,
                  flush=True)
            for size, seconds in figures.items():
                samples.setdefault((*job, int(size)), []).append(seconds)
        print(f"  round {round_ + 1}/{args.rounds} done (load {load_average():.1f})",
              file=sys.stderr, flush=True)
    return samples


def latency(rounds: list[list[float]]) -> float:
    """Seconds per commit: the median over rounds of each round's median."""
    return statistics.median(statistics.median(seconds) for seconds in rounds)


def throughput(rounds: list[list[float]], size: int) -> float:
    """Bytes per second: the median over rounds of the region bytes over the mean commit time."""
    return statistics.median(size * CHUNK_BYTES / statistics.mean(seconds) for seconds in rounds)


def print_rounds(samples: Samples) -> None:
    """Each round's median milliseconds on stderr, to judge the spread behind a median."""
    for (contender, backend, size), rounds in samples.items():
        cells = "/".join(f"{statistics.median(seconds) * 1000:.1f}" for seconds in rounds)
        print(f"  {contender} {backend} {size} chunks: {cells} ms", file=sys.stderr)


# ------------------------------------------------------------------ tables
def speed_over(samples: Samples, first: tuple[str, str], second: tuple[str, str],
               size: int) -> float | None:
    """``first``'s throughput over ``second``'s for ``size`` chunks (None if one is missing)."""
    ours, theirs = samples.get((*first, size)), samples.get((*second, size))
    if not ours or not theirs:
        return None
    return throughput(ours, size) / throughput(theirs, size)


def cell(value: float | None, form: str) -> str:
    return "" if value is None else format(value, form)


def tables(samples: Samples, args: argparse.Namespace) -> list[str]:
    icechunk = (ICECHUNK, "local")
    columns = [*OURS, *([ICECHUNK] if args.icechunk else [])]
    lines = [
        "| backend | chunks | MiB | " + " | ".join(f"{c} ms" for c in columns) + " | "
        + " | ".join(f"{c} MiB/s" for c in columns)
        + " | transaction / plain | atomic / plain"
        + (" | transaction / icechunk" if args.icechunk else "") + " |",
        "|---|---:|---:|" + "---:|" * (2 * len(columns) + 2 + bool(args.icechunk)),
    ]
    for backend in args.backends:
        for size in args.sizes:
            keys = [(c, backend) if c != ICECHUNK else icechunk for c in columns]
            found = [samples.get((*key, size)) for key in keys]
            ms = [cell(latency(r) * 1000 if r else None, ",.1f") for r in found]
            rates = [cell(throughput(r, size) / (1 << 20) if r else None, ",.0f") for r in found]
            ratios = [speed_over(samples, ("transaction", backend), ("plain", backend), size),
                      speed_over(samples, ("atomic", backend), ("plain", backend), size)]
            if args.icechunk:
                ratios.append(speed_over(samples, ("transaction", backend), icechunk, size))
            lines.append(
                f"| {BACKEND_NAMES[backend]} | {size} | {size * CHUNK_BYTES / (1 << 20):g} | "
                + " | ".join(ms + rates) + " | "
                + " | ".join(cell(r, ".2f") + ("x" if r else "") for r in ratios) + " |")
    return lines


def targets(samples: Samples, args: argparse.Namespace) -> list[str]:
    """The issue's targets at 16 chunks, each with its figure and verdict."""
    if TARGET_SIZE not in args.sizes:
        return []
    said = []
    for backend in args.backends:
        name = BACKEND_NAMES[backend]
        vs_plain = speed_over(samples, ("transaction", backend), ("plain", backend), TARGET_SIZE)
        if vs_plain is not None and backend != "redis":
            said.append(f"{name} transaction / plain {vs_plain:.2f}x (target "
                        f"{TARGET_VS_PLAIN}x: {verdict(vs_plain, TARGET_VS_PLAIN)})")
        vs_ice = speed_over(samples, ("transaction", backend), (ICECHUNK, "local"), TARGET_SIZE)
        if vs_ice is not None:
            said.append(f"{name} transaction / icechunk {vs_ice:.2f}x (target above 1: "
                        f"{verdict(vs_ice)})")
    return [f"Targets at {TARGET_SIZE} chunks: " + "; ".join(said) + "."] if said else []


def versions(args: argparse.Namespace) -> str:
    import zarr

    said = [f"zarr-python {zarr.__version__}", f"Python {platform.python_version()}"]
    if args.icechunk:
        said.append(f"icechunk {args.icechunk_version}")
    return ", ".join(said)


def report(samples: Samples, args: argparse.Namespace, load: tuple[float, float]) -> str:
    lines = [
        "## Atomic region writes (`scripts/bench_txn.py`)",
        "",
        (f"{versions(args)}; {os.cpu_count()} cores shared with other jobs (load average "
         f"{load[0]:.1f} at the start, {load[1]:.1f} at the end), {time.strftime('%Y-%m-%d')}.  "
         f"A zarr-python 3 array of {GRID} x {GRID} chunks of {CHUNK} x {CHUNK} float64 "
         f"({CHUNK_BYTES >> 10} KiB, uncompressed); regions of whole chunks, each written "
         f"{args.writes} times at different places over existing chunks, every write one "
         "commit: **plain** `array[region] = data` through `zarr_store(store)` (each chunk "
         "its own backend write: not atomic), **transaction** the same inside "
         "`with zs.transaction():`, **atomic** through `synchronized(array, sync, "
         "atomic=True)` (ProcessSynchronizer; RedisSynchronizer on Redis), and **icechunk** "
         "on a local-filesystem repository (`array[region] = data` and `session.commit()` "
         "timed; the session opened before the clock starts).  ms: milliseconds per commit; "
         "MiB/s: region bytes over the mean commit time; ratios: speeds (above 1.0: the "
         f"first is faster).  Median of {args.rounds} rounds, each contender in a fresh "
         "process per round, a different one first each round."),
        "",
        *tables(samples, args),
    ]
    said = targets(samples, args)
    if said:
        lines += ["", *said]
    return "\n".join(lines)


# ----------------------------------------------------------------- servers
@contextlib.contextmanager
def redis_server(args: argparse.Namespace) -> Iterator[None]:
    """``args.redis_url``: the one given, or a private server started for the run and stopped."""
    if args.redis_url or "redis" not in args.backends:
        yield
        return
    folder = Path(tempfile.mkdtemp(prefix="bench_txn-services-"))
    env = {**os.environ, "ZSTORES_SERVICES_DIR": str(folder)}
    services = [str(ROOT / "scripts" / "services")]
    started = subprocess.run([*services, "start", "redis"], capture_output=True, text=True,
                             env=env, check=False)
    if started.returncode != 0:
        raise SystemExit(f"scripts/services start redis failed:\n{started.stderr}")
    urls = dict(line.removeprefix("export ").split("=", 1)
                for line in started.stdout.splitlines() if line.startswith("export "))
    args.redis_url = urls["ZSTORES_TEST_REDIS_URL"]
    try:
        yield
    finally:
        subprocess.run([*services, "stop"], capture_output=True, env=env, check=False)
        shutil.rmtree(folder, ignore_errors=True)


def icechunk_python(given: str | None) -> str:
    """The interpreter that runs icechunk: the one given, this one if it can, or zarr-latest's."""
    if given:
        return given
    if importlib.util.find_spec("icechunk") is not None:
        return sys.executable
    return ZARR_LATEST_PYTHON


def icechunk_version(python: str) -> str | None:
    """icechunk's version in ``python``, or None if it is missing there."""
    if not Path(python).exists():
        return None
    done = subprocess.run([python, "-c", "import icechunk; print(icechunk.__version__)"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


# ------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--sizes", nargs="+", type=int, choices=list(SIZES), default=list(SIZES),
                        help="region sizes in chunks (default 1 4 16 64)")
    parser.add_argument("--writes", type=int, default=16,
                        help="timed region writes per size and round (default 16)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds; the median is shown (default 5)")
    parser.add_argument("--redis-url", default=os.environ.get("ZSTORES_TEST_REDIS_URL"))
    parser.add_argument("--icechunk-python",
                        help="the interpreter with icechunk (default: this one if it has "
                             "icechunk, else .venv-zarr-latest)")
    parser.add_argument("--no-icechunk", dest="icechunk", action="store_false",
                        help="leave icechunk out")
    parser.add_argument("--dir", help="where the stores live (default .bench/)")
    add_run_options(parser, smoke="1 and 4 chunks, 2 writes, one round", peers="icechunk")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.smoke:
        if args.record:
            parser.error("--smoke figures are not worth recording")
        args.sizes, args.writes, args.rounds = [1, 4], 2, 1
    if args.writes < 1 or args.rounds < 1:
        parser.error("--writes and --rounds must be at least 1")
    if args.icechunk:
        args.icechunk_python = icechunk_python(args.icechunk_python)
        args.icechunk_version = icechunk_version(args.icechunk_python)
        missing = missing_peers({"icechunk": args.icechunk_version is not None},
                                args.require_peers)
        args.icechunk = not missing
    with redis_server(args):
        start_load = load_average()
        samples = measure(args)
        load = (start_load, load_average())
    print_rounds(samples)
    text = report(samples, args, load)
    print(text)
    if args.record:
        record_section(MARK_BEGIN, MARK_END, text)


if __name__ == "__main__":
    main()
