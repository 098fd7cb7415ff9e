#!/usr/bin/env python
"""Synchronizer costs side by side: zstores against zarr-python 2.18's ProcessSynchronizer.

1. Lock cost: one ``with sync[key]: pass`` per chunk key, uncontended, over
   2,000 chunk keys (twice: first creating the lock files, then reusing
   them), for zstores' Process- (plain and striped), Thread- and Redis-
   synchronizers and zarr-python 2.18's Process- and ThreadSynchronizer.
2. Write throughput: 1, 2 and 4 spawned writer processes write disjoint
   stripes of 1 MiB (131,072 int64) into an array chunked by 131,071, so
   every stripe shares chunks with its neighbours, on LMDB, SQLite and
   Directory stores, uncompressed, Zarr format 2:
   - zarr-python 3 on zstores, unsynchronized (loses updates: the anchor
     for what the locks cost);
   - zarr-python 3 on zstores through ``synchronized(array, ProcessSynchronizer)``;
   - zarr-python 2.18 on zstores stores (through ``zstores.zarr_store``)
     with zstores' ``ProcessSynchronizer`` as its ``synchronizer=``: the
     same zarr as the anchor, so that this against the anchor is zstores'
     stores and locks alone, and this against zarr 3 + zstores sync is the
     zarr version alone;
   - zarr-python 2.18 on its own stores with its own ``ProcessSynchronizer``;
   - in the Directory rows (or the first backend's, when Directory is not
     measured), zarr-python 3 on its own ``LocalStore`` without
     any locks: what zarr-python 3 itself costs on its own store, the anchor
     for what zarr 3 rows can reach.
   Aggregate MB/s is all bytes written over the time from a common start to
   the last writer's end.  CPU ms/MB is the writer processes' CPU time (all
   their threads: zarr-python 3's event loop and store workers too) per MB
   written: on a shared machine, where a writer waits for a core as long as
   it runs, it shows what each implementation costs apart from that wait.

Every figure comes from fresh processes (this script re-run as a worker),
zarr-python 2.18's in the interpreter named by ``--zarr2-python``; the
implementations take turns round after round, each round starting with the
next one, so background load and warm caches favour none.  Tables show medians of
the rounds and ratios of medians.

    .venv/bin/python scripts/bench_sync.py            # print the tables
    .venv/bin/python scripts/bench_sync.py --record   # and write docs/benchmarks.md
    .venv/bin/python scripts/bench_sync.py --smoke    # seconds: that it still runs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_common import add_run_options, load_average, missing_peers

ROOT = Path(__file__).resolve().parents[1]
MARK_BEGIN = "<!-- bench_sync:begin -->"
MARK_END = "<!-- bench_sync:end -->"

LOCK_IMPLS = ["zstores-process", "zstores-striped", "zstores-thread", "zstores-redis",
              "zarr2-process", "zarr2-thread"]
WRITE_IMPLS = ["zarr3-nolock", "zarr3-sync", "zarr2-zstores", "zarr2-sync", "zarr3-localstore"]
# Implementations that do not use the backend: run once per round, shown in the
# Directory rows (or the first backend's, when Directory is not measured).
BACKEND_FREE = {"zarr3-localstore"}
BACKENDS = ["lmdb", "sqlite", "directory"]
WRITERS = [1, 2, 4]
# --smoke: a few small stripes and locks, set in the environment so that the
# worker processes (this script again, and their spawned writers) see it too.
SMOKE = os.environ.get("BENCH_SYNC_SMOKE") == "1"
LOCK_KEYS = 50 if SMOKE else 2000
STRIPES = 8 if SMOKE else 48  # per run, shared out among the writers
WIDTH = 1 << (10 if SMOKE else 17)  # int64 elements per stripe: 1 MiB (8 KiB)
CHUNK = WIDTH - 1


# ================================================================ lock worker
def lock_worker(impl: str, folder: str, redis_url: str | None) -> dict[str, float]:
    """Seconds per lock, first pass (new lock files) and second pass (existing ones)."""
    sync = make_synchronizer(impl, folder, redis_url)
    keys = [f"group/array/{index // 50}.{index % 50}" for index in range(LOCK_KEYS)]
    passes = {}
    for label in ("first", "again"):
        start = time.perf_counter()
        for key in keys:
            with sync[key]:
                pass
        passes[label] = (time.perf_counter() - start) / len(keys)
    return passes


def make_synchronizer(impl: str, folder: str, redis_url: str | None):
    if impl.startswith("zarr2-"):
        import zarr

        if impl == "zarr2-process":
            return zarr.ProcessSynchronizer(folder)
        return zarr.ThreadSynchronizer()
    from zstores.sync import ProcessSynchronizer, RedisSynchronizer, ThreadSynchronizer

    if impl == "zstores-process":
        return ProcessSynchronizer(folder)
    if impl == "zstores-striped":
        return ProcessSynchronizer(folder, stripes=64)
    if impl == "zstores-thread":
        return ThreadSynchronizer()
    prefix = f"bench-sync-{os.getpid()}:"
    return RedisSynchronizer(redis_url, prefix=prefix, lease=60)


# =========================================================== throughput worker
def write_worker(impl: str, backend: str, folder: str) -> dict[str, float]:
    """Seconds, and CPU seconds of the writers (``cpu<n>``), for each number of writers.

    The writers are a pool of warmed spawned processes.
    """
    import multiprocessing

    seconds = {}
    with multiprocessing.get_context("spawn").Pool(max(WRITERS)) as pool:
        pool.map(warm_up, range(max(WRITERS)), chunksize=1)
        for writers in WRITERS:
            target = make_target(impl, backend, Path(folder) / f"w{writers}")
            start_at = time.time() + 0.3
            arguments = [(target, list(range(w, STRIPES, writers)), start_at)
                         for w in range(writers)]
            ends = pool.starmap_async(write_stripes, arguments, chunksize=1).get(1800)
            seconds[str(writers)] = max(end for end, _ in ends) - start_at
            seconds[f"cpu{writers}"] = sum(cpu for _, cpu in ends)
        pool.close()
        pool.join()
    return seconds


def warm_up(_: int) -> None:
    import numpy  # noqa: F401 - imported once per worker, before any timing
    import zarr  # noqa: F401

    time.sleep(0.2)  # hold this worker so that every worker gets one warm-up


def write_stripes(target, stripes: list[int], start_at: float) -> tuple[float, float]:
    """Write the stripes from ``start_at``; the time at the end and the CPU seconds taken."""
    import numpy as np

    values = np.arange(WIDTH, dtype="i8")
    time.sleep(max(0.0, start_at - time.time()))
    cpu = time.process_time()  # every thread of this process: zarr's own ones too
    for stripe in stripes:
        target[stripe * WIDTH:(stripe + 1) * WIDTH] = values
    return time.time(), time.process_time() - cpu


def make_target(impl: str, backend: str, folder: Path):
    folder.mkdir(parents=True)
    shape, chunks = (STRIPES * WIDTH,), (CHUNK,)
    if impl.startswith("zarr2-"):
        import zarr

        if impl == "zarr2-sync":
            store = zarr2_store(backend, folder)
            sync = zarr.ProcessSynchronizer(str(folder / "locks"))
        else:
            from zstores.adapters import zarr_store
            from zstores.sync import ProcessSynchronizer

            store = zarr_store(zstores_store(backend, folder))
            sync = ProcessSynchronizer(folder / "locks")
        return zarr.open_array(store, mode="w", shape=shape, chunks=chunks, dtype="i8",
                               compressor=None, synchronizer=sync)
    import zarr

    from zstores.adapters import zarr_store
    from zstores.sync import ProcessSynchronizer, synchronized

    if impl == "zarr3-localstore":  # zarr 3's own store, no locks: the zarr 3 anchor
        return zarr.create_array(zarr.storage.LocalStore(str(folder / "data")), shape=shape,
                                 chunks=chunks, dtype="i8", compressors=None, zarr_format=2)
    array = zarr.create_array(zarr_store(zstores_store(backend, folder)), shape=shape,
                              chunks=chunks, dtype="i8", compressors=None, zarr_format=2)
    if impl == "zarr3-nolock":
        return array
    return synchronized(array, ProcessSynchronizer(folder / "locks"))


def zstores_store(backend: str, folder: Path):
    from zstores.urls import open_store

    suffix = {"lmdb": ".lmdb", "sqlite": ".sqlite", "directory": ""}[backend]
    scheme = {"lmdb": "lmdb", "sqlite": "sqlite", "directory": "file"}[backend]
    return open_store(f"{scheme}://{folder / ('data' + suffix)}", mode="w")


def zarr2_store(backend: str, folder: Path):
    import zarr

    if backend == "lmdb":
        return zarr.LMDBStore(str(folder / "data.lmdb"))
    if backend == "sqlite":
        return zarr.SQLiteStore(str(folder / "data.sqlite"))
    return zarr.DirectoryStore(str(folder / "data"))


# =============================================================== orchestrator
def run(python: str, *arguments: str) -> dict[str, float] | None:
    (ROOT / ".bench").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / ".bench") as folder:
        done = subprocess.run(
            [python, __file__, "--worker", *arguments, folder],
            capture_output=True, text=True, cwd=ROOT, timeout=3600, check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or ["no output"]
        print(f"  {' '.join(arguments)} failed: {last[0]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def python_for(impl: str, args: argparse.Namespace) -> str:
    return args.zarr2_python if impl.startswith("zarr2") else sys.executable


def rotated(impls: list[str], round_: int) -> list[str]:
    """Each round starts with the next implementation, so none always runs first."""
    shift = round_ % len(impls)
    return impls[shift:] + impls[:shift]


def measure_locks(args: argparse.Namespace) -> dict[tuple[str, str], float]:
    impls = [i for i in LOCK_IMPLS if i != "zstores-redis" or args.redis_url]
    samples: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.rounds):
        for impl in rotated(impls, round_):
            result = run(python_for(impl, args), "locks", impl, args.redis_url or "-")
            for label, seconds in (result or {}).items():
                samples.setdefault((impl, label), []).append(seconds)
        print(f"  locks: round {round_ + 1}/{args.rounds}", file=sys.stderr, flush=True)
    return {key: statistics.median(values) for key, values in samples.items()}


def measure_writes(args: argparse.Namespace) -> dict[tuple[str, str, str], float]:
    samples: dict[tuple[str, str, str], list[float]] = {}
    anchor_row = "directory" if "directory" in args.backends else args.backends[0]
    for round_ in range(args.rounds):
        for backend in args.backends:
            for impl in rotated(WRITE_IMPLS, round_):
                if impl in BACKEND_FREE and backend != anchor_row:
                    continue
                result = run(python_for(impl, args), "writes", impl, backend)
                for writers, seconds in (result or {}).items():
                    samples.setdefault((backend, writers, impl), []).append(seconds)
        print(f"  writes: round {round_ + 1}/{args.rounds}", file=sys.stderr, flush=True)
    return {key: statistics.median(values) for key, values in samples.items()}


def ratio(numerator: float | None, denominator: float | None) -> str:
    return f"{numerator / denominator:.2f}x" if numerator and denominator else "n/a"


def lock_table(medians: dict[tuple[str, str], float], rounds: int) -> str:
    lines = [
        (
            f"Lock acquire + release per chunk key, uncontended, {LOCK_KEYS:,} keys, "
            f"median of {rounds} rounds (µs; lower is better).  \"new\": the lock files are "
            "created; \"again\": they exist.  Ratios: zarr-python 2.18's ProcessSynchronizer "
            "time over this one's (above 1.0: faster than zarr 2.18)."
        ),
        "",
        "| synchronizer | new | again | vs zarr 2.18 (new) | vs zarr 2.18 (again) |",
        "|---|---:|---:|---:|---:|",
    ]
    anchor = {label: medians.get(("zarr2-process", label)) for label in ("first", "again")}
    for impl in LOCK_IMPLS:
        first, again = medians.get((impl, "first")), medians.get((impl, "again"))
        if first is None:
            continue
        lines.append(
            f"| {impl} | {first * 1e6:,.1f} | {again * 1e6:,.1f} | "
            f"{ratio(anchor['first'], first)} | {ratio(anchor['again'], again)} |"
        )
    return "\n".join(lines)


WRITE_COLUMNS = {
    "zarr3-nolock": "zarr 3, no locks",
    "zarr3-sync": "zarr 3 + zstores sync",
    "zarr2-zstores": "zarr 2.18 + zstores sync and store",
    "zarr2-sync": "zarr 2.18 + its sync and store",
    "zarr3-localstore": "zarr 3 on its LocalStore, no locks",
}


def write_table(
    medians: dict[tuple[str, str, str], float], rounds: int, backends: list[str]
) -> str:
    """Two tables: aggregate MB/s, then the writers' CPU ms per MB, with their ratios."""
    megabytes = STRIPES * WIDTH * 8 / 1e6
    names = " | ".join(WRITE_COLUMNS[impl] for impl in WRITE_IMPLS)
    ratios = ("locks' cost | zarr 3 + zstores vs zarr 2.18 | zarr 2.18: zstores vs its own "
              "| zarr 3 vs zarr 2.18, both on zstores | zarr 3 on LocalStore, no locks, "
              "vs zarr 2.18")
    head = [f"| backend | writers | {names} | {ratios} |",
            "|---|---:|" + "---:|" * (len(WRITE_IMPLS) + 5)]
    speed = [
        (
            f"Aggregate write throughput (MB/s; higher is better), {megabytes:.3g} MB in "
            f"{STRIPES} chunk-unaligned stripes of {WIDTH * 8 >> 10:,} KiB over chunks of "
            f"{CHUNK:,} elements, uncompressed, median of {rounds} rounds.  \"locks' cost\": "
            "zarr 3 synchronized over unsynchronized; \"zarr 3 + zstores vs zarr 2.18\": the "
            "target, zstores-synchronized zarr 3 over zarr-python 2.18 with its "
            "ProcessSynchronizer on its own store; \"zarr 2.18: zstores vs its own\": the "
            "same zarr 2.18 on zstores' store and locks over its own (what zstores' parts "
            "cost); \"zarr 3 vs zarr 2.18\": both on zstores' store and locks (what the zarr "
            "version costs); \"zarr 3 on LocalStore, no locks, vs zarr 2.18\" (Directory rows): "
            "zarr-python 3 on its own store without any lock over zarr 2.18 with its locks, "
            "what zarr 3 itself costs on its own store.  Above 1.0: faster."
        ),
        "",
        *head,
    ]
    cpu = [
        (
            "The writers' CPU time per MB written (ms; lower is better; every thread of the "
            "writer processes, so zarr 3's event loop too), the same runs.  On a shared "
            "machine a writer waits for a core as long as it runs; this shows what each "
            "costs apart from that wait.  Ratios as above (above 1.0: less CPU)."
        ),
        "",
        *head,
    ]
    for backend in backends:
        for writers in WRITERS:
            rate, used = {}, {}
            for impl in WRITE_IMPLS:
                seconds = medians.get((backend, str(writers), impl))
                rate[impl] = megabytes / seconds if seconds else None
                spent = medians.get((backend, f"cpu{writers}", impl))
                # as a rate (MB per CPU second), so that the ratios read the same way
                used[impl] = megabytes / spent if spent else None
            speed.append(_write_row(backend, writers, rate, lambda v: f"{v:,.0f}"))
            cpu.append(_write_row(backend, writers, used, lambda v: f"{1000 / v:,.2f}"))
    return "\n".join(speed) + "\n\n" + "\n".join(cpu)


def _write_row(backend: str, writers: int, rate: dict[str, float | None],
               show: Callable[[float], str]) -> str:
    """One table row: the figures, then the four ratios (rates: higher is better)."""
    cells = [show(rate[impl]) if rate[impl] else "n/a" for impl in WRITE_IMPLS]
    ratios = [
        ratio(rate["zarr3-sync"], rate["zarr3-nolock"]),
        ratio(rate["zarr3-sync"], rate["zarr2-sync"]),
        ratio(rate["zarr2-zstores"], rate["zarr2-sync"]),
        ratio(rate["zarr3-sync"], rate["zarr2-zstores"]),
        ratio(rate["zarr3-localstore"], rate["zarr2-sync"]),
    ]
    return f"| {backend} | {writers} | {' | '.join(cells)} | {' | '.join(ratios)} |"


def record(text: str) -> None:
    """Replace the section between our markers in docs/benchmarks.md, appending them if missing."""
    path = ROOT / "docs" / "benchmarks.md"
    document = path.read_text() if path.exists() else "# Benchmarks\n"
    if MARK_BEGIN not in document:
        document += ("" if document.endswith("\n") else "\n") + f"\n{MARK_BEGIN}\n{MARK_END}\n"
    head, rest = document.split(MARK_BEGIN, 1)
    tail = rest.split(MARK_END, 1)[1]
    path.write_text(f"{head}{MARK_BEGIN}\n{text}\n{MARK_END}{tail}")
    print(f"recorded in {path}", file=sys.stderr)


def worker_main(arguments: list[str]) -> None:
    kind, *rest = arguments
    if kind == "locks":
        impl, redis_url, folder = rest
        result = lock_worker(impl, folder, None if redis_url == "-" else redis_url)
    else:
        impl, backend, folder = rest
        result = write_worker(impl, backend, folder)
    print(json.dumps(result))


# ================================================= fencing and object locks
# ``--part fencing`` (issue 25): locks and fenced writes on an S3 emulator,
# RedisSynchronizer beside ObjectStoreSynchronizer, recorded in a section of
# its own.  Everything runs against the same moto bucket and Redis server.
FENCE_BEGIN = "<!-- bench_sync_fencing:begin -->"
FENCE_END = "<!-- bench_sync_fencing:end -->"
FENCE_LOCKS = 10 if SMOKE else 60  # acquire+release pairs per measurement
FENCE_WRITES = 4 if SMOKE else 24  # synchronized writes per measurement
CONTENDERS = [2] if SMOKE else [4, 8]
GRANTS = 3 if SMOKE else 8  # grants each contender waits for
HOLD = 0.01  # seconds a contender holds the lock


def _bench_s3(endpoint: str, location: str) -> Any:
    from zstores import S3Store

    return S3Store(location, endpoint_url=endpoint, access_key_id="bench",
                   secret_access_key="bench-secret", region="us-east-1")


def _bench_sync(kind: str, endpoint: str, location: str, redis_url: str, lease: float) -> Any:
    import uuid

    from zstores import ObjectStoreSynchronizer, RedisSynchronizer

    if kind == "redis":
        return RedisSynchronizer(redis_url, prefix=f"bench-{uuid.uuid4().hex[:8]}:", lease=lease)
    return ObjectStoreSynchronizer(_bench_s3(endpoint, location + "-locks"), lease=lease,
                                   poll=0.01)


def fence_lock_seconds(kind: str, endpoint: str, location: str, redis_url: str) -> float:
    """Seconds per uncontended acquire + release."""
    sync = _bench_sync(kind, endpoint, location, redis_url, 30)
    with sync["warm"]:
        pass
    start = time.perf_counter()
    for index in range(FENCE_LOCKS):
        with sync[f"k{index % 8}"]:
            pass
    return (time.perf_counter() - start) / FENCE_LOCKS


def fence_write_seconds(kind: str, fenced: bool, data: str, endpoint: str, location: str,
                        redis_url: str) -> float:
    """Seconds per synchronized write of 1,000 int32 across two chunks (two read-modify-writes)."""
    import numpy as np
    import zarr

    import zstores

    if data == "s3":
        store = _bench_s3(endpoint, location)
    else:
        store = zstores.SQLiteStore(location, mode="a")
    array = zarr.create_array(zstores.zarr_store(store), name="data", shape=(FENCE_WRITES * 1000,),
                              chunks=(1000,), dtype="i4", fill_value=0, overwrite=True)
    proxy = zstores.synchronized(array, _bench_sync(kind, endpoint, location, redis_url, 30),
                                 fenced=fenced)
    value = np.arange(1000, dtype="i4")
    proxy[0:10] = 1  # zarr and the locks warm
    start = time.perf_counter()
    for index in range(FENCE_WRITES - 1):
        proxy[index * 1000 + 500:index * 1000 + 1500] = value
    return (time.perf_counter() - start) / (FENCE_WRITES - 1)


def fence_waits(kind: str, processes: int, endpoint: str, location: str,
                redis_url: str) -> list[float]:
    """Every wait for one lock of ``processes`` spawned contenders, each taking it GRANTS times."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(processes), context.Queue()
    sync = _bench_sync(kind, endpoint, location, redis_url, 30)
    # The contenders share one synchronizer's prefix: pickled to them.
    workers = [context.Process(target=_contender_of, args=(sync, barrier, results))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    waits = [wait for _ in workers for wait in results.get(timeout=600)]
    for worker in workers:
        worker.join(60)
    return waits


def _contender_of(sync: Any, barrier: Any, results: Any) -> None:
    waits = []
    with sync["warm"]:  # connections, imports and Lua scripts ready before the first wait
        pass
    barrier.wait()
    for _ in range(GRANTS):
        asked = time.perf_counter()
        with sync["contended"]:
            waits.append(time.perf_counter() - asked)
            time.sleep(HOLD)
    results.put(waits)


def measure_fencing(args: argparse.Namespace) -> str:
    """All of the fencing part, the implementations taking turns in every round."""
    import uuid

    from bench_common import median

    endpoint, redis_url = args.s3_endpoint, args.redis_url
    if not endpoint or not redis_url:
        raise SystemExit("--part fencing needs --s3-endpoint and --redis-url "
                         "(or $ZSTORES_TEST_S3_ENDPOINT, $ZSTORES_TEST_REDIS_URL)")
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(f"{endpoint.rstrip('/')}/{bucket}",
                                                  method="PUT"), timeout=30).close()
    folder = tempfile.mkdtemp(prefix="bench-fence-")
    locks: dict[str, list[float]] = {}
    writes: dict[tuple[str, str, bool], list[float]] = {}
    waits: dict[tuple[str, int], list[float]] = {}
    lock_kinds = ["redis", "object"]
    write_rows = [("s3", "redis", False), ("s3", "redis", True), ("s3", "object", False),
                  ("s3", "object", True), ("sqlite", "redis", False), ("sqlite", "redis", True)]
    for round_ in range(args.rounds):
        turn = round_ % 2
        for kind in lock_kinds[turn:] + lock_kinds[:turn]:
            location = f"{bucket}/locks-{kind}-{round_}"
            locks.setdefault(kind, []).append(
                fence_lock_seconds(kind, endpoint, location, redis_url))
        for data, kind, fenced in write_rows[turn:] + write_rows[:turn]:
            tag = f"{data}-{kind}-{int(fenced)}-{round_}"
            location = (f"{bucket}/{tag}" if data == "s3"
                        else os.path.join(folder, f"{tag}.sqlite"))
            writes.setdefault((data, kind, fenced), []).append(
                fence_write_seconds(kind, fenced, data, endpoint, location, redis_url))
        for processes in CONTENDERS:
            for kind in lock_kinds[turn:] + lock_kinds[:turn]:
                location = f"{bucket}/wait-{kind}-{processes}-{round_}"
                waits.setdefault((kind, processes), []).extend(
                    fence_waits(kind, processes, endpoint, location, redis_url))
    names = {"redis": "RedisSynchronizer", "object": "ObjectStoreSynchronizer"}
    lines = [("Locks and data on the same emulators: moto (S3) and one Redis server; "
              f"{args.rounds} rounds, the implementations taking turns; medians."), "",
             (f"Uncontended `with sync[key]: pass`, {FENCE_LOCKS} per round (locks in S3 for "
              "the object synchronizer, in Redis for the other):"), "",
             "| synchronizer | ms per acquire + release | vs Redis |", "|---|---:|---:|"]
    redis_lock = median(locks["redis"])
    for kind in lock_kinds:
        seconds = median(locks[kind])
        lines.append(f"| {names[kind]} | {seconds * 1000:.2f} | {seconds / redis_lock:.2f}x |")
    lines += ["", (f"Synchronized writes of 1,000 int32 across two 1,000-element chunks (two "
                   f"read-modify-writes, one process), {FENCE_WRITES - 1} per round.  Fenced on "
                   "S3: each chunk written conditionally on the version read under its lock; "
                   "on SQLite: the fence record read in the write's transaction."), "",
              "| data | locks | unfenced writes/s | fenced writes/s | fenced / unfenced |",
              "|---|---|---:|---:|---:|"]
    for data, kind in [("s3", "redis"), ("s3", "object"), ("sqlite", "redis")]:
        plain, fence = median(writes[(data, kind, False)]), median(writes[(data, kind, True)])
        lines.append(f"| {data} | {names[kind]} | {1 / plain:.1f} | {1 / fence:.1f} | "
                     f"{plain / fence:.2f}x |")
    lines += ["", (f"Wait for one lock: N spawned processes, each taking it {GRANTS} times "
                   f"and holding it {HOLD * 1000:.0f} ms (all waits of all rounds).  Both are "
                   "FIFO; the unfair redis-py lock of before is gone (not selectable), so the "
                   "spread of a FIFO lock is set beside the ideal: (N - 1) holds of the others."),
              "",
              ("| synchronizer | processes | median wait ms | p95 ms | max ms | "
               "ideal (N-1) x hold ms |"), "|---|---:|---:|---:|---:|---:|"]
    for processes in CONTENDERS:
        for kind in lock_kinds:
            seen = sorted(waits[(kind, processes)])
            p95 = seen[min(len(seen) - 1, int(0.95 * len(seen)))]
            lines.append(f"| {names[kind]} | {processes} | {median(seen) * 1000:.0f} | "
                         f"{p95 * 1000:.0f} | {seen[-1] * 1000:.0f} | "
                         f"{(processes - 1) * HOLD * 1000:.0f} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", nargs="+", default=BACKENDS, choices=BACKENDS)
    parser.add_argument("--zarr2-python", default=str(ROOT / ".venv-zarr2" / "bin" / "python"))
    parser.add_argument("--redis-url", default=os.environ.get("ZSTORES_TEST_REDIS_URL"),
                        help="a Redis server for RedisSynchronizer "
                             "(default $ZSTORES_TEST_REDIS_URL)")
    add_run_options(parser, smoke="a few small stripes, one round",
                    peers="zarr-python 2.18's environment")
    parser.add_argument("--part", choices=["classic", "fencing"], default="classic",
                        help="classic: the tables above; fencing: locks and fenced writes on "
                             "an S3 emulator, Redis against object-store locks (issue 25)")
    parser.add_argument("--s3-endpoint", default=os.environ.get("ZSTORES_TEST_S3_ENDPOINT"),
                        help="an S3 emulator for --part fencing ($ZSTORES_TEST_S3_ENDPOINT)")
    args = parser.parse_args()
    if args.smoke:
        if args.record:
            parser.error("--smoke figures are not worth recording")
        if not SMOKE:  # again, with the sizes of a smoke run
            os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]],
                      {**os.environ, "BENCH_SYNC_SMOKE": "1"})
        args.rounds = 1
        args.backends = args.backends[:1]  # the others run the same code
    if args.part == "fencing":
        load_before = load_average()
        table = measure_fencing(args)
        text = "\n\n".join([
            "### Fenced writes and object-store locks (`scripts/bench_sync.py --part fencing`)",
            (f"Load average (1 minute) {load_before:.1f} at the start, {load_average():.1f} at "
             f"the end, on {os.cpu_count()} cores."), table])
        print(text)
        if args.record:
            from bench_common import record_section

            record_section(FENCE_BEGIN, FENCE_END, text)
        return
    missing_peers({"zarr-python 2.18": Path(args.zarr2_python).exists()}, args.require_peers)
    load_before = load_average()
    locks = lock_table(measure_locks(args), args.rounds)
    writes = write_table(measure_writes(args), args.rounds, args.backends)
    text = "\n\n".join([
        "### Synchronizers (`scripts/bench_sync.py`)",
        (f"Load average (1 minute) {load_before:.1f} at the start, {load_average():.1f} at "
         f"the end, on {os.cpu_count()} cores."),
        locks,
        writes,
    ])
    print(text)
    if args.record:
        record(text)


if __name__ == "__main__":
    main()
