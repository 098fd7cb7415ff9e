"""The conformance harness every store passes, importable by third parties.

Subclass :class:`StoreTests` in a pytest module and implement ``open_store``::

    from zstores.testing import StoreTests
    from mypackage import MyStore

    class TestMyStore(StoreTests):
        def open_store(self, location, mode="a"):
            return MyStore(location, mode=mode)

``location`` is a fresh ``pathlib.Path`` (not created) per test; a store that
is not file-based can derive a unique name from it.  The harness reads the
store's capability flags (``persistent``, ``supports_process_writers``,
``hierarchical`` ...) and checks each claim, and that a store refuses clearly
what it declares it cannot do.
"""

from __future__ import annotations

from .store_tests import StoreTests

__all__ = ["StoreTests"]
