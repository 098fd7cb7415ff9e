"""zstores: Zarr key/value stores for every backend, behind one API.

Everything public is re-exported here; nothing else lives in this module.

>>> import zstores
>>> store = zstores.MemoryStore()
>>> store["foo/.zgroup"] = b'{"zarr_format": 2}'
>>> store.listdir("foo")
['.zgroup']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports
from .adapters import zarr_store
from .base import MODES, Store, Version
from .errors import (
    CorruptValueError,
    InvalidKeyError,
    InvalidValueError,
    KeyConflictError,
    LeaseExpiredError,
    LockNamespaceError,
    LockOrderError,
    LockTimeoutError,
    LockUnsupportedError,
    ReadOnlyError,
    ReplicationTimeoutError,
    StaleStoreError,
    StoreAccessError,
    StoreClosedError,
    StoreConnectionError,
    StoreExistsError,
    StoreFullError,
    StoreIOError,
    StoreLockedError,
    StoreNotFoundError,
    TransactionConflictError,
    TransactionError,
    UnsafePathError,
    UnsupportedOperationError,
    ValueTooLargeError,
    ZStoresError,
)
from .keys import normalize_storage_path
from .stores.dbm import DBMStore
from .stores.directory import DirectoryStore, NestedDirectoryStore
from .stores.lmdb import LMDBStore
from .stores.memory import MemoryStore
from .stores.mongodb import MongoDBStore
from .stores.redis import RedisClusterStore, RedisStore
from .stores.sqlite import SQLiteStore
from .stores.zip import ZipStore
from .transactions import Transaction
from .urls import StoreURLError, open_store

__version__ = "0.1.0"

# Imported on first use: they pull in numpy and numcodecs (or fasteners),
# which would more than double the start-up of the zstores and zfuse commands.
_LAZY = {
    **dict.fromkeys(["ContainsArrayError", "ContainsGroupError", "contains_array",
                     "contains_group", "getsize", "init_array", "init_group", "listdir",
                     "rename", "rmdir"], "hierarchy"),
    "migrate_1to2": "migrate_v1",
    "N5Store": "wrappers.n5",
    **dict.fromkeys(["migrate_2to3", "plan_2to3"], "migrate_v3"),
    **dict.fromkeys(["ObjectStoreSynchronizer", "ProcessSynchronizer", "RedisSynchronizer",
                     "SynchronizedArray", "ThreadSynchronizer", "synchronized"], "sync"),
    **dict.fromkeys(["LRUStoreCache", "consolidate_metadata", "open_consolidated"], "wrappers"),
    **dict.fromkeys(["AzureStore", "GCSStore", "HTTPStore", "ObjectStore", "S3Store"],
                    "stores.objectstore"),
}

if TYPE_CHECKING:
    from .hierarchy import (
        ContainsArrayError,
        ContainsGroupError,
        contains_array,
        contains_group,
        getsize,
        init_array,
        init_group,
        listdir,
        rename,
        rmdir,
    )
    from .migrate_v1 import migrate_1to2
    from .migrate_v3 import migrate_2to3, plan_2to3
    from .stores.objectstore import AzureStore, GCSStore, HTTPStore, ObjectStore, S3Store
    from .sync import (
        ObjectStoreSynchronizer,
        ProcessSynchronizer,
        RedisSynchronizer,
        SynchronizedArray,
        ThreadSynchronizer,
        synchronized,
    )
    from .wrappers import LRUStoreCache, consolidate_metadata, open_consolidated
    from .wrappers.n5 import N5Store


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)

__all__ = [
    "MODES",
    "N5Store",
    "AzureStore",
    "ContainsArrayError",
    "ContainsGroupError",
    "CorruptValueError",
    "DBMStore",
    "DirectoryStore",
    "GCSStore",
    "HTTPStore",
    "InvalidKeyError",
    "InvalidValueError",
    "KeyConflictError",
    "LMDBStore",
    "LRUStoreCache",
    "LeaseExpiredError",
    "LockNamespaceError",
    "LockOrderError",
    "LockTimeoutError",
    "LockUnsupportedError",
    "MemoryStore",
    "MongoDBStore",
    "NestedDirectoryStore",
    "ObjectStore",
    "ObjectStoreSynchronizer",
    "ProcessSynchronizer",
    "ReadOnlyError",
    "ReplicationTimeoutError",
    "RedisClusterStore",
    "RedisStore",
    "RedisSynchronizer",
    "S3Store",
    "SQLiteStore",
    "StaleStoreError",
    "Store",
    "StoreAccessError",
    "StoreClosedError",
    "StoreConnectionError",
    "StoreExistsError",
    "StoreFullError",
    "StoreIOError",
    "StoreLockedError",
    "StoreNotFoundError",
    "StoreURLError",
    "SynchronizedArray",
    "ThreadSynchronizer",
    "Transaction",
    "TransactionConflictError",
    "TransactionError",
    "UnsafePathError",
    "UnsupportedOperationError",
    "ValueTooLargeError",
    "Version",
    "ZStoresError",
    "ZipStore",
    "consolidate_metadata",
    "contains_array",
    "contains_group",
    "getsize",
    "init_array",
    "init_group",
    "listdir",
    "migrate_1to2",
    "migrate_2to3",
    "normalize_storage_path",
    "open_consolidated",
    "open_store",
    "plan_2to3",
    "rename",
    "rmdir",
    "synchronized",
    "zarr_store",
]
