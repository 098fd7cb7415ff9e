"""zstores: Zarr key/value stores for every backend, behind one API.

Everything public is re-exported here; nothing else lives in this module.

>>> import zstores
>>> store = zstores.MemoryStore()
>>> store["foo/.zgroup"] = b'{"zarr_format": 2}'
>>> store.listdir("foo")
['.zgroup']
"""

from __future__ import annotations

from .base import MODES, Store
from .errors import (
    InvalidKeyError,
    KeyConflictError,
    ReadOnlyError,
    StoreClosedError,
    StoreConnectionError,
    StoreExistsError,
    StoreNotFoundError,
    UnsupportedOperationError,
    ValueTooLargeError,
    ZStoresError,
)
from .hierarchy import (
    ContainsArrayError,
    ContainsGroupError,
    contains_array,
    contains_group,
    getsize,
    init_array,
    init_group,
    listdir,
    migrate_1to2,
    rename,
    rmdir,
)
from .keys import normalize_storage_path
from .stores.dbm import DBMStore
from .stores.directory import DirectoryStore, NestedDirectoryStore
from .stores.lmdb import LMDBStore
from .stores.memory import MemoryStore
from .stores.sqlite import SQLiteStore
from .stores.zip import ZipStore

__version__ = "0.1.0"

__all__ = [
    "MODES",
    "ContainsArrayError",
    "ContainsGroupError",
    "DBMStore",
    "DirectoryStore",
    "NestedDirectoryStore",
    "contains_array",
    "contains_group",
    "getsize",
    "init_array",
    "init_group",
    "listdir",
    "migrate_1to2",
    "rename",
    "rmdir",
    "InvalidKeyError",
    "KeyConflictError",
    "LMDBStore",
    "MemoryStore",
    "ReadOnlyError",
    "SQLiteStore",
    "Store",
    "StoreClosedError",
    "StoreConnectionError",
    "StoreExistsError",
    "StoreNotFoundError",
    "UnsupportedOperationError",
    "ValueTooLargeError",
    "ZipStore",
    "ZStoresError",
    "normalize_storage_path",
]
