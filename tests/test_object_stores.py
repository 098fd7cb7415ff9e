"""Object stores (S3, GCS, Azure Blob, HTTP) against emulators on loopback.

The test command starts moto (S3), fake-gcs-server (GCS), Azurite (Azure
Blob) and a static HTTP server, and names them in ZSTORES_TEST_S3_ENDPOINT,
ZSTORES_TEST_GCS_ENDPOINT, ZSTORES_TEST_AZURE_ENDPOINT and
ZSTORES_TEST_HTTP_URL (+ ZSTORES_TEST_HTTP_DIR, the folder it serves).  When
a variable is set nothing here skips.  Every test gets a bucket of its own;
the raw hooks of StoreTests read and write it with each service's own client
library (botocore, google-cloud-storage, azure-storage-blob), never the store.

What an emulator does not prove: real consistency and rate limits, real
credentials and policies, multipart limits of the real services.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import socket
import statistics
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from zstores import open_store
from zstores.errors import (
    InvalidKeyError,
    ReadOnlyError,
    StoreAccessError,
    StoreConnectionError,
    StoreNotFoundError,
    StoreURLError,
    UnsupportedOperationError,
)
from zstores.stores.objectstore import AzureStore, GCSStore, HTTPStore, S3Store
from zstores.testing import StoreTests

from conftest import missing_peer, require_module
from object_urls import EMULATOR_CONNECT_TIMEOUT
from servers import (
    AZURITE_KEY,
    MotoS3Server,
    chain_text,
    create_azure_container,
    create_gcs_bucket,
    create_s3_bucket,
    free_port,
)

require_module("obstore")

# Never let a client library look for cloud credentials on this machine's
# network (instance metadata): every test passes its credentials explicitly.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
os.environ.setdefault("NO_GCE_CHECK", "true")

MiB = 1 << 20

# Emulator credentials: long enough that scrubbing them from messages is a real check.
S3_KEY_ID = "zstores-test-key-id"
S3_SECRET = "zstores-test-secret-7f3a9c"
GCS_TOKEN = "zstores-test-gcs-token-51d0"
AZURITE_ACCOUNT = "devstoreaccount1"


def endpoint(variable: str) -> str:
    value = os.environ.get(variable)
    if not value:
        missing_peer(f"{variable} is not set: no emulator to test against (see scripts/services)")
    return value.rstrip("/")


def unique_bucket() -> str:
    return "zt-" + uuid.uuid4().hex[:16]


def prefix_for(location: Path) -> str:
    # A space and a non-ASCII letter: the prefix is an object name part, not a URL part.
    digest = hashlib.sha1(str(location).encode()).hexdigest()[:10]
    return f"t {digest}/é"


# ---------------------------------------------------------------- S3 (moto)
def boto3_client(url: str):
    # botocore (boto3's engine, which s3fs installs at the version it pins): the same
    # client calls, without boto3, whose own botocore pin made pip backtrack for minutes
    import botocore.session

    return botocore.session.get_session().create_client(
        "s3", endpoint_url=url, aws_access_key_id=S3_KEY_ID,
        aws_secret_access_key=S3_SECRET, region_name="us-east-1")




def s3_options(url: str, connect_timeout: float = EMULATOR_CONNECT_TIMEOUT) -> dict:
    return {"endpoint_url": url, "access_key_id": S3_KEY_ID, "secret_access_key": S3_SECRET,
            "region": "us-east-1", "connect_timeout": connect_timeout}


def s3_url(bucket: str, prefix: str, url: str, **extra: str) -> str:
    from urllib.parse import quote, urlencode

    query = urlencode({**s3_options(url), **extra})
    return f"s3://{bucket}/{quote(prefix)}?{query}"


def empty_s3_bucket(client, bucket: str) -> None:
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys})
    client.delete_bucket(Bucket=bucket)


@pytest.fixture
def s3_bucket():
    url = endpoint("ZSTORES_TEST_S3_ENDPOINT")
    client = boto3_client(url)
    bucket = unique_bucket()
    client.create_bucket(Bucket=bucket)
    yield url, client, bucket
    empty_s3_bucket(client, bucket)


class ObjectStoreTests(StoreTests):
    """StoreTests over one service; subclasses open the store and reach the bucket raw."""

    #: Keys of the scaled-down test_100000_keys (what the emulator answers in a minute or two).
    many_keys = 5_000

    def raw_name(self, store, key: str) -> str:
        return f"{store.prefix}/{key}" if store.prefix else key

    @pytest.mark.slow
    def test_100000_keys(self, store) -> None:
        """The harness's test at 5,000 keys: the emulators answer a few hundred
        requests a second (moto lists 1,000 keys per page in seconds once a
        bucket holds 100,000), so 100,000 would take most of CI's time."""
        count = self.many_keys
        names = [f"k{i:06d}" for i in range(count)]
        store.setitems({f"many/{name}": b"x" for name in names})
        store["other"] = b"y"
        assert len(store) == count + 1
        assert store.listdir("many") == names
        assert store.listdir() == ["many", "other"]
        assert store.getsize("many") == count
        assert store.getitems(["many/k000000", f"many/k{count - 1:06d}"]) == {
            "many/k000000": b"x", f"many/k{count - 1:06d}": b"x"}
        store.rmdir("many")
        assert list(store) == ["other"]


class TestS3Store(ObjectStoreTests):
    via = "obstore"

    @pytest.fixture(autouse=True)
    def _bucket(self, s3_bucket):
        self.url, self.client, self.bucket = s3_bucket

    def open_store(self, location, mode="a"):
        return S3Store(f"{self.bucket}/{prefix_for(location)}", mode=mode, via=self.via,
                       **s3_options(self.url))

    def raw_get(self, store, key):
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self.raw_name(store, key))
        except self.client.exceptions.NoSuchKey:
            return None
        return answer["Body"].read()

    def raw_set(self, store, key, value):
        self.client.put_object(Bucket=self.bucket, Key=self.raw_name(store, key), Body=value)


class TestS3StoreViaFsspec(TestS3Store):
    """The same bucket through s3fs (``via="fsspec"``): the same behaviour and errors."""

    via = "fsspec"


# ------------------------------------------------------- Azure Blob (Azurite)
@pytest.fixture
def azure_container():
    url = endpoint("ZSTORES_TEST_AZURE_ENDPOINT")
    blob = require_module("azure.storage.blob")
    service = blob.BlobServiceClient(url, credential={"account_name": AZURITE_ACCOUNT,
                                                      "account_key": AZURITE_KEY})
    container = unique_bucket()
    create_azure_container(url, container)
    client = service.get_container_client(container)
    yield url, client, container
    client.delete_container()
    service.close()


def azure_options(url: str, connect_timeout: float = EMULATOR_CONNECT_TIMEOUT) -> dict:
    return {"endpoint_url": url, "account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY,
            "connect_timeout": connect_timeout}


class TestAzureStore(ObjectStoreTests):
    many_keys = 1_000  # Azurite lists and writes far slower than moto
    via = "obstore"

    @pytest.fixture(autouse=True)
    def _container(self, azure_container):
        self.url, self.client, self.container = azure_container

    def open_store(self, location, mode="a"):
        return AzureStore(f"{self.container}/{prefix_for(location)}", mode=mode, via=self.via,
                          **azure_options(self.url))

    def raw_get(self, store, key):
        from azure.core.exceptions import ResourceNotFoundError

        try:
            return self.client.download_blob(self.raw_name(store, key)).readall()
        except ResourceNotFoundError:
            return None

    def raw_set(self, store, key, value):
        self.client.upload_blob(self.raw_name(store, key), value, overwrite=True)


class TestAzureStoreViaFsspec(TestAzureStore):
    """The same container through adlfs (``via="fsspec"``): the same behaviour and errors,
    except that keys holding '?' or '#' are refused (test_keys_no_engine_can_store_are_refused)."""

    via = "fsspec"
    tricky_names = [name for name in StoreTests.tricky_names if "?" not in name]


def test_azure_wrong_key_is_a_permission_error(azure_container):
    url, _, container = azure_container
    wrong = "A" * 8 + AZURITE_KEY[8:]
    with pytest.raises(StoreAccessError) as info:
        AzureStore(f"{container}/p", endpoint_url=url, account_name=AZURITE_ACCOUNT,
                   account_key=wrong)
    assert wrong not in chain_text(info.value)


# ------------------------------------------------- GCS (fake-gcs-server)
def gcs_client(url: str):
    """google-cloud-storage on the emulator (its JSON API), anonymous: the raw hooks' client."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="zstores-tests", credentials=AnonymousCredentials(),
                          client_options={"api_endpoint": url})


def gcs_options(url: str) -> dict:
    # The emulator answers only GCS's JSON API, which gcsfs (via="fsspec") speaks;
    # the static token makes every request carry a secret the messages must hide.
    return {"endpoint_url": url, "via": "fsspec", "token": GCS_TOKEN}


def gcs_url(bucket: str, prefix: str, url: str, **extra: str) -> str:
    from urllib.parse import quote, urlencode

    return f"gs://{bucket}/{quote(prefix)}?{urlencode({**gcs_options(url), **extra})}"


@pytest.fixture
def gcs_bucket():
    url = endpoint("ZSTORES_TEST_GCS_ENDPOINT")
    client = gcs_client(url)
    bucket = unique_bucket()
    create_gcs_bucket(url, bucket)
    yield url, client.bucket(bucket), bucket
    # No clean-up: the emulator deletes one object per request, seconds for a
    # thousand, and keeps everything in memory until the test command stops it.


class TestGCSStore(ObjectStoreTests):
    many_keys = 1_000  # fake-gcs-server slows as a bucket fills: 2,000 puts take 24 s

    @pytest.fixture(autouse=True)
    def _bucket(self, gcs_bucket):
        self.url, self.bucket, self.bucket_name = gcs_bucket

    def open_store(self, location, mode="a"):
        return GCSStore(f"{self.bucket_name}/{prefix_for(location)}", mode=mode,
                        **gcs_options(self.url), connect_timeout=EMULATOR_CONNECT_TIMEOUT)

    def raw_get(self, store, key):
        from google.api_core.exceptions import NotFound

        try:
            return self.bucket.blob(self.raw_name(store, key)).download_as_bytes()
        except NotFound:
            return None

    def raw_set(self, store, key, value):
        self.bucket.blob(self.raw_name(store, key)).upload_from_string(bytes(value))


def test_gcs_open_store_url_options_and_secrets(gcs_bucket):
    url, bucket, name = gcs_bucket
    with open_store(gcs_url(name, "run 1/x", url, max_concurrency="8"), mode="w") as store:
        assert isinstance(store, GCSStore)
        assert (store.container, store.prefix, store.via) == (name, "run 1/x", "fsspec")
        store["a/.zgroup"] = b"{}"
        assert GCS_TOKEN not in repr(store)
        clone = pickle.loads(pickle.dumps(store))
        assert clone == store and clone["a/.zgroup"] == b"{}"
        clone.close()
    assert bucket.blob("run 1/x/a/.zgroup").download_as_bytes() == b"{}"
    with pytest.raises(StoreURLError, match="unknown option 'tokn'") as info:
        open_store(gcs_url(name, "p", url, tokn="x"))
    assert GCS_TOKEN not in chain_text(info.value)


def test_gcs_anonymous_access(gcs_bucket):
    url, bucket, name = gcs_bucket
    bucket.blob("pub/k").upload_from_string(b"public")
    with GCSStore(f"{name}/pub", endpoint_url=url, via="fsspec", anonymous=True,
                  mode="r") as store:
        assert store["k"] == b"public"


def test_gcs_missing_bucket_is_an_error_in_every_mode(gcs_bucket):
    url, bucket, name = gcs_bucket
    for mode in ("r", "r+", "a", "w", "w-"):
        with pytest.raises(StoreNotFoundError, match=f"bucket '{name}-nope' does not exist") \
                as info:
            GCSStore(f"{name}-nope/p", mode=mode, **gcs_options(url))
        assert GCS_TOKEN not in chain_text(info.value)
    assert not bucket.client.bucket(f"{name}-nope").exists()  # never created


def test_gcs_obstore_against_an_emulator_names_via_fsspec(gcs_bucket):
    """obstore speaks GCS's XML API, which the emulator lacks: one clear error, no secret."""
    url, _, name = gcs_bucket
    with pytest.raises(UnsupportedOperationError, match="via='fsspec'") as info:
        store = GCSStore(f"{name}/p", endpoint_url=url, token=GCS_TOKEN, via="obstore")
        store["k"] = b"v"
    assert GCS_TOKEN not in chain_text(info.value)


def test_gcs_dead_endpoint_fails_fast_with_a_connection_error():
    start = time.monotonic()
    with pytest.raises(StoreConnectionError, match="GCSStore") as info:
        GCSStore("bucket/p", endpoint_url=f"http://127.0.0.1:{free_port()}", via="fsspec",
                 token=GCS_TOKEN, connect_timeout=2)
    assert time.monotonic() - start < 10
    assert GCS_TOKEN not in chain_text(info.value)


def test_gcs_server_gone_after_open_is_a_connection_error(private_gcs):
    server = private_gcs()
    create_gcs_bucket(server.endpoint, "gone")
    store = GCSStore("gone/p", endpoint_url=server.endpoint, via="fsspec", token=GCS_TOKEN,
                     request_timeout=2, retry_timeout=2)
    store["k"] = b"v"
    server.kill()
    start = time.monotonic()
    with pytest.raises(StoreConnectionError, match="GCSStore") as info:
        store["k"]
    with pytest.raises(StoreConnectionError):
        store.getitems(["k", "j"])
    assert time.monotonic() - start < 30
    assert GCS_TOKEN not in chain_text(info.value)


class _RefusingGCS:
    """A loopback HTTP server answering every request as GCS refuses a token (HTTP 403).

    The emulator accepts any credentials; this shows what a refusal becomes.
    """

    def __enter__(self) -> str:
        import http.server
        import json
        import threading

        body = json.dumps({"error": {"code": 403, "message": "Forbidden: the token lacks "
                                     "storage.objects.list", "errors": []}}).encode()

        class Refuse(http.server.BaseHTTPRequestHandler):
            def refuse(self) -> None:
                self.send_response(403)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = refuse

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_gcs_refused_token_is_a_permission_error():
    with _RefusingGCS() as url:
        start = time.monotonic()
        with pytest.raises(StoreAccessError, match="refused the credentials") as info:
            GCSStore("bucket/p", endpoint_url=url, via="fsspec", token=GCS_TOKEN)
        assert isinstance(info.value, PermissionError)
        assert time.monotonic() - start < 10
        assert GCS_TOKEN not in chain_text(info.value)


# ---------------------------------------------- both engines, the same errors
ENGINES = ["obstore", "fsspec"]


@pytest.mark.parametrize("via", ENGINES)
def test_engines_report_a_missing_bucket_alike(via, s3_bucket, azure_container):
    s3, _, bucket = s3_bucket
    azure, _, _ = azure_container
    with pytest.raises(StoreNotFoundError, match=f"bucket '{bucket}-nope' does not exist") as info:
        S3Store(f"{bucket}-nope/p", via=via, **s3_options(s3))
    assert S3_SECRET not in chain_text(info.value)
    with pytest.raises(StoreNotFoundError, match="container 'zt-nope' does not exist") as info:
        AzureStore("zt-nope/p", via=via, **azure_options(azure))
    assert AZURITE_KEY not in chain_text(info.value)


@pytest.mark.parametrize("via", ENGINES)
def test_engines_report_a_refused_key_alike(via, azure_container):
    url, _, container = azure_container
    wrong = "A" * 8 + AZURITE_KEY[8:]
    with pytest.raises(StoreAccessError, match=f"AzureStore az://{container}/p") as info:
        AzureStore(f"{container}/p", via=via, endpoint_url=url, account_name=AZURITE_ACCOUNT,
                   account_key=wrong)
    assert wrong not in chain_text(info.value)


@pytest.mark.parametrize("via", ENGINES)
def test_engines_report_a_dead_endpoint_alike(via):
    """A connection error within connect_timeout, never "the bucket does not exist"
    (fsspec's own exists() answers False when nothing listens)."""
    port = free_port()
    start = time.monotonic()
    with pytest.raises(StoreConnectionError, match="S3Store s3://bucket/p .*within 2 s") as info:
        S3Store("bucket/p", via=via, endpoint_url=f"http://127.0.0.1:{port}",
                access_key_id=S3_KEY_ID, secret_access_key=S3_SECRET, connect_timeout=2)
    assert S3_SECRET not in chain_text(info.value)
    with pytest.raises(StoreConnectionError, match="AzureStore az://c/p .*within 2 s"):
        AzureStore("c/p", via=via,
                   **azure_options(f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}", connect_timeout=2))
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("via", ENGINES)
def test_engines_read_what_the_other_wrote(via, s3_bucket, azure_container):
    """One layout whatever the engine: keys with glob characters and spaces included
    (fsspec's many-path calls would expand "*" and "[x]" as patterns)."""
    s3, _, bucket = s3_bucket
    azure, _, container = azure_container
    other = "fsspec" if via == "obstore" else "obstore"
    values = {"a/*": b"star", "a/[x]": b"brackets", "a/x=1&y": b"query-like", "b c/0.0": bytes(100),
              "empty": b""}
    for cls, location, options in ((S3Store, f"{bucket}/p", s3_options(s3)),
                                   (AzureStore, f"{container}/p", azure_options(azure))):
        with cls(location, via=via, **options) as writer:
            writer.setitems(values)
        with cls(location, via=other, **options) as reader:
            assert reader.getitems([*values, "a/missing"]) == values
            assert list(reader) == sorted(values)
            assert reader.listdir("a") == ["*", "[x]", "x=1&y"]
            reader.delitems(["a/*", "a/x=1&y"])
            with pytest.raises(KeyError, match="'a/\\*'"):
                reader["a/*"]
            assert reader["a/[x]"] == b"brackets"


@pytest.mark.parametrize("via", ENGINES)
def test_keys_no_engine_can_store_are_refused(via, s3_bucket, azure_container):
    """Control characters: obstore can neither write nor list such an object (a bucket
    holding one could not be listed), so no engine writes one.  '?' and '#' through
    adlfs: it parses paths as URLs and would write "a/?" as the blob "a/"."""
    s3, _, bucket = s3_bucket
    azure, _, container = azure_container
    with S3Store(f"{bucket}/p", via=via, **s3_options(s3)) as s3_store, \
            AzureStore(f"{container}/p", via=via, **azure_options(azure)) as azure_store:
        for store in (s3_store, azure_store):
            for key in ("a\tb", "x/\x7f", "c/\x1b[0m"):
                with pytest.raises(InvalidKeyError, match="control characters"):
                    store[key] = b"1"
        s3_store["a/?"] = b"q"
        assert s3_store["a/?"] == b"q"
        if via == "obstore":
            azure_store["a/?"] = b"q"
            assert azure_store["a/?"] == b"q"
        else:
            for key in ("a/?", "a/#", "#"):
                with pytest.raises(InvalidKeyError, match="adlfs parses paths as URLs"):
                    azure_store[key] = b"q"
            assert list(azure_store) == []  # nothing written under another name


# ------------------------------------------------------------------------ HTTP
@pytest.fixture
def http_site():
    url = endpoint("ZSTORES_TEST_HTTP_URL")
    root = Path(os.environ.get("ZSTORES_TEST_HTTP_DIR") or missing_peer(
        "ZSTORES_TEST_HTTP_DIR is not set: the HTTP server's folder is unknown"))
    site = "site-" + uuid.uuid4().hex[:12]
    files = {"a/.zgroup": b'{"zarr_format": 2}', "a/x/0.0": bytes(range(100)),
             "with space/é": b"unicode", "empty": b""}
    for key, value in files.items():
        path = root / site / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value)
    return f"{url}/{site}", files


def test_http_store_reads_keys_ranges_and_batches(http_site):
    url, files = http_site
    with open_store(url, mode="r") as store:
        assert isinstance(store, HTTPStore) and store.read_only
        for key, value in files.items():
            assert store[key] == value
            assert store.stat(key) == len(value)
            assert store.get_range(key, 1, 3) == value[1:4]
            assert store.get_range(key, -3) == value[-3:]
        assert store.get_range("a/x/0.0", 98, 10) == bytes([98, 99])
        assert store.getitems([*files, "missing"]) == files
        assert "missing" not in store and store.stat("missing") is None
        with pytest.raises(KeyError):
            store["missing"]
        with pytest.raises(ReadOnlyError):
            store["new"] = b"1"
        with pytest.raises(UnsupportedOperationError, match="http:// stores cannot list keys"):
            store.listdir()  # a plain file server answers no PROPFIND
        clone = pickle.loads(pickle.dumps(store))
        assert clone == store and clone["empty"] == b""
        clone.close()


@pytest.mark.parametrize("via", ["obstore", "fsspec"])
def test_getitems_sends_requests_concurrently(private_http, via):
    """getitems of 200 keys has many requests in flight at once (counted by the server,
    each request held 20 ms like a network's latency); 200 single gets never more than
    one, which shows the count can tell.  No timing is asserted."""
    server = private_http(delay_ms=20)
    values = {f"c/{i}": i.to_bytes(4, "little") * 1024 for i in range(200)}
    for key, value in values.items():
        (server.root / key).parent.mkdir(parents=True, exist_ok=True)
        (server.root / key).write_bytes(value)
    with HTTPStore(server.url, mode="r", via=via, max_concurrency=16) as store:
        server.requests(reset=True)
        assert {key: store[key] for key in values} == values
        sequential = server.requests(reset=True)
        assert store.getitems(list(values)) == values
        batch = server.requests(reset=True)
    assert sequential == {"total": 200, "peak": 1}
    assert batch["total"] == 200 and batch["peak"] >= 4, batch


def test_http_dead_server_is_a_connection_error():
    start = time.monotonic()
    with pytest.raises(StoreConnectionError, match="HTTPStore"):
        HTTPStore(f"http://127.0.0.1:{free_port()}/data", mode="r", connect_timeout=2)
    assert time.monotonic() - start < 10


# --------------------------------------------------------------- S3 specifics
@pytest.fixture
def s3_store(s3_bucket):
    url, _, bucket = s3_bucket
    with S3Store(f"{bucket}/data", **s3_options(url)) as store:
        yield store


def test_open_store_url_and_options(s3_bucket):
    url, client, bucket = s3_bucket
    with open_store(s3_url(bucket, "run 1/x", url, max_concurrency="8"), mode="w") as store:
        assert isinstance(store, S3Store)
        assert (store.container, store.prefix, store.via) == (bucket, "run 1/x", "obstore")
        store["a/.zgroup"] = b"{}"
    assert client.get_object(Bucket=bucket, Key="run 1/x/a/.zgroup")["Body"].read() == b"{}"
    with pytest.raises(StoreURLError, match="unknown option 'regoin'"):
        open_store(s3_url(bucket, "p", url, regoin="x"))
    with pytest.raises(ValueError, match="via"):
        open_store(s3_url(bucket, "p", url, via="boto"))


def test_secrets_never_shown(s3_bucket):
    url, _, bucket = s3_bucket
    with open_store(s3_url(bucket, "p", url)) as store:
        assert S3_SECRET not in repr(store)
        clone = pickle.loads(pickle.dumps(store))
        assert clone == store
        clone.close()
    with pytest.raises(StoreNotFoundError) as info:
        open_store(s3_url(bucket + "-missing", "p", url))
    assert S3_SECRET not in chain_text(info.value)
    with pytest.raises(StoreURLError) as info:
        open_store(s3_url(bucket, "p", url, nope="1"))
    assert S3_SECRET not in chain_text(info.value)


def test_missing_bucket_is_an_error_in_every_mode(s3_bucket):
    url, client, bucket = s3_bucket
    for mode in ("r", "r+", "a", "w", "w-"):
        with pytest.raises(StoreNotFoundError, match=f"bucket '{bucket}-nope' does not exist"):
            S3Store(f"{bucket}-nope/p", mode=mode, **s3_options(url))
    names = [b["Name"] for b in client.list_buckets()["Buckets"]]
    assert f"{bucket}-nope" not in names  # never created


def test_dead_endpoint_fails_fast_with_a_connection_error():
    port = free_port()  # nothing listens here
    start = time.monotonic()
    with pytest.raises(StoreConnectionError, match="S3Store") as info:
        S3Store("bucket/p", endpoint_url=f"http://127.0.0.1:{port}", access_key_id=S3_KEY_ID,
                secret_access_key=S3_SECRET, connect_timeout=2)
    assert time.monotonic() - start < 10
    assert S3_SECRET not in chain_text(info.value)


def test_silent_endpoint_times_out_within_connect_timeout():
    # A server that accepts connections and never answers.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(StoreConnectionError, match="within 1 s"):
            S3Store("bucket/p", endpoint_url=f"http://127.0.0.1:{port}",
                    access_key_id=S3_KEY_ID, secret_access_key=S3_SECRET, connect_timeout=1)
        assert time.monotonic() - start < 10


def test_server_gone_after_open_is_a_connection_error(private_s3):
    server = private_s3()
    create_s3_bucket(server.endpoint, "gone")
    store = S3Store("gone/p", **s3_options(server.endpoint), retry_timeout=2)
    store["k"] = b"v"
    server.kill()
    start = time.monotonic()
    with pytest.raises(StoreConnectionError, match="S3Store"):
        store["k"]
    with pytest.raises(StoreConnectionError):
        store.getitems(["k", "j"])
    assert time.monotonic() - start < 30


class AuthenticatingMoto(MotoS3Server):
    """moto_server checking every request's credentials against its (empty) IAM."""

    def command(self) -> list[str]:
        return ["env", "INITIAL_NO_AUTH_ACTION_COUNT=0", *super().command()]


def test_wrong_credentials_are_a_permission_error(tmp_path):
    endpoint("ZSTORES_TEST_S3_ENDPOINT")  # required where the shared emulator is
    server = AuthenticatingMoto(tmp_path / "moto")
    server.start()
    try:
        with pytest.raises(StoreAccessError, match="refused the credentials") as info:
            S3Store("any/p", **s3_options(server.endpoint))
        assert isinstance(info.value, PermissionError)
        assert S3_SECRET not in chain_text(info.value)
    finally:
        server.kill()


def test_read_only_and_get_range_on_big_values(s3_store):
    value = np.random.default_rng(3).integers(0, 256, 12 * MiB + 5, dtype=np.uint8).tobytes()
    s3_store["big/0"] = value  # over obstore's 5 MiB part size: a multipart upload
    assert s3_store.stat("big/0") == len(value)
    assert s3_store.get_range("big/0", 7 * MiB, 10) == value[7 * MiB: 7 * MiB + 10]
    assert s3_store.get_range("big/0", -4) == value[-4:]
    assert s3_store["big/0"] == value
    reader = s3_store.reopen("r")
    with pytest.raises(ReadOnlyError):
        reader["x"] = b"1"
    reader.close()


def test_getitems_of_1000_keys_is_concurrent(s3_store, record_property):
    """Measured, not asserted on time: the figures go to the report (-rP shows them)."""
    keys = [f"many/{i}" for i in range(1000)]
    values = {key: i.to_bytes(4, "little") * 1024 for i, key in enumerate(keys)}
    s3_store.setitems(values)
    rounds = {"sequential": [], "getitems": []}
    for _ in range(3):
        start = time.perf_counter()
        sequential = {key: s3_store[key] for key in keys}
        rounds["sequential"].append(time.perf_counter() - start)
        start = time.perf_counter()
        batch = s3_store.getitems(keys)
        rounds["getitems"].append(time.perf_counter() - start)
        assert batch == sequential == values
    medians = {name: statistics.median(times) for name, times in rounds.items()}
    record_property("getitems_1000_seconds", medians)
    print(f"1,000 x 4 KiB on moto: sequential gets {medians['sequential']:.2f} s, "
          f"getitems {medians['getitems']:.2f} s "
          f"({medians['sequential'] / medians['getitems']:.1f}x)")


def test_rename_is_copy_then_delete(s3_bucket):
    url, client, bucket = s3_bucket
    with S3Store(f"{bucket}/r", **s3_options(url)) as store:
        store.setitems({f"src/{i}": bytes([i]) for i in range(30)})
        store.rename("src", "dst")
        assert store.listdir() == ["dst"]
        assert store.getitems([f"dst/{i}" for i in range(30)]) == {
            f"dst/{i}": bytes([i]) for i in range(30)}


def test_http_store_refuses_write_modes():
    with pytest.raises(UnsupportedOperationError, match="read-only"):
        HTTPStore("http://127.0.0.1:1/data", mode="a")


def test_classes_are_exported():
    import zstores

    assert zstores.S3Store is S3Store and zstores.GCSStore is GCSStore
    assert zstores.AzureStore is AzureStore and zstores.HTTPStore is HTTPStore


@pytest.mark.parametrize("via", ["obstore", "fsspec"])
def test_unpickled_stores_share_one_engine_and_send_nothing_until_used(private_s3, via):
    """50 stores unpickled in one process (a dask worker's tasks) share one engine (one HTTP
    connection pool and one set of batch threads); unpickling sends no request: it works
    while the endpoint is down (a dask scheduler moving tasks never reaches S3), and the
    first use then says the endpoint is unreachable."""
    server = private_s3()
    create_s3_bucket(server.endpoint, "shared")
    store = S3Store("shared/p", **s3_options(server.endpoint), retry_timeout=2, via=via)
    store.setitems({f"k{i}": b"v" for i in range(10)})
    blob = pickle.dumps(store)
    store.close()
    server.kill()
    copies = [pickle.loads(blob) for _ in range(50)]  # no request: the endpoint is down
    with pytest.raises(StoreConnectionError, match="S3Store"):
        copies[0]["k1"]
    server.start()  # moto keeps nothing across a restart: the bucket again
    create_s3_bucket(server.endpoint, "shared")
    copies[1].setitems({"k1": b"v", "k7": b"v"})
    for copy in copies:
        assert copy.getitems(["k1", "k7"]) == {"k1": b"v", "k7": b"v"}
    assert len({id(copy._engine) for copy in copies}) == 1
    other = pickle.loads(pickle.dumps(S3Store("shared/q", **s3_options(server.endpoint),
                                              retry_timeout=2, via=via)))
    assert other._engine is copies[0]._engine  # one bucket, the same options: one engine
    for copy in [*copies, other]:
        copy.close()
