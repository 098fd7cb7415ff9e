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
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

import zstores
from zstores.wrappers.delegate import WrapperStore

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


class PausingStore(WrapperStore):
    """Writes its first chunk at once, then holds every later write until ``resume`` is set.

    The negative control's construction: a plain region write is caught
    after one of its chunks landed and before the others, whatever the
    machine's load, so a reader reading meanwhile must see a torn region.
    """

    def __init__(self, store: zstores.Store) -> None:
        super().__init__(store)
        # Held writes must wait in a worker thread, never on zarr's event loop
        # (the reader needs that loop to read meanwhile).
        self.blocking = True
        self.first_written = threading.Event()
        self.resume = threading.Event()
        self._lock = threading.Lock()
        self._chunks = 0

    def _hold(self, key: str) -> None:
        if key.endswith("zarr.json"):
            return
        with self._lock:
            self._chunks += 1
            first = self._chunks == 1
        if not first:
            assert self.resume.wait(60), "the reader never resumed the writer"

    def _set(self, key, value):  # type: ignore[no-untyped-def]
        self._hold(key)
        super()._set(key, value)
        if not key.endswith("zarr.json"):
            self.first_written.set()

    def _set_many(self, items):  # type: ignore[no-untyped-def]
        for key, value in items:  # one by one, so the pause falls between two chunks
            self._set(key, value)


def read_during_a_held_write(store: zstores.Store, url: str | None, transactions: bool) -> int:
    """Torn regions a plain read sees while a region write is held after its first chunk."""
    import zarr

    pausing = PausingStore(store)
    zs = zstores.zarr_store(pausing, transaction=transactions)
    array = zarr.open_array(zs, mode="r+")
    region = demo_torn_reads.REGIONS[2]  # 16 chunks

    def write() -> None:
        if transactions:
            with zs.transaction():
                array[region] = 8
        else:
            array[region] = 7

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert pausing.first_written.wait(60), "the writer never wrote a chunk"
        torn = plain_read_torn(store, url)
    finally:
        pausing.resume.set()
        writer.join(60)
    assert not writer.is_alive()
    assert plain_read_torn(store, url) == 0  # whole once written
    return torn


def plain_read_torn(store: zstores.Store, url: str | None) -> int:
    """Torn regions of one plain read of the array: in a process of its own given a URL.

    (In this process, zarr's reads would queue behind the held writes in the
    adapter's worker threads.)
    """
    import zarr

    if url is None:
        return demo_torn_reads.torn_regions(
            zarr.open_array(zstores.zarr_store(store), mode="r")[:])
    code = ("import sys, zarr, zstores, demo_torn_reads; "
            "a = zarr.open_array(zstores.zarr_store(sys.argv[1], mode='r'), mode='r'); "
            "print(demo_torn_reads.torn_regions(a[:]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(demo_torn_reads.__file__).parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    return int(done.stdout)


@pytest.mark.parametrize("backend", ["memory", "lmdb", "sqlite", "redis"])
def test_plain_writes_do_tear(backend, tmp_path, request):
    """Without a transaction, a reader between two chunk writes of a region sees it torn.

    Made so by construction (``PausingStore`` holds the write after its
    first chunk), not by hoping timing produces it.
    """
    url = "memory" if backend == "memory" else backend_url(backend, tmp_path, request)
    store = zstores.MemoryStore() if backend == "memory" else zstores.open_store(url)
    try:
        demo_torn_reads.create_array(store)
        assert read_during_a_held_write(store, None if backend == "memory" else url,
                                        transactions=False) > 0
    finally:
        if backend == "redis":
            store.clear()
        store.close()


def test_the_region_checker_sees_a_torn_region():
    import numpy as np

    data = np.zeros(demo_torn_reads.SHAPE, dtype="i8")
    assert demo_torn_reads.torn_regions(data) == 0
    data[0, 0] = 1  # one element of the first region differs
    assert demo_torn_reads.torn_regions(data) == 1
