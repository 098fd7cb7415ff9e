"""Transactions and snapshots for zarr-python: ``zarr_store(..., transaction=True)``.

zarr-python 3 writes the chunks of one assignment concurrently (tasks on its
event loop, and worker threads for blocking stores), so only the adapter
knows the boundary: ``with zs.transaction():`` routes every call through the
adapter to one ``Transaction``.  These tests check with real zarr-python 3
(and 2.18, in its own environment) that a region spanning chunks is
all-or-nothing for other readers, that a conflict is refused clearly, and that
an adapter over a snapshot reads one version while a writer goes on.
"""

from __future__ import annotations

import pickle
import subprocess
import textwrap
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest
import zarr

import zstores
from zstores import MemoryStore

ROOT = Path(__file__).resolve().parents[1]


class BlockingMemoryStore(MemoryStore):
    """A MemoryStore the zarr 3 adapter calls from worker threads, as it does SQLite's."""

    blocking = True


def open_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> zstores.Store:
    if kind == "memory":
        return MemoryStore()
    if kind == "memory-threads":
        return BlockingMemoryStore()
    if kind == "redis":
        return zstores.RedisStore(request.getfixturevalue("redis_url"),
                                  prefix=f"txn-zarr-{uuid.uuid4().hex}", mode="w")
    return zstores.open_store(f"{kind}://{tmp_path / ('data.' + kind)}")


@pytest.fixture(params=["memory", "memory-threads", "lmdb", "sqlite", "redis"])
def backend(request, tmp_path):
    store = open_backend(request.param, tmp_path, request)
    assert store.supports_transactions, store
    yield store
    if request.param == "redis":
        store.clear()  # the test's keys go with it
    store.close()


def new_array(zs, shape=(80, 80), chunks=(20, 20)):
    array = zarr.create_array(zs, shape=shape, chunks=chunks, dtype="i4", fill_value=0)
    array[:] = 1
    return array


def chunk_keys(store: zstores.Store) -> dict[str, bytes]:
    return {key: store[key] for key in store.list_prefix("c")}


# ------------------------------------------------------------ transactions
def test_region_over_16_chunks_is_one_commit(backend):
    zs = zstores.zarr_store(backend, transaction=True)
    array = new_array(zs)
    reader = zarr.open_array(zstores.zarr_store(backend), mode="r")
    before = chunk_keys(backend)
    with zs.transaction() as tx:
        array[10:70, 10:70] = 2  # 16 chunks, 12 of them partly (read, then written)
        assert len(tx.changes().writes) == 16
        assert chunk_keys(backend) == before  # nothing reached the store
        assert (reader[:] == 1).all()  # another adapter sees the old array
        assert (array[10:70, 10:70] == 2).all()  # this one sees its writes
    expected = np.ones((80, 80), dtype="i4")
    expected[10:70, 10:70] = 2
    np.testing.assert_array_equal(reader[:], expected)


def test_exception_rolls_the_region_back(backend):
    zs = zstores.zarr_store(backend, transaction=True)
    array = new_array(zs)
    before = chunk_keys(backend)
    with pytest.raises(ValueError, match="bad data"):
        with zs.transaction():
            array[0:40, 0:40] = 5
            raise ValueError("bad data")
    assert chunk_keys(backend) == before
    assert (array[:] == 1).all()
    with zs.transaction():  # the adapter works on, outside and inside new transactions
        array[0, 0] = 9
    assert array[0, 0] == 9


def test_writers_to_different_chunks_both_commit(backend):
    zs_a = zstores.zarr_store(backend, transaction=True)
    zs_b = zstores.zarr_store(backend, transaction=True)
    array_a, array_b = new_array(zs_a), zarr.open_array(zs_b, mode="r+")
    with zs_a.transaction():
        array_a[0:30, 0:30] = 3  # chunks (0..1, 0..1)
        with zs_b.transaction():
            array_b[50:80, 50:80] = 4  # chunks (2..3, 2..3)
    result = array_a[:]
    assert (result[0:30, 0:30] == 3).all() and (result[50:80, 50:80] == 4).all()


def test_same_chunk_read_then_changed_is_a_conflict(backend):
    zs_a = zstores.zarr_store(backend, transaction=True)
    array_a = new_array(zs_a)
    array_b = zarr.open_array(zstores.zarr_store(backend), mode="r+")
    before = chunk_keys(backend)
    with pytest.raises(zstores.TransactionConflictError) as caught:
        with zs_a.transaction():
            array_a[5:45, 5:45] = 6  # reads the partial chunks first
            array_b[0:2, 0:2] = 7  # another writer changes chunk c/0/0 meanwhile
    assert "c/0/0" in caught.value.keys
    after = chunk_keys(backend)
    # Only the other writer's change is there: nothing of the transaction.
    assert {key for key in after if after[key] != before[key]} == {"c/0/0"}
    assert (array_a[2:80, 2:80] == 1).all()


def test_retrying_a_conflicted_transaction_succeeds(backend):
    zs = zstores.zarr_store(backend, transaction=True)
    array = new_array(zs)
    other = zarr.open_array(zstores.zarr_store(backend), mode="r+")
    for attempt in range(3):
        try:
            with zs.transaction():
                array[5:15, 5:15] = array[5:15, 5:15] + 10
                if attempt == 0:
                    other[0, 0] = 100  # a concurrent change to the chunk read
            break
        except zstores.TransactionConflictError:
            continue
    assert attempt == 1
    assert array[0, 0] == 100 and (array[5:15, 5:15] == 11).all()


def test_read_only_copies_share_the_transaction(backend):
    zs = zstores.zarr_store(backend, transaction=True)
    new_array(zs)
    with zs.transaction():
        zarr.open_array(zs, mode="r+")[0:20, 0:20] = 8
        # zarr makes a read-only copy of the adapter for mode "r": it reads the writes
        assert (zarr.open_array(zs, mode="r")[0:20, 0:20] == 8).all()
        assert (zarr.open_array(zstores.zarr_store(backend), mode="r")[0:20, 0:20] == 1).all()


def test_refusals(backend, tmp_path):
    zs = zstores.zarr_store(backend, transaction=True)
    new_array(zs)
    with zs.transaction():
        with pytest.raises(zstores.TransactionError, match="do not nest"):
            with zs.transaction():
                pass
        with pytest.raises(TypeError, match="has a transaction open"):
            pickle.dumps(zs)
    pickle.dumps(zs)  # after the commit it pickles again
    with pytest.raises(zstores.ReadOnlyError, match="read-only"):
        zstores.zarr_store(backend, mode="r").transaction()
    folder = zstores.DirectoryStore(tmp_path / "folder")
    with pytest.raises(zstores.UnsupportedOperationError, match="supports_transactions=False"):
        zstores.zarr_store(folder, transaction=True)
    with pytest.raises(zstores.UnsupportedOperationError, match="supports_transactions=False"):
        zstores.zarr_store(folder).transaction()


def test_commit_inside_the_block_ends_it(backend):
    zs = zstores.zarr_store(backend, transaction=True)
    array = new_array(zs)
    with zs.transaction() as tx:
        array[0:20, 0:20] = 3
        tx.commit()
        with pytest.raises(zstores.StoreClosedError, match="committed"):
            array[0, 0] = 4
    assert (array[0:20, 0:20] == 3).all()


def test_url_with_transaction_true_refuses_and_closes(tmp_path):
    with pytest.raises(zstores.UnsupportedOperationError, match="DirectoryStore"):
        zstores.zarr_store(str(tmp_path / "folder"), transaction=True)


# --------------------------------------------------------------- snapshots
@pytest.fixture(params=["memory", "lmdb", "sqlite"])
def snapshot_backend(request, tmp_path):
    store = open_backend(request.param, tmp_path, request)
    assert store.supports_snapshots, store
    yield store
    store.close()


def test_snapshot_adapter_reads_one_version_while_a_writer_goes_on(snapshot_backend):
    store = snapshot_backend
    writer = new_array(zstores.zarr_store(store))
    with store.snapshot() as view:
        frozen = zarr.open_array(zstores.zarr_store(view), mode="r")
        stop = threading.Event()

        def write() -> None:
            value = 2
            while not stop.is_set():
                writer[:] = value
                value += 1

        thread = threading.Thread(target=write)
        thread.start()
        try:
            for _ in range(20):
                assert (frozen[:] == 1).all()
        finally:
            stop.set()
            thread.join()
        assert (writer[:] > 1).all()
        with pytest.raises(zstores.ReadOnlyError):
            zstores.zarr_store(view).transaction()


# ----------------------------------------------------------- zarr-python 2
ZARR2_PROGRAM = textwrap.dedent("""
    import zarr, zstores
    backend = zstores.MemoryStore()
    zs = zstores.zarr_store(backend, transaction=True)
    array = zarr.zeros((40, 40), chunks=(10, 10), dtype="i4", store=zs)
    with zs.transaction() as tx:
        array[5:25, 5:25] = 2
        assert len(tx.changes().writes) == 9, tx.changes().writes
        assert sorted(backend) == [".zarray"], sorted(backend)
        assert array[6, 6] == 2
    assert zarr.open_array(backend)[6, 6] == 2
    try:
        with zs.transaction():
            array[:] = 3
            raise ValueError
    except ValueError:
        pass
    assert int(zarr.open_array(backend)[:].max()) == 2
    print("ok")
""")


def test_zarr2_adapter_transaction(zarr2):
    done = subprocess.run([zarr2.python, "-c", ZARR2_PROGRAM], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, timeout=120, check=False)
    assert done.stdout.strip() == "ok", done.stderr


def test_dask_threads_write_inside_the_transaction(backend):
    da = pytest.importorskip("dask.array")
    zs = zstores.zarr_store(backend, transaction=True)
    array = new_array(zs)
    data = da.full((80, 80), 5, dtype="i4", chunks=(20, 20))
    with zs.transaction() as tx:
        da.store(data, array, lock=False, scheduler="threads", num_workers=4)
        assert len(tx.changes().writes) == 16
        assert (zarr.open_array(zstores.zarr_store(backend), mode="r")[:] == 1).all()
    assert (array[:] == 5).all()


# ------------------------------------------- synchronized(atomic=True) over transactions
class CountingMemoryStore(MemoryStore):
    """A MemoryStore that counts its commits and its direct writes."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commits = 0
        self.direct_writes = 0
        self.before_commit = None  # called (once) before a commit: another writer's turn
        self._committing = False

    def _commit_changes(self, changes) -> None:
        hook, self.before_commit = self.before_commit, None
        if hook is not None:
            hook()
        self.commits += 1
        self._committing = True
        try:
            super()._commit_changes(changes)
        finally:
            self._committing = False

    def _set(self, key, value) -> None:
        self.direct_writes += not self._committing
        super()._set(key, value)


def test_synchronized_atomic_uses_the_transaction_and_one_commit():
    backend = CountingMemoryStore()
    array = new_array(zstores.zarr_store(backend))
    proxy = zstores.synchronized(array, zstores.ThreadSynchronizer(), atomic=True)
    assert proxy.transactional
    backend.commits = backend.direct_writes = 0
    proxy[10:70, 10:70] = 2  # 16 chunks
    assert (backend.commits, backend.direct_writes) == (1, 0)
    assert (array[10:70, 10:70] == 2).all() and (array[0:10, :] == 1).all()
    # Without atomic=True, or over a store without transactions: the locks, as before.
    assert not zstores.synchronized(array, zstores.ThreadSynchronizer()).transactional
    local = zarr.create_array(zarr.storage.MemoryStore(), shape=(4,), dtype="i4")
    assert not zstores.synchronized(local, zstores.ThreadSynchronizer(), atomic=True).transactional


def test_synchronized_atomic_retries_a_conflict_then_succeeds():
    backend = CountingMemoryStore()
    array = new_array(zstores.zarr_store(backend))
    other = zarr.open_array(zstores.zarr_store(backend), mode="r+")
    proxy = zstores.synchronized(array, zstores.ThreadSynchronizer(), atomic=True)

    def other_writer() -> None:
        other[0, 0] = 50  # chunk c/0/0, which the proxy's write read

    backend.before_commit = other_writer
    backend.commits = 0
    proxy[5:15, 5:15] = 9
    assert backend.commits == 2  # the conflicted commit applied nothing; the retry did
    assert array[0, 0] == 50 and (array[5:15, 5:15] == 9).all()


def test_synchronized_atomic_gives_up_with_a_clear_error():
    backend = CountingMemoryStore()
    array = new_array(zstores.zarr_store(backend))
    other = zarr.open_array(zstores.zarr_store(backend), mode="r+")
    proxy = zstores.synchronized(array, zstores.ThreadSynchronizer(), atomic=True, retries=1)
    backend.before_commit = lambda: other.__setitem__((0, 0), 50)
    with pytest.raises(zstores.TransactionConflictError) as caught:
        proxy[5:15, 5:15] = 9
    assert "tried 1 times" in "\n".join(caught.value.__notes__)
    assert array[0, 0] == 50 and (array[5:15, 5:15] == 1).all()
    with pytest.raises(ValueError, match="retries"):
        zstores.synchronized(array, zstores.ThreadSynchronizer(), atomic=True, retries=0)
    copy = pickle.loads(pickle.dumps(proxy))
    assert copy.transactional and copy._retries == 1


def test_synchronized_atomic_threads_sharing_chunks_lose_nothing(backend):
    """8 threads write stripes that share chunks: zarr's read-modify-writes conflict and retry."""
    array = new_array(zstores.zarr_store(backend), shape=(64, 64), chunks=(32, 32))
    proxy = zstores.synchronized(array, zstores.ThreadSynchronizer(), atomic=True, retries=1000)
    assert proxy.transactional

    def write_stripe(column: int) -> None:
        for row in range(0, 64, 8):
            proxy[row:row + 8, column * 8:column * 8 + 8] = column + 10

    threads = [threading.Thread(target=write_stripe, args=(c,)) for c in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = array[:]
    for column in range(8):
        assert (result[:, column * 8:column * 8 + 8] == column + 10).all(), column


def test_synchronized_locked_block_is_one_transaction(backend):
    array = new_array(zstores.zarr_store(backend))
    proxy = zstores.synchronized(array, zstores.ThreadSynchronizer(), atomic=True)
    reader = zarr.open_array(zstores.zarr_store(backend), mode="r")

    def increment() -> None:
        for _ in range(5):
            with proxy.locked(np.s_[0:40, 0:40]):
                proxy[0:40, 0:40] = proxy[0:40, 0:40] + 1
                assert (reader[0:40, 0:40] < proxy[0:40, 0:40]).all()  # not committed yet

    threads = [threading.Thread(target=increment) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (array[0:40, 0:40] == 21).all() and (array[40:, :] == 1).all()
    with pytest.raises(zstores.LockOrderError):
        with proxy.locked(np.s_[0:20, 0:20]):
            proxy[0:40, 0:40] = 0
    assert (array[0:40, 0:40] == 21).all()  # the refused block rolled back


ZARR2_SYNC_PROGRAM = textwrap.dedent("""
    import threading, zarr, zstores
    backend = zstores.MemoryStore()
    array = zarr.zeros((64, 64), chunks=(32, 32), dtype="i4", store=zstores.zarr_store(backend))
    proxy = zstores.synchronized(array, zstores.ThreadSynchronizer(), atomic=True, retries=1000)
    assert proxy.transactional
    def stripe(column):
        for row in range(0, 64, 8):
            proxy[row:row + 8, column * 8:column * 8 + 8] = column + 10
    threads = [threading.Thread(target=stripe, args=(c,)) for c in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    result = zarr.open_array(backend)[:]
    for column in range(8):
        assert (result[:, column * 8:column * 8 + 8] == column + 10).all(), column
    print("ok")
""")


def test_zarr2_synchronized_atomic_over_transactions(zarr2):
    done = subprocess.run([zarr2.python, "-c", ZARR2_SYNC_PROGRAM], capture_output=True,
                          text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, timeout=120,
                          check=False)
    assert done.stdout.strip() == "ok", done.stderr
