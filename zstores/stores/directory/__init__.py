"""Folders as zstores Stores: ``DirectoryStore`` and ``NestedDirectoryStore`` (``store.py``)."""

from .store import NAME_MAX, TEMP_PREFIX, DirectoryStore, NestedDirectoryStore

__all__ = ["NAME_MAX", "TEMP_PREFIX", "DirectoryStore", "NestedDirectoryStore"]
