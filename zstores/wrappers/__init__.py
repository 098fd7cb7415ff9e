"""Stores that wrap another store: an LRU cache, and consolidated Zarr metadata.

Both pass every operation they do not change to the wrapped store, follow its
mode and capability flags, pickle it with their parameters, and close it when
closed (not when garbage-collected).

>>> import zstores
>>> cache = zstores.LRUStoreCache(zstores.MemoryStore(), max_size=2**20)
>>> cache["a"] = b"1"
>>> cache
LRUStoreCache(MemoryStore(mode='a'), max_size=1048576, mode='a')
"""

from __future__ import annotations

from .cache import LRUStoreCache
from .consolidated import ConsolidatedStore, consolidate_metadata, open_consolidated
from .delegate import WrapperStore

__all__ = [
    "ConsolidatedStore",
    "LRUStoreCache",
    "WrapperStore",
    "consolidate_metadata",
    "open_consolidated",
]
