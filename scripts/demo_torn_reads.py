#!/usr/bin/env python
"""Show readers seeing half-written regions of a zarr array, and transactions preventing it.

Writers repeatedly set one whole region of a zarr-python 3 array (a zstores
store through ``zstores.zarr_store``) to a single new value; each region
spans 4 to 16 chunks.  A reader repeatedly reads the whole array and counts
the regions that do not hold one value: a write it saw half done (torn).
Each run happens twice, first with plain writes, then with every region
written inside ``with zs.transaction():``.  With ``--kill``, writers are
SIGKILLed at random moments (and started again): a region they were writing
must stay wholly old.

The reader alternates two kinds of reads.  A *plain* read is ``array[:]``:
zarr reads the chunks one by one, so even atomic commits landing between two
of its chunk reads tear what it sees.  A *consistent* read reads the array
through ``store.snapshot()`` (one version of the store), or, on a store
without snapshots (Redis), inside a transaction that writes nothing, whose
commit checks that every chunk read is still current (else it reads again).
Only transactional writes and consistent reads together never tear.

    scripts/demo_torn_reads.py [--backend memory|lmdb|sqlite|URL] [--seconds S]
                               [--writers N] [--kill]

``memory`` runs the writers and the reader as threads of one process; a
file backend (``lmdb``, ``sqlite``, or any store URL whose store has
transactions) runs each in a process of its own.  Prints the reads made and
the torn regions seen by each run; the transactional runs show none.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SHAPE, CHUNKS = (64, 64), (8, 8)
#: The regions written, in chunks of the 8 x 8 grid: (rows, columns); 4 to 16 chunks each.
REGIONS_IN_CHUNKS = [
    ((0, 2), (0, 2)),  # 4 chunks
    ((0, 2), (2, 8)),  # 12
    ((2, 6), (0, 4)),  # 16
    ((2, 6), (4, 8)),  # 16
    ((6, 8), (0, 8)),  # 16
]
REGIONS = [
    (slice(r0 * CHUNKS[0], r1 * CHUNKS[0]), slice(c0 * CHUNKS[1], c1 * CHUNKS[1]))
    for (r0, r1), (c0, c1) in REGIONS_IN_CHUNKS
]


@dataclass
class Outcome:
    """What one run saw: whole-array reads of each kind, torn regions they saw, writes done."""

    reads: int = 0
    torn: int = 0  # seen by consistent reads (and left at the end)
    plain_reads: int = 0
    plain_torn: int = 0
    writes: int = 0
    kills: int = 0


def torn_regions(data: np.ndarray) -> int:
    """How many regions of ``data`` hold more than one value."""
    return sum(int(data[region].min() != data[region].max()) for region in REGIONS)


def create_array(store) -> None:
    import zarr

    import zstores

    array = zarr.create_array(zstores.zarr_store(store), shape=SHAPE, chunks=CHUNKS,
                              dtype="i8", fill_value=0, overwrite=True)
    array[:] = 0


def write_regions(store, writer: int, transactions: bool, stop: Callable[[], bool],
                  wrote: Callable[[], None] = lambda: None) -> int:
    """Set random regions to values unique to this writer until ``stop()``; the writes done.

    ``wrote()`` is called after each write (a writer that is killed never returns).
    """
    import zarr

    import zstores

    zs = zstores.zarr_store(store, transaction=transactions)
    array = zarr.open_array(zs, mode="r+")
    rng = random.Random(writer * 7919 + os.getpid())
    done = 0
    while not stop():
        region = rng.choice(REGIONS)
        value = (writer + 1) * 1_000_000_000 + done + 1
        if transactions:
            with zs.transaction():
                array[region] = value
        else:
            array[region] = value
        done += 1
        wrote()
    return done


def consistent_read(store) -> np.ndarray:
    """The whole array as of one version of the store (a snapshot, or a checked transaction)."""
    import zarr

    import zstores

    if store.supports_snapshots:
        with store.snapshot() as view:
            return zarr.open_array(zstores.zarr_store(view), mode="r")[:]
    zs = zstores.zarr_store(store, transaction=True)
    while True:
        try:
            with zs.transaction():  # writes nothing: its commit only checks what it read
                return zarr.open_array(zs, mode="r+")[:]
        except zstores.TransactionConflictError:
            continue  # a commit landed while reading: read again


def read_whole(store, stop: Callable[[], bool]) -> Outcome:
    """Read the whole array until ``stop()``, plainly and consistently in turn; count tears."""
    import zarr

    import zstores

    array = zarr.open_array(zstores.zarr_store(store), mode="r")
    outcome = Outcome()
    while not stop() or not outcome.reads:  # one read at least on a slow machine
        outcome.plain_torn += torn_regions(array[:])
        outcome.plain_reads += 1
        outcome.torn += torn_regions(consistent_read(store))
        outcome.reads += 1
    return outcome


# ------------------------------------------------------------ threads (memory)
def run_threads(store, transactions: bool, seconds: float, writers: int) -> Outcome:
    """Writers and reader as threads sharing ``store`` (a MemoryStore)."""
    create_array(store)
    deadline = time.monotonic() + seconds
    stop = lambda: time.monotonic() > deadline  # noqa: E731 - shared by every thread
    writes = [0] * writers

    def writer(index: int) -> None:
        writes[index] = write_regions(store, index, transactions, stop)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    outcome = read_whole(store, stop)
    for thread in threads:
        thread.join()
    outcome.writes = sum(writes)
    return outcome


# ---------------------------------------------------------- processes (files)
def _open(url: str):
    import zstores

    return zstores.open_store(url)


def _writer_process(url: str, writer: int, transactions: bool, seconds: float,
                    counts) -> None:
    import zarr  # noqa: F401 - imported before the clock starts (slow machines)

    store = _open(url)
    deadline = time.time() + seconds

    def wrote() -> None:
        with counts.get_lock():
            counts[writer] += 1

    write_regions(store, writer, transactions, lambda: time.time() > deadline, wrote)
    store.close()


def _reader_process(url: str, seconds: float, results) -> None:
    import zarr  # noqa: F401 - imported before the clock starts (slow machines)

    store = _open(url)
    deadline = time.time() + seconds
    outcome = read_whole(store, lambda: time.time() > deadline)
    results.put((outcome.reads, outcome.torn, outcome.plain_reads, outcome.plain_torn))
    store.close()


def run_processes(url: str, transactions: bool, seconds: float, writers: int,
                  kill: bool = False) -> Outcome:
    """Writers and a reader in processes of their own on the store at ``url``.

    With ``kill``, a random writer is SIGKILLed every 0.1-0.4 s and started
    again; the reader checks on.  At the end every region must hold one value.
    """
    store = _open(url)
    create_array(store)
    store.close()
    context = multiprocessing.get_context("spawn")
    counts = context.Array("q", writers)
    results = context.Queue()
    # Each process runs ``seconds`` from when it is ready: starting Python and
    # zarr can take seconds on a loaded machine.
    reader = context.Process(target=_reader_process, args=(url, seconds, results))
    reader.start()

    def start(index: int):
        process = context.Process(target=_writer_process,
                                  args=(url, index, transactions, seconds, counts))
        process.start()
        return process

    processes = [start(i) for i in range(writers)]
    rng = random.Random(1)
    kills = 0
    started_at = [0] * writers  # the victim's writes when it was (re)started
    while kill and reader.is_alive():
        time.sleep(rng.uniform(0.1, 0.4))
        victim = rng.randrange(writers)
        # Only a writer that got to work (a slow machine takes a while to
        # start a process): killing it mid-region is the point.
        if processes[victim].is_alive() and counts[victim] > started_at[victim]:
            os.kill(processes[victim].pid, signal.SIGKILL)
            processes[victim].join()
            kills += 1
            started_at[victim] = counts[victim]
            processes[victim] = start(victim)
    for process in processes:
        process.join(seconds + 120)
    outcome = Outcome(*results.get(timeout=seconds + 120), kills=kills)
    reader.join(60)
    outcome.writes = sum(counts[:])
    store = _open(url)
    outcome.torn += final_torn(store)
    store.close()
    return outcome


def final_torn(store) -> int:
    """Torn regions in the array as it is now (a killed writer must have left none)."""
    import zarr

    import zstores

    return torn_regions(zarr.open_array(zstores.zarr_store(store, mode="r"), mode="r")[:])


# --------------------------------------------------------------------- main
def url_for(backend: str, folder: Path) -> str:
    if backend == "lmdb":
        return f"lmdb://{folder / 'torn.lmdb'}"
    if backend == "sqlite":
        return f"sqlite://{folder / 'torn.sqlite'}"
    return backend


def run(backend: str, transactions: bool, seconds: float, writers: int,
        kill: bool = False) -> Outcome:
    """One run on a fresh store of ``backend`` (memory, lmdb, sqlite or a URL)."""
    import zstores

    if backend == "memory":
        return run_threads(zstores.MemoryStore(), transactions, seconds, writers)
    with tempfile.TemporaryDirectory(prefix="zstores-torn-") as folder:
        return run_processes(url_for(backend, Path(folder)), transactions, seconds, writers,
                             kill=kill and transactions)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="memory",
                        help="memory (threads), lmdb, sqlite (processes) or a store URL")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each run")
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--kill", action="store_true",
                        help="SIGKILL writers at random moments in the transactional run")
    args = parser.parse_args(argv)
    for transactions in (False, True):
        outcome = run(args.backend, transactions, args.seconds, args.writers, kill=args.kill)
        how = "in transactions" if transactions else "plain writes   "
        killed = f", {outcome.kills} writers killed" if outcome.kills else ""
        print(f"{args.backend}: {how}: {outcome.writes} region writes{killed}; torn regions "
              f"seen by {outcome.plain_reads} plain reads: {outcome.plain_torn}, by "
              f"{outcome.reads} consistent reads: {outcome.torn}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
