"""Every benchmark script still runs: each one's ``--smoke`` mode, with its peers.

A smoke run measures a few keys or files in one round (figures worth nothing)
through the same code as a recorded run, so a benchmark cannot rot between
recordings: a changed API of ours or of a peer (zarr-sqlite, icechunk,
ratarmount, zarr-python 2.18) fails here.  Each script runs as a user would,
in a fresh process, with this tree first on ``PYTHONPATH``.  A missing peer
skips the test, or fails it under ``ZSTORES_REQUIRE_PEERS=1`` (the scripts'
``--require-peers`` then exits with status 3 naming it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench_common import PEER_MISSING
from conftest import REQUIRE_PEERS, missing_peer
from fuse_helpers import require_fuse

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
#: The newest zarr-python, where zarr-sqlite and icechunk are installed (scripts/setup-env).
ZARR_LATEST_PYTHON = os.environ.get("ZSTORES_ZARR_LATEST_PYTHON",
                                    str(ROOT / ".venv-zarr-latest" / "bin" / "python"))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def run_smoke(python: str, script: str, *options: str, env: dict[str, str] | None = None) -> str:
    """Run ``script --smoke`` and return what it printed; its failure fails the test."""
    if not Path(python).exists():
        missing_peer(f"{python} is missing (scripts/setup-env makes it)")
    command = [python, str(SCRIPTS / script), "--smoke", *options]
    if REQUIRE_PEERS:
        command.append("--require-peers")
    environment = {**os.environ, **(env or {}),
                   "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=environment,
                          timeout=840, check=False)
    if done.returncode == PEER_MISSING:
        missing_peer(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, f"{script} --smoke failed:\n{done.stdout}\n{done.stderr}"
    assert "peer missing" not in done.stderr or not REQUIRE_PEERS, done.stderr
    return done.stdout


def test_bench_zarr_smoke(tmp_path: Path) -> None:
    out = run_smoke(ZARR_LATEST_PYTHON, "bench_zarr.py", "--dir", str(tmp_path))
    assert "| 64 KiB chunks: read cold |" in out
    assert "| 4 MiB chunks: write |" in out
    # the ratios again by CPU time, which a loaded machine sways far less than the wall clock
    cpu_ratios = out.split("CPU time:", 1)[1]
    assert "| 4 MiB chunks: write |" in cpu_ratios
    assert "| figure | Directory / LocalStore" in cpu_ratios
    if REQUIRE_PEERS:  # every peer has a column and a ratio
        assert "| figure | unit | LocalStore | Directory | LMDB | SQLite" in out
        assert "zarr-sqlite" in out.split("| figure | unit |", 1)[1].splitlines()[0]
        assert "icechunk" in out.split("| figure | unit |", 1)[1].splitlines()[0]
        assert "| SQLite / zarr-sqlite |" in out


def test_bench_stores_smoke(redis_url: str, mongodb_url: str) -> None:
    zarr2 = os.environ.get("ZSTORES_ZARR2_PYTHON", str(ROOT / ".venv-zarr2" / "bin" / "python"))
    out = run_smoke(sys.executable, "bench_stores.py", "--zarr2-python", zarr2,
                    env={"ZSTORES_TEST_REDIS_URL": redis_url,
                         "ZSTORES_TEST_MONGODB_URL": mongodb_url})
    for backend in ("memory", "directory", "nested", "zip", "dbm", "lmdb", "sqlite", "redis",
                    "mongodb"):
        assert f"| {backend} | tiny, nested folder | listdir | 20 |" in out, backend
    assert "| 64 KiB | listdir |" not in out  # the listings rows measure it
    # The folder backends' listing floor: zarr 2.18's call, the safe floor, ours.
    for backend in ("directory", "nested"):
        floor_row = next(line for line in out.splitlines()
                         if line.startswith(f"| {backend} | tiny, nested folder | 20 |"))
        assert "n/a" not in floor_row, floor_row
    # The end-to-end row has its floor: zarr 3 reading the chunks from its MemoryStore.
    zarr3_row = next(line for line in out.splitlines()
                     if line.startswith("| lmdb | 64 KiB | zarr 3 reads the array |"))
    assert zarr3_row.split("|")[7].strip() != "n/a", zarr3_row
    # The listings' data, filled once for every run, is gone from the servers.
    import pymongo
    import redis

    assert not list(redis.Redis.from_url(redis_url).scan_iter(match="bench_*"))
    assert not [name for name in pymongo.MongoClient(mongodb_url).list_database_names()
                if name.startswith("bench_")]


def test_bench_sync_smoke(redis_url: str) -> None:
    zarr2 = os.environ.get("ZSTORES_ZARR2_PYTHON", str(ROOT / ".venv-zarr2" / "bin" / "python"))
    out = run_smoke(sys.executable, "bench_sync.py", "--zarr2-python", zarr2,
                    "--redis-url", redis_url)
    for synchronizer in ("zstores-process", "zstores-redis", "zarr2-process"):
        assert f"| {synchronizer} |" in out, synchronizer
    assert "| lmdb | 4 |" in out and "n/a" not in out


def test_bench_fuse_smoke(tmp_path: Path) -> None:
    require_fuse()
    out = run_smoke(sys.executable, "bench_fuse.py", "--dir", str(tmp_path))
    assert "| LMDB | ls of 200 keys |" in out
    assert "| small files, 8 threads, cold | files/s |" in out
    if REQUIRE_PEERS:
        assert "| zfuse read-write | zfuse read-only | ratarmount |" in out


def test_bench_fuse_versions_smoke() -> None:
    require_fuse()
    out = run_smoke(sys.executable, "bench_fuse_versions.py")
    for mount in ("read-write", "read-only"):
        for measure in ("small files, cold", "small files, warm", "big value, cold",
                        "big value, warm"):
            assert f"| LMDB | {mount} | {measure} |" in out


def test_bench_objects_smoke(s3_endpoint: str) -> None:
    zarr2 = os.environ.get("ZSTORES_ZARR2_PYTHON", str(ROOT / ".venv-zarr2" / "bin" / "python"))
    out = run_smoke(sys.executable, "bench_objects.py", "--zarr2-python", zarr2,
                    env={"ZSTORES_TEST_S3_ENDPOINT": s3_endpoint})
    assert "| 20 x 4 KiB | getitems | values/s |" in out
    assert "| values | N sequential gets s | one getitems s | getitems speed-up |" in out
    if REQUIRE_PEERS:
        assert "| zstores | zarr2-fsspec | zarr3-fsspec | zarr3-obstore | raw-obstore |" in out


def test_bench_txn_smoke(tmp_path: Path, redis_url: str) -> None:
    out = run_smoke(sys.executable, "bench_txn.py", "--dir", str(tmp_path),
                    "--redis-url", redis_url, "--icechunk-python", ZARR_LATEST_PYTHON)
    for backend in ("LMDB", "SQLite", "Redis"):
        assert f"| {backend} | 4 | 0.5 |" in out, backend
    if REQUIRE_PEERS:
        header = out.split("| backend | chunks |", 1)[1].splitlines()[0]
        assert "| transaction / icechunk |" in header


def test_bench_cluster_smoke(redis_url: str) -> None:
    if not os.environ.get("ZSTORES_TEST_REDIS_CLUSTER_URL"):
        pytest.skip("no Redis Cluster (scripts/services start makes one)")
    out = run_smoke(sys.executable, "bench_cluster.py")
    for op in ("set", "get", "getitems"):
        assert f"| {op} |" in out, out


def test_bench_versions_smoke() -> None:
    out = run_smoke(sys.executable, "bench_versions.py")
    for backend in ("LMDB", "SQLite", "Directory", "Memory", "Zip"):
        for op in ("get 16 B", "set 64 KiB", "getitems 100 x 16 B", "listdir of 1,000 keys",
                   "len(store)", "zarr 3: read 64 x 64 KiB chunks"):
            assert f"| {backend} | {op} |" in out, (backend, op)
    assert "zstores of commit HEAD" in out
