"""Process-safe writes to Zarr arrays: synchronizers and chunk-locked array proxies.

When a write does not line up with chunk boundaries, zarr-python reads the
chunk, changes part of it and writes it back; two processes doing that to one
chunk at once lose an update.  The synchronizers here give each key a lock
(``sync[key]``, zarr-python 2's ``synchronizer=`` protocol), and
``synchronized(array, sync)`` makes any zarr-python 2 or 3 array hold the
right chunk locks around its writes.

- ``locks.py``: ``ThreadSynchronizer``, ``ProcessSynchronizer`` (file locks),
  ``RedisSynchronizer`` (Redis leases), and their errors;
- ``objects.py``: ``ObjectStoreSynchronizer`` (lease objects in S3, GCS,
  Azure: no Redis) and the conditional writes of fenced object-store data;
- ``fencing.py``: the fence records of fenced writes in transactional stores;
- ``chunks.py``: the chunk grid and chunk keys, selections cut per chunk;
- ``arrays.py``: ``synchronized`` and ``SynchronizedArray``.

``StoreLockedError`` (a second writer process refused by Zip or DBM, whose
lock lives in ``zstores/stores/_single_writer.py``) is re-exported here.

See docs/parallel-writes.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ..errors import StoreLockedError

# Exports load on first use: ``import zstores`` must not pull in numpy
# (DBMStore runs in interpreters without numpy).
_EXPORTS = {
    "LockOrderError": "arrays",
    "SynchronizedArray": "arrays",
    "synchronized": "arrays",
    "ChunkLayout": "chunks",
    "LeaseExpiredError": "locks",
    "LockTimeoutError": "locks",
    "LockUnsupportedError": "locks",
    "ObjectStoreSynchronizer": "objects",
    "ProcessSynchronizer": "locks",
    "RedisSynchronizer": "locks",
    "ThreadSynchronizer": "locks",
    "lock_file_name": "locks",
}

__all__ = [
    "ChunkLayout",
    "LeaseExpiredError",
    "LockOrderError",
    "LockTimeoutError",
    "LockUnsupportedError",
    "ObjectStoreSynchronizer",
    "ProcessSynchronizer",
    "RedisSynchronizer",
    "StoreLockedError",
    "SynchronizedArray",
    "ThreadSynchronizer",
    "lock_file_name",
    "synchronized",
]

if TYPE_CHECKING:
    from .arrays import LockOrderError, SynchronizedArray, synchronized
    from .chunks import ChunkLayout
    from .locks import (
        LeaseExpiredError,
        LockTimeoutError,
        LockUnsupportedError,
        ProcessSynchronizer,
        RedisSynchronizer,
        ThreadSynchronizer,
        lock_file_name,
    )
    from .objects import ObjectStoreSynchronizer


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
