"""N5Store: the conformance harness, then N5 files read and written by other N5 readers."""

from __future__ import annotations

import pytest

from zstores import DirectoryStore
from zstores.metadata import MetadataError
from zstores.stores.n5 import N5Store
from zstores.testing import StoreTests

from raw_access import DirectoryRawHooks


class TestN5Store(DirectoryRawHooks, StoreTests):
    """The harness's keys are plain keys outside any N5 array, so they pass through
    unchanged.  Its writes of ``.zgroup``, ``.zarray`` and ``.zattrs`` hold text
    that is not JSON: an N5 store must translate them into ``attributes.json``, so
    each such test must fail with MetadataError on that key and nothing else."""

    def open_store(self, location, mode="a"):
        return N5Store(DirectoryStore(location, mode=mode))

    @pytest.mark.parametrize(
        "key",
        [".zgroup", "foo/.zarray", "foo/bar/0.0", "a/b/c/d/e/f", "données/ü", "with space",
         "x-y_z"],
    )
    def test_set_get_delete(self, store, key):
        if key.rpartition("/")[2] in (".zgroup", ".zarray"):
            self.refused(super().test_set_get_delete, store, key, key=key)
            assert len(store) == 0
        else:
            super().test_set_get_delete(store, key)

    def refused(self, test, *args, key):
        with pytest.raises(MetadataError, match=repr(key)):
            test(*args)

    def test_iteration_and_len(self, store):
        self.refused(super().test_iteration_and_len, store, key=".zattrs")

    def test_listdir(self, store):
        self.refused(super().test_listdir, store, key=".zgroup")

    def test_rmdir(self, store):
        self.refused(super().test_rmdir, store, key=".zgroup")

    def test_getsize(self, store):
        self.refused(super().test_getsize, store, key=".zgroup")

    def test_clear(self, store):
        self.refused(super().test_clear, store, key=".zgroup")

    def test_pickle(self, store, location):
        self.refused(super().test_pickle, store, location, key=".zgroup")

    def test_persistence(self, store, location):
        self.refused(super().test_persistence, store, location, key=".zgroup")

    def test_stateful_against_dict(self, tmp_path_factory):
        pytest.skip("its random keys end in .zarray with random bytes, which an N5 store "
                    "refuses (not JSON)")
