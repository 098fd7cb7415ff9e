"""The zarr-python 3 adapter: zarr's own store suite on every backend, plus what it leaves out."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle

import numpy as np
import pytest
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import cpu, default_buffer_prototype
from zarr.core.sync import sync
from zarr.testing.store import StoreTests

import zstores
from zstores.adapters import zarr_store
from zstores.adapters.zarr3 import ZarrStore, is_blocking
from zstores.errors import StoreClosedError
from zstores.testing.workers import race_key, race_zarr3_create, value_for
from zstores.urls import open_store

from conftest import missing_peer
from object_urls import azure_store_url, new_azure_container, new_s3_bucket, s3_store_url
from zarr2_suite.backends import ALL, backend_url, missing_server
from zarr3_suite import run_async_tests


class AdapterSuite(StoreTests[ZarrStore, cpu.Buffer]):
    """zarr.testing.store.StoreTests over one backend (``backend``)."""

    store_cls = ZarrStore
    buffer_cls = cpu.Buffer
    backend: str

    @pytest.fixture
    def store_kwargs(self, tmp_path):
        reason = missing_server(self.backend)
        if reason:
            missing_peer(reason)
        backend = open_store(backend_url(self.backend, tmp_path), mode="w")
        yield {"store": backend}
        if backend.persistent and not backend.closed:
            backend.clear()  # network stores outlive the test
        backend.close()

    # zarr's fixtures of the same names are coroutines (pytest-asyncio).
    @pytest.fixture
    def store(self, open_kwargs):
        return asyncio.run(self.store_cls.open(**open_kwargs))

    @pytest.fixture
    def store_not_open(self, store_kwargs):
        return self.store_cls(**store_kwargs)

    async def set(self, store: ZarrStore, key: str, value) -> None:
        store.store[key] = value.to_bytes()

    async def get(self, store: ZarrStore, key: str):
        return self.buffer_cls.from_bytes(store.store[key])

    def test_store_repr(self, store: ZarrStore) -> None:
        assert repr(store) == f"ZarrStore({store.store!r}, read_only=False)"

    def test_store_supports_writes(self, store: ZarrStore) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: ZarrStore) -> None:
        assert store.supports_listing


for _backend in ALL:
    _name = f"TestZarr3Suite_{_backend}"
    globals()[_name] = run_async_tests(type(_name, (AdapterSuite,), {"backend": _backend}))
del _backend, _name


class ObjectStoreSuite(AdapterSuite):
    """zarr's suite over an object store on the test command's emulator (a fresh bucket)."""

    backend = "object"
    #: The engine sending the requests (``via=``).
    via = "obstore"

    def new_url(self, request: pytest.FixtureRequest) -> str:
        raise NotImplementedError

    @pytest.fixture
    def store_kwargs(self, request):
        backend = open_store(self.new_url(request), mode="w")
        yield {"store": backend}
        if not backend.closed:
            backend.clear()  # the emulator outlives the test
        backend.close()


class S3Suite(ObjectStoreSuite):
    def new_url(self, request):
        endpoint = request.getfixturevalue("s3_endpoint")
        return s3_store_url(endpoint, new_s3_bucket(endpoint), "zarr3 suite", via=self.via)


class AzureSuite(ObjectStoreSuite):
    def new_url(self, request):
        endpoint = request.getfixturevalue("azure_endpoint")
        url = azure_store_url(endpoint, new_azure_container(endpoint), "zarr3 suite")
        return f"{url}&via={self.via}"


@run_async_tests
class TestZarr3Suite_s3(S3Suite):
    pass


@run_async_tests
class TestZarr3Suite_s3_via_fsspec(S3Suite):
    via = "fsspec"


@run_async_tests
class TestZarr3Suite_azure(AzureSuite):
    pass


@run_async_tests
class TestZarr3Suite_azure_via_fsspec(AzureSuite):
    via = "fsspec"


# ------------------------------------------------------------------------
# What zarr's suite leaves out.
# ------------------------------------------------------------------------
prototype = default_buffer_prototype()


class RecordingStore(zstores.DirectoryStore):
    """A real DirectoryStore that records which thread ran each read and each range read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.threads: list[str] = []
        self.ranges: list[tuple[str, int, int | None]] = []

    def _get(self, key):
        import threading

        self.threads.append(threading.current_thread().name)
        return super()._get(key)

    def _get_range(self, key, start, length):
        self.ranges.append((key, start, length))
        return super()._get_range(key, start, length)


class InlineDirectoryStore(RecordingStore):
    blocking = False  # what a store class declares to be called on the loop


def test_zarr_store_picks_the_zarr3_adapter_and_owns_url_stores(tmp_path):
    adapter = zarr_store(f"sqlite://{tmp_path}/s.sqlite")
    assert type(adapter) is ZarrStore and not adapter.read_only
    adapter.close()
    assert adapter.store.closed  # opened from a URL: the adapter's to close
    backend = open_store(f"sqlite://{tmp_path}/s.sqlite")
    mine = zarr_store(backend, mode="r")
    assert mine.read_only and mine.store is backend
    mine.close()
    assert not backend.closed  # passed in: the caller's to close
    backend.close()
    with pytest.raises(TypeError, match="zarr_store takes a zstores.Store, a URL or a path"):
        zarr_store({"a": b"1"})


def test_blocking_backends_run_in_worker_threads_others_on_the_loop(tmp_path):
    import threading

    async def read(adapter):
        await adapter.get("k", prototype)
        await asyncio.gather(*(adapter.get("k", prototype) for _ in range(20)))
        return threading.current_thread().name

    blocking = RecordingStore(tmp_path / "a")
    blocking["k"] = b"v"
    loop_thread = asyncio.run(read(ZarrStore(blocking)))
    assert is_blocking(blocking) and len(blocking.threads) == 21
    assert loop_thread not in blocking.threads
    assert all(name.startswith("zstores-zarr") for name in blocking.threads)

    inline = InlineDirectoryStore(tmp_path / "b")
    inline["k"] = b"v"
    loop_thread = asyncio.run(read(ZarrStore(inline)))
    assert not is_blocking(inline) and set(inline.threads) == {loop_thread}
    assert not is_blocking(zstores.MemoryStore())
    assert not is_blocking(open_store(f"lmdb://{tmp_path}/l"))
    assert is_blocking(open_store(f"sqlite://{tmp_path}/s.db"))


def test_errors_reach_the_awaiting_caller(tmp_path):
    adapter = ZarrStore(zstores.DirectoryStore(tmp_path / "d"))
    sync(adapter.set("a", cpu.Buffer.from_bytes(b"1")))
    with pytest.raises(zstores.KeyConflictError):  # a key cannot also be a folder here
        sync(adapter.set("a/b", cpu.Buffer.from_bytes(b"2")))
    with pytest.raises(zstores.InvalidKeyError):
        sync(adapter.get("a/../b", prototype))


@pytest.mark.parametrize(
    ("byte_range", "expected", "call"),
    [
        (RangeByteRequest(2, 5), b"234", (2, 3)),
        (OffsetByteRequest(7), b"789", (7, None)),
        (SuffixByteRequest(4), b"6789", (-4, None)),
        (SuffixByteRequest(0), b"", (0, 0)),
        (SuffixByteRequest(50), b"0123456789", (-50, None)),
    ],
)
def test_byte_ranges_go_through_get_range(tmp_path, byte_range, expected, call):
    backend = RecordingStore(tmp_path / "d")
    backend["v"] = b"0123456789"
    adapter = ZarrStore(backend)
    assert sync(adapter.get("v", prototype, byte_range)).to_bytes() == expected
    assert adapter.get_sync("v", byte_range=byte_range).to_bytes() == expected
    assert backend.ranges == [("v", *call)] * 2
    assert sync(adapter.get("missing", prototype, byte_range)) is None


def test_sharded_array_reads_inner_chunks_by_range(tmp_path):
    backend = RecordingStore(tmp_path / "d")
    adapter = ZarrStore(backend)
    array = zarr.create_array(adapter, shape=(64,), chunks=(8,), shards=(32,), dtype="i4",
                              compressors=None)
    array[:] = np.arange(64)
    assert int(zarr.open_array(adapter, mode="r")[37]) == 37
    assert any(key == "c/1" for key, _, _ in backend.ranges)  # index and inner chunk by range


def test_listing_streams_in_batches_from_blocking_backends(tmp_path):
    backend = zstores.SQLiteStore(tmp_path / "s.sqlite")
    backend.setitems({f"g/c/{i}": b"" for i in range(2500)} | {"g/zarr.json": b"{}", "h": b""})
    adapter = ZarrStore(backend)

    async def collect(iterator):
        return [key async for key in iterator]

    keys = asyncio.run(collect(adapter.list()))
    assert len(keys) == 2502 and len(set(keys)) == 2502
    assert sorted(asyncio.run(collect(adapter.list_dir("g")))) == ["c", "zarr.json"]
    assert len(asyncio.run(collect(adapter.list_prefix("g/c/")))) == 2500
    # a string prefix, not a folder: "g/c/24" matches g/c/24, g/c/240 ... g/c/2499
    expected = sorted(key for key in backend if key.startswith("g/c/24"))
    assert sorted(asyncio.run(collect(adapter.list_prefix("g/c/24")))) == expected
    assert len(expected) == 111
    assert asyncio.run(collect(adapter.list_prefix("h"))) == ["h"]


def test_a_whole_listing_comes_back_in_one_hand_off(tmp_path, monkeypatch):
    # listdir and list_prefix return lists: pulling them in batches of 1,000
    # cost a thread wake-up per batch (5 for 2,048 chunk names), which on a
    # loaded machine took longer than LocalStore's whole listing.
    import zstores.adapters.zarr3 as zarr3

    backend = zstores.SQLiteStore(tmp_path / "s.sqlite")
    backend.setitems({f"c/{i}": b"" for i in range(2048)})
    adapter = ZarrStore(backend)
    assert is_blocking(backend)
    hand_offs = []
    run = zarr3._WORKERS.run
    monkeypatch.setattr(zarr3._WORKERS, "run", lambda call: hand_offs.append(call) or run(call))

    async def collect(iterator):
        return [key async for key in iterator]

    assert len(asyncio.run(collect(adapter.list_dir("c")))) == 2048
    assert len(asyncio.run(collect(adapter.list_prefix("c/")))) == 2048
    assert len(hand_offs) == 2
    assert len(asyncio.run(collect(adapter.list()))) == 2048  # a lazy iterator: in batches
    assert len(hand_offs) == 2 + 1 + 3  # the iterator, then 1,000 + 1,000 + 48 keys

def test_sizes(tmp_path):
    adapter = zarr_store(f"lmdb://{tmp_path}/l")
    array = zarr.create_array(adapter, name="g/a", shape=(10,), chunks=(5,), dtype="u1",
                              compressors=None)
    array[:] = 1
    assert sync(adapter.getsize("g/a/c/0")) == 5
    assert sync(adapter.getsize_prefix("g/a")) == 10 + len(adapter.store["g/a/zarr.json"])
    assert array.nbytes_stored() == sync(adapter.getsize_prefix("g/a"))
    with pytest.raises(FileNotFoundError):
        sync(adapter.getsize("g/a"))  # a prefix, not a key


def test_read_only_refuses_every_write(tmp_path):
    backend = zstores.MemoryStore()
    reader = ZarrStore(backend, read_only=True)
    message = "store was opened in read-only mode and does not support writing"
    for attempt in (lambda: sync(reader.set("k", cpu.Buffer.from_bytes(b"1"))),
                    lambda: sync(reader.delete("k")), lambda: sync(reader.delete_dir("")),
                    lambda: sync(reader.clear()),
                    lambda: reader.set_sync("k", cpu.Buffer.from_bytes(b"1")),
                    lambda: sync(reader.set_if_not_exists("k", cpu.Buffer.from_bytes(b"1")))):
        with pytest.raises(ValueError, match=message):
            attempt()
    assert len(backend) == 0
    with pytest.raises(ValueError, match="opened read-only"):
        ZarrStore(zstores.MemoryStore(mode="r"), read_only=False)


def test_with_read_only_reopens_a_read_only_store_for_writing(tmp_path):
    with zstores.SQLiteStore(tmp_path / "s.db") as setup:
        setup["k"] = b"old"
    reader = zarr_store(f"sqlite://{tmp_path}/s.db", mode="r")
    writer = reader.with_read_only(False)
    assert not writer.read_only and writer.store is not reader.store
    writer.set_sync("k", cpu.Buffer.from_bytes(b"new"))
    assert reader.get_sync("k").to_bytes() == b"new"
    writer.close()
    assert writer.store.closed and not reader.store.closed
    view = reader.with_read_only(True)
    assert view.store is reader.store and view.read_only
    reader.close()


def test_an_owned_store_reopens_after_close(tmp_path):
    adapter = zarr_store(f"lmdb://{tmp_path}/l", mode="w")
    array = zarr.create_array(adapter, shape=(4,), chunks=(2,), dtype="u1", compressors=None)
    array[:] = 3
    adapter.close()
    assert adapter.store.closed and not adapter._is_open
    assert zarr.open_array(adapter, mode="r")[1] == 3  # as zarr's own stores do
    assert not adapter.store.closed
    adapter.close()
    assert sync(adapter.get("c/0", prototype)).to_bytes() == b"\x03\x03"
    assert adapter._is_open and not adapter.store.closed
    adapter.close()


def test_a_closed_unowned_store_is_an_error(tmp_path):
    backend = zstores.DirectoryStore(tmp_path / "d")
    adapter = ZarrStore(backend)
    backend.close()
    with pytest.raises(StoreClosedError):
        sync(adapter.get("k", prototype))


@pytest.mark.parametrize("url", ["memory://", "file://{root}/d", "lmdb://{root}/l", "sqlite://{root}/s.db"])
def test_pickled_adapter_equals_and_reaches_the_same_data(tmp_path, url):
    adapter = zarr_store(url.format(root=tmp_path), mode="w")
    adapter.set_sync("k", cpu.Buffer.from_bytes(b"v"))
    copy = pickle.loads(pickle.dumps(adapter))
    assert copy == adapter and hash(copy) == hash(adapter)
    assert copy.get_sync("k").to_bytes() == b"v"
    assert copy.with_read_only(True) != adapter
    if adapter.store.persistent:
        copy.set_sync("k2", cpu.Buffer.from_bytes(b"w"))
        assert adapter.get_sync("k2").to_bytes() == b"w"
    copy.close()
    adapter.close()


def test_an_empty_store_opened_with_w_unpickles(tmp_path):
    adapter = zarr_store(f"dbm://{tmp_path}/d?open=dumb", mode="w")
    copy = pickle.loads(pickle.dumps(adapter))  # reopened without clearing or refusing it
    assert copy.store.mode == "a" and copy == adapter
    adapter.close()
    copy.close()


def test_set_if_not_exists_and_get_many(tmp_path):
    adapter = zarr_store(f"sqlite://{tmp_path}/s.db")
    one = cpu.Buffer.from_bytes(b"1")
    sync(adapter.set_if_not_exists("a", one))
    sync(adapter.set_if_not_exists("a", cpu.Buffer.from_bytes(b"2")))
    assert adapter.get_sync("a").to_bytes() == b"1"

    async def many():
        requests = [("a", prototype, None), ("zz", prototype, None),
                    ("a", prototype, RangeByteRequest(0, 0))]
        return [(key, None if value is None else value.to_bytes())
                async for key, value in adapter._get_many(requests)]

    assert asyncio.run(many()) == [("a", b"1"), ("zz", None), ("a", b"")]
    adapter.close()


@pytest.mark.parametrize("scheme", ["file", "sqlite", "lmdb"])
def test_set_if_not_exists_is_atomic_across_processes(tmp_path, scheme):
    """Four processes race zarr's set_if_not_exists on a fresh key per round (a
    barrier starts each round): the first value written is the one every racer
    reads back and the one kept, so no racer overwrote another's value."""
    url = f"{scheme}://{tmp_path}/race.{scheme}"
    zarr_store(url, mode="w").close()
    context = multiprocessing.get_context("spawn")
    racers, rounds = 4, 24
    barrier, results = context.Barrier(racers), context.Queue()
    processes = [context.Process(target=race_zarr3_create,
                                 args=(url, writer, rounds, barrier, results))
                 for writer in range(racers)]
    for process in processes:
        process.start()
    try:
        seen = dict(results.get(timeout=300) for _ in processes)
    finally:
        for process in processes:
            process.join(120)
            if process.is_alive():
                process.kill()
    assert not [text for text in seen.values() if isinstance(text, str)], seen
    with open_store(url, mode="r") as store:
        for index in range(rounds):
            kept = store[race_key("zarr3", index)]
            assert kept in [value_for(writer, index) for writer in range(racers)]
            assert [seen[writer][index] for writer in range(racers)] == [kept] * racers


def test_suite_capabilities_are_claimed_so_nothing_is_skipped(tmp_path):
    # zarr's suite skips its sync and delete tests for stores without them
    from zarr.abc.store import SupportsSyncStore

    for backend in ("memory", "directory", "nested", "zip", "dbm", "lmdb", "sqlite"):
        adapter = zarr_store(backend_url(backend, tmp_path / backend), mode="w")
        assert isinstance(adapter, SupportsSyncStore)
        assert adapter.supports_deletes and adapter.supports_writes and adapter.supports_listing
        assert not adapter.supports_partial_writes
        adapter.close()


def test_empty_key_holds_nothing():
    adapter = ZarrStore(zstores.MemoryStore())
    assert sync(adapter.get("", prototype)) is None
    assert not sync(adapter.exists(""))
    assert sync(adapter.is_empty(""))


def test_a_writable_adapter_reads_lmdb_chunks_through_views_that_keep_their_bytes(tmp_path):
    # A partial-chunk write reads the chunk first: through a zero-copy view of
    # LMDB's map (the map is made large before the first view), not a copy.
    adapter = zarr_store(zstores.LMDBStore(tmp_path / "l", mode="w", map_size=1 << 20))
    array = zarr.create_array(adapter, shape=(2 * 8192,), chunks=(8192,), dtype="i8",
                              compressors=None)  # 64 KiB chunks: above the view threshold
    array[:] = 1
    array[5:8192 + 5] = 2  # both chunks read, changed and written back
    assert adapter.store.map_size >= 1 << 40
    assert array[:].tolist() == [1] * 5 + [2] * 8192 + [1] * (8192 - 5)
    # A buffer zarr holds stays as it was read while the key is written over.
    held = sync(adapter.get("c/0", default_buffer_prototype()))
    assert not held.as_numpy_array().flags.writeable
    array[:] = 7
    assert set(held.as_numpy_array().view("i8").tolist()) == {1, 2}
    assert set(array[:].tolist()) == {7}
    del held
    adapter.store.close()
