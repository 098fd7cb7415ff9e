"""LRUStoreCache: the conformance harness over three backends, cache behaviour,
concurrent readers and writers, and zarr-python 3 reading through the cache."""

from __future__ import annotations

import doctest
import pickle
import threading

import numpy as np
import pytest

import zstores
from zstores import (
    DirectoryStore,
    LMDBStore,
    LRUStoreCache,
    MemoryStore,
    SQLiteStore,
    TransactionError,
)
from zstores.testing import StoreTests
from zstores.wrappers import cache as cache_module

from raw_access import DirectoryRawHooks, MemoryRawHooks, SQLiteRawHooks


class TestCacheOverMemory(MemoryRawHooks, StoreTests):
    def open_store(self, location, mode="a"):
        return LRUStoreCache(MemoryStore(mode=mode), max_size=None)


class TestSmallCacheOverSQLite(SQLiteRawHooks, StoreTests):
    # 300 bytes: the harness's values keep evicting each other.
    def open_store(self, location, mode="a"):
        return LRUStoreCache(SQLiteStore(location, mode=mode), max_size=300)


class TestCacheOverDirectory(DirectoryRawHooks, StoreTests):
    def open_store(self, location, mode="a"):
        return LRUStoreCache(DirectoryStore(location, mode=mode), max_size=1 << 20)


# ------------------------------------------------------------------ helpers
class CountingStore(MemoryStore):
    """A real MemoryStore that counts the reads reaching it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.reads = 0
        self.batches = 0
        self.listings = 0

    def _get(self, key):
        self.reads += 1
        return super()._get(key)

    def _get_many(self, keys):
        self.batches += 1
        return {key: self._data[key] for key in keys if key in self._data}

    def _list_prefix(self, prefix):
        self.listings += 1
        return super()._list_prefix(prefix)

    def _listdir(self, prefix):
        self.listings += 1
        return {key[len(prefix):].split("/")[0] for key in self._data if key.startswith(prefix)}


@pytest.fixture
def counted():
    inner = CountingStore()
    return inner, LRUStoreCache(inner, max_size=None)


# ------------------------------------------------------------ value cache
def test_second_read_is_a_hit(counted):
    inner, cache = counted
    inner["a/0"] = b"abc"
    assert cache["a/0"] == b"abc"
    assert cache["a/0"] == b"abc"
    assert (cache.hits, cache.misses, inner.reads) == (1, 1, 1)
    assert cache.current_size == 3


def test_write_through_updates_the_cache(counted):
    inner, cache = counted
    cache["k"] = b"old"
    cache["k"] = bytearray(b"new!")
    assert inner["k"] == b"new!"
    reads = inner.reads
    assert cache["k"] == b"new!"
    assert type(cache["k"]) is bytes
    assert inner.reads == reads and cache.current_size == 4


def test_delete_drops_value_and_listings(counted):
    _, cache = counted
    cache["k"] = b"v"
    assert "k" in cache and cache.listdir() == ["k"]
    del cache["k"]
    assert "k" not in cache and cache.listdir() == [] and list(cache) == []
    with pytest.raises(KeyError):
        cache["k"]
    assert cache.current_size == 0


def test_lru_eviction_by_bytes():
    cache = LRUStoreCache(MemoryStore(), max_size=10)
    cache.store.update({"a": b"aaaa", "b": b"bbbb", "c": b"cccc"})
    cache["a"], cache["b"]
    cache["a"]  # a becomes most recent: b is the least recent
    cache["c"]  # 12 bytes > 10: b goes
    assert cache.current_size == 8
    hits = cache.hits
    cache["a"], cache["c"]
    assert cache.hits == hits + 2
    cache["b"]
    assert cache.hits == hits + 2 and cache.misses == 4


def test_value_larger_than_max_size_is_not_cached():
    cache = LRUStoreCache(MemoryStore(), max_size=4)
    cache["small"] = b"1234"
    cache["big"] = b"12345"
    assert cache.current_size == 4
    cache["big"]
    assert cache.misses == 1 and cache.current_size == 4


def test_max_size_zero_caches_nothing_but_empty_values():
    cache = LRUStoreCache(MemoryStore(), max_size=0)
    cache["a"] = b"x"
    cache["a"]
    assert cache.misses == 1 and cache.current_size == 0


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (1.5, TypeError), ("10", TypeError),
                                        (True, TypeError)])
def test_bad_max_size(bad, error):
    with pytest.raises(error, match="max_size"):
        LRUStoreCache(MemoryStore(), max_size=bad)


def test_getitems_fetches_misses_in_one_batch(counted):
    inner, cache = counted
    inner.update({"a": b"1", "b": b"2", "c": b"3"})
    cache["a"]
    assert cache.getitems(["a", "b", "c", "missing"]) == {"a": b"1", "b": b"2", "c": b"3"}
    assert (inner.reads, inner.batches) == (1, 1)  # b, c and missing in one batch
    assert cache.getitems(["a", "b", "c"]) == {"a": b"1", "b": b"2", "c": b"3"}
    assert (inner.reads, inner.batches) == (1, 1)


def test_range_and_size_of_a_cached_value(counted):
    inner, cache = counted
    cache["k"] = bytes(range(10))
    reads = inner.reads
    assert cache.get_range("k", 2, 3) == b"\x02\x03\x04"
    assert cache.get_range("k", -2) == b"\x08\x09"
    assert cache.getsize("k") == 10
    assert inner.reads == reads
    inner["other"] = b"abcdef"
    assert cache.get_range("other", 1, 2) == b"bc"  # a miss: goes to the store, not cached
    assert cache.current_size == 10


def test_keys_listdir_and_contains_are_cached(counted):
    inner, cache = counted
    inner.update({"g/a": b"1", "g/b": b"2", "top": b"3"})
    for _ in range(3):
        assert sorted(cache) == ["g/a", "g/b", "top"]
        assert cache.listdir("g") == ["a", "b"]
        assert len(cache) == 3
    assert inner.listings == 2  # one key listing, one listdir
    inner["g/c"] = b"behind the cache"
    assert "g/c" not in cache  # cached answer
    assert cache.listdir("g") == ["a", "b"]
    cache.invalidate_keys()
    assert "g/c" in cache and cache.listdir("g") == ["a", "b", "c"]


@pytest.mark.parametrize("operation", [
    lambda c: c.rmdir("g"),
    lambda c: c.rename("g", "h"),
    lambda c: c.clear(),
    lambda c: c.delitems(["g/a", "g/b"]),
])
def test_prefix_operations_drop_what_they_touch(counted, operation):
    inner, cache = counted
    cache.update({"g/a": b"1", "g/b": b"2", "keep": b"3"})
    assert cache.listdir("g") == ["a", "b"] and cache["g/a"] == b"1"
    operation(cache)
    assert dict(cache.items()) == dict(inner.items())
    assert cache.listdir("g") == []
    with pytest.raises(KeyError):
        cache["g/a"]


def test_rename_moves_under_the_cache(counted):
    _, cache = counted
    cache.update({"src/x": b"1", "dst/x": b"old"})
    cache["dst/x"]
    cache.rename("src", "dst")
    assert cache["dst/x"] == b"1" and "src/x" not in cache


def test_invalidate_values_and_invalidate(counted):
    inner, cache = counted
    cache["k"] = b"cached"
    inner["k"] = b"changed"
    assert cache["k"] == b"cached"
    cache.invalidate_values()
    assert cache["k"] == b"changed"
    inner["k2"] = b"new"
    assert cache.listdir() == ["k", "k2"]
    del inner["k2"]
    cache.invalidate()
    assert cache.listdir() == ["k"] and cache.current_size == 0


# ------------------------------------------------------------- wrapper API
def test_mode_and_flags_follow_the_store(tmp_path):
    inner = SQLiteStore(tmp_path / "s.sqlite", mode="w")
    cache = LRUStoreCache(inner, max_size=None)
    assert cache.mode == "w" and not cache.read_only
    assert cache.persistent and cache.supports_range_reads == inner.supports_range_reads
    assert inner.supports_process_writers and not cache.supports_process_writers
    view = LRUStoreCache(inner, max_size=None, mode="r")
    with pytest.raises(zstores.ReadOnlyError):
        view["k"] = b"v"
    inner.close()
    read_only = SQLiteStore(tmp_path / "s.sqlite", mode="r")
    assert LRUStoreCache(read_only, max_size=None).read_only
    with pytest.raises(ValueError, match="read-only"):
        LRUStoreCache(read_only, max_size=None, mode="r+")
    with pytest.raises(ValueError, match="never creates or clears"):
        LRUStoreCache(MemoryStore(), max_size=None, mode="w")
    with pytest.raises(TypeError, match="zstores.Store"):
        LRUStoreCache({}, max_size=None)


def test_repr_pickle_and_close(tmp_path):
    inner = SQLiteStore(tmp_path / "s.sqlite")
    cache = LRUStoreCache(inner, max_size=1000)
    cache["k"] = b"v"
    assert repr(cache) == f"LRUStoreCache({inner!r}, max_size=1000, mode='a')"
    clone = pickle.loads(pickle.dumps(cache))
    assert clone == cache and hash(clone) == hash(cache)
    assert clone.max_size == 1000 and clone.current_size == 0 and clone["k"] == b"v"
    assert clone != LRUStoreCache(inner, max_size=10)
    clone.close()
    view = pickle.loads(pickle.dumps(LRUStoreCache(inner, max_size=None, mode="r")))
    assert view.read_only and not view.store.read_only
    view.close()
    cache.close()
    assert inner.closed  # closing the cache closes its store


def test_garbage_collected_cache_leaves_the_store_open():
    inner = MemoryStore()
    LRUStoreCache(inner, max_size=None)["k"] = b"v"
    assert not inner.closed and inner["k"] == b"v"


def test_nested_store_keys_share_one_cache_entry(tmp_path):
    cache = LRUStoreCache(zstores.NestedDirectoryStore(tmp_path / "n"), max_size=None)
    cache["arr/0.1"] = b"chunk"
    assert cache["arr/0/1"] == b"chunk" and cache.hits == 1
    assert list(cache) == ["arr/0/1"]


# ------------------------------------------------------------ concurrency
class SlowStore(MemoryStore):
    """A MemoryStore whose reads can be held at a barrier, to force interleavings."""

    def __init__(self):
        super().__init__()
        self.hold = threading.Event()
        self.reading = threading.Event()
        self.gate = None

    def _get(self, key):
        value = super()._get(key)
        if self.gate == "get":
            self.reading.set()
            self.hold.wait(30)
        return value

    def _set(self, key, value):
        super()._set(key, value)
        if self.gate == "set":
            self.reading.set()
            self.hold.wait(30)


def test_a_miss_does_not_cache_a_value_replaced_meanwhile():
    inner = SlowStore()
    inner["k"] = b"old"
    cache = LRUStoreCache(inner, max_size=None)
    inner.gate = "get"
    seen = []
    reader = threading.Thread(target=lambda: seen.append(cache["k"]))
    reader.start()
    assert inner.reading.wait(30)  # the reader holds b"old", not yet cached
    inner.gate = None
    cache["k"] = b"new"
    inner.hold.set()
    reader.join(30)
    assert seen == [b"old"]
    assert cache["k"] == b"new"


def test_overlapping_writes_of_one_key_leave_it_uncached():
    inner = SlowStore()
    cache = LRUStoreCache(inner, max_size=None)
    inner.gate = "set"
    first = threading.Thread(target=lambda: cache.__setitem__("k", b"first"))
    first.start()
    assert inner.reading.wait(30)  # b"first" is in the store; its writer has not returned
    inner.gate = None
    cache["k"] = b"second"  # lands last in the store
    inner.hold.set()
    first.join(30)
    assert inner["k"] == b"second"
    assert cache["k"] == b"second"


def test_concurrent_misses_do_not_wait_for_each_other():
    inner = SlowStore()
    inner.update({"a": b"1", "b": b"2"})
    cache = LRUStoreCache(inner, max_size=None)
    inner.gate = "get"
    first = threading.Thread(target=lambda: cache["a"])
    first.start()
    assert inner.reading.wait(30)  # "a" is held inside the store
    inner.gate = None
    assert cache["b"] == b"2"  # not blocked by the lock
    inner.hold.set()
    first.join(30)
    assert cache.misses == 2


def test_threads_reading_and_writing_end_equal_to_the_store():
    inner = SQLiteStore(":memory:")
    cache = LRUStoreCache(inner, max_size=4000)
    keys = [f"k{i}" for i in range(12)]
    cache.setitems({key: b"0" for key in keys})
    errors = []

    def writer(number):
        try:
            for round_ in range(150):
                key = keys[(number + round_) % len(keys)]
                if round_ % 17 == 0:
                    cache.delitems([key])
                elif round_ % 11 == 0:
                    cache.setitems({key: f"{number}:{round_};".encode() * 20})
                else:
                    cache[key] = f"{number}:{round_};".encode() * (round_ % 40 + 1)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    def check(key, value):
        # A value read for a key is one written to that very key.
        if value is None or value == b"0":
            return
        number, round_ = map(int, value.split(b";")[0].split(b":"))
        assert keys[(number + round_) % len(keys)] == key, (key, value)

    def reader():
        try:
            for round_ in range(300):
                key = keys[round_ % len(keys)]
                check(key, cache.get(key))
                for key, value in cache.getitems(keys[:4]).items():
                    check(key, value)
                assert (key in cache) in (True, False)
                cache.listdir()
                if round_ % 50 == 0:
                    cache.invalidate_values()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors[0]
    expected = dict(inner.items())
    assert {key: cache[key] for key in keys if key in cache} == expected
    assert sorted(cache) == sorted(expected)
    assert cache.listdir() == sorted(expected)
    assert cache.current_size <= 4000


# --------------------------------------------------------------- zarr 3
def test_zarr3_reads_an_array_through_the_cache(tmp_path):
    zarr = pytest.importorskip("zarr")
    data = np.arange(600, dtype="<f8").reshape(20, 30)
    with SQLiteStore(tmp_path / "z.sqlite") as backend:
        array = zarr.create_array(zstores.zarr_store(backend), name="a", shape=data.shape,
                                  chunks=(7, 8), dtype=data.dtype)
        array[:] = data
    cache = LRUStoreCache(SQLiteStore(tmp_path / "z.sqlite", mode="r"), max_size=1 << 20)
    group = zarr.open_group(zstores.zarr_store(cache), mode="r")
    np.testing.assert_array_equal(group["a"][:], data)
    misses = cache.misses
    np.testing.assert_array_equal(group["a"][3:15, 2:29], data[3:15, 2:29])
    assert cache.misses == misses and cache.hits > 0  # the second read came from memory
    written = LRUStoreCache(SQLiteStore(tmp_path / "z.sqlite"), max_size=1 << 20)
    again = zarr.open_array(zstores.zarr_store(written), path="a")
    again[0, :] = -1
    np.testing.assert_array_equal(again[0, :], -np.ones(30))
    written.close()
    cache.invalidate()
    np.testing.assert_array_equal(group["a"][0, :], -np.ones(30))
    cache.close()


def test_docstring_examples_run():
    results = doctest.testmod(cache_module)
    assert results.attempted > 0 and results.failed == 0


def test_wrappers_follow_the_inner_store_for_blocking_and_reopen_their_own_handle(tmp_path):
    from zstores.adapters.zarr3 import is_blocking

    inner = LMDBStore(tmp_path / "x.lmdb")
    cache = LRUStoreCache(inner, max_size=None)
    assert not is_blocking(cache)
    assert is_blocking(LRUStoreCache(SQLiteStore(tmp_path / "s.sqlite"), max_size=None))
    other = cache._reopen_as("r")
    assert other.read_only and other.store is not inner
    other.close()
    inner["k"] = b"v"  # closing the reopened wrapper left this handle open
    assert cache["k"] == b"v"


def test_cache_refuses_work_inside_a_transaction_on_its_store():
    """A transaction opened on the wrapped store would hand the cache uncommitted values."""
    inner = MemoryStore()
    cache = LRUStoreCache(inner, max_size=None)
    inner["a"] = b"committed"
    with inner.transaction() as tx:
        inner["a"] = b"uncommitted"
        for use in (lambda: cache["a"], lambda: cache.__setitem__("b", b"1"),
                    lambda: "a" in cache, cache.listdir, lambda: cache.getitems(["a"])):
            with pytest.raises(TransactionError, match="LRUStoreCache"):
                use()
        tx.rollback()
    assert cache["a"] == b"committed"
    seen = []
    thread = threading.Thread(target=lambda: seen.append(cache["a"]))
    thread.start()
    thread.join()
    assert seen == [b"committed"]
