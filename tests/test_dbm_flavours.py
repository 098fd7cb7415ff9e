"""dbm.gnu and dbm.ndbm through the whole StoreTests harness, under a Python that has them.

The Python of ``.venv`` (pyenv's build) has neither ``dbm.gnu`` nor
``dbm.ndbm``, so ``tests/test_dbm.py`` cannot collect their harness classes
there.  Debian's ``/usr/bin/python3`` has both (``dbm.gnu`` from the
``python3-gdbm`` package; its ``dbm.ndbm`` is Berkeley DB's ndbm interface):
``scripts/setup-env`` makes ``.venv-system`` from it, and this module runs
``tests/test_dbm.py``'s classes for the two flavours in that environment, in a
subprocess, and checks every outcome.  ``ZSTORES_DBM_PYTHON`` names another
interpreter with them.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest

from zstores.testing import StoreTests

from conftest import missing_peer

ROOT = Path(__file__).resolve().parents[1]
#: flavour -> the harness class of tests/test_dbm.py that runs it.
FLAVOURS = {"dbm.gnu": "TestDBMStoreGnu", "dbm.ndbm": "TestDBMStoreNdbm"}
#: Known failures, each a defect of DBMStore on that flavour (none today: Berkeley DB's
#: ndbm loses empty values, so DBMStore declares supports_empty_values=False there).
KNOWN_FAILURES: dict[str, set[str]] = {}

Results = dict[str, tuple[str, str]]


def flavour_python() -> str:
    """The interpreter that has the dbm flavours: ``ZSTORES_DBM_PYTHON`` or ``.venv-system``."""
    python = os.environ.get("ZSTORES_DBM_PYTHON") or str(ROOT / ".venv-system" / "bin" / "python")
    if not os.path.exists(python):
        missing_peer(f"no Python with dbm.gnu and dbm.ndbm at {python} (run scripts/setup-env, "
                     "or set ZSTORES_DBM_PYTHON)")
    return python


def _has_here(flavour: str) -> bool:
    try:
        __import__(flavour)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def harness_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Results]:
    """``flavour -> {test: (outcome, message)}``: one run of test_dbm.py's harness per flavour."""
    return {}


def _run(flavour: str, cache: dict[str, Results], folder: Path) -> Results:
    if flavour in cache:
        return cache[flavour]
    if _has_here(flavour):
        pytest.skip(f"{flavour} is in this Python: tests/test_dbm.py runs it in-process")
    python = flavour_python()
    probe = subprocess.run([python, "-c", f"import {flavour}"], capture_output=True, text=True,
                           timeout=60, check=False)
    if probe.returncode != 0:
        missing_peer(f"{python} lacks {flavour}: {probe.stderr.strip().splitlines()[-1:]} "
                     "(apt-get install python3-gdbm)")
    report = folder / f"{flavour}.xml"
    done = subprocess.run(
        [python, "-m", "pytest", "tests/test_dbm.py", "-q", "-p", "no:cacheprovider",
         "-k", FLAVOURS[flavour], f"--junitxml={report}", "-o", "junit_family=xunit1"],
        capture_output=True, text=True, cwd=ROOT, timeout=1100, check=False,
    )
    if not report.exists():
        raise AssertionError(f"the {flavour} harness did not run:\n{done.stdout}\n{done.stderr}")
    results: Results = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, child.get("message", "")
        results[case.get("name", "")] = (outcome, message)
    cache[flavour] = results
    return results


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_flavour_passes_the_store_harness(flavour: str, harness_runs: dict[str, Results],
                                          tmp_path: Path) -> None:
    results = _run(flavour, harness_runs, tmp_path)
    base_names = {name.partition("[")[0] for name in results}
    expected = {name for name in dir(StoreTests) if name.startswith("test_")}
    assert base_names == expected, ("harness tests not run", expected - base_names,
                                    "unexpected", base_names - expected)
    known = KNOWN_FAILURES.get(flavour, set())
    broken = {name: message for name, (outcome, message) in results.items()
              if outcome in ("failure", "error") and name.partition("[")[0] not in known}
    assert not broken, broken
    skipped = {message for outcome, message in results.values() if outcome == "skipped"}
    # Only what the store declares it cannot do (a capability flag) may be skipped.
    assert all("declares" in message for message in skipped), skipped


def test_ndbm_refuses_empty_values(tmp_path: Path) -> None:
    """Berkeley DB's ndbm reads an empty value back as a missing key: DBMStore refuses it."""
    if _has_here("dbm.ndbm"):
        pytest.skip("dbm.ndbm is in this Python: tests/test_dbm.py runs it in-process")
    done = subprocess.run(
        [flavour_python(), "-c", _ZERO_BYTES, str(tmp_path / "data.ndbm")],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["refused: UnsupportedOperationError", "['x']"]


_ZERO_BYTES = """
import dbm.ndbm, sys
from zstores import DBMStore, UnsupportedOperationError

with DBMStore(sys.argv[1], open=dbm.ndbm.open, mode="w") as store:
    assert not store.supports_empty_values
    try:
        store["empty"] = b""
    except UnsupportedOperationError as error:
        print("refused:", type(error).__name__)
    store["x"] = b"x"
with DBMStore(sys.argv[1], open=dbm.ndbm.open, mode="r") as store:
    print(sorted(store))
"""


_DEFAULT_FLAVOUR = """
import dbm, dbm.gnu, sys
from zstores import DBMStore

new, old = sys.argv[1], sys.argv[2]
with DBMStore(new) as store:           # a new database: dbm.dumb, not the first installed
    store["a"] = b"1"
db = dbm.gnu.open(old, "c")             # an existing gdbm database keeps its flavour
db[b"b"] = b"2"
db.close()
with DBMStore(old) as store:
    store["c"] = b"3"
with DBMStore(old, mode="w") as store:  # emptied in its own flavour
    store["d"] = b"4"
print(dbm.whichdb(new), dbm.whichdb(old), sorted(DBMStore(old, mode="r")))
"""


def test_default_creates_dumb_and_keeps_an_existing_flavour(tmp_path: Path) -> None:
    """On a Python with dbm.gnu, DBMStore still creates dbm.dumb files by default."""
    done = subprocess.run(
        [flavour_python(), "-c", _DEFAULT_FLAVOUR, str(tmp_path / "new"), str(tmp_path / "old")],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["dbm.dumb", "dbm.gnu", "['d']"]


_READERS_AND_WRITER = """
import importlib, json, subprocess, sys
from zstores import DBMStore, StoreLockedError

flavour, path = sys.argv[1], sys.argv[2]
module = importlib.import_module(flavour)
OTHER = '''
import importlib, sys
from zstores import DBMStore, StoreLockedError
try:
    DBMStore(sys.argv[2], open=importlib.import_module(sys.argv[1]).open, mode=sys.argv[3]).close()
except StoreLockedError as error:
    print("refused:", error)
else:
    print("opened")
'''


def other_process(mode):
    done = subprocess.run([sys.executable, "-c", OTHER, flavour, path, mode],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def here(mode):
    try:
        DBMStore(path, open=module.open, mode=mode).close()
    except StoreLockedError as error:
        return f"refused: {error}"
    return "opened"


out = {}
with DBMStore(path, open=module.open, mode="w") as store:
    store["a"] = b"1"
reader = DBMStore(path, open=module.open, mode="r")
out["writer beside a reader"] = other_process("r+")
out["writer beside a reader, same process"] = here("r+")
out["second reader"] = other_process("r")
reader.close()
writer = DBMStore(path, open=module.open, mode="r+")
out["reader beside a writer"] = other_process("r")
out["reader beside a writer, same process"] = here("r")
writer["b"] = b"2"
writer.close()
with DBMStore(path, open=module.open, mode="r") as reader:
    out["after"] = sorted(reader)
if flavour == "dbm.gnu":  # a writer that is not a DBMStore: gdbm's own lock refuses
    raw = module.open(path, "w")
    out["reader beside a gdbm writer"] = here("r")
    raw.close()
print(json.dumps(out))
"""


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_readers_and_a_writer_of_gnu_and_ndbm_exclude_each_other(flavour: str,
                                                                 tmp_path: Path) -> None:
    """gdbm and Berkeley DB's ndbm cannot be read while a writer changes them (ndbm's
    readers got stale or mixed values): a writer is refused beside readers, and a
    reader beside a writer, with StoreLockedError, in other processes and this one."""
    if _has_here(flavour):
        pytest.skip(f"{flavour} is in this Python: see tests/test_dbm.py")
    done = subprocess.run(
        [flavour_python(), "-c", _READERS_AND_WRITER, flavour, str(tmp_path / "data")],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    for case in ("writer beside a reader", "writer beside a reader, same process",
                 "reader beside a writer", "reader beside a writer, same process"):
        assert out[case].startswith("refused: "), (case, out[case])
        assert str(tmp_path / "data") in out[case] and "dbm.dumb" in out[case], out[case]
    assert out["second reader"] == "opened"
    assert out["after"] == ["a", "b"]
    if flavour == "dbm.gnu":
        assert out["reader beside a gdbm writer"].startswith("refused: "), out
