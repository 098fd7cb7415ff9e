"""Many processes and threads on one store at once: no torn, foreign or lost value.

4 processes x 2 threads each run a random mix of set, setitems, get,
getitems, delete, delitems and listdir for ``ZSTORES_STRESS_SECONDS``
(default 20) on one SQLite, LMDB (from a tiny map, so the map grows under
load) or Directory store.  Every value names its key and a serial unique to
one write (``full_disk.make_value``), so a read can tell a torn value, a
value of another key and one nobody wrote.

Keys:

- ``own/<writer>/k<i>``: written and deleted by one thread only (a writer),
  read by everyone.  The writer knows what each of its keys holds, so its
  own reads and listings must show exactly that, and the final state must
  be the result of its last operation on each key.
- ``shared/k<i>``: written and deleted by every thread.  Each completed
  change is logged with its start and end (``CLOCK_MONOTONIC``, one clock
  for all processes).  At the end, a present key must hold a value some
  logged write stored, an absent one must have a logged delete (or none
  logged write), and when one change started after every other change of
  that key had ended, the final state must be exactly its result.

Each process logs to its own file; the checks run in the test process after
every worker has ended, on the store reopened.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import zstores

from full_disk import check_value, make_value

PROCESSES = 4
THREADS = 2
OWN_KEYS = 24  # per writer
SHARED_KEYS = 16
# Bounds every loop even if the clock misbehaves.
MAX_OPS = 2_000_000

SECONDS = float(os.environ.get("ZSTORES_STRESS_SECONDS", "20"))

pytestmark = pytest.mark.timeout(SECONDS * 3 + 120)

# Value sizes: mostly small, a few large ones to make the LMDB map grow.
_SIZES = [64] * 6 + [1024] * 3 + [16 << 10] * 2 + [256 << 10]


# ---------------------------------------------------------------- stores
def open_store(kind: str, where: str) -> zstores.Store:
    """The store of ``kind`` under the folder ``where`` (run in every worker)."""
    if kind == "sqlite":
        from zstores.stores.sqlite import SQLiteStore

        return SQLiteStore(os.path.join(where, "data.sqlite"))
    if kind == "lmdb":
        from zstores.stores.lmdb import LMDBStore

        return LMDBStore(os.path.join(where, "data.lmdb"), map_size=TINY_MAP)
    if kind == "directory":
        return zstores.DirectoryStore(os.path.join(where, "data"))
    raise ValueError(f"unknown backend {kind!r}")


TINY_MAP = 64 << 10


# ---------------------------------------------------------------- the worker
def _own_key(writer: str, index: int) -> str:
    return f"own/{writer}/k{index}"


def _shared_key(index: int) -> str:
    return f"shared/k{index}"


def _writers() -> list[str]:
    return [f"p{p}t{t}" for p in range(PROCESSES) for t in range(THREADS)]


class Worker:
    """One thread's random operations, with what it knows of its own keys."""

    def __init__(self, store: zstores.Store, writer: str, serial_base: int, log: Callable,
                 deadline: float, seed: int) -> None:
        self.store, self.writer, self.log, self.deadline = store, writer, log, deadline
        self.serials = iter(range(serial_base, serial_base + MAX_OPS * 8))
        self.random = random.Random(seed)
        self.mine: dict[str, int | None] = {_own_key(writer, i): None for i in range(OWN_KEYS)}
        self.everyone = [_own_key(w, i) for w in _writers() for i in range(OWN_KEYS)]
        self.shared = [_shared_key(i) for i in range(SHARED_KEYS)]
        self.ops = 0

    def run(self) -> int:
        operations = [self.set, self.setitems, self.get, self.get, self.getitems,
                      self.delete, self.delitems, self.listdir]
        for _ in range(MAX_OPS):
            if time.monotonic() >= self.deadline:
                break
            self.random.choice(operations)()
            self.ops += 1
        return self.ops

    # -- what to touch: own keys, the shared ones, or (reads) anybody's
    def _targets(self, count: int) -> list[str]:
        pool = list(self.mine) if self.random.random() < 0.5 else self.shared
        return self.random.sample(pool, count)

    def _value(self, key: str) -> tuple[int, bytes]:
        serial = next(self.serials)
        return serial, make_value(key, serial, self.random.choice(_SIZES))

    # -- changes
    def set(self) -> None:
        (key,) = self._targets(1)
        serial, value = self._value(key)
        start = time.monotonic_ns()
        self.store[key] = value
        self._done("set", {key: serial}, start)

    def setitems(self) -> None:
        keys = self._targets(self.random.randint(1, 5))
        serials, values = {}, {}
        for key in keys:
            serials[key], values[key] = self._value(key)
        start = time.monotonic_ns()
        self.store.setitems(values)
        self._done("set", serials, start)

    def delete(self) -> None:
        (key,) = self._targets(1)
        start = time.monotonic_ns()
        try:
            del self.store[key]
        except KeyError:
            # Only correct when the key was absent: for an own key we know.
            assert key not in self.mine or self.mine[key] is None, (
                f"{self.writer}: deleting {key!r} (serial {self.mine[key]}) raised KeyError"
            )
            return
        assert key not in self.mine or self.mine[key] is not None, (
            f"{self.writer}: deleted {key!r}, which it had deleted before"
        )
        self._done("delete", {key: None}, start)

    def delitems(self) -> None:
        keys = self._targets(self.random.randint(1, 5))
        start = time.monotonic_ns()
        self.store.delitems(keys)
        self._done("delete", dict.fromkeys(keys), start)

    def _done(self, op: str, changes: dict[str, int | None], start: int) -> None:
        end = time.monotonic_ns()
        for key, serial in changes.items():
            if key in self.mine:
                self.mine[key] = serial
        self.log([op, self.writer, start, end, changes])

    # -- reads
    def get(self) -> None:
        key = self.random.choice(self.everyone + self.shared)
        try:
            value = self.store[key]
        except KeyError:
            value = None
        self._check(key, value)

    def getitems(self) -> None:
        keys = self.random.sample(self.everyone + self.shared, self.random.randint(1, 8))
        found = self.store.getitems(keys)
        assert set(found) <= set(keys), f"getitems({keys}) returned {sorted(found)}"
        for key in keys:
            self._check(key, found.get(key))

    def _check(self, key: str, value: bytes | None) -> None:
        if value is not None:
            serial = check_value(key, value)  # not torn, not another key's
            owner = key.split("/")[1] if key.startswith("own/") else None
            if owner is not None:  # only that writer's serials
                assert serial // 10**12 == _writers().index(owner) + 1, (
                    f"{key!r} holds serial {serial}, not written by {owner}"
                )
        if key in self.mine:  # read-your-writes, exactly
            got = None if value is None else check_value(key, value)
            assert got == self.mine[key], (
                f"{self.writer} wrote {key!r} last as {self.mine[key]} and read back {got}"
            )

    def listdir(self) -> None:
        if self.random.random() < 0.5:
            prefix, universe = f"own/{self.writer}", {f"k{i}" for i in range(OWN_KEYS)}
            names = self.store.listdir(prefix)
            expected = sorted(key.rsplit("/", 1)[1] for key, serial in self.mine.items()
                              if serial is not None)
            assert names == expected, f"{self.writer}: listdir({prefix!r}) = {names}"
        else:
            prefix, universe = "shared", {f"k{i}" for i in range(SHARED_KEYS)}
            names = self.store.listdir(prefix)
        assert set(names) <= universe, f"listdir({prefix!r}) shows {set(names) - universe}"
        top = self.store.listdir("")
        assert set(top) <= {"own", "shared"}, f"listdir('') shows {top}"


def worker_main(kind: str, where: str, process: int, log_path: str, seconds: float,
                seed: int) -> None:
    """One worker process: ``THREADS`` threads until ``seconds`` have passed."""
    store = open_store(kind, where)
    lock = threading.Lock()
    log_file = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed below

    def log(entry: list[Any]) -> None:
        line = json.dumps(entry) + "\n"
        with lock:
            log_file.write(line)

    deadline = time.monotonic() + seconds
    failures: list[BaseException] = []
    workers = [
        Worker(store, f"p{process}t{t}", (process * THREADS + t + 1) * 10**12, log, deadline,
               seed * 1000 + process * THREADS + t)
        for t in range(THREADS)
    ]

    def run(worker: Worker) -> None:
        try:
            worker.run()
        except BaseException as error:  # reported by the process, then re-raised
            failures.append(error)
            raise

    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log_file.close()
    summary = {"ops": sum(w.ops for w in workers)}
    if kind == "lmdb":
        summary["map_size"] = store.map_size
    store.close()
    print("__SUMMARY__" + json.dumps(summary))
    if failures:
        raise SystemExit(f"{len(failures)} thread(s) failed: {failures[0]!r}")


# ---------------------------------------------------------------- the checks
@dataclass
class Change:
    op: str
    writer: str
    start: int
    end: int
    serial: int | None


def read_logs(paths: list[Path]) -> dict[str, list[Change]]:
    """Every completed change, by key."""
    changes: dict[str, list[Change]] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            op, writer, start, end, keys = json.loads(line)
            for key, serial in keys.items():
                changes.setdefault(key, []).append(Change(op, writer, start, end, serial))
    return changes


def check_final_state(store: zstores.Store, changes: dict[str, list[Change]]) -> None:
    keys = set(store.keys())
    universe = {_own_key(w, i) for w in _writers() for i in range(OWN_KEYS)}
    universe |= {_shared_key(i) for i in range(SHARED_KEYS)}
    assert keys <= universe, f"keys nobody wrote: {sorted(keys - universe)[:5]}"
    for key in sorted(universe):
        history = changes.get(key, [])
        value = store[key] if key in keys else None
        final = None if value is None else check_value(key, value)
        if key.startswith("own/"):
            # One writer, one thread: its last change is the final state, exactly.
            expected = history[-1].serial if history else None
            assert final == expected, f"{key!r} ends as {final}, its writer's last was {expected}"
            continue
        written = {c.serial for c in history if c.op == "set"}
        if final is not None:
            assert final in written, f"{key!r} holds serial {final}, which no completed write made"
        else:
            assert not written or any(c.op == "delete" for c in history), (
                f"{key!r} is gone though no delete of it completed"
            )
        if history:
            last = max(history, key=lambda c: c.start)
            others_end = max((c.end for c in history if c is not last), default=-1)
            if last.start > others_end:  # no overlap: it must be the final state
                assert final == last.serial, (
                    f"{key!r} ends as {final}; the last change ({last.op} {last.serial} "
                    f"by {last.writer}) started after every other had ended"
                )


# ---------------------------------------------------------------- the tests
def _run_workers(kind: str, tmp_path: Path) -> tuple[list[dict], list[Path]]:
    where = tmp_path / "store"
    where.mkdir()
    open_store(kind, str(where)).close()  # created once, before the workers race to it
    tests = str(Path(__file__).resolve().parent)
    seed = int(os.environ.get("ZSTORES_STRESS_SEED", random.randrange(1 << 30)))
    logs = [tmp_path / f"log-{p}.jsonl" for p in range(PROCESSES)]
    children = []
    for process, log in enumerate(logs):
        code = (f"import sys; sys.path.insert(0, {tests!r}); import test_stress; "
                f"test_stress.worker_main({kind!r}, {str(where)!r}, {process}, {str(log)!r}, "
                f"{SECONDS}, {seed})")
        children.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
    summaries, failures = [], []
    for process, child in enumerate(children):
        try:
            out, err = child.communicate(timeout=SECONDS * 2 + 60)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
            failures.append(f"process {process} did not stop by itself (killed)")
        if child.returncode != 0:
            failures.append(f"process {process} (seed {seed}) exited {child.returncode}:\n"
                            f"{err[-3000:]}")
        found = re.search(r"__SUMMARY__(.*)", out)
        if found:
            summaries.append(json.loads(found.group(1)))
    assert not failures, "\n".join(failures)
    return summaries, logs


@pytest.mark.parametrize("kind", ["sqlite", "lmdb", "directory"])
def test_processes_and_threads_never_see_a_torn_foreign_or_lost_value(
        kind: str, tmp_path: Path) -> None:
    summaries, logs = _run_workers(kind, tmp_path)
    assert len(summaries) == PROCESSES
    changes = read_logs(logs)
    assert sum(len(c) for c in changes.values()) > 100, "hardly any change completed"
    with open_store(kind, str(tmp_path / "store")) as store:
        check_final_state(store, changes)
    if kind == "lmdb":
        assert max(s["map_size"] for s in summaries) > TINY_MAP, "the map never grew"
    print(f"{kind}: {sum(s['ops'] for s in summaries)} operations, "
          f"{sum(len(c) for c in changes.values())} completed key changes")


def test_the_final_checks_catch_lost_stale_and_unwritten_values() -> None:
    """The checks above fail on each kind of damage they exist for."""
    own, shared = _own_key("p0t0", 0), _shared_key(0)
    changes = {
        own: [Change("set", "p0t0", 1, 2, 10**12 + 1), Change("set", "p0t0", 3, 4, 10**12 + 2)],
        shared: [Change("set", "p0t0", 1, 5, 10**12 + 3),
                 Change("set", "p1t0", 2, 6, 3 * 10**12 + 1),
                 Change("delete", "p1t1", 7, 8, None)],
    }
    good = zstores.MemoryStore()
    good[own] = make_value(own, 10**12 + 2, 100)
    check_final_state(good, changes)  # the shared key's last change, a delete, is final

    damaged = {
        "stale own value": {own: make_value(own, 10**12 + 1, 100)},
        "lost own value": {},
        "value nobody wrote": {own: make_value(own, 10**12 + 2, 100),
                               shared: make_value(shared, 99, 100)},
        "delete that did not stick": {own: make_value(own, 10**12 + 2, 100),
                                      shared: make_value(shared, 10**12 + 3, 100)},
        "torn value": {own: make_value(own, 10**12 + 2, 100)[:-1] + b"?"},
        "foreign key": {own: make_value(own, 10**12 + 2, 100), "shared/zz": b"x"},
    }
    for damage, contents in damaged.items():
        store = zstores.MemoryStore()
        store.update(contents)
        with pytest.raises(AssertionError):
            check_final_state(store, changes)
            pytest.fail(f"the checks missed a {damage}")
