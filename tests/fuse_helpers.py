"""Shared pieces of the zfuse tests: real stores, real mounts, and a leftover-mount guard.

Every mount a test makes goes through ``zfuse.mounted`` (always unmounted,
lazily if still busy) or through the ``zfuse`` command with ``zfuse unmount``
in a ``finally``; the session guard ``no_mount_left_behind`` then checks
/proc/mounts for zfuse mounts under the test session's temporary folders,
unmounts any it finds and fails the run.
"""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from zstores import Store

from conftest import missing_peer

#: Backends every file operation is tested on (redis and mongodb need servers).
BACKENDS = ["memory", "directory", "zip", "dbm", "lmdb", "sqlite", "redis", "mongodb"]

ZFUSE = [sys.executable, "-m", "zfuse"]


def require_fuse() -> None:
    """Skip (or fail under ZSTORES_REQUIRE_PEERS=1) when FUSE cannot mount here."""
    if not os.path.exists("/dev/fuse"):
        missing_peer("FUSE is not available: /dev/fuse is missing")
    if not (shutil.which("fusermount") or shutil.which("fusermount3")):
        missing_peer("FUSE is not available: fusermount is not installed")
    try:
        import zfuse

        zfuse.libfuse_version()  # loads libfuse (3 where it can mount, else 2)
    except (ImportError, OSError) as error:
        missing_peer(f"mfusepy cannot load libfuse: {error}")


def make_store(kind: str, folder: Path, **options: Any) -> Store:
    """A new, empty store of ``kind`` keeping its data under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "memory":
        from zstores import MemoryStore

        return MemoryStore(**options)
    if kind == "directory":
        from zstores import DirectoryStore

        return DirectoryStore(folder / "data", **options)
    if kind == "zip":
        from zstores import ZipStore

        return ZipStore(folder / "data.zip", **options)
    if kind == "dbm":
        from zstores import DBMStore

        return DBMStore(folder / "data.dbm", **options)
    if kind == "lmdb":
        from zstores.stores.lmdb import LMDBStore

        return LMDBStore(folder / "data.lmdb", map_size=1 << 28, **options)
    if kind == "sqlite":
        from zstores.stores.sqlite import SQLiteStore

        return SQLiteStore(folder / "data.sqlite", **options)
    if kind == "redis":
        return _server_store("ZSTORES_TEST_REDIS_URL", "zstores.stores.redis", "RedisStore",
                             options)
    if kind == "mongodb":
        return _server_store("ZSTORES_TEST_MONGODB_URL", "zstores.stores.mongodb",
                             "MongoDBStore", options)
    raise ValueError(f"unknown backend {kind!r}")


def _server_store(variable: str, module: str, name: str, options: dict[str, Any]) -> Store:
    url = os.environ.get(variable)
    if not url:
        missing_peer(f"{variable} is not set: no server for the {name} mount tests")
    try:
        cls = getattr(__import__(module, fromlist=[name]), name)
    except (ImportError, AttributeError) as error:
        missing_peer(f"{module}.{name} is not available: {error}")
    unique = f"zfuse_{uuid.uuid4().hex[:12]}"
    parameters = inspect.signature(cls).parameters
    for option in ("prefix", "collection"):
        if option in parameters:
            options.setdefault(option, unique)
    return cls(url, **options)


def keys_under(store: Store, prefix: str) -> set[str]:
    """The store's keys below ``prefix`` (relative to it)."""
    prefix = prefix.rstrip("/") + "/"
    return {key[len(prefix):] for key in store if key.startswith(prefix)}


def zfuse_mounts() -> list[str]:
    """Mount points of every zfuse mount in this mount namespace."""
    found = []
    with open("/proc/self/mounts", encoding="utf-8", errors="surrogateescape") as table:
        for line in table:
            fields = line.split(" ")
            if len(fields) >= 3 and fields[2] == "fuse.zfuse":
                found.append(fields[1].replace("\\040", " "))
    return found


def run_zfuse(*args: str, timeout: float = 60,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the ``zfuse`` command (``python -m zfuse``), with ``env`` added to the environment."""
    return subprocess.run([*ZFUSE, *args], capture_output=True, text=True, timeout=timeout,
                          check=False, env={**os.environ, **(env or {})})


@pytest.fixture
def mountpoint(tmp_path: Path) -> Path:
    """An empty folder to mount on (FUSE required)."""
    require_fuse()
    path = tmp_path / "mnt"
    path.mkdir()
    return path


@pytest.fixture(scope="session", autouse=True)
def no_mount_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the session if a test left a zfuse mount under the session's temp folders."""
    base = str(tmp_path_factory.getbasetemp())
    yield
    left = [path for path in zfuse_mounts() if path.startswith(base)]
    for path in left:
        subprocess.run(["fusermount", "-u", "-z", path], capture_output=True, check=False)
    assert not left, f"tests left zfuse mounts behind (now lazily unmounted): {left}"
