"""The object-store emulators of scripts/services answer like the services they stand for.

Each is driven by a plain client library, not by zstores: create a bucket (or
container), put, get, a byte-range get, and a listing with a delimiter.  If
one of these fails here, a failure of the object-store backends' tests is the
emulator's, not the backend's.

Clients: obstore (the library of the S3 and Azure backends) for S3, Azure and
HTTP.  For GCS google-cloud-storage and gcsfs, which speak GCS's JSON API:
obstore speaks the XML API, of which fake-gcs-server has only a part (its
XML PUT answers 400 "invalid uploadType").  The GCS checks include what
gcp-storage-emulator, the emulator used before, failed: values ending in
"\r" uploaded by gcsfs came back shorter, and 64 concurrent uploads stalled.

The private servers (tests/servers.py) are checked to start, die and start
again on the same port, empty: what the dead-server tests of the backends do.
"""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import http_answers
from servers import (
    AZURITE_ACCOUNT,
    AZURITE_KEY,
    S3_ACCESS_KEY,
    S3_REGION,
    S3_SECRET_KEY,
    MotoS3Server,
    create_azure_container,
    create_gcs_bucket,
    create_s3_bucket,
    unique_name,
)

VALUE = b"0123456789"
KEYS = ["group/zarr.json", "group/array/zarr.json", "group/array/c/0/0", "top"]


def s3_store(endpoint: str, bucket: str) -> object:
    from obstore.store import S3Store

    return S3Store(bucket, endpoint=endpoint, access_key_id=S3_ACCESS_KEY,
                   secret_access_key=S3_SECRET_KEY, region=S3_REGION,
                   client_options={"allow_http": True})


def azure_store(endpoint: str, container: str) -> object:
    from obstore.store import AzureStore

    return AzureStore(container, account_name=AZURITE_ACCOUNT, account_key=AZURITE_KEY,
                      endpoint=endpoint, client_options={"allow_http": True})


def check_obstore(store: object) -> None:
    """put, get, range get, head and a delimited listing through obstore."""
    import obstore

    for key in KEYS:
        obstore.put(store, key, VALUE)
    assert bytes(obstore.get(store, "group/array/c/0/0").bytes()) == VALUE
    assert bytes(obstore.get_range(store, "group/array/c/0/0", start=2, end=5)) == b"234"
    assert obstore.head(store, "top")["size"] == len(VALUE)
    listing = obstore.list_with_delimiter(store, "group/")
    assert [item["path"] for item in listing["objects"]] == ["group/zarr.json"]
    assert [prefix.rstrip("/") for prefix in listing["common_prefixes"]] == ["group/array"]
    obstore.delete(store, "top")
    with pytest.raises(FileNotFoundError):
        obstore.get(store, "top")


def test_s3_emulator(s3_endpoint: str) -> None:
    bucket = unique_name()
    create_s3_bucket(s3_endpoint, bucket)
    check_obstore(s3_store(s3_endpoint, bucket))


def test_azure_emulator(azure_endpoint: str) -> None:
    container = unique_name()
    create_azure_container(azure_endpoint, container)
    check_obstore(azure_store(azure_endpoint, container))


def test_gcs_emulator(gcs_endpoint: str) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket_name = unique_name()
    create_gcs_bucket(gcs_endpoint, bucket_name)
    client = storage.Client(project="zstores-tests", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": gcs_endpoint})
    bucket = client.bucket(bucket_name)
    for key in KEYS:
        bucket.blob(key).upload_from_string(VALUE)
    assert bucket.blob("group/array/c/0/0").download_as_bytes() == VALUE
    assert bucket.blob("group/array/c/0/0").download_as_bytes(start=2, end=4) == b"234"
    listing = client.list_blobs(bucket_name, prefix="group/", delimiter="/")
    assert [blob.name for blob in listing] == ["group/zarr.json"]
    assert listing.prefixes == {"group/array/"}  # known once the pages were read


def test_gcs_emulator_keeps_bytes_and_serves_concurrent_clients(gcs_endpoint: str) -> None:
    """gcsfs (the GCS engine of the tests) uploads binary values intact, 64 at once."""
    import gcsfs.core

    bucket = unique_name()
    create_gcs_bucket(gcs_endpoint, bucket)
    fs = gcsfs.core.GCSFileSystem(token="anon", endpoint_url=gcs_endpoint,
                                  skip_instance_cache=True)
    values = {f"{bucket}/v/{i}": bytes([i % 256]) * (i % 17) + b"\r" for i in range(200)}
    values[f"{bucket}/all"] = bytes(range(256)) + b"\r\n\r"
    fs.pipe(values, batch_size=64, timeout=60)  # fsspec's timeout: a stall fails
    assert fs.cat(list(values), batch_size=64) == values


def get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of a GET (an error status is returned, not raised)."""
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_http_server(http_server: tuple[str, Path]) -> None:
    import obstore
    from obstore.store import HTTPStore

    url, folder = http_server
    mine = unique_name()
    (folder / mine / "c").mkdir(parents=True)
    (folder / mine / "c" / "0").write_bytes(VALUE)
    base = f"{url}{mine}/"

    store = HTTPStore.from_url(base, client_options={"allow_http": True})
    assert bytes(obstore.get(store, "c/0").bytes()) == VALUE
    assert bytes(obstore.get_range(store, "c/0", start=2, end=5)) == b"234"
    assert obstore.head(store, "c/0")["size"] == len(VALUE)

    # The HTTP rules the backends lean on, byte for byte (http.server fails the first two).
    status, headers, body = get(base + "c/0", Range="bytes=2-4")
    assert (status, headers["Content-Range"], body) == (206, "bytes 2-4/10", b"234")
    status, _, body = get(base + "c/0", Range="bytes=-3")  # a suffix: sharded Zarr's index
    assert (status, body) == (206, b"789")
    status, headers, _ = get(base + "c/0", Range="bytes=10-")
    assert (status, headers["Content-Range"]) == (416, "bytes */10")
    assert get(base + "c/missing")[0] == 404
    status, _, body = get(base)
    assert status == 200 and b'href="/' + mine.encode() + b'/c/"' in body
    put = urllib.request.Request(base + "c/0", data=b"x", method="PUT")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(put, timeout=30)
    assert refused.value.code == 405 and (folder / mine / "c" / "0").read_bytes() == VALUE


def test_http_server_refuses_paths_outside_its_folder(http_server: tuple[str, Path]) -> None:
    url, folder = http_server
    secret = folder.parent / "outside.txt"
    secret.write_bytes(b"not served")
    try:
        # urllib would normalize '..' away: the request line is written by hand.
        port = int(url.rsplit(":", 1)[1].strip("/"))
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(b"GET /../outside.txt HTTP/1.0\r\n\r\n")
            reply = b"".join(iter(lambda: conn.recv(65536), b""))
        assert reply.split(b" ", 2)[1] == b"404" and b"not served" not in reply
    finally:
        secret.unlink()


def refused(endpoint: str) -> bool:
    """True when nothing listens on the endpoint's port any more."""
    port = int(endpoint.split(":")[2].split("/")[0])
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_private_s3_dies_and_comes_back_empty(private_s3: Callable[[], MotoS3Server]) -> None:
    import obstore

    server = private_s3()
    create_s3_bucket(server.endpoint, "bucket")
    obstore.put(s3_store(server.endpoint, "bucket"), "key", VALUE)
    server.kill()
    assert refused(server.endpoint)
    server.start()  # same port, nothing kept
    assert http_answers(server.endpoint + "/")
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{server.endpoint}/bucket/key", timeout=30)
    assert missing.value.code == 404


@pytest.mark.parametrize("kind", ["private_gcs", "private_azure", "private_http"])
def test_private_emulators_restart(kind: str, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue(kind)()
    probe = server.endpoint + server.probe
    assert http_answers(probe)
    server.kill()
    assert refused(server.endpoint)
    server.start()
    assert http_answers(probe)


def test_services_exports_every_endpoint() -> None:
    """Under the test command (ZSTORES_REQUIRE_PEERS=1) every emulator variable is set."""
    names = ["ZSTORES_TEST_S3_ENDPOINT", "ZSTORES_TEST_GCS_ENDPOINT",
             "ZSTORES_TEST_AZURE_ENDPOINT", "ZSTORES_TEST_HTTP_URL", "ZSTORES_TEST_HTTP_DIR"]
    if os.environ.get("ZSTORES_REQUIRE_PEERS") != "1":
        pytest.skip("only the test command promises every server")
    assert [name for name in names if not os.environ.get(name)] == []
    assert os.environ["ZSTORES_TEST_AZURE_ENDPOINT"].endswith("/" + AZURITE_ACCOUNT)
    assert os.environ["ZSTORES_TEST_HTTP_URL"].endswith("/")
