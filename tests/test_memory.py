from zstores import MemoryStore
from zstores.testing import StoreTests

from raw_access import memory_get, memory_set


class TestMemoryStore(StoreTests):
    def open_store(self, location, mode="a"):
        return MemoryStore(mode=mode)

    # The backend of a MemoryStore is its dict.
    def raw_get(self, store, key):
        return memory_get(store, key)

    def raw_set(self, store, key, value):
        memory_set(store, key, value)
