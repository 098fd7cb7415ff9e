"""A writer process for the single-writer stores (Zip, DBM), driven round by round from a test.

``WriterProcess(open_code)`` starts a child process that opens the store with
``open_code`` (a Python expression) and writes every key at version 0.  Each
``round()`` then makes it delete a third of the keys and rewrite the rest with
values of new sizes, flush, and rewrite a third again (into the space the
first rewrite left dead, which an older directory or index still names), and
flush again; it returns only when the child has finished, with the state a
reader opened beside it must now see (``key -> serial``).  Values are
``full_disk.make_value``'s: each says which key and which serial it is, so a
reader's wrong bytes are caught by ``full_disk.check_value``.

``run_rounds(count)`` makes the child run ``count`` rounds on its own, as fast
as it can (the stress variants), and ``wait()`` waits for them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from zstores.errors import StaleStoreError

from full_disk import check_value, make_value

TESTS = str(Path(__file__).resolve().parent)

_CHILD = r"""
import dbm.dumb, json, sys
sys.path.insert(0, TESTS)
from full_disk import make_value
import zstores

store = eval(OPEN)
visible = {}

def size(i, serial):
    # 1 KB to 161 KB, changing with every serial: new values rarely fit where old ones were
    return 1000 + ((i * 7 + serial * 13) % 9) * SPREAD

def write(i, serial):
    key = f"k{i}"
    store[key] = make_value(key, serial, size(i, serial))
    visible[key] = serial

def flush():
    getattr(store, "flush", lambda: None)()

def one_round(v):
    for i in range(KEYS):
        if (i + v) % 3 == 0:
            if f"k{i}" in visible:
                del store[f"k{i}"]
                del visible[f"k{i}"]
        else:
            write(i, 2 * v)
    flush()  # the values replaced and deleted are dead now: their space is reused next
    for i in range(KEYS):
        if (i + v) % 3 == 1:
            write(i, 2 * v + 1)
    flush()

for i in range(KEYS):
    write(i, 0)
flush()
print(json.dumps(visible), flush=True)
for line in sys.stdin:
    command, _, argument = line.partition(" ")
    if command == "round":
        one_round(int(argument))
        print(json.dumps(visible), flush=True)
    elif command == "rounds":
        first, count = map(int, argument.split())
        for v in range(first, first + count):
            one_round(v)
        print(json.dumps(visible), flush=True)
    elif command.strip() == "close":
        store.close()
        print("{}", flush=True)
        break
"""


class WriterProcess:
    """A child process writing a single-writer store round by round (see the module)."""

    def __init__(self, open_code: str, *, keys: int = 12, spread: int = 20_000,
                 python: str = sys.executable) -> None:
        program = "\n".join([
            f"TESTS = {TESTS!r}", f"OPEN = {open_code!r}", f"KEYS = {keys}",
            f"SPREAD = {spread}", textwrap.dedent(_CHILD),
        ])
        self.keys = keys
        self.version = 0
        self._child = subprocess.Popen(
            [python, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        self.visible = self._answer()

    def _answer(self) -> dict[str, int]:
        line = self._child.stdout.readline()  # type: ignore[union-attr]
        if not line:
            self._child.wait(60)
            raise AssertionError(f"the writer died: {self._child.stderr.read()[-3000:]}")  # type: ignore[union-attr]
        return json.loads(line)

    def _send(self, line: str) -> None:
        self._child.stdin.write(line + "\n")  # type: ignore[union-attr]
        self._child.stdin.flush()  # type: ignore[union-attr]

    def round(self) -> dict[str, int]:
        """Run one round to completion; the state a reader must see now."""
        self.version += 1
        self._send(f"round {self.version}")
        self.visible = self._answer()
        return self.visible

    def run_rounds(self, count: int) -> None:
        """Start ``count`` rounds; the child runs them without waiting (see ``wait``)."""
        self._send(f"rounds {self.version + 1} {count}")
        self.version += count

    def wait(self) -> dict[str, int]:
        """Wait for the rounds ``run_rounds`` started; the state after them."""
        self.visible = self._answer()
        return self.visible

    def close(self) -> None:
        """Close the store in the child and wait for it to end."""
        if self._child.poll() is None:
            self._send("close")
            self._answer()
        self._child.wait(60)
        assert self._child.returncode == 0, self._child.stderr.read()[-3000:]  # type: ignore[union-attr]

    def __enter__(self) -> WriterProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()
        else:
            self._child.kill()
            self._child.wait(60)


def check_sees(reader, visible: dict[str, int], keys: int) -> None:
    """``reader`` holds exactly ``visible``: each value whole, the right serial; ranges too."""
    assert sorted(reader) == sorted(visible)
    for i in range(keys):
        key = f"k{i}"
        if key not in visible:
            assert key not in reader
            try:
                reader[key]
            except KeyError:
                continue
            raise AssertionError(f"{key!r} was deleted, yet read")
        value = reader[key]
        assert check_value(key, value) == visible[key]
        expected = make_value(key, visible[key], len(value))
        assert reader.get_range(key, 7, 300) == expected[7:307]
        assert reader.get_range(key, -50) == expected[-50:]


def check_read(key: str, read, allowed: set[int] | None = None) -> str:
    """Run ``read()`` (a read of ``key``): a whole value of ``key``, KeyError or StaleStoreError.

    Returns ``"value"``, ``"missing"`` or ``"stale"``; a value's serial must be in
    ``allowed`` when given.  Anything else (wrong or torn bytes, another error)
    fails the test.
    """
    try:
        value = read()
    except KeyError:
        return "missing"
    except StaleStoreError:
        return "stale"
    serial = check_value(key, value)
    assert allowed is None or serial in allowed, f"{key!r}: serial {serial}, not {allowed}"
    return "value"
