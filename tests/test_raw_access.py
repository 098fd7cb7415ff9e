"""The out-of-band checks of StoreTests can fail, and every harness class here runs them.

A store that agrees with itself passes every test that writes and reads only
through it.  The stores below are deliberately wrong in ways that only the
backend's bytes show: the raw tests must fail for each, while the harness's
self-consistent tests pass (which is why the raw tests exist).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from pathlib import Path

import pytest

from zstores import MemoryStore, Store
from zstores.testing import StoreTests

from raw_access import MemoryRawHooks

TESTS = Path(__file__).resolve().parent


# ------------------------------------------------------ deliberately wrong
class ReversingStore(MemoryStore):
    """Stores every value reversed and reverses it back on read: self-consistent, wrong bytes."""

    def _get(self, key: str) -> bytes:
        return super()._get(key)[::-1]

    def _set(self, key: str, value) -> None:
        super()._set(key, bytes(value)[::-1])


class RenamingStore(MemoryStore):
    """Stores ``a/b`` under ``a%2Fb`` (one flat name) and maps names back when listing."""

    def _get(self, key: str) -> bytes:
        return super()._get(key.replace("/", "%2F"))

    def _set(self, key: str, value) -> None:
        super()._set(key.replace("/", "%2F"), value)

    def _delete(self, key: str) -> None:
        super()._delete(key.replace("/", "%2F"))

    def _contains(self, key: str) -> bool:
        return super()._contains(key.replace("/", "%2F"))

    def _getsize_key(self, key: str) -> int:
        return super()._getsize_key(key.replace("/", "%2F"))

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        every = [key.replace("%2F", "/") for key in super()._list_prefix("")]
        return [key for key in every if key.startswith(prefix)]

    # MemoryStore's fast listdir reads its own key table: list from the names above instead.
    _listdir = Store._listdir


class HidingStore(MemoryStore):
    """A delete only hides the key: its bytes stay in the backend."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._hidden: set[str] = set()

    def _get(self, key: str) -> bytes:
        if key in self._hidden:
            raise KeyError(key)
        return super()._get(key)

    def _set(self, key: str, value) -> None:
        self._hidden.discard(key)
        super()._set(key, value)

    def _delete(self, key: str) -> None:
        if key in self._hidden or not super()._contains(key):
            raise KeyError(key)
        self._hidden.add(key)

    def _contains(self, key: str) -> bool:
        return key not in self._hidden and super()._contains(key)

    def _getsize_key(self, key: str) -> int:
        return len(self._get(key))

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        return [key for key in super()._list_prefix(prefix) if key not in self._hidden]

    _listdir = Store._listdir  # as in RenamingStore: listings follow _list_prefix

    def _len(self) -> int:
        return len(list(self._list_prefix("")))

    def _clear(self) -> None:
        self._hidden.update(self._list_prefix(""))


def harness_for(store_class: type[MemoryStore]) -> StoreTests:
    """A harness instance for ``store_class`` whose hooks read its dict."""

    class Harness(MemoryRawHooks, StoreTests):
        def open_store(self, location, mode="a"):
            return store_class(mode=mode)

    return Harness()


def run(harness: StoreTests, test_name: str, tmp_path: Path) -> None:
    """Run one harness test method as pytest would, with a fresh store."""
    location = tmp_path / "store"
    store = harness.open_store(location, mode="w")
    try:
        method = getattr(harness, test_name)
        parameters = inspect.signature(method).parameters
        method(store, location) if "location" in parameters else method(store)
    finally:
        store.close()


RAW_TESTS = sorted(name for name in dir(StoreTests) if name.startswith("test_raw_"))
WRONG = {
    ReversingStore: {"test_raw_values_set_are_stored_byte_for_byte",
                     "test_raw_written_values_are_read_by_the_store",
                     "test_raw_key_layout", "test_raw_value_over_16_mib"},
    RenamingStore: {"test_raw_values_set_are_stored_byte_for_byte",
                    "test_raw_written_values_are_read_by_the_store",
                    "test_raw_key_layout", "test_raw_overwrites_and_deletes_reach_the_backend",
                    "test_raw_value_over_16_mib"},
    HidingStore: {"test_raw_overwrites_and_deletes_reach_the_backend"},
}
CASES = [(cls, name) for cls, names in WRONG.items() for name in sorted(names)]


@pytest.mark.parametrize("store_class, test_name", CASES,
                         ids=[f"{cls.__name__}-{name}" for cls, name in CASES])
def test_raw_tests_fail_for_a_store_that_stores_the_wrong_thing(store_class, test_name, tmp_path):
    if test_name == "test_raw_value_over_16_mib":
        pytest.importorskip("numpy")
    with pytest.raises(AssertionError):
        run(harness_for(store_class), test_name, tmp_path)


@pytest.mark.parametrize("store_class", list(WRONG), ids=lambda cls: cls.__name__)
def test_the_wrong_stores_pass_the_self_consistent_tests(store_class, tmp_path):
    harness = harness_for(store_class)
    for name in ["test_iteration_and_len", "test_bytes_like_values", "test_get_range",
                 "test_listdir", "test_getsize", "test_rmdir", "test_getitems",
                 "test_setitems_and_delitems"]:
        run(harness, name, tmp_path)


@pytest.mark.parametrize("test_name", RAW_TESTS)
def test_raw_tests_pass_for_a_correct_store(test_name, tmp_path):
    run(harness_for(MemoryStore), test_name, tmp_path)


@pytest.mark.parametrize("test_name", RAW_TESTS)
def test_a_harness_without_hooks_skips_naming_the_missing_hook(test_name, tmp_path):
    class NoHooks(StoreTests):
        def open_store(self, location, mode="a"):
            return MemoryStore(mode=mode)

    with pytest.raises(pytest.skip.Exception, match=r"NoHooks does not provide the raw_(get|set)"):
        run(NoHooks(), test_name, tmp_path)


# ------------------------------------------------- every harness class here
# A module whose harness classes another helper is still writing hooks for
# is listed here with the reason; the list should be empty.
PENDING: dict[str, str] = {}


def harness_classes() -> list[tuple[str, type]]:
    found = []
    for path in sorted(TESTS.glob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        if "zstores.testing import StoreTests" not in source:
            continue
        module = importlib.import_module(path.stem)
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, StoreTests)
                    and value.__module__ == path.stem and name.startswith("Test")):
                found.append((f"{path.stem}.{name}", value))
    return found


def test_every_backend_harness_class_provides_the_raw_hooks():
    classes = harness_classes()
    modules = {name.partition(".")[0] for name, _ in classes}
    assert {"test_memory", "test_directory", "test_zip", "test_dbm", "test_lmdb", "test_sqlite",
            "test_redis", "test_mongodb", "test_cache", "test_consolidated"} <= modules, modules
    missing = [name for name, cls in classes
               if name.partition(".")[0] not in PENDING
               and any(getattr(cls, hook) is getattr(StoreTests, hook)
                       for hook in ("raw_get", "raw_set"))]
    assert not missing, f"harness classes without raw_get/raw_set: {missing}"
