"""SQLite as a zstores Store: ``SQLiteStore`` (``store.py``)."""

from .store import MEMORY as MEMORY
from .store import SYNCHRONOUS as SYNCHRONOUS
from .store import SQLiteStore

__all__ = ["SQLiteStore"]
