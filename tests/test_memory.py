from zstores import MemoryStore
from zstores.testing import StoreTests


class TestMemoryStore(StoreTests):
    def open_store(self, location, mode="a"):
        return MemoryStore(mode=mode)
