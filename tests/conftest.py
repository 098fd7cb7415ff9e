"""Shared fixtures: peers (zarr-python 2.18 in its own virtual environment), servers.

The README's test command sets ``ZSTORES_REQUIRE_PEERS=1``: then a missing
peer fails the test instead of skipping it, so CI cannot pass without them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

# The helper modules that define fixtures, registered as plugins so a test names
# their fixtures (small_fs, private_redis, private_mongodb, mountpoint ...) as
# arguments without importing them: an imported fixture is an unused import that
# the argument then redefines (pyflakes F811), and a module importing it registers
# a second copy.  Python imports each module once; a test module's own
# ``from full_disk import make_value`` gets the same module object.
pytest_plugins = ["full_disk", "servers", "fuse_helpers"]

REQUIRE_PEERS = os.environ.get("ZSTORES_REQUIRE_PEERS") == "1"


def missing_peer(reason: str) -> None:
    """Skip (on a developer's machine) or fail (under the test command)."""
    if REQUIRE_PEERS:
        pytest.fail(f"{reason} (ZSTORES_REQUIRE_PEERS=1 forbids skipping)")
    pytest.skip(reason)


def require_module(name: str, minversion: str | None = None) -> Any:
    """``pytest.importorskip(name)``, but a failure under ZSTORES_REQUIRE_PEERS=1.

    For the libraries a peer test needs (obstore, s3fs, tensorstore ...): under
    the test command a missing one fails the run instead of skipping its tests
    unseen (at module level, as a collection error).
    """
    try:
        return pytest.importorskip(name, minversion=minversion)
    except pytest.skip.Exception as skipped:
        if REQUIRE_PEERS:
            pytest.fail(f"{skipped} (ZSTORES_REQUIRE_PEERS=1 forbids skipping)", pytrace=False)
        raise


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test command's Redis server (ZSTORES_TEST_REDIS_URL), checked to answer."""
    url = os.environ.get("ZSTORES_TEST_REDIS_URL")
    if not url:
        missing_peer("ZSTORES_TEST_REDIS_URL is not set: no Redis server (see scripts/services)")
    import redis

    from zstores.urls import redact_url

    try:
        redis.Redis.from_url(url).ping()
    except redis.exceptions.RedisError as error:
        missing_peer(f"the Redis server at {redact_url(url)} does not answer: {error}")
    return url


@pytest.fixture(scope="session")
def mongodb_url() -> str:
    """The test command's MongoDB-protocol server (ZSTORES_TEST_MONGODB_URL), checked to answer."""
    url = os.environ.get("ZSTORES_TEST_MONGODB_URL")
    if not url:
        missing_peer(
            "ZSTORES_TEST_MONGODB_URL is not set: no MongoDB server (see scripts/services)"
        )
    import pymongo

    from zstores.urls import redact_url

    try:
        pymongo.MongoClient(url, serverSelectionTimeoutMS=5000).admin.command("ping")
    except pymongo.errors.PyMongoError as error:
        missing_peer(f"the MongoDB server at {redact_url(url)} does not answer: {error}")
    return url


def http_answers(url: str) -> bool:
    """True when ``url`` answers HTTP at all (a 403 or 404 is an answer too)."""
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=5).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def emulator_endpoint(variable: str, what: str, probe: str = "") -> str:
    """The URL in ``variable`` (set by scripts/services), checked to answer.

    ``probe`` is appended for the check (a path the emulator answers on).
    """
    url = os.environ.get(variable)
    if not url:
        missing_peer(f"{variable} is not set: no {what} (see scripts/services)")
    if not http_answers(url.rstrip("/") + probe):
        missing_peer(f"the {what} at {url} ({variable}) does not answer")
    return url


@pytest.fixture(scope="session")
def s3_endpoint() -> str:
    """The test command's S3 emulator (moto), ``ZSTORES_TEST_S3_ENDPOINT``."""
    return emulator_endpoint("ZSTORES_TEST_S3_ENDPOINT", "S3 emulator (moto_server)", "/")


@pytest.fixture(scope="session")
def gcs_endpoint() -> str:
    """The test command's GCS emulator (fake-gcs-server), ``ZSTORES_TEST_GCS_ENDPOINT``."""
    return emulator_endpoint("ZSTORES_TEST_GCS_ENDPOINT", "GCS emulator (fake-gcs-server)",
                             "/storage/v1/b")


@pytest.fixture(scope="session")
def azure_endpoint() -> str:
    """The test command's Azure Blob emulator (Azurite), ``ZSTORES_TEST_AZURE_ENDPOINT``.

    The URL ends in the account, ``.../devstoreaccount1``.
    """
    return emulator_endpoint("ZSTORES_TEST_AZURE_ENDPOINT", "Azure Blob emulator (Azurite)",
                             "?comp=list")


@pytest.fixture(scope="session")
def http_server() -> tuple[str, Path]:
    """The test command's static HTTP server: ``(url, folder)``.

    ``url`` (``ZSTORES_TEST_HTTP_URL``, ending in ``/``) serves the files of
    ``folder`` (``ZSTORES_TEST_HTTP_DIR``) read-only, Range requests included.
    Tests write below ``folder`` in a sub-folder of their own.
    """
    url = emulator_endpoint("ZSTORES_TEST_HTTP_URL", "static HTTP server")
    folder = os.environ.get("ZSTORES_TEST_HTTP_DIR")
    if not folder or not Path(folder).is_dir():
        missing_peer(f"ZSTORES_TEST_HTTP_DIR ({folder!r}) is not the folder {url} serves")
    return url, Path(folder)


class Zarr2:
    """Runs Python code in the zarr-python 2.18 environment.

    ``run(code, **args)`` executes ``code`` with ``args`` bound as globals
    (JSON-serializable values) and returns whatever it assigned to ``result``
    (JSON), so a test can drive zarr-python 2 and check its answer.
    """

    def __init__(self, python: str) -> None:
        self.python = python

    def run(self, code: str, **args: object) -> object:
        program = (
            "import json, sys\n"
            "globals().update(json.loads(sys.argv[1]))\n"
            "result = None\n"
            + textwrap.dedent(code)
            + "\nprint('\\n__RESULT__' + json.dumps(result))\n"
        )
        done = subprocess.run(
            [self.python, "-c", program, json.dumps(args, default=str)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,  # a failure is reported below with zarr 2's output
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
        if done.returncode != 0:
            raise AssertionError(f"zarr-python 2 code failed:\n{done.stdout}\n{done.stderr}")
        return json.loads(done.stdout.rsplit("__RESULT__", 1)[1])


@pytest.fixture(scope="session")
def zarr2() -> Zarr2:
    """zarr-python 2.18 in the interpreter named by ``ZSTORES_ZARR2_PYTHON``."""
    python = os.environ.get("ZSTORES_ZARR2_PYTHON")
    if not python:
        missing_peer("ZSTORES_ZARR2_PYTHON is not set: no zarr-python 2.18 environment")
    check = subprocess.run(
        [python, "-c", "import zarr; print(zarr.__version__)"],
        capture_output=True, text=True, check=False,
    )
    if check.returncode != 0 or not check.stdout.startswith("2.18"):
        missing_peer(f"{python} has no zarr-python 2.18: {check.stdout}{check.stderr}")
    return Zarr2(python)


def pytest_report_header(config: pytest.Config) -> str:
    zarr2 = os.environ.get("ZSTORES_ZARR2_PYTHON")
    return f"zstores peers: ZSTORES_ZARR2_PYTHON={zarr2!r}, python {sys.version.split()[0]}"
