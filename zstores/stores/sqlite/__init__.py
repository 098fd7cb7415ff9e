"""SQLite as a zstores Store: ``SQLiteStore`` (``store.py``) over ``connection.py``.

``connection.py`` opens the connections (one per thread), runs the
checkpoint thread and turns ``sqlite3`` errors into zstores errors; it never
imports ``Store``.
"""

from .connection import MEMORY as MEMORY
from .connection import SYNCHRONOUS as SYNCHRONOUS
from .store import SQLiteStore

__all__ = ["SQLiteStore"]
