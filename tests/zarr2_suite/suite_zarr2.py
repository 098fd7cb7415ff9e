"""zarr-python 2.18's own ``StoreTests`` against ``Zarr2Store`` over every backend.

Runs in the zarr-python 2.18 environment, not in the main one (the name does
not start with ``test_``, so the main test run does not collect it)::

    /tmp/venv2/bin/python -m pytest tests/zarr2_suite/suite_zarr2.py

``tests/test_adapter_zarr2.py`` runs it so and checks the outcome of every
backend.  The suite's tests are zarr's, unmodified; only ``create_store`` is
ours.
"""

from __future__ import annotations

import itertools

import pytest
from backends import ALL, backend_url, missing_server
from zarr.tests.test_storage import (
    StoreTests,
    dimension_separator_fixture,  # noqa: F401 - a fixture StoreTests uses
)

from zstores.adapters.zarr2 import Zarr2Store
from zstores.urls import open_store

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


for _backend in ALL:
    _name = f"TestZarr2Suite_{_backend}"
    globals()[_name] = type(_name, (AdapterSuite,), {"backend": _backend})
del _backend, _name
