#!/usr/bin/env python
"""Show zarr writes from parallel processes losing updates, and a synchronizer preventing it.

Two workloads, each run twice on a fresh zarr-python 3 array (a zstores
store through the zarr adapter), first straight into the array, then through
``zstores.synchronized(array, ProcessSynchronizer(...))``:

stripes     Each spawned process writes its own disjoint 1,000-element
            stripes of an array chunked by 999, as zarr-python 2's own test
            did: every stripe shares a chunk with its neighbours, which
            belong to other processes.  A lost update leaves elements at
            the fill value -1.
increments  Each process adds 1 to an overlapping region many times with
            ``a[r] = a[r] + 1`` (inside ``proxy.locked(r)`` when synchronized).

    scripts/demo_lost_updates.py [--writers N] [--backend directory|lmdb|sqlite]

Prints the updates lost by each run; the synchronized runs lose none.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WIDTH, CHUNK = 1000, 999


def open_store(backend: str, folder: Path):
    from zstores.stores.directory import DirectoryStore
    from zstores.stores.lmdb import LMDBStore
    from zstores.stores.sqlite import SQLiteStore

    opener = {"directory": DirectoryStore, "lmdb": LMDBStore, "sqlite": SQLiteStore}[backend]
    suffix = {"directory": "", "lmdb": ".lmdb", "sqlite": ".sqlite"}[backend]
    return opener(folder / f"data{suffix}", mode="w")


def new_array(store, length: int, fill_value: int):
    import zarr

    from zstores.adapters import zarr_store

    return zarr.create_array(
        zarr_store(store), shape=(length,), chunks=(CHUNK,), dtype="i8", fill_value=fill_value
    )


# ----------------------------------------------------- run in the workers
def write_stripes(target, stripes: list[int], start_at: float) -> None:
    _wait_until(start_at)
    for stripe in stripes:
        first = stripe * WIDTH
        target[first:first + WIDTH] = np.arange(first, first + WIDTH, dtype="i8")


def add_ones(target, start: int, stop: int, rounds: int, start_at: float) -> None:
    from zstores.sync import SynchronizedArray

    _wait_until(start_at)
    for _ in range(rounds):
        if isinstance(target, SynchronizedArray):
            with target.locked(slice(start, stop)):
                target[start:stop] = target[start:stop] + 1
        else:
            target[start:stop] = target[start:stop] + 1


def _wait_until(moment: float) -> None:
    # Workers start together once all have imported zarr, so their writes overlap.
    delay = moment - time.time()
    if delay > 0:
        time.sleep(delay)


# --------------------------------------------------------------- workloads
def run(pool, function, arguments: list[tuple]) -> None:
    start_at = time.time() + 1.0
    pool.starmap_async(function, [(*args, start_at) for args in arguments]).get(600)


def stripes_lost(pool, backend: str, writers: int, per_writer: int, repeats: int,
                 synchronizer) -> tuple[int, int]:
    """Elements left unwritten after every process wrote its stripes once, over fresh arrays."""
    from zstores.sync import synchronized

    stripes = writers * per_writer
    wrong = 0
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as folder:
            store = open_store(backend, Path(folder))
            array = new_array(store, stripes * WIDTH, -1)
            target = array if synchronizer is None else synchronized(array, synchronizer)
            run(pool, write_stripes,
                [(target, list(range(w, stripes, writers))) for w in range(writers)])
            wrong += int(np.count_nonzero(array[:] != np.arange(stripes * WIDTH)))
            store.close()
    return wrong, repeats * stripes * WIDTH


def increments_lost(pool, backend: str, writers: int, rounds: int, synchronizer) -> tuple[int, int]:
    """Increments missing from the overlap of every process's region."""
    from zstores.sync import synchronized

    length = 3000
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(backend, Path(folder))
        array = new_array(store, length, 0)
        target = array if synchronizer is None else synchronized(array, synchronizer)
        regions = [(w * 200, length - (writers - w) * 200) for w in range(writers)]
        run(pool, add_ones, [(target, start, stop, rounds) for start, stop in regions])
        expected = np.zeros(length, dtype="i8")
        for start, stop in regions:
            expected[start:stop] += rounds
        lost = int((expected - array[:]).sum())
        store.close()
    return lost, int(expected.sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", type=int, default=min(4, os.cpu_count() or 2),
                        help="writer processes (default: the cores, at most 4)")
    parser.add_argument("--backend", choices=["directory", "lmdb", "sqlite"], default="directory")
    parser.add_argument("--stripes", type=int, default=100, help="stripes per writer (default 100)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="arrays the stripes go to (default 5)")
    parser.add_argument("--rounds", type=int, default=40, help="increments per writer (default 40)")
    args = parser.parse_args(argv)

    from zstores.sync import ProcessSynchronizer

    with tempfile.TemporaryDirectory() as locks, \
            multiprocessing.get_context("spawn").Pool(args.writers) as pool:
        sync = ProcessSynchronizer(locks, timeout=600)
        cases = [("without a synchronizer", None), ("with ProcessSynchronizer", sync)]
        print(f"{args.writers} spawned writer processes, zarr-python 3 array on {args.backend}, "
              f"chunks of {CHUNK}")
        print(f"\nstripes: each process writes {args.stripes} disjoint {WIDTH}-element stripes "
              f"once, into {args.repeats} fresh arrays in turn")
        for label, synchronizer in cases:
            lost, total = stripes_lost(pool, args.backend, args.writers, args.stripes,
                                       args.repeats, synchronizer)
            print(f"  {label:26s} {lost:>9,} of {total:,} elements lost")
        print(f"\nincrements: each process adds 1 to an overlapping region {args.rounds} times")
        for label, synchronizer in cases:
            lost, total = increments_lost(pool, args.backend, args.writers, args.rounds,
                                          synchronizer)
            print(f"  {label:26s} {lost:>9,} of {total:,} element increments lost")
        pool.close()
        pool.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
