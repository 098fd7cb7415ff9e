"""Object-store URLs for the tests of the CLI, zfuse, synchronizers and interop.

Each helper makes a fresh bucket (or container) on the test command's
emulators (scripts/services: moto for S3, Azurite for Azure Blob,
fake-gcs-server for GCS) and
returns a ``zstores`` URL for a prefix in it, the credentials in the query
as a user would write them, so a test can check that they never show.

Examples
--------
In a test::

    def test_ls(s3_endpoint):
        bucket = new_s3_bucket(s3_endpoint)
        url = s3_store_url(s3_endpoint, bucket, "run1")
        assert S3_SECRET not in zstores_cmd("ls", url).err
"""

from __future__ import annotations

from urllib.parse import quote, urlencode

from servers import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    create_azure_container,
    create_gcs_bucket,
    create_s3_bucket,
)
from servers import unique_name as unique_bucket

__all__ = ["AZURITE_KEY", "GCS_TOKEN", "S3_KEY_ID", "S3_SECRET", "azure_store_url",
           "gcs_options", "gcs_store_url", "new_azure_container", "new_gcs_bucket",
           "new_s3_bucket", "s3_env", "s3_options", "s3_store_url", "unique_bucket"]

#: Credentials sent to moto (it checks none): long enough that a secret
#: showing in a message is a real finding, not a coincidence.
S3_KEY_ID = "zstores-objextra-key"
S3_SECRET = "zstores-objextra-secret-9b41e7"
S3_REGION = "us-east-1"


def new_s3_bucket(endpoint: str) -> str:
    """A new, empty bucket on the S3 emulator at ``endpoint``."""
    bucket = unique_bucket("zx")
    create_s3_bucket(endpoint, bucket)
    return bucket


#: The stores' reachability check at open (5 s by default) waits this long for
#: an emulator: at a load average of 16 moto once took over 4 s to answer, at
#: load 2 an Azurite error's SDK retry (backing off) took over 5 s, and with two
#: suites running at once Azurite once gave no answer within 5 s.
EMULATOR_CONNECT_TIMEOUT = 30


def s3_options(endpoint: str) -> dict[str, str]:
    """The S3Store keywords reaching the emulator at ``endpoint``."""
    return {"endpoint_url": endpoint, "access_key_id": S3_KEY_ID,
            "secret_access_key": S3_SECRET, "region": S3_REGION}


def s3_store_url(endpoint: str, bucket: str, prefix: str = "", *,
                 credentials: bool = True, **extra: str) -> str:
    """``s3://bucket/prefix?endpoint_url=...`` (credentials in the query unless told not)."""
    options = s3_options(endpoint) if credentials else {"endpoint_url": endpoint,
                                                        "region": S3_REGION}
    query = urlencode({**options, "connect_timeout": EMULATOR_CONNECT_TIMEOUT, **extra})
    return f"s3://{bucket}/{quote(prefix)}?{query}"


def s3_env(endpoint: str) -> dict[str, str]:
    """Environment variables giving S3 credentials (AWS's names), for a subprocess."""
    return {"AWS_ACCESS_KEY_ID": S3_KEY_ID, "AWS_SECRET_ACCESS_KEY": S3_SECRET,
            "AWS_REGION": S3_REGION, "AWS_DEFAULT_REGION": S3_REGION,
            "AWS_ENDPOINT_URL": endpoint, "AWS_EC2_METADATA_DISABLED": "true"}


def new_azure_container(endpoint: str) -> str:
    """A new, empty container on Azurite (``endpoint`` ends in the account)."""
    container = unique_bucket("zx")
    create_azure_container(endpoint, container)
    return container


def azure_store_url(endpoint: str, container: str, prefix: str = "") -> str:
    """``az://container/prefix?...`` with Azurite's development account and key."""
    query = urlencode({"endpoint_url": endpoint, "account_name": AZURITE_ACCOUNT,
                       "account_key": AZURITE_KEY, "connect_timeout": EMULATOR_CONNECT_TIMEOUT})
    return f"az://{container}/{quote(prefix)}?{query}"


#: An OAuth token sent to fake-gcs-server (it checks none), as a secret to hide.
GCS_TOKEN = "zstores-objextra-gcs-token-3c88d2"


def new_gcs_bucket(endpoint: str) -> str:
    """A new, empty bucket on fake-gcs-server at ``endpoint``."""
    bucket = unique_bucket("zx")
    create_gcs_bucket(endpoint, bucket)
    return bucket


def gcs_options(endpoint: str) -> dict[str, str]:
    """The GCSStore keywords reaching the emulator: gcsfs (``via=fsspec``), its JSON API."""
    return {"endpoint_url": endpoint, "via": "fsspec", "token": GCS_TOKEN}


def gcs_store_url(endpoint: str, bucket: str, prefix: str = "") -> str:
    """``gs://bucket/prefix?endpoint_url=...&via=fsspec&token=...``."""
    query = urlencode({**gcs_options(endpoint), "connect_timeout": EMULATOR_CONNECT_TIMEOUT})
    return f"gs://{bucket}/{quote(prefix)}?{query}"
