"""LMDB as a zstores Store: ``LMDBStore`` (``store.py``)."""

from .store import DEFAULT_MAP_SIZE, LMDBStore

__all__ = ["DEFAULT_MAP_SIZE", "LMDBStore"]
