"""A hypothesis state machine that drives a store and a dict with the same operations.

Keys are built so that no key is ever also a prefix of another key (every
key ends in a *leaf* name, every prefix is made of *folder* names, and the
two sets are disjoint), which lets hierarchical stores take part unchanged.
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

if TYPE_CHECKING:
    import pytest

    from .store_tests import StoreTests

FOLDERS = ["a", "b", "c", "cc", "a_b", "axb", "%", "A", "é"]
LEAVES = [".zarray", "0.0", "1.2", "x", "x_", "*", "[z]", "É"]

folder_paths = st.lists(st.sampled_from(FOLDERS), min_size=1, max_size=3).map("/".join)
keys = st.builds(
    lambda folders, leaf: "/".join([*folders, leaf]),
    st.lists(st.sampled_from(FOLDERS), min_size=0, max_size=3),
    st.sampled_from(LEAVES),
)
#: Mostly small values, some of a few KiB: a transaction holds those in pooled
#: memory (zstores._arena) rather than as bytes, a path of its own.
values = st.one_of(
    st.binary(max_size=40),
    st.builds(lambda seed, times: seed * times, st.binary(min_size=1, max_size=3),
              st.integers(400, 1500)),
)


def run_stateful_test(tests: StoreTests, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Run the state machine for the store that ``tests.open_store`` opens."""
    counter = itertools.count()
    canonical = tests.canonical_key

    class StoreMatchesDict(RuleBasedStateMachine):
        @initialize()
        def open(self) -> None:
            location = tmp_path_factory.mktemp("stateful") / f"store{next(counter)}"
            self.store = tests.open_store(location, mode="w")
            self.model: dict[str, bytes] = {}
            # While a transaction is open: the model as committed (what other
            # threads must see), and the transaction.
            self.committed: dict[str, bytes] | None = None
            self.tx: Any = None
            # Open snapshots, each with the committed contents when it was taken.
            self.snapshots: list[tuple[Any, dict[str, bytes]]] = []

        def teardown(self) -> None:
            store = getattr(self, "store", None)
            if store is not None:
                for view, _ in self.snapshots:
                    view.close()
                if self.tx is not None and not self.tx.closed:
                    self.tx.rollback()
                store.close()

        @precondition(lambda self: hasattr(self, "store") and self.store.supports_snapshots
                      and len(self.snapshots) < 2)
        @rule()
        def take_snapshot(self) -> None:
            # Taken inside an open transaction too: it shows what is committed.
            shown = self.committed if self.tx is not None else self.model
            self.snapshots.append((self.store.snapshot(), dict(shown)))  # type: ignore[arg-type]

        @precondition(lambda self: bool(getattr(self, "snapshots", None)))
        @rule()
        def close_snapshot(self) -> None:
            view, _ = self.snapshots.pop(0)
            view.close()

        @invariant()
        def snapshots_unchanged(self) -> None:
            for view, shown in getattr(self, "snapshots", []):
                assert {key: view[key] for key in view} == shown, (
                    "a snapshot changed after it was taken")

        def transactions(self) -> bool:
            return hasattr(self, "store") and self.store.supports_transactions

        @precondition(lambda self: self.transactions() and self.tx is None)
        @rule()
        def begin(self) -> None:
            self.tx = self.store.transaction()
            self.committed = dict(self.model)

        def seen_by_another_thread(self) -> dict[str, bytes]:
            seen: dict[str, bytes] = {}
            thread = threading.Thread(
                target=lambda: seen.update({key: self.store[key] for key in self.store}))
            thread.start()
            thread.join(60)
            return seen

        @precondition(lambda self: self.tx is not None)
        @rule()
        def commit(self) -> None:
            assert self.seen_by_another_thread() == self.committed, (
                "another thread saw the open transaction's writes")
            self.tx.commit()
            self.tx = self.committed = None
            assert self.seen_by_another_thread() == self.model

        @precondition(lambda self: self.tx is not None)
        @rule()
        def rollback(self) -> None:
            self.tx.rollback()
            assert self.committed is not None
            self.model = self.committed
            self.tx = self.committed = None

        def storable(self, value: bytes) -> bytes:
            # A store that declares supports_empty_values=False refuses b"".
            return value if value or self.store.supports_empty_values else b"\x00"

        @rule(key=keys, value=values)
        def set(self, key: str, value: bytes) -> None:
            value = self.storable(value)
            self.store[key] = value
            self.model[canonical(key)] = value

        @rule(key=keys)
        def get(self, key: str) -> None:
            expected = self.model.get(canonical(key))
            assert self.store.get(key) == expected
            assert (key in self.store) == (expected is not None)

        @rule(key=keys)
        def delete(self, key: str) -> None:
            if canonical(key) in self.model:
                del self.store[key]
                del self.model[canonical(key)]
            else:
                try:
                    del self.store[key]
                except KeyError:
                    pass
                else:
                    raise AssertionError(f"deleting missing key {key!r} did not raise KeyError")

        @rule(items=st.dictionaries(keys, values, max_size=5))
        def setitems(self, items: dict[str, bytes]) -> None:
            items = {key: self.storable(value) for key, value in items.items()}
            self.store.setitems(items)
            self.model.update({canonical(k): v for k, v in items.items()})

        @rule(batch=st.lists(keys, max_size=5))
        def getitems(self, batch: list[str]) -> None:
            expected = {k: self.model[canonical(k)] for k in batch if canonical(k) in self.model}
            assert self.store.getitems(batch) == expected

        @rule(batch=st.lists(keys, max_size=5))
        def delitems(self, batch: list[str]) -> None:
            self.store.delitems(batch)
            for key in batch:
                self.model.pop(canonical(key), None)

        @rule(path=folder_paths)
        def rmdir(self, path: str) -> None:
            self.store.rmdir(path)
            self.model = {k: v for k, v in self.model.items() if not k.startswith(path + "/")}

        @rule(path=st.one_of(st.just(""), folder_paths))
        def listdir(self, path: str) -> None:
            prefix = path + "/" if path else ""
            expected = {k[len(prefix):].split("/")[0] for k in self.model if k.startswith(prefix)}
            assert self.store.listdir(path) == sorted(expected)

        @rule(path=st.one_of(st.just(""), folder_paths, keys))
        def getsize(self, path: str) -> None:
            path = canonical(path)
            if path in self.model:
                expected = len(self.model[path])
            else:
                prefix = path + "/" if path else ""
                expected = sum(len(v) for k, v in self.model.items() if k.startswith(prefix))
            assert self.store.getsize(path) == expected

        @rule(key=keys, start=st.integers(-50, 50), length=st.one_of(st.none(), st.integers(0, 50)))
        def get_range(self, key: str, start: int, length: int | None) -> None:
            value = self.model.get(canonical(key))
            if value is None:
                return
            first = start if start >= 0 else max(len(value) + start, 0)
            stop = None if length is None else first + length
            assert self.store.get_range(key, start, length) == value[start:stop]

        @rule(src=keys, dst=keys)
        def rename_key(self, src: str, dst: str) -> None:
            src, dst = canonical(src), canonical(dst)
            if src not in self.model or src == dst:
                return
            self.store.rename(src, dst)
            self.model[dst] = self.model.pop(src)

        @rule(src=folder_paths, dst=folder_paths)
        def rename_prefix(self, src: str, dst: str) -> None:
            moved = {k: v for k, v in self.model.items() if k.startswith(src + "/")}
            if not moved or src == dst or dst.startswith(src + "/"):
                return
            self.store.rename(src, dst)
            for key in moved:
                del self.model[key]
            for key, value in moved.items():
                self.model[dst + key[len(src):]] = value

        @invariant()
        def same_keys(self) -> None:
            if hasattr(self, "store"):
                assert sorted(self.store) == sorted(self.model)
                assert len(self.store) == len(self.model)

    run_state_machine_as_test(
        StoreMatchesDict,
        settings=settings(
            max_examples=25,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
