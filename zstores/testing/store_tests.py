"""``StoreTests``: the behaviour every ``zstores.Store`` must show."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from ..base import Store
from ..errors import (
    InvalidKeyError,
    KeyConflictError,
    ReadOnlyError,
    StoreClosedError,
    StoreExistsError,
    StoreNotFoundError,
    TransactionConflictError,
    TransactionError,
    UnsupportedOperationError,
    ValueTooLargeError,
)
from .stateful import run_stateful_test
from .workers import (
    overwrite,
    race_conditional,
    race_key,
    race_start,
    value_for,
    write_in_transaction,
    write_keys,
)

T = TypeVar("T")

MiB = 1 << 20

INVALID_KEYS = {
    "": "empty",
    "/": "empty",
    "//": "empty",
    ".": "'.' or '..'",
    "..": "'.' or '..'",
    "a/./b": "'.' or '..'",
    "a/../b": "'.' or '..'",
    "../escape": "'.' or '..'",
    "a/..": "'.' or '..'",
    "a\x00b": "NUL",
    "a/\udcff": "lone surrogates",  # one rule on every backend: keys are valid Unicode
    "\ud800x/0.0": "lone surrogates",
}

# Names that broke zarr-python 2: SQL LIKE and glob wildcards, shared prefixes,
# case, a prefix whose children repeat its characters (str.lstrip renames).
TRICKY_NAMES = ["c", "cc", "c.d", "a_b", "axb", "p%q", "p*q", "p?q", "p[q]", "Case", "case"]


class StoreTests:
    """Conformance tests; subclass with ``open_store(location, mode)``.

    Override ``canonical_key`` when the backend stores a key under another
    spelling (NestedDirectoryStore writes chunk ``0.1`` as ``0/1``), and
    ``tricky_names`` when it refuses one of them with ``InvalidKeyError`` by
    a documented rule (adlfs cannot name ``?``: ``AzureStore`` via fsspec).
    """

    #: Folder names that stress listings (globs, case, shared prefixes).
    tricky_names: list[str] = TRICKY_NAMES

    # ----------------------------------------------------------- to override
    def open_store(self, location: Path, mode: str = "a") -> Store:
        """Open the store at ``location`` (a fresh path per test) with ``mode``."""
        raise NotImplementedError("subclasses of StoreTests implement open_store")

    def canonical_key(self, key: str) -> str:
        """How the store lists ``key`` (identity for almost every store)."""
        return key

    def raw_get(self, store: Store, key: str) -> bytes | None:
        """The bytes the backend holds for ``key``, read around the store; None if absent.

        Read the backend's own format with the backend's own library (the
        file under the folder, the zip member, the SQL row, the Redis key),
        never through ``store``'s methods.  ``key`` is a normalized key as
        the store's users spell it; apply the backend's layout here (a
        nested store's chunk ``0.1`` is the file ``0/1``).  A hook may make
        pending writes durable first through public methods (``flush()``),
        or ``close()`` the store when the backend admits no second handle
        while it is open: the harness then reopens it with mode ``"r+"``.
        Call ``pytest.skip(reason)`` when this backend cannot be reached
        from outside (a private in-memory database).
        """
        raise NotImplementedError

    def raw_set(self, store: Store, key: str, value: bytes) -> None:
        """Write ``value`` under ``key`` in the backend directly, as another program would.

        The same rules as ``raw_get``: the backend's own library and layout,
        and the hook may ``close()`` the store first (an archive whose
        directory the open store keeps in memory); the harness reopens it.
        """
        raise NotImplementedError

    # -------------------------------------------------------------- fixtures
    @pytest.fixture
    def location(self, tmp_path: Path) -> Path:
        return tmp_path / "store"

    @pytest.fixture
    def store(self, location: Path) -> Iterator[Store]:
        store = self.open_store(location, mode="w")
        yield store
        store.close()

    # --------------------------------------------------------------- helpers
    def reopen(self, store: Store, location: Path, mode: str = "r") -> Store:
        store.close()
        return self.open_store(location, mode=mode)

    def requires_persistence(self, store: Store) -> None:
        if not store.persistent:
            pytest.skip(f"{type(store).__name__} declares persistent=False")

    def fill(self, store: Store, keys: list[str]) -> dict[str, bytes]:
        values = {key: f"value of {key}".encode() for key in keys}
        for key, value in values.items():
            store[key] = value
        return {self.canonical_key(k): v for k, v in values.items()}

    def listed(self, store: Store) -> dict[str, bytes]:
        return {key: store[key] for key in store}

    # ------------------------------------------------------- mapping basics
    def test_new_store_is_empty(self, store: Store) -> None:
        assert len(store) == 0
        assert list(store) == []
        assert store.listdir() == []
        assert store.getsize() == 0
        assert "a" not in store

    @pytest.mark.parametrize(
        "key",
        [".zgroup", "foo/.zarray", "foo/bar/0.0", "a/b/c/d/e/f", "données/ü", "with space",
         "x-y_z"],
    )
    def test_set_get_delete(self, store: Store, key: str) -> None:
        store[key] = b"hello"
        assert store[key] == b"hello"
        assert type(store[key]) is bytes
        assert key in store
        assert list(store) == [self.canonical_key(key)]
        assert len(store) == 1
        store[key] = b"world!"
        assert store[key] == b"world!"
        del store[key]
        assert key not in store
        assert len(store) == 0
        with pytest.raises(KeyError):
            store[key]

    def test_missing_key_raises_key_error_naming_it(self, store: Store) -> None:
        with pytest.raises(KeyError) as info:
            store["foo/missing"]
        assert "missing" in str(info.value)
        with pytest.raises(KeyError):
            del store["foo/missing"]
        assert store.get("foo/missing") is None
        assert store.get("foo/missing", b"x") == b"x"

    def test_iteration_and_len(self, store: Store) -> None:
        expected = self.fill(store, ["a", "b/c", "b/d/e", ".zattrs"])
        assert sorted(store) == sorted(expected)
        assert len(store) == 4
        assert sorted(store.keys()) == sorted(expected)
        assert dict(store.items()) == expected
        assert sorted(store.values()) == sorted(expected.values())

    def test_mutable_mapping_methods(self, store: Store) -> None:
        store.update({"a": b"1", "b/c": b"2"}, d=b"3")
        assert self.listed(store) == {"a": b"1", "b/c": b"2", "d": b"3"}
        assert store.pop("a") == b"1"
        assert store.pop("a", None) is None
        with pytest.raises(KeyError):
            store.pop("a")
        assert store.setdefault("e", b"5") == b"5"
        assert store.setdefault("e", b"6") == b"5"
        key, value = store.popitem()
        assert key not in store
        assert len(store) == 2
        store.update([("x", b"7")])
        assert store["x"] == b"7"

    def test_bytes_like_values(self, store: Store) -> None:
        c_order = np.arange(12, dtype="<i4").reshape(3, 4)
        f_order = np.asfortranarray(c_order)
        values = {
            "bytes": b"abc",
            "bytearray": bytearray(b"def"),
            "memoryview": memoryview(b"ghij")[1:],
            "numpy": c_order,
            "numpy_f": f_order,
            "numpy_scalar": np.float64(1.5),
        }
        if store.supports_empty_values:
            values["empty"] = b""
        for key, value in values.items():
            store[key] = value
        assert store["bytes"] == b"abc"
        assert store["bytearray"] == b"def"
        assert store["memoryview"] == b"hij"
        assert store["numpy"] == c_order.tobytes()
        assert store["numpy_f"] == f_order.tobytes(order="F")  # memory order
        assert store["numpy_scalar"] == np.float64(1.5).tobytes()
        assert store.get("empty", b"") == b""
        for key in values:
            assert type(store[key]) is bytes

    def test_stored_value_does_not_alias_caller_buffer(self, store: Store) -> None:
        buffer = bytearray(b"original")
        store["k"] = buffer
        buffer[:] = b"changed!"
        assert store["k"] == b"original"

    @pytest.mark.parametrize("value", ["text", 42, None, 1.5, [1, 2], {"a": 1}, object()])
    def test_non_buffer_values_raise_type_error(self, store: Store, value: object) -> None:
        with pytest.raises(TypeError, match=type(value).__name__):
            store["k"] = value
        assert "k" not in store
        with pytest.raises(TypeError):
            store.setitems({"ok": b"1", "k": value})
        assert len(store) == 0

    def test_strided_value_raises_value_error(self, store: Store) -> None:
        strided = np.arange(10)[::2]
        with pytest.raises(ValueError, match="contiguous"):
            store["k"] = strided
        assert "k" not in store

    # ------------------------------------------------------------------ keys
    @pytest.mark.parametrize(
        "given, normal",
        [("\\a\\b", "a/b"), ("/a//b/", "a/b"), ("a///b", "a/b"), ("//x", "x")],
    )
    def test_keys_are_normalized(self, store: Store, given: str, normal: str) -> None:
        store[given] = b"v"
        assert list(store) == [normal]
        assert store[normal] == b"v"
        assert given in store
        del store[given]
        assert len(store) == 0

    @pytest.mark.parametrize("key, rule", sorted(INVALID_KEYS.items()))
    def test_invalid_keys_raise(self, store: Store, key: str, rule: str) -> None:
        with pytest.raises(InvalidKeyError, match=rule) as info:
            store[key] = b"v"
        assert repr(key.strip("/")) in str(info.value) or repr(key) in str(info.value)
        with pytest.raises(InvalidKeyError):
            store[key]
        with pytest.raises(InvalidKeyError):
            del store[key]
        with pytest.raises(InvalidKeyError):
            store.setitems({"fine": b"1", key: b"2"})
        with pytest.raises(InvalidKeyError):
            store.get_range(key)
        assert key not in store
        assert len(store) == 0

    @pytest.mark.parametrize("key", [5, None, b"bytes", ("a",)])
    def test_non_string_keys_raise_type_error(self, store: Store, key: object) -> None:
        with pytest.raises(TypeError):
            store[key] = b"v"  # type: ignore[index]
        with pytest.raises(TypeError):
            store[key]  # type: ignore[index]
        assert key not in store
        assert len(store) == 0

    def test_key_and_prefix_of_same_name(self, store: Store) -> None:
        store["a"] = b"key"
        if store.hierarchical:
            with pytest.raises(KeyConflictError, match="'a/b'"):
                store["a/b"] = b"child"
            assert self.listed(store) == {"a": b"key"}
            del store["a"]
            store["a/b"] = b"child"
            with pytest.raises(KeyConflictError, match="'a'"):
                store["a"] = b"key"
            assert self.listed(store) == {"a/b": b"child"}
        else:
            store["a/b"] = b"child"
            assert self.listed(store) == {"a": b"key", "a/b": b"child"}
            assert store.listdir() == ["a"]
            assert store.listdir("a") == ["b"]

    # ----------------------------------------------------------- value sizes
    def requires_empty_values(self, store: Store) -> None:
        """Skip when the store declares it cannot keep an empty value."""
        if not store.supports_empty_values:
            pytest.skip(f"{type(store).__name__} declares supports_empty_values=False")

    def test_empty_value_refused_when_declared(self, store: Store) -> None:
        if store.supports_empty_values:
            return
        with pytest.raises(UnsupportedOperationError, match="empty value"):
            store["zero"] = b""
        with pytest.raises(UnsupportedOperationError):
            store.setitems({"one": b"1", "zero": b""})
        assert "zero" not in store and "one" not in store  # nothing of the batch written

    def test_zero_byte_value(self, store: Store) -> None:
        self.requires_empty_values(store)
        store["zero"] = b""
        assert store["zero"] == b""
        assert "zero" in store
        assert store.getsize("zero") == 0
        assert store.get_range("zero", 0, 10) == b""
        assert store.get_range("zero", -5) == b""

    @pytest.mark.slow
    def test_64_mib_value(self, store: Store) -> None:
        value = np.random.default_rng(0).integers(0, 256, 64 * MiB, dtype=np.uint8)
        store["big/0.0"] = value
        assert store.getsize("big/0.0") == 64 * MiB
        assert store.getsize("big") == 64 * MiB
        assert store.get_range("big/0.0", 64 * MiB - 10) == value[-10:].tobytes()
        assert store.get_range("big/0.0", 32 * MiB, 5) == value[32 * MiB : 32 * MiB + 5].tobytes()
        assert store["big/0.0"] == value.tobytes()

    def test_declared_value_limit_is_enforced(self, store: Store) -> None:
        limit = store.max_value_size
        if limit is None:
            assert store.max_value_size is None
            return
        if limit > 1024 * MiB:
            pytest.skip(f"max_value_size {limit} is too large to allocate in a test")
        over = bytes(limit + 1)
        with pytest.raises(ValueTooLargeError, match="'over'"):
            store["over"] = over
        with pytest.raises(ValueTooLargeError, match="'over'"):
            store.setitems({"fine": b"1", "over": over})
        assert "over" not in store and "fine" not in store

    # ----------------------------------------------------------- range reads
    def test_get_range(self, store: Store) -> None:
        value = bytes(range(100))
        store["r/0"] = value
        cases = [
            (0, None), (10, None), (10, 5), (0, 0), (95, 10), (100, None), (150, 5),
            (-10, None), (-10, 3), (-1000, None), (-1000, 5), (99, 1),
        ]
        for start, length in cases:
            stop = None if length is None else _slice_stop(start, length, len(value))
            assert store.get_range("r/0", start, length) == value[start:stop], (start, length)
        assert store.get_range("r/0") == value
        assert type(store.get_range("r/0", 1, 2)) is bytes
        with pytest.raises(KeyError):
            store.get_range("r/missing", 0, 1)
        with pytest.raises(ValueError, match="length"):
            store.get_range("r/0", 0, -1)

    # ------------------------------------------------------ prefix operations
    def tree(self, store: Store) -> dict[str, bytes]:
        keys = [".zgroup", "top"]
        for name in self.tricky_names:
            keys += [f"g/{name}/.zarray", f"g/{name}/0.0", f"g/{name}/sub/x"]
        return self.fill(store, keys)

    def test_listdir(self, store: Store) -> None:
        self.tree(store)
        assert store.listdir() == [".zgroup", "g", "top"]
        assert store.listdir("") == store.listdir("/") == store.listdir(None)  # type: ignore[arg-type]
        assert store.listdir("g") == sorted(self.tricky_names)
        assert store.listdir("/g/") == sorted(self.tricky_names)
        for name in self.tricky_names:
            children = sorted([".zarray", self.canonical_key("0.0").split("/")[0], "sub"])
            assert store.listdir(f"g/{name}") == children, name
            assert store.listdir(f"g/{name}/sub") == ["x"]
        assert store.listdir("g/c/.zarray") == []
        assert store.listdir("missing") == []
        assert store.listdir("g/c_") == []

    def test_rmdir(self, store: Store) -> None:
        expected = self.tree(store)
        for name in ["c", "a_b", "p%q", "p*q", "p[q]", "case"]:
            store.rmdir(f"g/{name}")
            expected = {k: v for k, v in expected.items() if not k.startswith(f"g/{name}/")}
            assert self.listed(store) == expected, name
        store.rmdir("g/missing")
        store.rmdir("g/cc/sub")
        expected = {k: v for k, v in expected.items() if not k.startswith("g/cc/sub/")}
        assert self.listed(store) == expected
        assert store.listdir("g/cc") == sorted([".zarray", self.canonical_key("0.0").split("/")[0]])
        store.rmdir()
        assert len(store) == 0

    def test_remove_empty_folder_never_removes_a_key(self, store: Store) -> None:
        expected = self.fill(store, ["a/b/c", "a/d", "e"])
        for path in ["a", "a/b", "/a/", ""]:
            assert not store.remove_empty_folder(path), path
        assert store.remove_empty_folder("missing/folder")
        assert store.remove_empty_folder("e")  # a key, not a folder: it stays
        assert self.listed(store) == expected
        del store["a/b/c"]
        assert store.remove_empty_folder("a/b")
        assert store.listdir("a") == ["d"]
        assert self.listed(store) == {"a/d": expected["a/d"], "e": expected["e"]}

    def test_getsize(self, store: Store) -> None:
        expected = self.tree(store)
        assert store.getsize() == sum(len(v) for v in expected.values())
        assert store.getsize("top") == len(expected["top"])
        for name in self.tricky_names:
            under = [v for k, v in expected.items() if k.startswith(f"g/{name}/")]
            assert store.getsize(f"g/{name}") == sum(map(len, under)), name
        assert store.getsize("missing") == 0
        assert store.getsize("g/c_") == 0

    def test_rename_key(self, store: Store) -> None:
        store["a/x"] = b"1"
        store["b/y"] = b"2"
        store.rename("a/x", "a/z")
        assert self.listed(store) == {"a/z": b"1", "b/y": b"2"}
        store.rename("a/z", "b/y")  # overwrites
        assert self.listed(store) == {"b/y": b"1"}
        store.rename("b/y", "new/deep/key")
        assert self.listed(store) == {"new/deep/key": b"1"}

    def test_rename_prefix(self, store: Store) -> None:
        # Children repeat the prefix's own characters: str.lstrip would mangle them.
        self.fill(store, ["abc/abc/x", "abc/cba", "abc/a", "abcd/x", "ab/x"])
        store.rename("abc", "xyz")
        assert self.listed(store) == {
            "xyz/abc/x": b"value of abc/abc/x",
            "xyz/cba": b"value of abc/cba",
            "xyz/a": b"value of abc/a",
            "abcd/x": b"value of abcd/x",
            "ab/x": b"value of ab/x",
        }
        store.rename("xyz/abc", "moved/deeper")
        assert store["moved/deeper/x"] == b"value of abc/abc/x"
        assert store.listdir("xyz") == ["a", "cba"]

    def test_rename_into_an_ancestor(self, store: Store) -> None:
        # Moving "a/b" to "a" makes some targets ("a/b/y") source keys too.
        store.update({"a/b/b/y": b"1", "a/b/y": b"2", "a/b/x": b"3", "a/z": b"4"})
        store.rename("a/b", "a")
        assert self.listed(store) == {"a/b/y": b"1", "a/y": b"2", "a/x": b"3", "a/z": b"4"}

    def test_rename_wildcard_prefix(self, store: Store) -> None:
        self.fill(store, ["a_b/x", "axb/x", "a%/x", "aZ/x"])
        store.rename("a_b", "q")
        store.rename("a%", "r")
        assert sorted(store) == ["aZ/x", "axb/x", "q/x", "r/x"]

    def test_rename_errors(self, store: Store) -> None:
        store["a/b"] = b"1"
        with pytest.raises(KeyError):
            store.rename("missing", "other")
        with pytest.raises(InvalidKeyError, match="inside"):
            store.rename("a", "a/inner")
        with pytest.raises(InvalidKeyError):
            store.rename("", "x")
        with pytest.raises(InvalidKeyError):
            store.rename("a", "../x")
        store.rename("a/b", "a/b")
        assert self.listed(store) == {"a/b": b"1"}

    def test_clear(self, store: Store) -> None:
        self.tree(store)
        store.clear()
        assert len(store) == 0
        assert store.listdir() == []
        store["after"] = b"1"
        assert list(store) == ["after"]

    # ------------------------------------- namespace queries (public API)
    # What layers above a store (adapters, zfuse, the command line) call
    # instead of the backend's primitives: one section, kept together.
    def namespace_tree(self, store: Store) -> dict[str, bytes]:
        # No metadata names: a consolidated wrapper refuses writes of those.
        keys = ["top"]
        for name in self.tricky_names:
            keys += [f"g/{name}/data", f"g/{name}/0.0", f"g/{name}/sub/x"]
        return self.fill(store, keys)

    def test_list_prefix(self, store: Store) -> None:
        expected = self.namespace_tree(store)
        assert store.list_prefix() == sorted(expected)
        assert store.list_prefix("") == store.list_prefix("/") == store.list_prefix(None)  # type: ignore[arg-type]
        for name in self.tricky_names:
            under = sorted(k for k in expected if k.startswith(f"g/{name}/"))
            assert store.list_prefix(f"g/{name}") == under, name
            assert store.list_prefix(f"/g/{name}/") == under, name
        assert store.list_prefix("g") == sorted(k for k in expected if k.startswith("g/"))
        assert store.list_prefix("top") == []  # a key is not a folder
        assert store.list_prefix("missing") == []
        assert store.list_prefix("g/c_") == []
        with pytest.raises(InvalidKeyError, match="'.' or '..'"):
            store.list_prefix("g/../x")

    def test_getsize_prefix(self, store: Store) -> None:
        expected = self.namespace_tree(store)
        assert store.getsize_prefix() == sum(map(len, expected.values()))
        for name in self.tricky_names:
            under = [v for k, v in expected.items() if k.startswith(f"g/{name}/")]
            assert store.getsize_prefix(f"g/{name}") == sum(map(len, under)), name
        assert store.getsize_prefix("top") == 0  # the key itself is not under it
        assert store.getsize_prefix("missing") == 0
        assert store.getsize_prefix("g/c_") == 0
        if not store.hierarchical:  # a key and a prefix of the same name
            store["g/c"] = b"12345"
            under = [v for k, v in expected.items() if k.startswith("g/c/")]
            assert store.getsize_prefix("g/c") == sum(map(len, under))
            assert store.list_prefix("g/c") == sorted(k for k in expected if k.startswith("g/c/"))

    def test_stat(self, store: Store) -> None:
        store["a/b"] = b"abc"
        empty = b"" if store.supports_empty_values else b"\x00"
        store["a/empty"] = empty
        assert store.stat("a/b") == 3
        assert store.stat("/a//b") == 3  # normalized like every key
        assert store.stat("a/empty") == len(empty)  # present and empty is not absent
        assert store.stat("a") is None  # a folder is not a key
        assert store.stat("a/missing") is None
        assert store.stat("missing") is None
        store["a/b"] = b"longer value"
        assert store.stat("a/b") == len(b"longer value")
        del store["a/empty"]
        assert store.stat("a/empty") is None
        assert store.getsize("a/b") == store.stat("a/b")
        with pytest.raises(InvalidKeyError, match="'.' or '..'"):
            store.stat("a/../b")
        with pytest.raises(TypeError):
            store.stat(5)  # type: ignore[arg-type]

    def test_normalize(self, store: Store) -> None:
        for given, normal in [("\\a\\b", "a/b"), ("/a//b/", "a/b"), ("top", "top")]:
            assert store.normalize(given) == normal
        # The store's own spelling: what iteration lists after a write.
        chunk = "g/x/0.0"
        store[chunk] = b"v"
        assert store.normalize(chunk) == self.canonical_key(chunk)
        assert list(store) == [store.normalize(chunk)]
        for key, rule in INVALID_KEYS.items():
            with pytest.raises(InvalidKeyError, match=rule):
                store.normalize(key)
        store.close()
        assert store.normalize("/a") == "a"  # key rules hold on a closed store too

    def test_namespace_queries_refuse_a_closed_store(self, store: Store) -> None:
        store["a/b"] = b"1"
        store.close()
        for query in (lambda: store.stat("a/b"), lambda: store.list_prefix("a"),
                      lambda: store.getsize_prefix("a")):
            with pytest.raises(StoreClosedError, match=type(store).__name__):
                query()

    def test_reopen(self, store: Store) -> None:
        with pytest.raises(ValueError, match="invalid mode"):
            store.reopen("x")
        if not store.persistent:
            with pytest.raises(UnsupportedOperationError, match=type(store).__name__):
                store.reopen("r")
            return
        store["k"] = b"v"
        store.close()  # single-writer backends (Zip, DBM) admit no reader beside a writer
        reader = store.reopen("r")
        try:
            assert reader is not store and type(reader) is type(store)
            assert reader.read_only and reader.mode == "r"
            assert reader["k"] == b"v"
            assert reader == store
        finally:
            reader.close()
        again = store.reopen()  # opened "w": reopened "a", neither cleared nor refused
        try:
            assert again.mode == "a"
            assert again.stat("k") == 1
            again["k2"] = b"writable"
        finally:
            again.close()

    # --------------------------------------------------------------- batches
    def test_getitems(self, store: Store) -> None:
        expected = self.fill(store, ["a", "b/c", "b/d"])
        got = store.getitems(["a", "b/c", "missing", "b/missing", "a"])
        assert got == {"a": expected["a"], "b/c": expected["b/c"]}
        assert all(type(v) is bytes for v in got.values())
        assert store.getitems([]) == {}
        assert store.getitems(["/a"]) == {"/a": expected["a"]}

    def test_setitems_and_delitems(self, store: Store) -> None:
        first = 0 if store.supports_empty_values else 1  # batch/0 is empty
        values = {f"batch/{i}": bytes([i]) * i for i in range(first, 50)}
        store.setitems(values)
        assert self.listed(store) == {self.canonical_key(k): v for k, v in values.items()}
        store.delitems([f"batch/{i}" for i in range(0, 50, 2)] + ["batch/missing"])
        assert sorted(store) == sorted(self.canonical_key(f"batch/{i}") for i in range(1, 50, 2))
        store.setitems({})
        store.delitems([])

    # --------------------------------------------------------------- modes
    def test_invalid_mode(self, location: Path) -> None:
        with pytest.raises(ValueError, match="'x'"):
            self.open_store(location, mode="x")

    def test_read_only_refuses_every_write(self, store: Store, location: Path) -> None:
        self.fill(store, ["a", "b/c"])
        if store.persistent:
            store = self.reopen(store, location, mode="r")
        else:
            store._mode = "r"  # an in-memory store cannot be reopened: flip it
        before = self.listed(store)
        assert store.read_only
        writes = [
            lambda: store.__setitem__("a", b"x"),
            lambda: store.__setitem__("new", b"x"),
            lambda: store.__delitem__("a"),
            lambda: store.__delitem__("missing"),
            lambda: store.setitems({"a": b"x"}),
            lambda: store.delitems(["a"]),
            lambda: store.rmdir("b"),
            lambda: store.rmdir(),
            lambda: store.remove_empty_folder("b"),
            lambda: store.rename("a", "z"),
            lambda: store.clear(),
            lambda: store.pop("a"),
            lambda: store.popitem(),
            lambda: store.setdefault("new", b"x"),
            lambda: store.update({"a": b"x"}),
        ]
        for write in writes:
            with pytest.raises(ReadOnlyError, match="read-only"):
                write()
        with pytest.raises(PermissionError):
            store["a"] = b"x"
        assert self.listed(store) == before
        store.close()

    def test_modes_on_existing_and_missing_store(self, store: Store, location: Path) -> None:
        self.requires_persistence(store)
        store["k"] = b"v"
        store.close()
        with self.open_store(location, mode="a") as again:
            assert again["k"] == b"v"
        with self.open_store(location, mode="r+") as again:
            assert again["k"] == b"v"
            again["k2"] = b"v2"
        with pytest.raises(StoreExistsError):
            self.open_store(location, mode="w-")
        with self.open_store(location, mode="w") as again:
            assert len(again) == 0
        missing = location.with_name(location.name + "-missing")
        for mode in ("r", "r+"):
            with pytest.raises(StoreNotFoundError):
                self.open_store(missing, mode=mode)
        with self.open_store(missing, mode="w-") as created:
            created["x"] = b"1"

    def test_persistence(self, store: Store, location: Path) -> None:
        self.requires_persistence(store)
        expected = self.tree(store)
        store = self.reopen(store, location, mode="r")
        assert self.listed(store) == expected
        store.close()

    # ------------------------------------------------------------- lifecycle
    def test_close_is_idempotent_and_final(self, store: Store) -> None:
        store["k"] = b"v"
        store.close()
        store.close()
        assert store.closed
        for call in [
            lambda: store["k"],
            lambda: store.__setitem__("k", b"v"),
            lambda: "k" in store,
            lambda: list(store),
            lambda: store.listdir(),
            lambda: store.getitems(["k"]),
        ]:
            with pytest.raises(StoreClosedError, match="closed"):
                call()

    def test_context_manager(self, location: Path) -> None:
        with self.open_store(location, mode="w") as store:
            store["k"] = b"v"
        assert store.closed

    def test_pickle(self, store: Store, location: Path) -> None:
        expected = self.tree(store)
        if store.persistent:
            store = self.reopen(store, location, mode="r")
        clone = pickle.loads(pickle.dumps(store))
        try:
            assert type(clone) is type(store)
            assert clone.read_only == store.read_only
            assert self.listed(clone) == expected
            if store.persistent:
                assert clone == store
        finally:
            clone.close()
            store.close()

    def test_repr_names_backend(self, store: Store) -> None:
        text = repr(store)
        assert type(store).__name__ in text
        assert "mode=" in text

    def test_equality(self, store: Store, location: Path) -> None:
        assert store == store
        other_location = location.with_name(location.name + "-other")
        with self.open_store(other_location, mode="w") as other:
            assert store != other
        if store.persistent:
            store["k"] = b"v"
            store.close()
            with self.open_store(location, mode="r") as first, \
                    self.open_store(location, mode="r") as second:
                assert first == second
                assert hash(first) == hash(second)

    # ------------------------------------------------------------ hierarchy
    def test_zarr_hierarchy_functions(self, store: Store) -> None:
        from .. import hierarchy

        hierarchy.init_group(store)
        hierarchy.init_group(store, path="grp")
        hierarchy.init_array(store, shape=(10, 10), chunks=(5, 5), dtype="<f8", path="grp/arr")
        assert hierarchy.contains_group(store)
        assert hierarchy.contains_group(store, "grp")
        assert hierarchy.contains_array(store, "grp/arr")
        assert not hierarchy.contains_array(store, "grp")
        assert hierarchy.listdir(store, "grp") == [".zgroup", "arr"]
        assert hierarchy.getsize(store, "grp/arr") == store.getsize("grp/arr")
        hierarchy.rename(store, "grp/arr", "grp/moved")
        assert hierarchy.contains_array(store, "grp/moved")
        hierarchy.rmdir(store, "grp/moved")
        assert not hierarchy.contains_array(store, "grp/moved")

    # ------------------------------------------------------------------ scale
    @pytest.mark.slow
    def test_100000_keys(self, store: Store) -> None:
        count = 100_000
        names = [f"k{i:06d}" for i in range(count)]
        store.setitems({f"many/{name}": b"x" for name in names})
        store["other"] = b"y"
        assert len(store) == count + 1
        assert store.listdir("many") == names
        assert store.listdir() == ["many", "other"]
        assert store.getsize("many") == count
        assert store.getitems(["many/k000000", "many/k099999"]) == {
            "many/k000000": b"x",
            "many/k099999": b"x",
        }
        store.rmdir("many")
        assert list(store) == ["other"]

    # ------------------------------------------------------------ concurrency
    def test_threads_write_and_read(self, store: Store) -> None:
        errors: list[BaseException] = []
        sizes = [value_for(w, 0) for w in range(8)]

        def work(writer: int) -> None:
            try:
                for index in range(40):
                    store[f"t{writer}/k{index}"] = value_for(writer, index)
                    store["shared"] = value_for(writer, 0)
                    seen = store["shared"]
                    assert seen in sizes, "torn value under concurrent writes"
                    assert store[f"t{writer}/k{index}"] == value_for(writer, index)
                    store.listdir()
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not errors, errors[0]
        for writer in range(8):
            for index in range(40):
                assert store[f"t{writer}/k{index}"] == value_for(writer, index)
        assert store["shared"] in sizes

    def test_processes_write_concurrently(self, store: Store) -> None:
        if not store.supports_process_writers:
            pytest.skip(f"{type(store).__name__} declares supports_process_writers=False")
        context = multiprocessing.get_context("spawn")
        writers, count = 3, 40
        with context.Pool(writers) as pool:
            done = pool.starmap(write_keys, [(store, w, count, "shared") for w in range(writers)])
        assert done == [count] * writers
        for writer in range(writers):
            for index in range(count):
                assert store[f"w{writer}/k{index}"] == value_for(writer, index)
        assert store["shared"] in [value_for(w, 0) for w in range(writers)]
        assert len(store) == writers * count + 1

    # ------------------------------------------------------------- declared
    def test_capability_flags_are_declared(self, store: Store) -> None:
        for flag in ("supports_range_reads", "supports_process_writers", "supports_deletes",
                     "persistent", "hierarchical"):
            assert isinstance(getattr(store, flag), bool), flag
        assert store.max_value_size is None or store.max_value_size > 0

    def test_store_without_deletes_refuses_them(self, store: Store) -> None:
        if store.supports_deletes:
            store["k"] = b"v"
            del store["k"]
            assert "k" not in store
            return
        store["k"] = b"v"
        with pytest.raises(UnsupportedOperationError):
            del store["k"]
        assert store["k"] == b"v"

    # ------------------------------------------------------ out-of-band checks
    # A store that agrees with itself but writes the wrong bytes (reversed,
    # re-encoded, under another name) passes every test above; these read and
    # write the backend around the store, through the raw_get/raw_set hooks.
    def require_raw_hook(self, *names: str) -> None:
        """Skip, naming the hooks, when a subclass does not provide them."""
        missing = [name for name in names if getattr(type(self), name) is getattr(StoreTests, name)]
        if missing:
            pytest.skip(f"{type(self).__name__} does not provide the {' and '.join(missing)} "
                        "hook of StoreTests: the backend's bytes are not checked out of band")

    def reopened_if_closed(self, store: Store, location: Path) -> Store:
        """``store``, or the store reopened with mode ``"r+"`` if a raw hook closed it."""
        return self.open_store(location, mode="r+") if store.closed else store

    def raw_values(self) -> dict[str, tuple[object, bytes]]:
        """key -> (the value given to the store, the bytes the backend must hold)."""
        binary = bytes(range(256)) * 3 + b"\x00\x00"  # every byte value, NULs at the end
        large = np.random.default_rng(14).integers(0, 256, 3 * MiB + 7, dtype=np.uint8).tobytes()
        c_order = np.arange(24, dtype="<f8").reshape(4, 6)
        f_order = np.asfortranarray(c_order)
        return {
            "raw/small": (b"hello", b"hello"),
            "raw/binary": (binary, binary),
            "raw/large": (large, large),
            "raw/bytearray": (bytearray(b"\x00ab\x00"), b"\x00ab\x00"),
            "raw/memoryview": (memoryview(binary)[7:300], binary[7:300]),
            "raw/numpy": (c_order, c_order.tobytes()),
            "raw/numpy_f": (f_order, f_order.tobytes(order="F")),
            "raw/deep/a/b/c": (b"deep", b"deep"),
            "raw/arr/0.1": (b"chunk", b"chunk"),
        }

    def test_raw_values_set_are_stored_byte_for_byte(self, store: Store) -> None:
        self.require_raw_hook("raw_get")
        values = self.raw_values()
        keys = list(values)
        for key in keys[::2]:
            store[key] = values[key][0]
        store.setitems({key: values[key][0] for key in keys[1::2]})
        for key, (_, expected) in values.items():
            held = self.raw_get(store, key)
            assert held == expected, (
                f"{key!r}: the backend holds {_shown(held)}, expected {_shown(expected)}")

    def test_raw_overwrites_and_deletes_reach_the_backend(
        self, store: Store, location: Path
    ) -> None:
        self.require_raw_hook("raw_get")
        store.update({"raw/k": b"old", "raw/gone": b"1", "raw/batch/1": b"2", "raw/batch/2": b"3",
                      "raw/dir/x": b"4", "raw/dir/y/z": b"5", "raw/from": b"6"})
        store["raw/k"] = b"new"
        del store["raw/gone"]
        store.delitems(["raw/batch/1"])
        store.rmdir("raw/dir")
        store.rename("raw/from", "raw/to")
        expected = {"raw/k": b"new", "raw/gone": None, "raw/batch/1": None, "raw/batch/2": b"3",
                    "raw/dir/x": None, "raw/dir/y/z": None, "raw/from": None, "raw/to": b"6"}
        for key, value in expected.items():
            held = self.raw_get(store, key)
            assert held == value, (
                f"{key!r}: the backend holds {_shown(held)}, expected {_shown(value)}")
        store = self.reopened_if_closed(store, location)
        try:
            store.clear()
            for key in expected:
                assert self.raw_get(store, key) is None, (
                    f"{key!r} is still in the backend after clear()")
        finally:
            store.close()

    def test_raw_written_values_are_read_by_the_store(self, store: Store, location: Path) -> None:
        self.require_raw_hook("raw_set")
        values = {key: stored for key, (_, stored) in self.raw_values().items()
                  if not key.endswith(("bytearray", "memoryview", "numpy", "numpy_f"))}
        for key, value in values.items():
            self.raw_set(store, key, value)
        store = self.reopened_if_closed(store, location)
        try:
            self.check_reads(store, values)
        finally:
            store.close()

    def check_reads(self, store: Store, values: dict[str, bytes]) -> None:
        """Every read method of ``store`` sees exactly ``values`` (all under ``raw/``)."""
        stat = getattr(store, "stat", None)  # a public method of newer versions of Store
        for key, value in values.items():
            assert key in store, key
            assert store[key] == value, (
                f"{key!r}: the store reads {_shown(store[key])}, expected {_shown(value)}")
            assert store.get_range(key, 1, 5) == value[1:6], key
            assert store.get_range(key, -3) == value[-3:], key
            assert store.getsize(key) == len(value), key
            if stat is not None:
                assert stat(key) == len(value), key
        assert store.getitems([*values, "raw/missing"]) == values
        assert sorted(store) == sorted(self.canonical_key(key) for key in values)
        assert len(store) == len(values)
        children = {self.canonical_key(key).split("/")[1] for key in values}
        assert store.listdir("raw") == sorted(children)
        assert store.listdir("raw/deep/a/b") == ["c"]
        assert store.getsize("raw") == sum(map(len, values.values()))
        assert "raw/missing" not in store and "raw/deep/a" not in store

    def test_raw_empty_value(self, store: Store, location: Path) -> None:
        # Apart from the others: some engines cannot keep an empty value.
        self.requires_empty_values(store)
        self.require_raw_hook("raw_get", "raw_set")
        store["raw/set"] = b""
        assert self.raw_get(store, "raw/set") == b"", "an empty value is not stored as empty"
        self.raw_set(store, "raw/put", b"")
        store = self.reopened_if_closed(store, location)
        try:
            assert "raw/put" in store and store["raw/put"] == b""
            assert store.getsize("raw/put") == 0 and store.get_range("raw/put", 0, 5) == b""
            assert store.getitems(["raw/put"]) == {"raw/put": b""}
            assert store.listdir("raw") == ["put", "set"]
        finally:
            store.close()

    def test_raw_key_layout(self, store: Store) -> None:
        self.require_raw_hook("raw_get")
        store["lay/a/b/c"] = b"abc"
        store["lay/arr/0.1"] = b"chunk"
        store["lay/with space/é"] = b"unicode"
        layout = {"lay/a/b/c": b"abc", "lay/arr/0.1": b"chunk", "lay/with space/é": b"unicode"}
        for key, value in layout.items():
            held = self.raw_get(store, key)
            assert held == value, f"{key!r} is not where the format puts it: {_shown(held)} there"
        for absent in ["lay/a/b", "lay/a", "lay", "lay/c", "lay/arr/0", "lay/never"]:
            held = self.raw_get(store, absent)
            assert held is None, f"the backend holds {_shown(held)} under {absent!r}"

    @pytest.mark.slow
    def test_raw_value_over_16_mib(self, store: Store, location: Path) -> None:
        # Larger than one MongoDB document (16 MiB): stored as parts there.
        self.require_raw_hook("raw_get", "raw_set")
        rng = np.random.default_rng(16)
        first, second = (rng.integers(0, 256, 20 * MiB + 3, dtype=np.uint8).tobytes()
                         for _ in range(2))
        store["big/0.0"] = first
        assert self.raw_get(store, "big/0.0") == first, "a 20 MiB value is not stored byte for byte"
        self.raw_set(store, "big/0.1", second)
        store = self.reopened_if_closed(store, location)
        try:
            assert store["big/0.1"] == second, "a 20 MiB value written out of band is not read back"
            assert store.getsize("big/0.1") == len(second)
            assert store.get_range("big/0.1", 20 * MiB, 10) == second[20 * MiB : 20 * MiB + 10]
        finally:
            store.close()

    # ---------------------------------------------------- transactions
    # Driven by supports_transactions / supports_snapshots: a store that
    # declares it cannot must refuse clearly, one that can must keep every
    # promise of Store.transaction and Store.snapshot.
    def requires_transactions(self, store: Store) -> None:
        if not store.supports_transactions:
            pytest.skip(f"{type(store).__name__} declares supports_transactions=False")

    def requires_snapshots(self, store: Store) -> None:
        if not store.supports_snapshots:
            pytest.skip(f"{type(store).__name__} declares supports_snapshots=False")

    def in_other_thread(self, call: Callable[[], T]) -> T:
        """``call()`` run in a new thread; its result, or its exception re-raised."""
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.append((True, call()))
            except BaseException as error:  # noqa: BLE001 - re-raised below
                outcome.append((False, error))

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(timeout=120)
        ok, result = outcome[0]
        if not ok:
            raise result
        return result  # type: ignore[no-any-return]

    def committed_view(self, store: Store) -> Callable[[], dict[str, bytes]]:
        """What another handle (persistent stores) or another thread sees of the store."""
        if store.persistent and store.supports_process_writers:
            def from_other_handle() -> dict[str, bytes]:
                reader = store.reopen("r")
                try:
                    return {key: reader[key] for key in reader}
                finally:
                    reader.close()

            return from_other_handle
        return lambda: self.in_other_thread(lambda: {key: store[key] for key in store})

    def test_transactions_refused_when_declared(self, store: Store) -> None:
        assert isinstance(store.supports_transactions, bool)
        assert isinstance(store.supports_snapshots, bool)
        if not store.supports_transactions:
            with pytest.raises(UnsupportedOperationError, match=type(store).__name__):
                store.transaction()
        if not store.supports_snapshots:
            with pytest.raises(UnsupportedOperationError, match=type(store).__name__):
                store.snapshot()

    def test_transaction_commits_everything_at_once(self, store: Store) -> None:
        self.requires_transactions(store)
        store.update({"arr/0": b"old", "arr/1": b"old", "arr/gone": b"old"})
        before = self.listed(store)
        others = self.committed_view(store)
        with store.transaction() as tx:
            store["arr/0"] = b"new"
            store.update({"arr/1": b"new", "arr/2": b"new"})
            del store["arr/gone"]
            assert others() == before, "another handle saw a write before the commit"
            assert not tx.committed
        assert tx.committed and tx.state == "committed"
        expected = {"arr/0": b"new", "arr/1": b"new", "arr/2": b"new"}
        assert others() == expected
        assert self.listed(store) == expected

    def test_transaction_sees_its_own_writes(self, store: Store) -> None:
        self.requires_transactions(store)
        store.update({"a/x": b"12345", "a/y": b"1", "b/z": b"22", "c": b"333"})
        with store.transaction() as tx:
            store["a/new"] = b"abcdef"
            del store["a/y"]
            store.rmdir("b")
            store["b/w"] = b"w"
            store.rename("c", "d/c")
            for view in (store, tx):
                assert view["a/new"] == b"abcdef"
                assert "a/y" not in view and "b/z" not in view and "c" not in view
                assert view.get_range("a/new", 2, 3) == b"cde"
                assert view.getitems(["a/x", "a/y", "a/new"]) == {"a/x": b"12345",
                                                                  "a/new": b"abcdef"}
                assert view.listdir() == ["a", "b", "d"]
                assert view.listdir("a") == ["new", "x"]
                assert view.list_prefix() == ["a/new", "a/x", "b/w", "d/c"]
                assert len(view) == 4 and sorted(view) == view.list_prefix()
                assert view.stat("a/new") == 6 and view.stat("a/y") is None
                assert view.getsize("a") == 11 and view.getsize() == 15
                assert view.getsize_prefix("b") == 1
            with pytest.raises(KeyError):
                del store["a/y"]
        assert self.listed(store) == {"a/x": b"12345", "a/new": b"abcdef", "b/w": b"w",
                                      "d/c": b"333"}

    def test_transaction_keeps_its_own_copy_of_large_values(self, store: Store) -> None:
        # Values of a KiB or more are held in reused memory until the commit
        # (zstores._arena): the caller may change its buffer after each call,
        # what a read returns must outlive the transaction, and a key
        # rewritten many times must not pile up copies.
        self.requires_transactions(store)
        size = 300_000
        buffer = bytearray(b"a" * size)
        with store.transaction() as tx:
            store["big/0"] = buffer
            store.setitems({"big/1": memoryview(buffer)})
            buffer[:] = b"b" * size
            read = store["big/0"]
            many = store.getitems(["big/0", "big/1"])
            for round_ in range(40):
                store["big/2"] = bytes([round_]) * size
            assert set(map(type, [read, *many.values()])) == {bytes}
            assert set(map(type, tx.changes().writes.values())) == {bytes}
        assert read == many["big/0"] == many["big/1"] == b"a" * size
        assert self.listed(store) == {"big/0": b"a" * size, "big/1": b"a" * size,
                                      "big/2": bytes([39]) * size}

    def test_transaction_is_hidden_from_other_threads(self, store: Store) -> None:
        self.requires_transactions(store)
        store["k"] = b"old"
        with store.transaction():
            store["k"] = b"new"
            store["n"] = b"new"
            seen = self.in_other_thread(lambda: (store["k"], "n" in store, sorted(store)))
            assert seen == (b"old", False, ["k"])
            # Another thread's own writes go straight to the store meanwhile.
            self.in_other_thread(lambda: store.__setitem__("other", b"o"))
            assert store["other"] == b"o"
        assert self.in_other_thread(lambda: store["k"]) == b"new"
        assert sorted(store) == ["k", "n", "other"]

    def test_transaction_rolls_back_on_exception(self, store: Store) -> None:
        self.requires_transactions(store)
        store.update({"a/0": b"old", "a/1": b"old"})
        before = self.listed(store)
        with pytest.raises(RuntimeError, match="inside"):
            with store.transaction() as tx:
                store["a/0"] = b"new"
                store.rmdir("a")
                store["b"] = b"new"
                raise RuntimeError("inside")
        assert tx.state == "rolled back"
        assert self.listed(store) == before
        tx = store.transaction()
        store.clear()
        tx.rollback()
        assert self.listed(store) == before
        with pytest.raises(StoreClosedError, match="rolled back"):
            tx["a/0"] = b"x"
        store["c"] = b"after"  # the thread is free of the ended transaction
        assert self.in_other_thread(lambda: store["c"]) == b"after"

    def test_transaction_nesting_refused(self, store: Store) -> None:
        self.requires_transactions(store)
        with store.transaction() as tx:
            store["a"] = b"1"
            with pytest.raises(TransactionError, match="nest"):
                store.transaction()
            with pytest.raises(TransactionError, match="nest"):
                tx.transaction()
            assert store.in_transaction
            # Another thread may open its own.
            self.in_other_thread(lambda: store.transaction().rollback())
        assert not store.in_transaction
        assert store["a"] == b"1"

    def test_transaction_ended_refuses_use(self, store: Store) -> None:
        self.requires_transactions(store)
        with store.transaction() as tx:
            tx["a"] = b"1"
        for use in (lambda: tx["a"], lambda: tx.__setitem__("a", b"2"), tx.commit,
                    tx.rollback):
            with pytest.raises(StoreClosedError, match="committed"):
                use()
        with pytest.raises(TypeError, match="pickle"):
            pickle.dumps(store.transaction())

    def test_transaction_on_read_only_store_refuses_writes(
        self, store: Store, location: Path
    ) -> None:
        self.requires_transactions(store)
        self.requires_persistence(store)
        store["a"] = b"1"
        reader = self.reopen(store, location, mode="r")
        try:
            with reader.transaction():
                assert reader["a"] == b"1"
                with pytest.raises(ReadOnlyError):
                    reader["a"] = b"2"
        finally:
            reader.close()

    def test_transaction_conflicts_on_changed_reads(self, store: Store) -> None:
        self.requires_transactions(store)
        store.update({"c/0": b"0", "c/1": b"1"})
        second_handle = store.persistent and store.supports_process_writers
        writer = store.reopen("a") if second_handle else store
        try:
            tx = store.transaction()
            assert store["c/0"] == b"0"  # read: the commit checks it
            store["c/1"] = b"from tx"
            store["c/2"] = b"from tx"
            self.in_other_thread(lambda: writer.__setitem__("c/0", b"changed"))
            with pytest.raises(TransactionConflictError, match="c/0") as caught:
                tx.commit()
            assert caught.value.keys == ("c/0",)
            assert tx.state == "failed"
            assert self.listed(store) == {"c/0": b"changed", "c/1": b"1"}
            # Disjoint writers both commit; blind writes to one key: the later wins.
            first = store.transaction(bind_thread=False)
            second = store.transaction(bind_thread=False)
            first["c/1"] = b"first"
            first["c/3"] = b"first"
            second["c/3"] = b"second"
            second["c/4"] = b"second"
            first.commit()
            second.commit()
            assert self.listed(store) == {"c/0": b"changed", "c/1": b"first",
                                          "c/3": b"second", "c/4": b"second"}
        finally:
            if writer is not store:
                writer.close()

    def test_transaction_visible_to_another_process_only_at_commit(self, store: Store) -> None:
        self.requires_transactions(store)
        if not (store.persistent and store.supports_process_writers):
            pytest.skip(f"{type(store).__name__}: no second process reaches this store")
        store["old"] = b"old"
        context = multiprocessing.get_context("spawn")
        ready, go = context.Event(), context.Event()
        items = {f"t/{i}": bytes([i]) * 100 for i in range(16)}
        child = context.Process(target=write_in_transaction,
                                args=(store, items, ready, go, True))
        child.start()
        try:
            assert ready.wait(120), "the writer process did not start its transaction"
            assert self.listed(store) == {"old": b"old"}
            go.set()
            child.join(120)
            assert child.exitcode == 0
            assert self.listed(store) == {"old": b"old", **items}
        finally:
            child.kill()
            child.join()

    def test_transaction_killed_process_leaves_nothing(self, store: Store) -> None:
        self.requires_transactions(store)
        if not (store.persistent and store.supports_process_writers):
            pytest.skip(f"{type(store).__name__}: no second process reaches this store")
        store.update({"t/0": b"old", "t/1": b"old"})
        context = multiprocessing.get_context("spawn")
        ready, go = context.Event(), context.Event()
        items = {f"t/{i}": b"new" * 1000 for i in range(16)}
        child = context.Process(target=write_in_transaction,
                                args=(store, items, ready, go, True))
        child.start()
        try:
            assert ready.wait(120), "the writer process did not start its transaction"
        finally:
            os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
            child.join(120)
        assert child.exitcode == -signal.SIGKILL
        assert self.listed(store) == {"t/0": b"old", "t/1": b"old"}
        with store.transaction():  # the store still takes transactions
            store["t/0"] = b"after"
        assert store["t/0"] == b"after"

    # ------------------------------------------------------------ snapshots
    def test_snapshot_is_unaffected_by_later_writes(self, store: Store) -> None:
        self.requires_snapshots(store)
        store.update({"a/0": b"v1", "a/1": b"v1", "b": b"v1"})
        with store.snapshot() as view:
            store.update({"a/0": b"v2", "a/2": b"v2"})
            store.rmdir("b")
            if store.persistent and store.supports_process_writers:
                other = store.reopen("a")
                other["a/1"] = b"other handle"
                other.close()
            for _ in range(2):
                assert self.listed(view) == {"a/0": b"v1", "a/1": b"v1", "b": b"v1"}
                assert view.listdir() == ["a", "b"] and len(view) == 3
                assert view.getitems(["a/0", "a/2"]) == {"a/0": b"v1"}
                assert view.get_range("a/0", 1) == b"1" and view.stat("a/2") is None
                assert view.getsize() == 6 and view.list_prefix("a") == ["a/0", "a/1"]
            assert store["a/0"] == b"v2"
        assert view.closed
        with pytest.raises(StoreClosedError):
            view["a/0"]

    def test_snapshot_is_read_only(self, store: Store) -> None:
        self.requires_snapshots(store)
        store["a"] = b"1"
        with store.snapshot() as view:
            assert view.read_only
            for write in (lambda: view.__setitem__("a", b"2"), lambda: view.__delitem__("a"),
                          lambda: view.rmdir(""), view.clear,
                          lambda: view.setitems({"b": b"1"})):
                with pytest.raises(ReadOnlyError):
                    write()
            assert view["a"] == b"1"
        assert store["a"] == b"1"

    def test_snapshot_serves_several_threads(self, store: Store) -> None:
        self.requires_snapshots(store)
        values = {f"k/{i}": value_for(i, i, 64) for i in range(32)}
        store.update(values)
        with store.snapshot() as view:
            stop = threading.Event()

            def overwrite() -> None:
                round_ = 0
                while not stop.is_set():
                    round_ += 1
                    store.update({key: bytes([round_ % 200 + 1]) * 10 for key in values})

            writer = threading.Thread(target=overwrite)
            writer.start()
            try:
                results = [self.in_other_thread(lambda: self.listed(view)) for _ in range(4)]
            finally:
                stop.set()
                writer.join(120)
            assert all(result == values for result in results)

    def test_snapshot_is_unaffected_by_another_process(self, store: Store) -> None:
        self.requires_snapshots(store)
        if not (store.persistent and store.supports_process_writers):
            pytest.skip(f"{type(store).__name__}: no second process reaches this store")
        values = {f"p/{i}": b"before" for i in range(8)}
        store.update(values)
        context = multiprocessing.get_context("spawn")
        with store.snapshot() as view:
            child = context.Process(
                target=overwrite, args=(store, {f"p/{i}": b"after" * 100 for i in range(16)}))
            child.start()
            child.join(120)
            assert child.exitcode == 0
            assert store["p/0"] == b"after" * 100
            assert self.listed(view) == values

    # ---------------------------------------------------- conditional writes
    def requires_create_if_absent(self, store: Store) -> None:
        if not store.supports_create_if_absent:
            pytest.skip(f"{type(store).__name__} declares supports_create_if_absent=False")

    def requires_compare_and_swap(self, store: Store) -> None:
        if not store.supports_compare_and_swap:
            pytest.skip(f"{type(store).__name__} declares supports_compare_and_swap=False")

    def test_conditional_write_flags_are_declared(self, store: Store) -> None:
        assert isinstance(store.supports_create_if_absent, bool)
        assert isinstance(store.supports_compare_and_swap, bool)

    def test_set_if_not_exists(self, store: Store) -> None:
        self.requires_create_if_absent(store)
        assert store.set_if_not_exists("c/a", b"first") is True
        assert store.set_if_not_exists("c/a", b"second") is False
        assert store.set_if_not_exists("/c//a/", b"third") is False  # the same key, normalized
        assert store["c/a"] == b"first"
        assert store.set_if_not_exists("c/b", memoryview(np.arange(4, dtype="u2"))) is True
        assert store["c/b"] == np.arange(4, dtype="u2").tobytes()
        del store["c/a"]
        assert store.set_if_not_exists("c/a", bytearray(b"again")) is True
        assert store["c/a"] == b"again"
        if store.supports_empty_values:
            assert store.set_if_not_exists("c/empty", b"") is True
            assert store.set_if_not_exists("c/empty", b"x") is False
            assert store["c/empty"] == b""
        with pytest.raises(TypeError):
            store.set_if_not_exists("c/x", "text")
        with pytest.raises(InvalidKeyError):
            store.set_if_not_exists("a/../b", b"x")
        assert self.listed(store) == {
            self.canonical_key(key): value for key, value in
            {"c/a": b"again", "c/b": np.arange(4, dtype="u2").tobytes(),
             **({"c/empty": b""} if store.supports_empty_values else {})}.items()}

    def test_set_if_not_exists_large_value(self, store: Store) -> None:
        self.requires_create_if_absent(store)
        size = 17 * MiB  # above MongoDB's 16 MiB document limit: a value in parts
        if store.max_value_size is not None and store.max_value_size < size:
            pytest.skip(f"{type(store).__name__} holds at most {store.max_value_size} bytes")
        big = np.random.default_rng(7).integers(0, 256, size, dtype="u1").tobytes()
        assert store.set_if_not_exists("big", big) is True
        assert store.set_if_not_exists("big", b"small") is False
        assert store.set_if_not_exists("big", big[::-1]) is False
        assert store["big"] == big
        if store.supports_compare_and_swap:
            assert store.replace_if("big", big[::-1], b"x") is False
            assert store.replace_if("big", big, big[::-1]) is True
            value, version = store.get_with_version("big")
            assert value == big[::-1]
            assert store.replace_if("big", version, b"small") is True
            assert store["big"] == b"small"

    def test_set_if_not_exists_keeps_hierarchy_rules(self, store: Store) -> None:
        self.requires_create_if_absent(store)
        if not store.hierarchical:
            pytest.skip(f"{type(store).__name__} declares hierarchical=False: "
                        "a key may also be a prefix")
        store["h/a/b"] = b"1"
        with pytest.raises(KeyConflictError):
            store.set_if_not_exists("h/a", b"x")  # a prefix of a key
        with pytest.raises(KeyConflictError):
            store.set_if_not_exists("h/a/b/c", b"x")  # below a key
        assert self.listed(store) == {self.canonical_key("h/a/b"): b"1"}

    def test_replace_if(self, store: Store) -> None:
        self.requires_compare_and_swap(store)
        store["k"] = b"one"
        assert store.replace_if("k", b"other", b"x") is False
        assert store.replace_if("k", b"one", b"two") is True
        assert store.replace_if("k", b"one", b"three") is False
        assert store["k"] == b"two"
        assert store.replace_if("k", bytearray(b"two"), memoryview(b"three")) is True
        assert store.replace_if("missing", b"", b"x") is False
        assert store.replace_if("missing", b"one", b"x") is False
        assert "missing" not in store
        value, version = store.get_with_version("k")
        assert value == b"three"
        again = pickle.loads(pickle.dumps(version))  # another process may hold the token
        assert again == version and hash(again) == hash(version)
        assert store.get_with_version("k")[1] == version  # unchanged: the same version
        assert store.replace_if("k", again, b"four") is True
        assert store.replace_if("k", version, b"five") is False  # stale now
        assert store["k"] == b"four"
        _, version = store.get_with_version("k")
        store["k"] = b"plain"  # a plain write moves the version on
        assert store.replace_if("k", version, b"six") is False
        assert store["k"] == b"plain"
        store["gone"] = b"1"
        _, version = store.get_with_version("gone")
        del store["gone"]
        assert store.replace_if("gone", version, b"x") is False
        assert "gone" not in store
        with pytest.raises(KeyError):
            store.get_with_version("gone")

    def test_conditional_writes_refused_when_declared(self, store: Store) -> None:
        store["k"] = b"v"
        if not store.supports_create_if_absent:
            with pytest.raises(UnsupportedOperationError,
                               match=f"{type(store).__name__}.*supports_create_if_absent=False"):
                store.set_if_not_exists("new", b"x")
            assert "new" not in store
        if not store.supports_compare_and_swap:
            with pytest.raises(UnsupportedOperationError,
                               match=f"{type(store).__name__}.*supports_compare_and_swap=False"):
                store.replace_if("k", b"v", b"x")
            assert store["k"] == b"v"
        value, version = store.get_with_version("k")  # a read: every store answers
        assert value == b"v" and version == store.get_with_version("k")[1]

    def test_conditional_writes_refused_read_only(self, store: Store, location: Path) -> None:
        store["k"] = b"v"
        if store.persistent:
            store = self.reopen(store, location, mode="r")
        else:
            store._mode = "r"
        try:
            with pytest.raises(ReadOnlyError, match="read-only"):
                store.set_if_not_exists("new", b"x")
            with pytest.raises(ReadOnlyError, match="read-only"):
                store.replace_if("k", b"v", b"x")
            assert store.get_with_version("k")[0] == b"v"
            assert self.listed(store) == {"k": b"v"}
        finally:
            store.close()

    def test_conditional_writes_in_a_transaction(self, store: Store) -> None:
        self.requires_transactions(store)
        self.requires_create_if_absent(store)
        self.requires_compare_and_swap(store)
        store["t/k"] = b"old"
        with store.transaction():
            assert store.set_if_not_exists("t/new", b"1") is True
            assert store.set_if_not_exists("t/new", b"2") is False  # the overlay's own write
            assert store.replace_if("t/k", b"old", b"mid") is True
            value, version = store.get_with_version("t/k")
            assert value == b"mid"
            assert store.replace_if("t/k", version, b"new") is True
            assert self.committed_view(store)() == {"t/k": b"old"}
        assert self.listed(store) == {"t/k": b"new", "t/new": b"1"}
        # Another writer creates the key before the commit: nothing is applied.
        second_handle = store.persistent and store.supports_process_writers
        writer = store.reopen("a") if second_handle else store
        try:
            tx = store.transaction()
            assert store.set_if_not_exists("t/raced", b"mine") is True
            assert store.replace_if("t/k", b"new", b"newer") is True
            self.in_other_thread(lambda: writer.__setitem__("t/raced", b"theirs"))
            with pytest.raises(TransactionConflictError, match="t/raced"):
                tx.commit()
            assert self.listed(store) == {"t/k": b"new", "t/new": b"1", "t/raced": b"theirs"}
        finally:
            if writer is not store:
                writer.close()

    #: Rounds of each conditional-write race (a fresh key per round).
    race_rounds = 8

    def race(self, store: Store, op: str, roles: list[str]) -> list[list[bool | None]]:
        """Run ``race_conditional`` with one racer per role; each racer's outcomes.

        Processes (spawned, each with its own handle) where several may write
        the store, threads on this handle otherwise (in-memory and
        single-writer stores).  A barrier starts every round in all racers.
        """
        processes = store.persistent and store.supports_process_writers
        if processes:
            context = multiprocessing.get_context("spawn")
            barrier, results = context.Barrier(len(roles)), context.Queue()
            racers: list[Any] = [
                context.Process(target=race_conditional, args=(
                    store, writer, role, op, self.race_rounds, barrier, results, True))
                for writer, role in enumerate(roles)]
        else:
            import queue
            barrier, results = threading.Barrier(len(roles)), queue.Queue()
            racers = [threading.Thread(target=race_conditional, args=(
                store, writer, role, op, self.race_rounds, barrier, results, False))
                for writer, role in enumerate(roles)]
        for racer in racers:
            racer.start()
        try:
            outcomes = dict(results.get(timeout=300) for _ in roles)
        finally:
            for racer in racers:
                racer.join(120)
                if processes and racer.is_alive():
                    racer.kill()
        errors = [text for text in outcomes.values() if isinstance(text, str)]
        assert not errors, errors
        return [outcomes[writer] for writer in range(len(roles))]

    def winners(self, outcomes: list[list[bool | None]], index: int) -> list[int]:
        return [writer for writer, seen in enumerate(outcomes) if seen[index]]

    def test_set_if_not_exists_race(self, store: Store) -> None:
        self.requires_create_if_absent(store)
        outcomes = self.race(store, "create", ["create"] * 4)
        for index in range(self.race_rounds):
            winners = self.winners(outcomes, index)
            assert len(winners) == 1, f"round {index}: winners {winners}"
            assert store[race_key("create", index)] == value_for(winners[0], index)

    def test_set_if_not_exists_race_with_a_plain_writer(self, store: Store) -> None:
        self.requires_create_if_absent(store)
        outcomes = self.race(store, "create", ["create"] * 3 + ["plain"])
        for index in range(self.race_rounds):
            winners = self.winners(outcomes, index)
            assert len(winners) <= 1, f"round {index}: winners {winners}"
            stored = store[race_key("create", index)]
            allowed = [value_for(3, index)] + [value_for(w, index) for w in winners]
            assert stored in allowed, f"round {index}: a value no winner wrote"

    def test_replace_if_race(self, store: Store) -> None:
        self.requires_compare_and_swap(store)
        store.update({race_key("replace", i): race_start(i) for i in range(self.race_rounds)})
        outcomes = self.race(store, "replace", ["replace-bytes", "replace-version"] * 2)
        for index in range(self.race_rounds):
            winners = self.winners(outcomes, index)
            assert len(winners) == 1, f"round {index}: winners {winners}"
            assert store[race_key("replace", index)] == value_for(winners[0], index)

    def test_replace_if_race_with_a_plain_writer(self, store: Store) -> None:
        self.requires_compare_and_swap(store)
        store.update({race_key("replace", i): race_start(i) for i in range(self.race_rounds)})
        outcomes = self.race(store, "replace", ["replace-bytes", "replace-version",
                                                "replace-bytes", "plain"])
        for index in range(self.race_rounds):
            winners = self.winners(outcomes, index)
            assert len(winners) <= 1, f"round {index}: winners {winners}"
            stored = store[race_key("replace", index)]
            allowed = [value_for(3, index)] + [value_for(w, index) for w in winners]
            assert stored in allowed, f"round {index}: a value no winner wrote"

    # ------------------------------------------------------------- stateful
    def test_stateful_against_dict(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        run_stateful_test(self, tmp_path_factory)


def _shown(value: bytes | None) -> str:
    """A short description of stored bytes for an assertion message."""
    if value is None:
        return "nothing"
    return f"{len(value)} bytes {bytes(value[:12])!r}{'...' if len(value) > 12 else ''}"


def _slice_stop(start: int, length: int, size: int) -> int:
    first = start if start >= 0 else max(size + start, 0)
    return first + length
