"""Writer processes on object storage: RedisSynchronizer + synchronized() over S3.

zarr-python issue #1224: serverless writers (one process per machine, no
shared disk) updating one array on S3 lose updates, because a chunk written
by one writer is read, changed and written back by another that read it
before.  Object storage gives whole-object atomicity and nothing more; the
locks have to live where every machine reaches them, a Redis server.  Here
three spawned processes add 1 to overlapping regions of a zarr-python 3
array in a bucket of the moto emulator, first unguarded (updates are lost),
then through ``synchronized(array, RedisSynchronizer(...))`` (the sums are
exact).  Spawned processes share nothing with each other but the bucket
and the Redis server, as separate machines would.  Locks kept in the bucket
itself (``ObjectStoreSynchronizer``, no Redis) are tested in
tests/test_object_locks.py.
"""

from __future__ import annotations

import multiprocessing
import time
import uuid

import numpy as np
import pytest

from zstores import open_store
from zstores.sync import RedisSynchronizer, synchronized

import sync_workers as workers
from conftest import require_module
from object_urls import new_s3_bucket, s3_store_url

require_module("obstore")
zarr = require_module("zarr", minversion="3")
from zstores.adapters import zarr_store  # noqa: E402 - needs zarr

pytestmark = pytest.mark.timeout(600)

WRITERS = 3
WAIT = 400  # seconds the writers may take at most (moto answers a few hundred requests/s)
LENGTH, CHUNK = 2400, 500
ROUNDS = 4
#: Each writer's region: 1,200 elements starting 600 apart, so neighbours share
#: chunks (and elements) and every chunk boundary is crossed.
REGIONS = [[(w * 600, w * 600 + 1200)] for w in range(WRITERS)]


@pytest.fixture(scope="module")
def pool():
    """Spawned writer processes (a fresh interpreter each, like a separate machine)."""
    with multiprocessing.get_context("spawn").Pool(WRITERS) as writers:
        yield writers
        writers.close()
        writers.join()


def expected_counts() -> np.ndarray:
    expected = np.zeros(LENGTH, dtype="i8")
    for own in REGIONS:
        for start, stop in own:
            expected[start:stop] += ROUNDS
    return expected


def run_writers(pool, target) -> None:
    start_at = time.time() + 2  # every writer starts at once, however long it took to spawn
    done = pool.starmap_async(workers.add_ones_from,
                              [(target, own, ROUNDS, start_at) for own in REGIONS]).get(WAIT)
    assert sum(done) == WRITERS * ROUNDS


@pytest.fixture
def s3_array(s3_endpoint: str):
    """A fresh int64 zarr-python 3 array of zeros in a new bucket, and its store."""
    url = s3_store_url(s3_endpoint, new_s3_bucket(s3_endpoint), "runs/counts")
    store = open_store(url, mode="w")
    array = zarr.create_array(zarr_store(store), shape=(LENGTH,), chunks=(CHUNK,), dtype="i8",
                              fill_value=0)
    yield array
    store.close()


def test_unsynchronized_writers_lose_updates_on_s3(pool, s3_array) -> None:
    """The failure the synchronizer exists for, shown on the same workload.

    Made so by construction, not by hoping the scheduler overlaps the
    writers (on a busy machine one can run while the others wait for a
    core): in each round every writer reads its region before any writes
    (``add_ones_in_step``'s barrier), so each element two regions share
    (1,200 of them) loses at least one increment a round.
    """
    expected = expected_counts()
    with multiprocessing.get_context("spawn").Manager() as manager:
        barrier = manager.Barrier(WRITERS, timeout=WAIT)
        done = pool.starmap_async(workers.add_ones_in_step,
                                  [(s3_array, own, ROUNDS, barrier) for own in REGIONS]).get(WAIT)
    assert sum(done) == WRITERS * ROUNDS
    counts = s3_array[:]
    assert (counts <= expected).all()  # nothing is ever counted twice ...
    lost = int((expected - counts).sum())
    print(f"lost {lost:,} of {int(expected.sum()):,} increments")
    shared = int((expected > ROUNDS).sum())  # elements in two regions
    assert shared == 1200
    assert lost >= shared * ROUNDS  # ... but some vanish, every time


def test_redis_synchronized_writers_count_exactly_on_s3(pool, s3_array, redis_url: str) -> None:
    sync = RedisSynchronizer(redis_url, prefix=f"s3-{uuid.uuid4().hex[:8]}:", lease=120,
                             timeout=WAIT)
    proxy = synchronized(s3_array, sync)
    run_writers(pool, proxy)
    np.testing.assert_array_equal(s3_array[:], expected_counts())
