"""LMDB as a zstores Store: ``LMDBStore`` (``store.py``) over its engine (``env.py``).

``env.py`` holds what speaks py-lmdb: the environment every store on the same
files shares in a process, the gate between transactions and remaps of the
map, zero-copy views, and fork safety.  It never imports ``Store``.
"""

from .store import DEFAULT_MAP_SIZE, LMDBStore

__all__ = ["DEFAULT_MAP_SIZE", "LMDBStore"]
