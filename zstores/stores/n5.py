"""The former place of ``N5Store``, now ``zstores.wrappers.n5`` (it wraps a store).

Kept so that ``zstores.stores.n5.N5Store`` still imports; nothing else lives
here (tests/test_import_graph.py allows this one arrow up to the wrappers).
"""

from ..wrappers.n5 import N5Store

__all__ = ["N5Store"]
