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

Tests that only write and read through the store cannot tell a store that
keeps the right bytes from one that agrees with itself (one that stored each
value reversed and reversed it back would pass them).  Provide the two
out-of-band hooks, which reach the backend with its own library, and the
``test_raw_*`` tests check what is really stored: values set through the
store are there byte for byte, under the key's place in the backend's
format; overwrites and deletes reach the backend; values written there by
another program are read by every read method::

    class TestMyStore(StoreTests):
        def open_store(self, location, mode="a"):
            return MyStore(location, mode=mode)

        def raw_get(self, store, key):   # bytes, or None if absent
            path = location_of(store, key)      # the backend's own layout
            return path.read_bytes() if path.is_file() else None

        def raw_set(self, store, key, value):
            location_of(store, key).write_bytes(value)

Without them those tests skip, naming the missing hook.
"""

from __future__ import annotations

from .store_tests import StoreTests

__all__ = ["StoreTests"]
