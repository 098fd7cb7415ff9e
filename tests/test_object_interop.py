"""Arrays on S3 shared with other libraries' S3 stores, both ways, on the moto emulator.

- zarr-python 2.18's ``FSStore`` (s3fs), run in its own environment
  (``ZSTORES_ZARR2_PYTHON``): what it writes reads through ``S3Store``, and
  what zarr writes through ``S3Store`` reads in it;
- zarr-python 3's ``FsspecStore`` (s3fs) and ``ObjectStore`` (obstore), in
  formats 2 and 3, both ways;
- on GCS (fake-gcs-server), zarr-python 2.18's ``FSStore`` (gcsfs) and
  ``GCSStore`` (``via=fsspec``) read what the other wrote;
- on Azure Blob (Azurite), zarr-python 2.18's ``ABSStore`` (azure-storage-blob)
  and ``AzureStore`` read what the other wrote, with both dimension separators;
- tensorstore's ``s3`` kvstore (endpoint override, credentials from the
  environment) reads arrays written through ``S3Store`` in formats 2 and 3.

The layout is the same for all (one object per key under the prefix), so each
test also checks that both sides list the same keys.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

import zstores
from zstores.stores.objectstore import AzureStore, GCSStore, S3Store

from conftest import require_module
from object_urls import (
    AZURITE_KEY,
    S3_KEY_ID,
    S3_REGION,
    S3_SECRET,
    azure_store_url,
    gcs_options,
    new_azure_container,
    new_gcs_bucket,
    new_s3_bucket,
    s3_env,
    s3_options,
)
from servers import AZURITE_ACCOUNT

require_module("obstore")
zarr = require_module("zarr", minversion="3")
from zstores.adapters import zarr_store  # noqa: E402 - needs zarr

pytestmark = pytest.mark.timeout(300)

SHAPE, CHUNKS = (37, 45), (16, 20)  # edge chunks cut short on both axes


def sample() -> np.ndarray:
    return (np.arange(SHAPE[0] * SHAPE[1], dtype="<i4").reshape(SHAPE) * 7) % 1000 - 300


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array, dtype="<i4").tobytes()).hexdigest()


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    return new_s3_bucket(s3_endpoint)


def ours(s3_endpoint: str, bucket: str, prefix: str, mode: str = "a") -> S3Store:
    return S3Store(f"{bucket}/{prefix}", mode=mode, **s3_options(s3_endpoint))


def write_group(store: Any, zarr_format: int, separator: str = ".") -> set[str]:
    """A group with an attribute and array ``x`` (blosc or zstd) in ``store``; its keys."""
    group = zarr.open_group(zarr_store(store), mode="w", zarr_format=zarr_format)
    group.attrs["source"] = "zstores"
    encoding = {"name": "v2", "separator": separator} if zarr_format == 2 else None
    x = group.create_array("x", shape=SHAPE, chunks=CHUNKS, dtype="<i4", fill_value=0,
                           chunk_key_encoding=encoding)
    x[...] = sample()
    return set(store)


def read_group(store: Any) -> tuple[np.ndarray, dict, set]:
    """Array ``x``, the attributes and the keys of the group in ``store``."""
    group = zarr.open_group(zarr_store(store), mode="r")
    return group["x"][...], dict(group.attrs), set(store)


def assert_written_by_zarr2(store: Any, keys: list[str]) -> None:
    """``store`` holds what ZARR2_WRITES wrote, every key of it and no other."""
    data, attrs, listed = read_group(store)
    np.testing.assert_array_equal(data, sample())
    assert attrs == {"source": "zarr 2"} and listed == set(keys)


def write_ours(s3_endpoint: str, bucket: str, prefix: str, zarr_format: int) -> None:
    """``write_group`` through S3Store."""
    with ours(s3_endpoint, bucket, prefix, mode="w") as store:
        write_group(store, zarr_format)


def read_ours(s3_endpoint: str, bucket: str, prefix: str) -> tuple[np.ndarray, dict, set]:
    with ours(s3_endpoint, bucket, prefix, mode="r") as store:
        return read_group(store)


# ------------------------------------------------------------ zarr-python 2.18
# What zarr-python 2.18 runs after one of the *_STORAGE scripts made ``store``:
# writing the group of ``sample()`` (returns the keys), and reading one back
# (returns the array's digest, the attributes and the keys).
ZARR2_WRITES = """
import numpy as np, numcodecs
root = zarr.group(store=store, overwrite=True)
root.attrs["source"] = "zarr 2"
data = (np.arange(shape[0] * shape[1], dtype="<i4").reshape(shape) * 7) % 1000 - 300
x = root.create_dataset("x", shape=shape, chunks=chunks, dtype="<i4",
                        compressor=numcodecs.Blosc("zstd", 3), dimension_separator=separator)
x[...] = data
result = sorted(store.keys())
"""
ZARR2_READS = """
import hashlib, numpy as np
root = zarr.open_group(store=store, mode="r")
x = root["x"][...]
result = [hashlib.sha256(np.ascontiguousarray(x, dtype="<i4").tobytes()).hexdigest(),
          dict(root.attrs), sorted(store.keys())]
"""
ZARR2_STORAGE = """
import s3fs, zarr
storage = dict(key=key, secret=secret, client_kwargs=dict(endpoint_url=endpoint,
                                                           region_name=region))
store = zarr.storage.FSStore(f"s3://{bucket}/{prefix}", **storage)
"""


def s3_where(s3_endpoint: str, bucket: str) -> dict[str, str]:
    """What ZARR2_STORAGE needs to reach ``bucket`` on the S3 emulator."""
    return {"key": S3_KEY_ID, "secret": S3_SECRET, "endpoint": s3_endpoint,
            "region": S3_REGION, "bucket": bucket}


@pytest.mark.parametrize("separator", [".", "/"])
def test_zarr2_fsstore_writes_and_s3store_reads(zarr2, s3_endpoint: str, bucket: str,
                                                separator: str) -> None:
    keys = zarr2.run(ZARR2_STORAGE + ZARR2_WRITES, **s3_where(s3_endpoint, bucket),
                     prefix="from-zarr2", shape=list(SHAPE), chunks=list(CHUNKS),
                     separator=separator)
    assert ("x/2/2" if separator == "/" else "x/2.2") in keys
    with ours(s3_endpoint, bucket, "from-zarr2", mode="r") as store:
        assert_written_by_zarr2(store, keys)


def test_s3store_writes_and_zarr2_fsstore_reads(zarr2, s3_endpoint: str, bucket: str) -> None:
    write_ours(s3_endpoint, bucket, "from-zstores", zarr_format=2)
    seen = zarr2.run(ZARR2_STORAGE + ZARR2_READS, **s3_where(s3_endpoint, bucket),
                     prefix="from-zstores")
    assert seen[0] == digest(sample()) and seen[1] == {"source": "zstores"}
    with ours(s3_endpoint, bucket, "from-zstores", mode="r") as store:
        assert set(seen[2]) == set(store)


# ---------------------------------------------------- zarr-python 2.18 on GCS
# gcsfs's class for gs:// asks Google's Storage Control service (gRPC) for each
# bucket's layout, which an emulator lacks (60 s per call): a zarr 2 user on an
# emulator switches that class off with gcsfs's own variable, before importing it.
ZARR2_GCS_STORAGE = """
import os
os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
import zarr
store = zarr.storage.FSStore(f"gs://{bucket}/{prefix}", token="anon", endpoint_url=endpoint)
"""


def gcs_ours(endpoint: str, bucket: str, prefix: str, mode: str = "a") -> GCSStore:
    return GCSStore(f"{bucket}/{prefix}", mode=mode, **gcs_options(endpoint))


def test_zarr2_fsstore_on_gcs_and_gcsstore_read_each_other(zarr2, gcs_endpoint: str) -> None:
    bucket = new_gcs_bucket(gcs_endpoint)
    keys = zarr2.run(ZARR2_GCS_STORAGE + ZARR2_WRITES, endpoint=gcs_endpoint, bucket=bucket,
                     prefix="from-zarr2", shape=list(SHAPE), chunks=list(CHUNKS), separator=".")
    with gcs_ours(gcs_endpoint, bucket, "from-zarr2", mode="r") as store:
        assert_written_by_zarr2(store, keys)
    with gcs_ours(gcs_endpoint, bucket, "from-zstores", mode="w") as store:
        written = write_group(store, zarr_format=2)
    seen = zarr2.run(ZARR2_GCS_STORAGE + ZARR2_READS, endpoint=gcs_endpoint, bucket=bucket,
                     prefix="from-zstores")
    assert seen[0] == digest(sample()) and seen[1] == {"source": "zstores"}
    assert set(seen[2]) == written


# ------------------------------------------------- zarr-python 2.18 on Azure Blob
# ABSStore talks to Azure through azure-storage-blob: given a ContainerClient
# made from a connection string, it reaches Azurite (zarr 2's own way to an
# endpoint other than Azure's).
ZARR2_ABS_STORAGE = """
from azure.storage.blob import ContainerClient
import zarr
connection = (f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={key};"
              f"BlobEndpoint={endpoint}")
client = ContainerClient.from_connection_string(connection, container_name=container)
store = zarr.storage.ABSStore(prefix=prefix, client=client, dimension_separator=separator)
"""


def azure_ours(endpoint: str, container: str, prefix: str, mode: str = "a") -> AzureStore:
    return zstores.open_store(azure_store_url(endpoint, container, prefix), mode=mode)


@pytest.mark.parametrize("separator", [".", "/"])
def test_zarr2_absstore_on_azurite_and_azurestore_read_each_other(
        zarr2, azure_endpoint: str, separator: str) -> None:
    container = new_azure_container(azure_endpoint)
    where = {"endpoint": azure_endpoint, "account": AZURITE_ACCOUNT, "key": AZURITE_KEY,
             "container": container, "separator": separator}
    keys = zarr2.run(ZARR2_ABS_STORAGE + ZARR2_WRITES, prefix="from-zarr2", shape=list(SHAPE),
                     chunks=list(CHUNKS), **where)
    assert ("x/2/2" if separator == "/" else "x/2.2") in keys
    with azure_ours(azure_endpoint, container, "from-zarr2", mode="r") as store:
        assert isinstance(store, AzureStore)
        assert_written_by_zarr2(store, keys)
    with azure_ours(azure_endpoint, container, "from-zstores", mode="w") as store:
        written = write_group(store, zarr_format=2, separator=separator)
    seen = zarr2.run(ZARR2_ABS_STORAGE + ZARR2_READS, prefix="from-zstores", **where)
    assert seen[0] == digest(sample()) and seen[1] == {"source": "zstores"}
    assert set(seen[2]) == written


# ------------------------------------------------------------- zarr-python 3
def fsspec_store(s3_endpoint: str, bucket: str, prefix: str, read_only: bool = False) -> Any:
    require_module("s3fs")
    return zarr.storage.FsspecStore.from_url(
        f"s3://{bucket}/{prefix}", read_only=read_only,
        storage_options={"key": S3_KEY_ID, "secret": S3_SECRET, "asynchronous": True,
                         "client_kwargs": {"endpoint_url": s3_endpoint,
                                           "region_name": S3_REGION}})


def obstore_store(s3_endpoint: str, bucket: str, prefix: str, read_only: bool = False) -> Any:
    from obstore.store import S3Store as ObstoreS3

    inner = ObstoreS3(bucket, prefix=prefix, endpoint=s3_endpoint, access_key_id=S3_KEY_ID,
                      secret_access_key=S3_SECRET, region=S3_REGION,
                      client_options={"allow_http": True})
    return zarr.storage.ObjectStore(inner, read_only=read_only)


PEERS = {"FsspecStore": fsspec_store, "ObjectStore": obstore_store}


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("peer", sorted(PEERS))
def test_zarr3_peer_stores_and_s3store_read_each_other(peer: str, zarr_format: int,
                                                       s3_endpoint: str, bucket: str) -> None:
    theirs = PEERS[peer](s3_endpoint, bucket, "from-peer")
    group = zarr.open_group(theirs, mode="w", zarr_format=zarr_format)
    group.attrs["source"] = peer
    group.create_array("x", shape=SHAPE, chunks=CHUNKS, dtype="<i4", fill_value=0)[...] = sample()
    data, attrs, listed = read_ours(s3_endpoint, bucket, "from-peer")
    np.testing.assert_array_equal(data, sample())
    assert attrs == {"source": peer}
    write_ours(s3_endpoint, bucket, "from-zstores", zarr_format)
    reader = zarr.open_group(PEERS[peer](s3_endpoint, bucket, "from-zstores", read_only=True),
                             mode="r")
    np.testing.assert_array_equal(reader["x"][...], sample())
    assert dict(reader.attrs) == {"source": "zstores"}
    documents = {"zarr.json", "x/zarr.json"} if zarr_format == 3 else {".zgroup", "x/.zarray"}
    with ours(s3_endpoint, bucket, "from-zstores", mode="r") as store:
        assert documents <= set(store)
    assert documents <= listed


# ----------------------------------------------------------------- tensorstore
@pytest.mark.parametrize("driver,zarr_format", [("zarr", 2), ("zarr3", 3)])
def test_tensorstore_s3_kvstore_reads_what_s3store_wrote(driver: str, zarr_format: int,
                                                         s3_endpoint: str, bucket: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ts = require_module("tensorstore")
    write_ours(s3_endpoint, bucket, "for-tensorstore", zarr_format)
    for name, value in s3_env(s3_endpoint).items():
        monkeypatch.setenv(name, value)  # tensorstore's credentials: AWS's variables
    spec = {"driver": driver,
            "kvstore": {"driver": "s3", "bucket": bucket, "path": "for-tensorstore/x/",
                        "endpoint": s3_endpoint, "aws_region": S3_REGION,
                        "aws_credentials": {"type": "environment"}}}
    array = ts.open(spec, open=True, read=True).result()
    assert tuple(array.shape) == SHAPE
    np.testing.assert_array_equal(array.read().result(), sample())
