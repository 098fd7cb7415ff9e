"""Zip archives as a zstores Store: ``ZipStore`` (``store.py``) over its engine (``archive.py``).

``archive.py`` holds the zip machinery: the records (local headers, central
directory, end records) read and written with ``pread``/``pwrite``, and
``Archive``, the store's directory reading, member space, commits, reads and
compaction; it never imports ``Store``.
"""

from .store import ZipStore

__all__ = ["ZipStore"]
