"""The ``zstores`` command on object-store URLs (s3://, az://, gs://), for real.

Every subcommand runs in a subprocess against the test command's emulators
(moto for S3, Azurite for Azure Blob, fake-gcs-server for GCS through gcsfs,
``via=fsspec``; see scripts/services), with the
credentials in the URL as a user would type them: none may show in anything
the command prints.  ``cp`` into S3 killed
with SIGKILL midway leaves only whole values, and the same command run again
finishes and verifies the copy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import zstores

from cli_helpers import (
    COMMAND,
    Result,
    contents,
    write_rows,
    write_sample,
    zstores_cmd,
)
from conftest import require_module
from object_urls import (
    AZURITE_KEY,
    GCS_TOKEN,
    S3_SECRET,
    azure_store_url,
    gcs_store_url,
    new_azure_container,
    new_gcs_bucket,
    new_s3_bucket,
    s3_env,
    s3_store_url,
)
from relays import CuttingRelay, through

require_module("obstore")

SAMPLE_KEYS = 23  # what write_sample writes: 5 metadata documents and 18 chunks
SECRETS = (S3_SECRET, AZURITE_KEY, GCS_TOKEN)


def shows_no_secret(result: Result) -> Result:
    """``result``, once checked to show no credential on stdout or stderr."""
    for secret in SECRETS:
        assert secret not in result.out and secret not in result.err, result
    return result


def run(*args: str) -> Result:
    return shows_no_secret(zstores_cmd(*args))


@pytest.fixture(params=["s3", "azure"])
def object_url(request: pytest.FixtureRequest, s3_endpoint: str, azure_endpoint: str):
    """Makes URLs of fresh prefixes in one new bucket (container) of the service."""
    if request.param == "s3":
        bucket = new_s3_bucket(s3_endpoint)
        return lambda prefix: s3_store_url(s3_endpoint, bucket, prefix)
    container = new_azure_container(azure_endpoint)
    return lambda prefix: azure_store_url(azure_endpoint, container, prefix)


def test_every_subcommand_works_on_an_object_store(object_url, tmp_path: Path) -> None:
    url = object_url("runs/run 1")
    written = write_sample(url)
    members = run("ls", url, "-r")
    assert (members.code, members.err) == (0, "")
    assert members.out.splitlines() == [
        "/", "├── counts  (10,) int16", "└── g/", "    └── temp  (20, 20) float64"]
    info = run("info", url, "counts", "--json").json()
    assert (info["shape"], info["chunks_initialized"], info["nchunks"]) == ([10], 2, 3)
    assert info["store_type"] in ("S3Store", "AzureStore", "GCSStore")
    usage = run("du", url, "--json").json()
    assert (usage["keys"], usage["bytes"]) == (SAMPLE_KEYS, sum(map(len, written.values())))
    checked = run("verify", url)
    assert checked.code == 0 and "18 of 18 chunks decoded" in checked.out
    assert run("consolidate", url).code == 0
    with zstores.open_store(url, mode="r") as store:
        assert ".zmetadata" in store
    local = str(tmp_path / "local")
    down = run("cp", url, local, "--verify")
    assert down.code == 0 and f"{SAMPLE_KEYS + 1} of {SAMPLE_KEYS + 1} keys verified" in down.out
    other = object_url("runs/copy")
    up = run("cp", local, other, "--jobs", "3")
    assert up.code == 0 and contents(other) == contents(url)
    plan = run("migrate", other, "--to", "3", "--dry-run")
    assert plan.code == 0 and "zarr.json" in plan.out
    assert run("migrate", other, "--to", "3").code == 0
    with zstores.open_store(other, mode="r") as store:
        assert {"zarr.json", "g/temp/zarr.json", "counts/zarr.json"} <= set(store)
    removed = run("rm", url, "g")
    assert removed.code == 0 and removed.out.startswith("removed 19 keys")
    assert run("ls", url).out.splitlines() == ["counts  (10,) int16"]
    missing = run("ls", url, "nothing/here")
    assert missing.code == 1 and len(missing.err.splitlines()) == 1


def test_http_without_listing_is_one_clear_line(http_server, tmp_path: Path) -> None:
    """A plain HTTP server cannot list a folder (that takes WebDAV's PROPFIND), and every
    subcommand starts with a listing: each says so in one line, with no traceback."""
    base, served = http_server
    folder = served / f"cli-{tmp_path.name}"
    write_sample(str(folder))
    url = f"{base}{folder.name}"
    for command in (["ls", url], ["du", url], ["verify", url], ["cp", url, str(tmp_path / "c")]):
        failed = run(*command)
        assert failed.code == 1 and len(failed.err.splitlines()) == 1, failed
        assert "HTTPStore" in failed.err and "http:// stores cannot list keys" in failed.err
        assert "Traceback" not in failed.err


def test_credentials_from_the_environment(s3_endpoint: str) -> None:
    """No credentials in the URL at all: AWS's environment variables, as on a cluster."""
    bucket = new_s3_bucket(s3_endpoint)
    write_sample(s3_store_url(s3_endpoint, bucket, "env"))
    done = subprocess.run([*COMMAND, "verify", f"s3://{bucket}/env"], capture_output=True,
                          text=True, env={**os.environ, **s3_env(s3_endpoint)}, timeout=300,
                          check=False)
    assert done.returncode == 0 and "18 of 18 chunks decoded" in done.stdout, done.stderr
    assert S3_SECRET not in done.stdout + done.stderr


def test_a_missing_bucket_is_one_line_without_the_secret(s3_endpoint: str) -> None:
    url = s3_store_url(s3_endpoint, "zx-no-such-bucket", "p")
    for command in (["ls", url], ["verify", url], ["cp", url, url.replace("/p?", "/q?")]):
        failed = run(*command)
        assert failed.code == 1 and len(failed.err.splitlines()) == 1, failed
        assert "bucket 'zx-no-such-bucket' does not exist" in failed.err


def test_commands_exit_cleanly_after_concurrent_batches(s3_endpoint: str) -> None:
    """Each run ends with status 0: batches once ran obstore's async calls on an event
    loop of ours, and a tokio thread waking that loop while the interpreter exited
    aborted the process (status 134) in about one run of eight."""
    url = s3_store_url(s3_endpoint, new_s3_bucket(s3_endpoint), "exit")
    with zstores.open_store(url, mode="w") as store:
        store.setitems({f"k/{i}": bytes(64) for i in range(24)})
    script = ("import sys, zstores; s = zstores.open_store(sys.argv[1], mode='r'); "
              "keys = list(s); [s.getitems(keys) for _ in range(3)]")
    statuses = []
    for _ in range(10):  # four at a time: the race needs a busy machine, not a long run
        runs = [subprocess.Popen([sys.executable, "-c", script, url], stderr=subprocess.PIPE)
                for _ in range(4)]
        statuses += [(process.wait(timeout=300), process.stderr.read()) for process in runs]
    assert [status for status, _ in statuses] == [0] * len(statuses), statuses


def test_cp_from_lmdb_to_s3_killed_midway_resumes_and_verifies(s3_endpoint: str,
                                                               tmp_path: Path) -> None:
    rows = 1_000
    src = f"lmdb://{tmp_path}/run1.lmdb"
    write_rows(src, rows)
    total = rows + 1
    bucket = new_s3_bucket(s3_endpoint)
    with _link_dying_after(s3_endpoint, COPY_BUDGET["s3"]) as (relayed, cut):
        status, stderr = _copy_killed_midway(src, s3_store_url(relayed, bucket, "run1"), cut)
    assert status == -signal.SIGKILL
    assert S3_SECRET not in stderr
    dst = s3_store_url(s3_endpoint, bucket, "run1")
    partial = settled_contents(dst)  # only whole values (an S3 PUT is atomic), each the source's
    assert partial.pop(INCOMPLETE) is not None  # the killed copy says it is one
    assert 0 < len(partial) < total
    _assert_resumes_and_verifies(src, dst, partial, rows)


#: Bytes ``zstores cp`` may send before its link dies, about a third of the whole copy's
#: (measured through the relay: 711 KB for the 1,001 keys to S3, 204 KB for 301 to GCS),
#: well past its first writes (the unfinished-copy marker, then ``.zarray``, a few KB).
COPY_BUDGET = {"s3": 240_000, "gcs": 70_000}


@contextlib.contextmanager
def _link_dying_after(endpoint: str, budget: int) -> Iterator[tuple[str, threading.Event]]:
    """``endpoint`` reached through a ``CuttingRelay`` that dies after ``budget`` bytes:
    the relayed endpoint and the event set at the cut.  The relay is closed on exit,
    dropping the requests it held cut short."""
    relay = CuttingRelay(urlsplit(endpoint).port, budget)
    try:
        yield through(endpoint, relay), relay.cut
    finally:
        relay.close()


def _copy_killed_midway(src: str, dst: str, cut: threading.Event) -> tuple[int | None, str]:
    """``zstores cp SRC DST`` SIGKILLed once its link is cut: its status and stderr.

    The cut stops the copy midway by construction (its link passes a fixed number of
    bytes), so the kill never comes too late, however fast or slow the machine.
    """
    process = subprocess.Popen([*COMMAND, "cp", src, dst, "--jobs", "2", "--progress"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    stderr = _Drained(process)
    try:
        while not cut.wait(timeout=1):
            assert process.poll() is None, f"the copy ended before its link died: {stderr.text}"
        process.send_signal(signal.SIGKILL)  # no clean-up of any kind
    finally:
        process.kill()
        process.wait(timeout=60)
        stderr.join(timeout=60)
    return process.returncode, stderr.text


class _Drained(threading.Thread):
    """Reads a process's stderr to its end (so the process never blocks on a full pipe)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        super().__init__(daemon=True)
        self.process, self.text = process, ""
        self.start()

    def run(self) -> None:
        assert self.process.stderr is not None
        while chunk := self.process.stderr.read1(4096):  # type: ignore[attr-defined]
            self.text += chunk.decode("utf-8", "replace")


#: The key a copy writes first and deletes once complete (``zstores cp``).
INCOMPLETE = ".zstores/cp-incomplete"


def settled_contents(url: str) -> dict[str, bytes]:
    """``contents(url)`` once the killed copy's requests have all landed.

    SIGKILL stops the client, not the requests it had sent: the emulator may
    still complete an upload after the kill, so the keys are read until two
    looks half a second apart agree (at most 20 looks).
    """
    seen = contents(url)
    for _ in range(20):
        time.sleep(0.5)
        again = contents(url)
        if again == seen:
            return seen
        seen = again
    raise AssertionError(f"{url} kept changing after the copy was killed")


def _assert_resumes_and_verifies(src: str, dst: str, partial: dict[str, bytes],
                                 rows: int) -> dict[str, bytes]:
    """Each of ``partial`` (what a killed copy left in DST) is the source's; the same
    command again skips those, copies the rest and verifies; the source's contents."""
    total = rows + 1
    source = contents(src)
    assert all(source[key] == value for key, value in partial.items())
    resumed = run("cp", src, dst, "--verify")
    assert (resumed.code, resumed.err) == (0, "")
    assert f"skipped {len(partial):,} identical keys" in resumed.out
    assert f"{total:,} of {total:,} keys verified" in resumed.out
    assert contents(dst) == source
    checked = run("verify", dst, "--jobs", "4")
    assert checked.code == 0 and f"{rows:,} of {rows:,} chunks decoded" in checked.out
    return source


# ------------------------------------------------------------------------ GCS
@pytest.fixture
def gcs_object_url(gcs_endpoint: str):
    """Makes gs:// URLs (via=fsspec, a token in the query) of fresh prefixes in one new bucket."""
    bucket = new_gcs_bucket(gcs_endpoint)
    return lambda prefix: gcs_store_url(gcs_endpoint, bucket, prefix)


def test_every_subcommand_works_on_gcs(gcs_object_url, tmp_path: Path) -> None:
    test_every_subcommand_works_on_an_object_store(gcs_object_url, tmp_path)


def test_cp_between_lmdb_and_gcs_resumes_and_verifies(gcs_endpoint: str, tmp_path: Path) -> None:
    """Up to gs:// killed midway, resumed; then down again into LMDB, resumed too."""
    rows = 300
    src = f"lmdb://{tmp_path}/run1.lmdb"
    write_rows(src, rows)
    total = rows + 1
    bucket = new_gcs_bucket(gcs_endpoint)
    with _link_dying_after(gcs_endpoint, COPY_BUDGET["gcs"]) as (relayed, cut):
        status, stderr = _copy_killed_midway(src, gcs_store_url(relayed, bucket, "run1"), cut)
    assert status == -signal.SIGKILL
    assert GCS_TOKEN not in stderr
    dst = gcs_store_url(gcs_endpoint, bucket, "run1")
    partial = settled_contents(dst)  # whole values only (a GCS upload is atomic), each the source's
    assert partial.pop(INCOMPLETE) is not None
    assert 0 < len(partial) < total
    source = _assert_resumes_and_verifies(src, dst, partial, rows)

    back = f"lmdb://{tmp_path}/back.lmdb"
    first = run("cp", dst, back, "--verify")
    assert first.code == 0 and f"{total:,} of {total:,} keys verified" in first.out
    again = run("cp", dst, back)  # everything there already: all skipped, verified
    assert again.code == 0 and f"skipped {total:,} identical keys" in again.out
    assert contents(back) == source
    listed = run("ls", dst)
    assert listed.code == 0 and listed.out.splitlines() == [f"/  ({rows}, 64) float64"], listed


def test_a_missing_gcs_bucket_is_one_line_without_the_token(gcs_endpoint: str) -> None:
    url = gcs_store_url(gcs_endpoint, "zx-no-such-gcs-bucket", "p")
    for command in (["ls", url], ["verify", url]):
        failed = run(*command)
        assert failed.code == 1 and len(failed.err.splitlines()) == 1, failed
        assert "bucket 'zx-no-such-gcs-bucket' does not exist" in failed.err
