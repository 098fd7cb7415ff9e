"""A plain ``pip install zstores`` (no extras): a missing extra says in one line what to install.

The environment ``.venv-plain`` holds zstores with its required dependencies
only (numpy, numcodecs, lmdb, tqdm): no zarr, mfusepy, fasteners, redis or
pymongo.  It is made on first use (that needs PyPI) and kept; every run
reinstalls zstores itself from this tree (without dependencies), so the
commands tested are the current ones, installed as a user installs them.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import missing_peer

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-plain"
STAMP = VENV / "zstores-tree.sha256"  # the tree last installed there
#: Optional packages that must be absent for these tests to mean anything.
EXTRAS = {"zarr": "zarr", "mfusepy": "fuse", "fasteners": "sync", "redis": "redis",
          "pymongo": "mongodb"}

pytestmark = pytest.mark.timeout(900)


def _pip(*args: str) -> None:
    done = subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", *args],
                          capture_output=True, text=True, timeout=800, check=False)
    if done.returncode != 0:
        missing_peer(f"cannot install into {VENV} (PyPI unreachable?): "
                     f"{done.stderr.strip()[-300:]}")


def _tree_digest() -> str:
    digest = hashlib.sha256()
    files = [ROOT / "pyproject.toml", *sorted((ROOT / "zstores").rglob("*.py")),
             *sorted((ROOT / "zfuse").rglob("*.py"))]
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def plain() -> Iterator[Path]:
    """The bin folder of an environment with a plain, current ``pip install zstores``."""
    # Test workers (pytest -n) share the environment: one installs, the others wait.
    VENV.mkdir(exist_ok=True)  # python -m venv fills an existing folder
    with open(VENV / "install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _install()
        fcntl.flock(lock, fcntl.LOCK_UN)
    yield VENV / "bin"


def _install() -> None:
    current = _tree_digest()
    if not (VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
        _pip(str(ROOT))  # first time: zstores and its required dependencies
    elif not STAMP.exists() or STAMP.read_text() != current:
        _pip("--no-deps", "--force-reinstall", str(ROOT))  # this tree's code, not an old copy
    STAMP.write_text(current)
    present = subprocess.run(
        [str(VENV / "bin" / "python"), "-c",
         ("import importlib.util as u, sys; "
          "print(' '.join(n for n in sys.argv[1:] if u.find_spec(n)))"), *EXTRAS],
        capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert not present, f"{VENV} is not a plain install: it has {present}"


def _run(plain: Path, *command: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    program = str(plain / command[0]) if (plain / command[0]).exists() else command[0]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([program, *command[1:]], capture_output=True, text=True, timeout=120,
                          check=False, cwd=cwd, env=env)


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    return lines[0]


def test_zfuse_help_version_and_list_work_without_mfusepy(plain: Path) -> None:
    done = _run(plain, "zfuse", "--help")
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert "examples:" in done.stdout and "pip install 'zstores[fuse]'" in done.stdout
    done = _run(plain, "zfuse", "mount", "--help")
    assert done.returncode == 0 and not done.stderr, done.stderr
    done = _run(plain, "zfuse", "--version")
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert done.stdout.startswith("zfuse ")
    assert "mfusepy not installed: pip install 'zstores[fuse]'" in done.stdout
    done = _run(plain, "zfuse", "list")
    assert done.returncode == 0 and not done.stderr, done.stderr


def test_zfuse_mount_names_the_extra(plain: Path, tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    done = _run(plain, "zfuse", "mount", "memory://", str(tmp_path / "mnt"))
    assert done.returncode == 1
    assert _one_line(done) == "zfuse: error: zfuse needs mfusepy: pip install 'zstores[fuse]'"


def test_zstores_version_and_a_store_of_an_extra_from_the_command(plain: Path) -> None:
    done = _run(plain, "zstores", "--version")
    assert done.returncode == 0 and done.stdout.startswith("zstores ") and not done.stderr
    done = _run(plain, "zstores", "ls", "redis://127.0.0.1:9/0")
    assert done.returncode == 1
    assert "pip install 'zstores[redis]'" in _one_line(done)


@pytest.mark.parametrize(("code", "extra"), [
    ("zstores.zarr_store('memory://')", "zarr"),
    ("zstores.ProcessSynchronizer('locks')", "sync"),
    ("zstores.RedisStore()", "redis"),
    ("zstores.MongoDBStore()", "mongodb"),
])
def test_python_api_raises_one_error_naming_the_extra(plain: Path, tmp_path: Path, code: str,
                                                      extra: str) -> None:
    done = _run(plain, "python", "-c", f"import zstores; {code}", cwd=tmp_path)
    assert done.returncode == 1
    # One exception, the last line, not chained to the ImportError behind it.
    assert done.stderr.count("Traceback") == 1 and "During handling" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(("ModuleNotFoundError: ", "ImportError: ")), last
    assert last.endswith(f"pip install 'zstores[{extra}]'"), last
    assert not (tmp_path / "locks").exists()  # nothing made before failing


def test_the_core_works_without_extras(plain: Path, tmp_path: Path) -> None:
    done = _run(plain, "python", "-c", (
        "import zstores, zfuse\n"
        "with zstores.open_store('data.sqlite') as s:\n"
        "    zstores.init_array(s, shape=(4,), chunks=(2,), dtype='i2')\n"
        "    print(s.listdir())\n"), cwd=tmp_path)
    assert done.returncode == 0 and not done.stderr, done.stderr
    assert done.stdout == "['.zarray']\n"
