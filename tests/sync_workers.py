"""Functions that tests/test_sync.py (and its zarr-python 2 runs) start in spawned processes.

They must import in both interpreters (zarr-python 3 and 2.18), so nothing
here imports zarr at module level.
"""

from __future__ import annotations

import numpy as np


def stripes_of(writer: int, writers: int, stripes: int) -> list[int]:
    """The stripes a writer owns: every ``writers``-th, so neighbours belong to others."""
    return list(range(writer, stripes, writers))


def write_stripes(target, stripes: list[int], width: int, rounds: int) -> int:
    """Write ``arange`` values into each own stripe ``rounds`` times; return writes done.

    ``target`` is a zarr-python 2 array with ``synchronizer=`` or a
    ``synchronized`` proxy; the stripes are ``width`` long and do not line up
    with the chunks, so neighbouring writers share chunks.
    """
    done = 0
    for _ in range(rounds):
        for stripe in stripes:
            start = stripe * width
            target[start:start + width] = np.arange(start, start + width, dtype="i8")
            done += 1
    return done


def add_ones(proxy, regions: list[tuple[int, int]], rounds: int) -> int:
    """Add 1 to each region ``rounds`` times, each read-modify-write inside ``locked``."""
    for _ in range(rounds):
        for start, stop in regions:
            with proxy.locked(slice(start, stop)):
                proxy[start:stop] = proxy[start:stop] + 1
    return rounds * len(regions)


def append_blocks(proxy, writer: int, blocks: int, size: int) -> list[int]:
    """Append ``blocks`` blocks of ``size`` elements, each filled with its own label."""
    labels = [writer * 1000 + block + 1 for block in range(blocks)]
    for label in labels:
        proxy.append(np.full(size, label, dtype="i8"))
    return labels


def write_whole_regions(proxy, start: int, stop: int, rounds: int) -> int:
    """Fill ``[start, stop)`` with 1, 2, ... ``rounds``, one write per value."""
    for value in range(1, rounds + 1):
        proxy[start:stop] = value
    return rounds


def hold_lock(synchronizer, key: str, connection) -> None:
    """Take ``synchronizer[key]``, say so on ``connection``, and keep it until told.

    The test kills this process with SIGKILL while it holds the lock (a pipe,
    unlike a multiprocessing Event, survives a killed waiter); the wait is
    bounded so a failing test never leaves the process behind.
    """
    with synchronizer[key]:
        connection.send("held")
        connection.poll(120)


def try_lock(synchronizer, key: str, timeout: float) -> str:
    """Try to take the lock within ``timeout``: 'acquired' or the error's text."""
    lock = synchronizer[key]
    try:
        lock.acquire(timeout=timeout)
    except TimeoutError as error:
        return f"{type(error).__name__}: {error}"
    lock.release()
    return "acquired"


def open_for_writing(cls, path: str, kwargs: dict) -> str:
    """Open a store writable in this process: 'opened' or the error's type and text."""
    try:
        store = cls(path, mode="a", **kwargs)
    except OSError as error:
        return f"{type(error).__name__}: {error}"
    store.close()
    return "opened"


def add_ones_from(target, regions: list[tuple[int, int]], rounds: int, start_at: float) -> int:
    """From ``start_at`` (``time.time()``) on, add 1 to each region ``rounds`` times.

    ``target`` is a plain zarr array (each ``a[r] = a[r] + 1`` unguarded: the
    lost updates of zarr-python issue #1224) or a ``synchronized`` proxy (each
    read-modify-write inside ``proxy.locked``).  The common start makes the
    writers overlap however long each took to spawn.
    """
    import time

    time.sleep(max(0.0, start_at - time.time()))
    guarded = hasattr(target, "locked")
    for _ in range(rounds):
        for start, stop in regions:
            if guarded:
                with target.locked(slice(start, stop)):
                    target[start:stop] = target[start:stop] + 1
            else:
                target[start:stop] = target[start:stop] + 1
    return rounds * len(regions)


def add_ones_in_step(array, regions: list[tuple[int, int]], rounds: int, barrier) -> int:
    """Add 1 to each region ``rounds`` times, unguarded, every writer reading before any writes.

    The lost updates of zarr-python issue #1224 made certain rather than
    hoped for: in each round every writer reads its regions, waits at
    ``barrier`` (a ``Manager().Barrier`` shared by all the writers) until
    all have read, writes them back plus 1, and waits again.  Where two
    writers' regions overlap, both write the value they read plus 1, so one
    increment of every overlapping element is lost each round, however the
    machine's scheduler runs the writers.
    """
    for _ in range(rounds):
        read = [array[start:stop] for start, stop in regions]
        barrier.wait()
        for (start, stop), values in zip(regions, read, strict=True):
            array[start:stop] = values + 1
        barrier.wait()
    return rounds * len(regions)
