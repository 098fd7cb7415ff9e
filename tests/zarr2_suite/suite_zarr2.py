"""zarr-python 2.18's own ``StoreTests`` against ``Zarr2Store`` over every backend.

Runs in the zarr-python 2.18 environment, not in the main one (the name does
not start with ``test_``, so the main test run does not collect it)::

    /tmp/venv2/bin/python -m pytest tests/zarr2_suite/suite_zarr2.py

``tests/test_adapter_zarr2.py`` runs it so and checks the outcome of every
backend.  The suite's tests are zarr's, unmodified; only ``create_store`` is
ours.  ``TestZarr2Suite_nested_own`` also runs zarr 2's own
``TestNestedDirectoryStore`` (its ``test_listdir``, ``test_chunk_nesting``,
``test_pickle_ext``, ``test_normalize_keys`` ...) over a ``NestedDirectoryStore``.
"""

from __future__ import annotations

import itertools

import pytest
from zarr.tests import test_storage as zarr_tests  # a module: its Test* classes are not collected
from zarr.tests.test_storage import (
    StoreTests,
    dimension_separator_fixture,  # noqa: F401 - a fixture StoreTests uses
)

from zstores.adapters.zarr2 import Zarr2Store
from zstores.stores.directory import NestedDirectoryStore
from zstores.stores.zip import ZipStore
from zstores.urls import open_store

from backends import ALL, backend_url, missing_server

_UNSET = object()


class AdapterSuite(StoreTests):
    """zarr.tests.test_storage.StoreTests over one backend (``backend``)."""

    backend: str

    @pytest.fixture(autouse=True)
    def _locations(self, tmp_path):
        reason = missing_server(self.backend)
        if reason:
            pytest.skip(reason)
        self._urls: list[str] = []
        self._numbers = itertools.count()
        self._tmp = tmp_path
        yield
        if self.backend in ("redis", "mongodb"):  # servers outlive the test: empty them
            for url in self._urls:
                with open_store(url) as store:
                    store.clear()

    def create_store(self, dimension_separator=_UNSET, **kwargs):
        if self.backend == "nested" and dimension_separator in (None, "."):
            # zarr's test expects "." from these; a nested store records "/" (as
            # zarr-python 2's own NestedDirectoryStore, whose suite skips them too).
            pytest.skip("NestedDirectoryStore declares dimension_separator '/' for every array")
        url = backend_url(self.backend, self._tmp / f"s{next(self._numbers)}")
        self._urls.append(url)
        separator = None if dimension_separator is _UNSET else dimension_separator
        return Zarr2Store(open_store(url, mode="w"), dimension_separator=separator,
                          owns_store=True, **kwargs)


# The part after TestZarr2Suite_ names the backend in the report (test_adapter_zarr2).
class TestZarr2Suite_nested_own(zarr_tests.TestNestedDirectoryStore):
    """zarr 2's ``TestNestedDirectoryStore`` (StoreTests plus its folder tests) over the adapter.

    Its ``test_filesystem_path``, ``test_init_pathlib`` and ``test_listing_keys_*``
    test zarr's own ``DirectoryStore`` (they never call ``create_store``); they
    run, and pass or fail with zarr itself.
    """

    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)  # test_filesystem_path writes data/store in the working folder
        self._tmp = tmp_path
        self._numbers = itertools.count()

    def test_setdel(self):
        # zarr 2's DirectoryStore raises KeyError for a key below a file, and
        # replaces a whole folder by a key written over it; ours refuses both
        # with KeyConflictError (a ValueError) and never deletes a folder's keys.
        pytest.skip("a key over a folder or below a key is a KeyConflictError, "
                    "not a KeyError or a silent replacement of the folder")

    def create_store(self, normalize_keys=False, **kwargs):
        if kwargs.get("dimension_separator", "/") in (None, "."):
            pytest.skip("NestedDirectoryStore declares dimension_separator '/' for every array")
        kwargs.pop("dimension_separator", None)
        path = self._tmp / f"n{next(self._numbers)}"
        return Zarr2Store(NestedDirectoryStore(path, normalize_keys=normalize_keys, mode="w"),
                          owns_store=True, **kwargs)


def _adapted_zip(path, mode="a", dimension_separator=None, **kwargs):
    """What zarr 2's zip tests construct (``ZipStoreClass(path, mode=...)``), as the adapter."""
    return Zarr2Store(ZipStore(path, mode=mode, **kwargs), owns_store=True,
                      dimension_separator=dimension_separator)


# The part after TestZarr2Suite_ names the backend in the report (test_adapter_zarr2).
class TestZarr2Suite_zip_own(zarr_tests.TestZipStore):
    """zarr 2's ``TestZipStore`` (StoreTests plus its archive tests) over the adapter."""

    ZipStoreClass = staticmethod(_adapted_zip)

    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)  # its tests write data/store.zip in the working folder
        (tmp_path / "data").mkdir()
        self._tmp = tmp_path
        self._numbers = itertools.count()

    # zarr 2's ZipStore cannot delete; ours can (the archive is rewritten at close).
    def test_pop(self):
        pytest.skip("ZipStore supports deletes: pop does not raise NotImplementedError")

    def test_popitem(self):
        pytest.skip("ZipStore supports deletes: popitem does not raise NotImplementedError")

    def test_permissions(self):
        # The member modes it checks are those zstores writes too (0o644); the
        # test also writes the key "baz/", which every zstores store normalizes to "baz".
        pytest.skip("a key ending in '/' is normalized (no 'baz/' folder member is written)")

    def create_store(self, **kwargs):
        return _adapted_zip(self._tmp / f"z{next(self._numbers)}.zip", mode="w", **kwargs)


for _backend in ALL:
    _name = f"TestZarr2Suite_{_backend}"
    globals()[_name] = type(_name, (AdapterSuite,), {"backend": _backend})
del _backend, _name
