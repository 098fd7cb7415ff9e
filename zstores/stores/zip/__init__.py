"""ZipStore: every key a member of one zip archive (``store.py``)."""

from .store import ZipStore

__all__ = ["ZipStore"]
