"""No torn region: transactional writers, consistent readers, SIGKILLed writers (issue #16).

Writers set whole regions (4 to 16 chunks) of a zarr-python 3 array to one
value inside ``zs.transaction()``; a reader reads the whole array over and
over through a snapshot (or a checked read-only transaction) and must never
see a region holding two values.  Memory runs threads; LMDB, SQLite and Redis
run every writer and the reader in processes of their own, and SIGKILL
writers at random moments: a region being written stays wholly old.  The same
workload with plain writes must show torn regions (else the checks could not
fail).  The workload is
``scripts/demo_torn_reads.py``, which also shows the torn regions plain
writes leave.  ``ZSTORES_STRESS_SECONDS`` sets each run's length (default 5).
"""

from __future__ import annotations

import os
import uuid

import pytest

import zstores

import demo_torn_reads

SECONDS = float(os.environ.get("ZSTORES_STRESS_SECONDS", "5"))

pytestmark = pytest.mark.timeout(SECONDS * 4 + 240)


def test_memory_threads_never_see_a_torn_region():
    outcome = demo_torn_reads.run("memory", transactions=True, seconds=SECONDS, writers=3)
    assert outcome.writes > 0 and outcome.reads > 0, outcome
    assert outcome.torn == 0, outcome


def backend_url(backend: str, tmp_path, request: pytest.FixtureRequest) -> str:
    """The store the run uses: a file in ``tmp_path``, or a fresh prefix on the test's Redis."""
    if backend == "redis":
        redis_url = request.getfixturevalue("redis_url")
        return f"{redis_url}?prefix=torn-{uuid.uuid4().hex}"
    return demo_torn_reads.url_for(backend, tmp_path)


@pytest.fixture(params=["lmdb", "sqlite", "redis"])
def url(request, tmp_path):
    url = backend_url(request.param, tmp_path, request)
    yield url
    if request.param == "redis":
        with zstores.open_store(url) as store:
            store.clear()  # the run's keys go with it


def test_processes_and_killed_writers_never_leave_a_torn_region(url):
    outcome = demo_torn_reads.run(url, transactions=True, seconds=SECONDS, writers=3,
                                  kill=True)
    assert outcome.writes > 0 and outcome.reads > 0 and outcome.kills > 0, outcome
    assert outcome.torn == 0, outcome


@pytest.mark.parametrize("backend", ["memory", "lmdb", "sqlite", "redis"])
def test_plain_writes_do_tear(backend, tmp_path, request):
    """Without transactions the same workload shows torn regions: the checks above can fail."""
    runs = []
    # A tear needs a read to land inside a write: usually at once.  On Redis the
    # reader's consistent read (checked at commit) is retried until no plain
    # write lands during it, which under three plain writers on a loaded machine
    # takes the rest of the run: one plain read per attempt, so more attempts.
    attempts = 6 if backend == "redis" else 3
    for attempt in range(attempts):
        url = backend if backend == "memory" else backend_url(backend, tmp_path / str(attempt),
                                                               request)
        (tmp_path / str(attempt)).mkdir()
        outcome = demo_torn_reads.run(url, transactions=False, seconds=SECONDS, writers=3)
        if url.startswith("redis"):
            with zstores.open_store(url) as store:
                store.clear()
        runs.append(outcome)
        if tears(backend, outcome):
            break
    assert tears(backend, runs[-1]) > 0, runs


def tears(backend: str, outcome: demo_torn_reads.Outcome) -> int:
    """The torn regions a run without transactions must show.

    Redis has no snapshots: its consistent reads are read-only transactions
    whose commit checks the chunks read, and that check catches plain writers
    too (the read is retried), so there the reader's plain reads are the ones
    that must tear.
    """
    return outcome.plain_torn if backend == "redis" else outcome.torn


def test_the_region_checker_sees_a_torn_region():
    import numpy as np

    data = np.zeros(demo_torn_reads.SHAPE, dtype="i8")
    assert demo_torn_reads.torn_regions(data) == 0
    data[0, 0] = 1  # one element of the first region differs
    assert demo_torn_reads.torn_regions(data) == 1
