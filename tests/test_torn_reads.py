"""No torn region: transactional writers, consistent readers, SIGKILLed writers (issue #16).

Writers set whole regions (4 to 16 chunks) of a zarr-python 3 array to one
value inside ``zs.transaction()``; a reader reads the whole array over and
over through a snapshot (or a checked read-only transaction) and must never
see a region holding two values.  Memory runs threads; LMDB and SQLite run
every writer and the reader in processes of their own, and SIGKILL writers
at random moments: a region being written stays wholly old.  The workload is
``scripts/demo_torn_reads.py``, which also shows the torn regions plain
writes leave.  ``ZSTORES_STRESS_SECONDS`` sets each run's length (default 5).
"""

from __future__ import annotations

import os

import pytest

import zstores

import demo_torn_reads

SECONDS = float(os.environ.get("ZSTORES_STRESS_SECONDS", "5"))

pytestmark = pytest.mark.timeout(SECONDS * 4 + 240)


def test_memory_threads_never_see_a_torn_region():
    outcome = demo_torn_reads.run("memory", transactions=True, seconds=SECONDS, writers=3)
    assert outcome.writes > 0 and outcome.reads > 0, outcome
    assert outcome.torn == 0, outcome


@pytest.mark.parametrize("backend", ["lmdb", "sqlite"])
def test_processes_and_killed_writers_never_leave_a_torn_region(backend, tmp_path):
    probe = zstores.open_store(demo_torn_reads.url_for(backend, tmp_path))
    capable = probe.supports_transactions
    probe.close()
    if not capable:
        pytest.skip(f"{type(probe).__name__} has no transactions yet (supports_transactions)")
    outcome = demo_torn_reads.run(backend, transactions=True, seconds=SECONDS, writers=3,
                                  kill=True)
    assert outcome.writes > 0 and outcome.reads > 0 and outcome.kills > 0, outcome
    assert outcome.torn == 0, outcome


def test_the_region_checker_sees_a_torn_region():
    import numpy as np

    data = np.zeros(demo_torn_reads.SHAPE, dtype="i8")
    assert demo_torn_reads.torn_regions(data) == 0
    data[0, 0] = 1  # one element of the first region differs
    assert demo_torn_reads.torn_regions(data) == 1
