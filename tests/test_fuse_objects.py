"""``zfuse mount`` of object-store URLs (S3 on moto, Azure Blob on Azurite, GCS on
fake-gcs-server through gcsfs), for real.

zarr-python 3's LocalStore writes and reads an array through the mounted
folder while zstores reads the same objects from the bucket, and the
reverse.  The credentials never show: not in what ``zfuse`` prints, not in
``zfuse list``, and not in the daemon's command line when the URL comes on
standard input (``zfuse mount - MOUNTPOINT``), nor when they come from the
environment.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import zstores
from zstores.adapters import zarr_store

from conftest import require_module
from fuse_helpers import ZFUSE, run_zfuse
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
from test_fuse_cli import _daemon_pid

pytestmark = pytest.mark.timeout(300)

require_module("obstore")
zarr = require_module("zarr", minversion="3")


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as file:
        return file.read().replace(b"\0", b" ").decode()


def _mount_from_stdin(url: str, mountpoint: Path, *options: str) -> int:
    """``zfuse mount - MOUNTPOINT`` with ``url`` on standard input; the daemon's pid."""
    done = subprocess.run([*ZFUSE, "mount", "-", str(mountpoint), *options], input=url + "\n",
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    for secret in (S3_SECRET, AZURITE_KEY, GCS_TOKEN):
        assert secret not in done.stdout + done.stderr
    return _daemon_pid(done.stdout)


def _unmount(mountpoint: Path) -> None:
    done = run_zfuse("unmount", str(mountpoint), timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.fixture(params=["s3", "azure"])
def object_url(request: pytest.FixtureRequest, s3_endpoint: str, azure_endpoint: str) -> str:
    """A fresh prefix of a new bucket (container), credentials in the URL."""
    if request.param == "s3":
        return s3_store_url(s3_endpoint, new_s3_bucket(s3_endpoint), "mounted/run1")
    return azure_store_url(azure_endpoint, new_azure_container(azure_endpoint), "mounted/run1")


def test_zarr_writes_through_the_mount_and_zstores_reads_the_bucket(
        object_url: str, mountpoint: Path) -> None:
    data = np.arange(48 * 40, dtype="<i4").reshape(48, 40)
    with zstores.open_store(object_url, mode="w") as store:
        store["readme.txt"] = b"written before the mount"
    pid = _mount_from_stdin(object_url, mountpoint)
    try:
        command_line = _cmdline(pid)
        assert S3_SECRET not in command_line and AZURITE_KEY not in command_line
        assert GCS_TOKEN not in command_line
        assert command_line.split()[-2:] == ["-", str(mountpoint)]
        listed = run_zfuse("list", "--json")
        entry = next(e for e in json.loads(listed.stdout)
                     if e["mountpoint"] == str(mountpoint))
        assert entry["pid"] == pid and "***" in entry["url"]
        assert S3_SECRET not in listed.stdout and AZURITE_KEY not in listed.stdout
        assert GCS_TOKEN not in listed.stdout
        assert (mountpoint / "readme.txt").read_bytes() == b"written before the mount"
        local = zarr.storage.LocalStore(mountpoint)
        array = zarr.create_array(store=local, name="grid", shape=data.shape, chunks=(16, 16),
                                  dtype=data.dtype, zarr_format=3)
        array[...] = data
        array[:8, :8] = -1  # a chunk rewritten: replaced in the bucket, not added
        expected = data.copy()
        expected[:8, :8] = -1
    finally:
        _unmount(mountpoint)
    with zstores.open_store(object_url, mode="r") as store:
        assert sorted(store.listdir("grid/c")) == ["0", "1", "2"]
        assert len([key for key in store if key.startswith("grid/")]) == 1 + 3 * 3
        read = zarr.open_array(store=zarr_store(store), path="grid", mode="r")[...]
    np.testing.assert_array_equal(read, expected)


def test_an_array_in_s3_reads_through_a_mount_with_credentials_from_the_environment(
        s3_endpoint: str, mountpoint: Path) -> None:
    bucket = new_s3_bucket(s3_endpoint)
    data = np.linspace(0, 1, 70 * 30).reshape(70, 30)
    with zstores.open_store(s3_store_url(s3_endpoint, bucket, "env"), mode="w") as store:
        array = zarr.create_array(store=zarr_store(store), shape=data.shape, chunks=(32, 32),
                                  dtype="f8", zarr_format=2, compressors=None)
        array[...] = data
    url = f"s3://{bucket}/env"  # nothing secret in it: AWS's variables hold the keys
    done = run_zfuse("mount", "--read-only", url, str(mountpoint), env=s3_env(s3_endpoint))
    assert done.returncode == 0, done.stderr
    pid = _daemon_pid(done.stdout)
    try:
        assert S3_SECRET not in _cmdline(pid)
        assert sorted(os.listdir(mountpoint)) == [".zarray", ".zattrs", "0.0", "1.0", "2.0"]
        read = zarr.open_array(zarr.storage.LocalStore(mountpoint, read_only=True), mode="r")
        np.testing.assert_array_equal(read[...], data)
        with pytest.raises(OSError, match="Read-only"):
            (mountpoint / "new").write_bytes(b"x")
    finally:
        _unmount(mountpoint)


def test_zarr_writes_through_a_mount_of_gcs(gcs_endpoint: str, mountpoint: Path) -> None:
    """The same round trip on gs:// (via=fsspec, a token in the URL on standard input)."""
    url = gcs_store_url(gcs_endpoint, new_gcs_bucket(gcs_endpoint), "mounted/run1")
    test_zarr_writes_through_the_mount_and_zstores_reads_the_bucket(url, mountpoint)


def test_a_url_on_stdin_is_refused_when_empty(mountpoint: Path) -> None:
    done = subprocess.run([*ZFUSE, "mount", "-", str(mountpoint)], input="\n",
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.strip() == ("zfuse: error: URL '-': no store URL on standard input "
                                   "(one line: the URL)")
