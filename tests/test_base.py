"""The base class's own machinery, checked on a minimal backend."""

import pickle

import numpy as np
import pytest

from zstores import MemoryStore, Store
from zstores.base import children_by_scan, children_by_seek, to_buffer
from zstores.errors import ReadOnlyError, StoreClosedError, ValueTooLargeError


class TinyStore(MemoryStore):
    max_value_size = 8


def test_to_buffer_is_zero_copy_for_contiguous_buffers():
    data = bytearray(b"abcdef")
    view = to_buffer(data)
    assert isinstance(view, memoryview) and view.obj is data
    array = np.arange(6, dtype="<i2").reshape(2, 3)
    assert to_buffer(array).nbytes == 12
    assert to_buffer(b"x") == b"x"
    assert to_buffer(np.asfortranarray(array)) == np.asfortranarray(array).tobytes(order="F")


def test_value_limit_names_key_and_limit():
    store = TinyStore()
    store["ok"] = b"12345678"
    with pytest.raises(ValueTooLargeError, match=r"'big'.*9 bytes.*at most 8"):
        store["big"] = b"123456789"
    with pytest.raises(ValueTooLargeError):
        store.setitems({"a": b"1", "b": bytes(9)})
    assert sorted(store) == ["ok"]


@pytest.mark.parametrize("mode", ["x", "rw", "", None])
def test_invalid_mode_lists_the_valid_ones(mode):
    with pytest.raises(ValueError, match=r"'r\+'.*'w-'"):
        MemoryStore(mode=mode)


def test_children_by_seek_matches_a_scan():
    keys = sorted(["a", "a/b", "a/b/c", "a.b", "a0", "ab/x", "ab/y/z", "b", "b/", "c/d/e"])
    keys = [k for k in keys if not k.endswith("/")]

    def first_from(prefix):
        def first(lower):
            for key in keys:
                if key >= lower and key.startswith(prefix):
                    return key
            return None
        return first

    for prefix in ["", "a/", "ab/", "c/", "c/d/", "zz/"]:
        expected = sorted({k[len(prefix):].split("/")[0] for k in keys if k.startswith(prefix)})
        assert sorted(children_by_seek(prefix, first_from(prefix))) == expected, prefix


@pytest.mark.parametrize("rows_per_folder", [1, 2, 3, 32])
def test_children_by_scan_matches_a_listing(rows_per_folder):
    # Folders of 1 to 40 keys (some jumped over, some read past), plain keys
    # sorting between a folder's name and its keys (a.b between a and a/x),
    # deeper folders, and prefixes with nothing under them.
    keys = ["a", "a/b", "a/b/c", "a.b", "a0", "ab/x", "ab/y/z", "b", "c/d/e", "a/.zarray"]
    keys += [f"a/big/{i}" for i in range(40)] + [f"a/two/{i}" for i in range(2)]
    keys += [f"a/n/{i}/0" for i in range(5)] + ["a/big.1", "a/bigger"]
    keys = sorted(keys)
    reads = []

    def keys_from(prefix):
        def read(lower):
            reads.append(lower)
            return (key for key in keys if key >= lower and key.startswith(prefix))
        return read

    for prefix in ["", "a/", "a/n/", "ab/", "c/", "c/d/", "zz/"]:
        expected = sorted({k[len(prefix):].split("/")[0] for k in keys if k.startswith(prefix)})
        listed = children_by_scan(prefix, keys_from(prefix), rows_per_folder=rows_per_folder)
        assert sorted(listed) == expected and len(listed) == len(expected), prefix
    # The 40 keys of a/big are jumped over, not read, once a few were.
    assert ("a/big0" in reads) == (rows_per_folder < 40)


def test_pickle_of_mode_w_reopens_without_clearing():
    store = MemoryStore(mode="w")
    store["k"] = b"v"
    clone = pickle.loads(pickle.dumps(store))
    assert clone["k"] == b"v" and clone.mode == "a"
    read_only = MemoryStore(mode="r")
    assert pickle.loads(pickle.dumps(read_only)).read_only


def test_subclass_with_only_primitives_works():
    class ListStore(Store):
        def __init__(self, *, mode="a"):
            super().__init__(mode=mode)
            self.items_ = {}

        def _get(self, key):
            return self.items_[key]

        def _set(self, key, value):
            self.items_[key] = bytes(value)

        def _delete(self, key):
            del self.items_[key]

        def _list_prefix(self, prefix):
            return [k for k in list(self.items_) if k.startswith(prefix)]

    store = ListStore()
    store.setitems({"a/b": b"12", "a/c/d": b"345", "e": b"6"})
    assert store.listdir() == ["a", "e"]
    assert store.getsize("a") == 5
    assert store.get_range("a/c/d", -2) == b"45"
    store.rename("a", "z")
    assert sorted(store) == ["e", "z/b", "z/c/d"]
    store.rmdir("z")
    assert list(store) == ["e"]
    assert len(store) == 1


class CountingStore(MemoryStore):
    """A Memory store that counts backend calls and, like Redis STRLEN, answers a
    size of 0 for a missing key: it has no ``_stat`` of its own, so it runs
    ``Store._stat``'s fallback."""

    def __init__(self, *, mode="a"):
        super().__init__(mode=mode)
        self.calls = []

    def _contains(self, key):
        self.calls.append("_contains")
        return super()._contains(key)

    def _getsize_key(self, key):
        self.calls.append("_getsize_key")
        value = self._data.get(key)
        return 0 if value is None else len(value)

    _stat = Store._stat  # the fallback, not Memory's dict lookup


def calls_of(store, call):
    store.calls.clear()
    result = call()
    return result, list(store.calls)


def test_stat_fallback_costs_one_call_for_a_non_empty_key():
    store = CountingStore()
    store.update({"a/b": b"abc", "a/empty": b""})
    assert calls_of(store, lambda: store.stat("a/b")) == (3, ["_getsize_key"])
    # a 0 may mean "missing" (STRLEN): one more call tells them apart
    assert calls_of(store, lambda: store.stat("a/empty")) == (0, ["_getsize_key", "_contains"])
    assert calls_of(store, lambda: store.stat("nope")) == (None, ["_getsize_key", "_contains"])
    assert store.stat("a") is None


def test_getsize_of_a_key_is_one_backend_call():
    store = CountingStore()
    store["k"] = b"12345"
    # before stat, getsize asked _contains and then _getsize_key
    assert calls_of(store, lambda: store.getsize("k")) == (5, ["_getsize_key"])


def test_stat_of_a_wrapper_is_one_call_into_its_store():
    from zstores.wrappers.delegate import WrapperStore

    inner = CountingStore()
    inner["k"] = b"12345"
    view = WrapperStore(inner, mode="r")
    assert calls_of(inner, lambda: view.stat("k")) == (5, ["_getsize_key"])
    assert calls_of(inner, lambda: view.getsize("k")) == (5, ["_getsize_key"])
    assert view.stat("nope") is None


def test_memory_stat_answers_from_its_dict():
    store = MemoryStore()
    store.update({"k": b"", "x/y": b"12"})
    sizes = [store.stat(key) for key in ["k", "x/y", "x", "nope"]]
    assert sizes == [0, 2, None, None]


def test_list_prefix_sorts_an_unsorted_backend():
    store = MemoryStore()  # lists in insertion order
    for key in ["b/2", "a/9", "b/1", "a/1/z", "a/1"]:
        store[key] = b"v"
    assert list(store) != sorted(store)
    assert store.list_prefix() == ["a/1", "a/1/z", "a/9", "b/1", "b/2"]
    assert store.list_prefix("a") == ["a/1", "a/1/z", "a/9"]
    assert store.list_prefix("a/1") == ["a/1/z"]


def test_reopen_of_an_in_memory_store_is_refused():
    from zstores.errors import UnsupportedOperationError

    with pytest.raises(UnsupportedOperationError, match=r"MemoryStore\(mode='a'\) keeps its data"):
        MemoryStore().reopen()


# ------------------------------------------------------------- the one route
#: Public methods that touch no data, so no transaction takes them over.
_UNGATED = {"close", "normalize", "reopen", "snapshot", "transaction", "update"}


def _public_methods(cls: type) -> dict[str, object]:
    mapping = {"__getitem__", "__setitem__", "__delitem__", "__contains__", "__iter__",
               "__len__"}
    return {name: value for name, value in vars(cls).items()
            if callable(value) and (not name.startswith("_") or name in mapping)}


def _every_store_class() -> set[type]:
    import importlib
    import pkgutil

    import zstores
    for module in pkgutil.walk_packages(zstores.__path__, "zstores."):
        if not module.name.startswith(("zstores.adapters", "zstores.testing")):
            importlib.import_module(module.name)
    found, todo = set(), [Store]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def test_every_public_method_of_a_store_goes_through_the_gate():
    # A new public method must be gated (@_reads/@_writes) or named here as
    # one a transaction has no part in.
    ungated = {name for name, method in _public_methods(Store).items()
               if not hasattr(method, "_gated")}
    assert ungated == _UNGATED
    # A subclass's override of a gated method is gated too, with no decorator.
    gated = set(_public_methods(Store)) - _UNGATED
    for cls in _every_store_class():
        for name, method in _public_methods(cls).items():
            assert name not in gated or hasattr(method, "_gated"), (cls, name)


def test_an_override_written_without_the_route_is_routed():
    class Renaming(MemoryStore):
        def rename(self, src_path, dst_path):
            return ("renamed here", src_path, dst_path)

    store = Renaming()
    store["a"] = b"1"
    assert store.rename("a", "b") == ("renamed here", "a", "b")
    with store.transaction():
        store.rename("a", "b")  # the transaction's rename, on its overlay
        assert sorted(store) == ["b"]
    assert sorted(store) == ["b"]
    store.close()
    with pytest.raises(StoreClosedError):
        store.rename("b", "c")


def test_the_gate_keeps_signatures_defaults_and_keywords():
    import inspect

    store = MemoryStore()
    store["k"] = b"abcdef"
    assert store.get_range(key="k", length=2, start=1) == b"bc"
    assert store.get_range("k", -2) == b"ef"
    assert list(inspect.signature(Store.get_range).parameters) == ["self", "key", "start",
                                                                    "length"]
    assert Store.get_range.__doc__.startswith("Read part of a value")
    reader = MemoryStore(mode="r")
    with pytest.raises(ReadOnlyError):
        reader["k"] = b"x"
    with pytest.raises(StoreClosedError):
        store.close() or store["k"]


def test_a_bound_transaction_takes_only_its_own_threads_calls():
    import threading

    store = MemoryStore()
    seen = {}
    with store.transaction() as tx:
        store["a"] = b"in the transaction"

        def other_thread():
            seen["other"] = ("a" in store, store.in_transaction)

        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        assert tx["a"] == b"in the transaction" and store.in_transaction
    assert seen["other"] == (False, False)
    assert store["a"] == b"in the transaction" and not store.in_transaction


def test_a_transaction_reaches_its_store_only_through_the_hooks_protocol():
    import ast
    from pathlib import Path

    import zstores.transactions
    from zstores.transaction_hooks import TransactionHooks

    hooks = {name for name, value in vars(TransactionHooks).items()
             if callable(value) and not name.startswith("__")}
    hooks |= set(TransactionHooks.__annotations__)
    tree = ast.parse(Path(zstores.transactions.__file__).read_text(encoding="utf-8"))
    called, stray = set(), []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            continue
        owner = ast.unparse(node.value)
        if owner == "self._hooks":
            called.add(node.attr)
        elif owner not in ("self", "super()", "Store"):  # Store: _transaction_class, set once
            stray.append(ast.unparse(node))
    assert stray == [] and called <= hooks, (stray, called - hooks)
    assert called == hooks  # each hook named is one a transaction needs
    for store in (MemoryStore(),):
        assert isinstance(store, TransactionHooks)
