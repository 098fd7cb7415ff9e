"""The services: how S3, GCS, Azure Blob and HTTP clients are configured.

Each class only turns its options into a client (an obstore store, or an
fsspec file system with ``via="fsspec"``); every Store method is
``ObjectStore``'s.  Credentials come from the usual places of each service
(environment variables, its configuration files, the options here), and the
options that hold secrets are never shown (``secret_options``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from ...base import Mode
from ...errors import StoreURLError, UnsupportedOperationError
from ...metadata import CONSOLIDATED_V2, NODE_V3
from ...metadata.consolidated import published_keys
from ...secrets import redact_url
from .._network import backend_error, call_translating, network_errors_as
from ._obstore import ObstoreEngine, duration, import_obstore
from .published import PublishedListing
from .store import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_RETRY_TIMEOUT,
    ObjectStore,
    _short,
)

__all__ = ["AzureStore", "GCSStore", "HTTPStore", "S3Store"]

#: Retries of a normal request (obstore's default is 10): throttling (503,
#: 429), server errors and dropped connections are retried with backoff,
#: within ``retry_timeout`` seconds.
MAX_RETRIES = 10


def _client_options(options: dict[str, Any], endpoint: str | None, *,
                    probe: bool = False) -> dict[str, Any]:
    connect = duration(options["connect_timeout"])
    client: dict[str, Any] = {
        "connect_timeout": connect,
        "timeout": connect if probe else duration(options["request_timeout"]),
    }
    if endpoint and endpoint.lower().startswith("http://"):
        client["allow_http"] = True  # an emulator or a local S3-compatible server
    return client


def _retry_config(options: dict[str, Any], *, probe: bool = False) -> dict[str, Any]:
    if probe:  # the check at open: answered within connect_timeout, or not at all
        return {"max_retries": 1, "retry_timeout": duration(options["connect_timeout"]),
                "backoff": {"init_backoff": timedelta(milliseconds=50),
                            "max_backoff": timedelta(milliseconds=200)}}
    return {"max_retries": MAX_RETRIES, "retry_timeout": duration(options["retry_timeout"])}


def _obstore_engine(options: dict[str, Any], build: Any, endpoint: str | None,
                    **engine_options: Any) -> ObstoreEngine:
    """An engine whose normal and probe stores come from ``build(client, retry)``."""
    store = build(_client_options(options, endpoint), _retry_config(options))
    probe = build(_client_options(options, endpoint, probe=True),
                  _retry_config(options, probe=True))
    return ObstoreEngine(store, probe, max_concurrency=options["max_concurrency"],
                         **engine_options)


def _fsspec_engine(store: ObjectStore, protocol: str, **storage_options: Any) -> Any:
    from ._fsspec import FsspecEngine

    options = store._options
    return FsspecEngine(protocol, store.container, store.extra,
                        max_concurrency=options["max_concurrency"],
                        connect_timeout=options["connect_timeout"],
                        call_timeout=options["request_timeout"] + options["retry_timeout"],
                        **storage_options)


# --------------------------------------------------------------------- S3
class _ProfileCredentials:
    """obstore credentials from an AWS profile (``~/.aws/credentials``, ``~/.aws/config``).

    obstore reads ``AWS_*`` environment variables but not AWS's configuration
    files; botocore (installed with ``zstores[s3]`` through s3fs) reads them,
    with every kind of profile (keys, ``credential_process``, SSO, roles).
    """

    def __init__(self, profile: str | None) -> None:
        self.profile = profile

    def session(self) -> Any:
        try:
            import botocore.session
        except ImportError:  # pragma: no cover - installed with the extra
            raise ImportError(
                "reading AWS profiles needs botocore: pip install 'zstores[s3]'") from None
        return botocore.session.Session(profile=self.profile)

    def __call__(self) -> dict[str, Any]:
        credentials = self.session().get_credentials()
        if credentials is None:
            raise PermissionError(f"AWS profile {self.profile or 'default'!r} holds no credentials")
        frozen = credentials.get_frozen_credentials()
        return {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key,
                "token": frozen.token,
                # Asked again every 10 minutes: temporary credentials get renewed.
                "expires_at": datetime.now(UTC) + timedelta(minutes=10)}


def _aws_files_exist() -> bool:
    files = [os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
             os.environ.get("AWS_CONFIG_FILE", "~/.aws/config")]
    return any(os.path.isfile(os.path.expanduser(path)) for path in files)


class S3Store(ObjectStore):
    """Keys as objects ``<prefix>/<key>`` in an S3 bucket (or any S3-compatible service).

    Parameters
    ----------
    location : str
        ``s3://bucket/prefix`` or ``bucket/prefix`` (the prefix may be empty:
        the whole bucket).  ``open_store("s3://bucket/prefix?region=eu-west-1")``
        opens it from a URL, options in the query.
    mode : {"a", "r", "r+", "w", "w-"}
        The bucket must exist in every mode (zstores never creates buckets).
        The *store* exists when at least one object is under the prefix:
        ``"r"``/``"r+"`` require one, ``"w-"`` refuses one, ``"w"`` deletes
        every object under the prefix.
    endpoint_url : str, optional
        An S3-compatible service (MinIO, Ceph, R2, moto ...): ``http://`` is
        allowed for it.  Default: AWS (``AWS_ENDPOINT_URL_S3`` or
        ``AWS_ENDPOINT_URL`` if set).
    region : str, optional
        The bucket's region (default ``AWS_REGION``, the profile's, or us-east-1).
    access_key_id, secret_access_key, session_token : str, optional
        Credentials; by default ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
        ``AWS_SESSION_TOKEN``, then the profile (``profile``, ``AWS_PROFILE``
        or default) of ``~/.aws/credentials`` and ``~/.aws/config``, then the
        instance's role (ECS, EC2, web identity).
    profile : str, optional
        A named profile of AWS's configuration files.
    anonymous : bool
        Send unsigned requests (public buckets).
    via : {"obstore", "fsspec"}
        The library sending the requests: obstore (default) or s3fs.
    connect_timeout : float
        Seconds to connect; also the bound of the check at open.
    request_timeout : float
        Seconds one request may take.
    retry_timeout : float
        Seconds within which failed requests (throttling, 5xx, dropped
        connections) are retried with backoff before the call fails.
    max_concurrency : int
        Requests in flight at once in ``getitems``/``setitems``/``delitems``/``rename``.

    Examples
    --------
    Options are checked before any request; a secret never shows:

    >>> from zstores import open_store
    >>> open_store("s3://my-bucket/run1?regoin=eu-west-1&secret_access_key=abc")
    ... # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    zstores.errors.StoreURLError: unknown option 'regoin' for s3:// in
    's3://my-bucket/run1?regoin=eu-west-1&secret_access_key=***'; known options: ...
    """

    scheme = "s3"
    extra = "s3"
    secret_options: ClassVar[tuple[str, ...]] = ("secret_access_key", "session_token")

    def __init__(
        self,
        location: str,
        *,
        mode: Mode = "a",
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        profile: str | None = None,
        anonymous: bool = False,
        via: str = "obstore",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        retry_timeout: float = DEFAULT_RETRY_TIMEOUT,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        options = {name: value for name, value in locals().items()
                   if name not in ("self", "location", "mode", "__class__")}
        super().__init__(location, mode=mode, options=options)

    def _credential_options(self) -> dict[str, Any]:
        """obstore's credential settings: explicit keys, or the profile when files hold it."""
        options = self._options
        if options["anonymous"]:
            return {"skip_signature": True}
        if options["access_key_id"] or options["secret_access_key"]:
            keys = {"access_key_id": options["access_key_id"],
                    "secret_access_key": options["secret_access_key"]}
            if options["session_token"]:
                keys["session_token"] = options["session_token"]
            return keys
        if os.environ.get("AWS_ACCESS_KEY_ID"):
            return {}  # obstore reads the environment itself
        if options["profile"] or os.environ.get("AWS_PROFILE") or _aws_files_exist():
            return {"credential_provider": _ProfileCredentials(options["profile"])}
        return {}

    def _make_engine(self) -> Any:
        options = self._options
        # AWS's variables name an endpoint too; one of http:// (an emulator,
        # MinIO) must reach obstore's client options, which allow plain HTTP.
        endpoint = options["endpoint_url"] or os.environ.get("AWS_ENDPOINT_URL_S3") \
            or os.environ.get("AWS_ENDPOINT_URL")
        if options["via"] == "fsspec":
            client: dict[str, Any] = {}
            if endpoint:
                client["endpoint_url"] = endpoint
            if options["region"]:
                client["region_name"] = options["region"]
            return _fsspec_engine(
                self, "s3", anon=options["anonymous"], key=options["access_key_id"],
                secret=options["secret_access_key"], token=options["session_token"],
                profile=options["profile"], client_kwargs=client,
                config_kwargs={"connect_timeout": options["connect_timeout"],
                               "read_timeout": options["request_timeout"]})
        obstore = import_obstore("s3")
        config: dict[str, Any] = self._credential_options()
        if endpoint:
            config["endpoint"] = endpoint
        region = options["region"]
        provider = config.get("credential_provider")
        if region is None and isinstance(provider, _ProfileCredentials):
            region = provider.session().get_config_variable("region")
        if region:
            config["region"] = region

        def build(client: dict[str, Any], retry: dict[str, Any]) -> Any:
            return obstore.store.S3Store(self._container, client_options=client,
                                         retry_config=retry, **config)

        return _obstore_engine(options, build, endpoint)


# --------------------------------------------------------------------- GCS
class _StaticToken:
    """obstore credentials: one OAuth bearer token (``token=``), never refreshed."""

    def __init__(self, token: str) -> None:
        self.token = token

    def __call__(self) -> dict[str, Any]:
        return {"token": self.token, "expires_at": None}


def _gcsfs_class(endpoint: str | None) -> Any:
    """The gcsfs file system for an endpoint: the JSON-API one when an endpoint is named.

    gcsfs registers for ``gs://`` a subclass that first asks Google's Storage
    Control service (gRPC) for each bucket's layout (zonal, hierarchical).
    Another endpoint (an emulator, a private GCS-compatible service) has no
    such service: measured on GCS emulators, every call waited 60 s
    for it, as the failed lookup is not cached.  The base class speaks only
    the JSON API, which is what such endpoints implement.
    """
    try:
        import gcsfs.core
    except ImportError:  # pragma: no cover - installed with the extra
        raise ImportError("via='fsspec' for gs:// needs gcsfs: pip install 'zstores[gcs]'") \
            from None
    if endpoint:
        return gcsfs.core.GCSFileSystem
    import fsspec

    return fsspec.get_filesystem_class("gs")


class GCSStore(ObjectStore):
    """Keys as objects ``<prefix>/<key>`` in a Google Cloud Storage bucket.

    Two engines, chosen with ``via``: gcsfs (``"fsspec"``, the default), which
    speaks GCS's JSON API, the engine the test suite runs against
    fake-gcs-server, and which anonymous access needs; obstore
    (``via="obstore"``), which speaks its XML API, for Google's own service
    only: no emulator serves that API on loopback, so it is not tested here.
    An endpoint refusing obstore's XML requests raises
    ``UnsupportedOperationError`` naming ``via='fsspec'``.

    Parameters
    ----------
    location : str
        ``gs://bucket/prefix`` or ``bucket/prefix``.
    mode : {"a", "r", "r+", "w", "w-"}
        As for ``S3Store``: the bucket must exist.
    endpoint_url : str, optional
        Another GCS-compatible endpoint (an emulator: ``http://`` is allowed).
    service_account_path : str, optional
        A service account's JSON key file.  By default
        ``GOOGLE_SERVICE_ACCOUNT``/``GOOGLE_APPLICATION_CREDENTIALS``, then
        gcloud's application default credentials, then the instance's account.
    token : str, optional
        An OAuth 2 access token to send as is (it is not refreshed).
    anonymous : bool
        Unsigned requests (public buckets, emulators); needs ``via="fsspec"``
        (gcsfs), because obstore's unsigned mode for GCS still asks for a token.
    via : {"fsspec", "obstore"}
        The library sending the requests: gcsfs (default, tested against
        fake-gcs-server) or obstore (not tested: no emulator speaks its XML API).
    connect_timeout : float
        As for ``S3Store``.
    request_timeout : float
        As for ``S3Store``.
    retry_timeout : float
        As for ``S3Store``.
    max_concurrency : int
        As for ``S3Store``.

    Examples
    --------
    >>> from zstores import open_store
    >>> open_store("gs://my-bucket/run1?via=obstore", anonymous=True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    zstores.errors.UnsupportedOperationError: GCSStore gs://my-bucket/run1: anonymous GCS ...
    """

    scheme = "gs"
    extra = "gcs"
    _object_version = "generation"  # ifGenerationMatch: what a GCS precondition compares
    secret_options: ClassVar[tuple[str, ...]] = ("token",)

    def __init__(
        self,
        location: str,
        *,
        mode: Mode = "a",
        endpoint_url: str | None = None,
        service_account_path: str | None = None,
        token: str | None = None,
        anonymous: bool = False,
        via: str = "fsspec",  # the engine tests/test_object_stores.py runs: see the docstring
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        retry_timeout: float = DEFAULT_RETRY_TIMEOUT,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        options = {name: value for name, value in locals().items()
                   if name not in ("self", "location", "mode", "__class__")}
        super().__init__(location, mode=mode, options=options)

    def _gcsfs_token(self) -> Any:
        """gcsfs's ``token``: "anon", a key file, static credentials, or None (its defaults)."""
        options = self._options
        if options["anonymous"]:
            return "anon"
        if options["service_account_path"]:
            return options["service_account_path"]
        if options["token"]:
            # A bare string would be read as a file name or a refresh token
            # (gcsfs then asks oauth2.googleapis.com); a Credentials object
            # without a refresh token is sent as it is.
            import google.oauth2.credentials

            return google.oauth2.credentials.Credentials(options["token"])
        return None

    def _make_engine(self) -> Any:
        options = self._options
        endpoint = options["endpoint_url"]
        if options["via"] == "fsspec":
            return _fsspec_engine(self, "gs", filesystem=_gcsfs_class(endpoint),
                                  token=self._gcsfs_token(), endpoint_url=endpoint)
        if options["anonymous"]:
            raise UnsupportedOperationError(
                f"{type(self).__name__} {self._url()}: anonymous GCS access needs via='fsspec' "
                "(obstore's unsigned mode for GCS still asks the metadata server for a token)")
        obstore = import_obstore("gcs")
        config: dict[str, Any] = {}
        if endpoint:
            config["base_url"] = endpoint
        if options["service_account_path"]:
            config["service_account"] = options["service_account_path"]
        if options["token"]:
            config["credential_provider"] = _StaticToken(options["token"])

        def build(client: dict[str, Any], retry: dict[str, Any]) -> Any:
            return obstore.store.GCSStore(self._container, client_options=client,
                                          retry_config=retry, **config)

        return _obstore_engine(options, build, endpoint)

    def _typed_error(self, error: BaseException) -> Exception:
        typed = super()._typed_error(error)
        if self.via == "obstore" and self._options["endpoint_url"] and (
                isinstance(typed, UnsupportedOperationError)
                or "invalid uploadType" in str(error)):
            # An endpoint without GCS's XML API: an emulator (gcp-storage-emulator
            # answers 501 to obstore's listing, fake-gcs-server 400 to its PUT).
            return backend_error(
                UnsupportedOperationError, self._store_name(),
                "the endpoint does not answer GCS's XML API, which obstore speaks; "
                "emulators implement the JSON API: open it with via='fsspec' (gcsfs)",
                self._secrets(), error, detail=_short(error))
        return typed


# ------------------------------------------------------------------- Azure
class AzureStore(ObjectStore):
    """Keys as blobs ``<prefix>/<key>`` in an Azure Blob Storage container.

    Parameters
    ----------
    location : str
        ``az://container/prefix`` or ``container/prefix``.
    mode : {"a", "r", "r+", "w", "w-"}
        As for ``S3Store``: the container must exist.
    account_name : str, optional
        The storage account (default ``AZURE_STORAGE_ACCOUNT_NAME``).
    account_key, sas_token : str, optional
        A shared key or a SAS token; by default ``AZURE_STORAGE_ACCOUNT_KEY``,
        ``AZURE_STORAGE_SAS_TOKEN``, a service principal (``AZURE_CLIENT_ID``
        ...), a managed identity or the Azure CLI's login.
    endpoint_url : str, optional
        Another endpoint, with the account in its path for Azurite
        (``http://127.0.0.1:10000/devstoreaccount1``).
    anonymous : bool
        Unsigned requests (containers with public access).
    via : {"obstore", "fsspec"}
        The library sending the requests: obstore (default) or adlfs.
    connect_timeout : float
        As for ``S3Store``.
    request_timeout : float
        As for ``S3Store``.
    retry_timeout : float
        As for ``S3Store``.
    max_concurrency : int
        As for ``S3Store``.

    Examples
    --------
    >>> from zstores import open_store
    >>> open_store("az://container/run1?account_name=acct&connect_timeout=0")
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: invalid connect_timeout 0.0: it must be a number of seconds above 0
    """

    scheme = "az"
    extra = "azure"
    container_word = "container"
    secret_options: ClassVar[tuple[str, ...]] = ("account_key", "sas_token")

    def __init__(
        self,
        location: str,
        *,
        mode: Mode = "a",
        account_name: str | None = None,
        account_key: str | None = None,
        sas_token: str | None = None,
        endpoint_url: str | None = None,
        anonymous: bool = False,
        via: str = "obstore",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        retry_timeout: float = DEFAULT_RETRY_TIMEOUT,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        options = {name: value for name, value in locals().items()
                   if name not in ("self", "location", "mode", "__class__")}
        super().__init__(location, mode=mode, options=options)

    def _connection_string(self) -> str:
        """An Azure connection string for ``endpoint_url`` (adlfs's only way to another endpoint).

        It holds the key or SAS token: never shown (they are secret options,
        scrubbed from every message).
        """
        options = self._options
        parts = [f"BlobEndpoint={options['endpoint_url'].rstrip('/')}"]
        if options["account_name"]:
            parts.append(f"AccountName={options['account_name']}")
        if options["account_key"] and not options["anonymous"]:
            parts.append(f"AccountKey={options['account_key']}")
        elif options["sas_token"] and not options["anonymous"]:
            parts.append(f"SharedAccessSignature={options['sas_token'].lstrip('?')}")
        return ";".join(parts)

    def _make_engine(self) -> Any:
        options = self._options
        endpoint = options["endpoint_url"]
        if options["via"] == "fsspec":
            if endpoint:  # adlfs takes another endpoint only in a connection string
                return _fsspec_engine(self, "az", connection_string=self._connection_string(),
                                      anon=options["anonymous"] or None)
            return _fsspec_engine(
                self, "az", account_name=options["account_name"],
                account_key=options["account_key"], sas_token=options["sas_token"],
                anon=options["anonymous"] or None)
        obstore = import_obstore("azure")
        config: dict[str, Any] = {}
        for name in ("account_name", "account_key"):
            if options[name]:
                config[name] = options[name]
        if options["sas_token"]:
            config["sas_key"] = options["sas_token"].lstrip("?")
        if endpoint:
            config["endpoint"] = endpoint
        if options["anonymous"]:
            config["skip_signature"] = True

        def build(client: dict[str, Any], retry: dict[str, Any]) -> Any:
            return obstore.store.AzureStore(self._container, client_options=client,
                                            retry_config=retry, **config)

        # Azure answers no suffix range ("the last n bytes"): a HEAD first.  Deletes
        # are concurrent single requests, not blob batches, which Azurite (the
        # emulator the tests run on) answers too slowly to finish.
        return _obstore_engine(options, build, endpoint, suffix_ranges=False,
                               bulk_delete=False)


# -------------------------------------------------------------------- HTTP
class HTTPStore(ObjectStore):
    """Read-only keys under an ``http://`` or ``https://`` URL: ``<url>/<key>``.

    Reads are GETs, ``get_range`` a range GET (the server must answer
    ``Range``: most static file servers and every object store's public
    URL do), ``stat`` a HEAD.  Listing (``iter``, ``listdir``) comes from
    the hierarchy's consolidated metadata when the URL has it (``.zmetadata``,
    or a root ``zarr.json`` with ``consolidated_metadata``): its metadata
    keys, and the chunk keys its arrays' grids name that exist (concurrent
    HEADs, asked once per array when a listing first reaches into it; see
    ``published.py``).  Then ``stat``, ``in`` (and reads, once a listing,
    ``stat`` or ``in`` has read the metadata) take the name of a folder of
    the hierarchy for no key, whatever the server answers for its URL.  Without consolidated
    metadata, listing needs a server that answers WebDAV's ``PROPFIND``;
    elsewhere it raises ``UnsupportedOperationError`` saying to consolidate.
    Mode ``"r"`` only: there is no way to write.

    Parameters
    ----------
    location : str
        The base URL (``https://example.org/data/run1.zarr``).
    mode : {"r"}
        The only mode.  A store opened with mode ``"r"`` cannot tell whether
        anything is at the URL without listing, so it opens if the server
        answers at all.
    via : {"obstore", "fsspec"}
        The library sending the requests: obstore (default) or fsspec's HTTP file system.
    connect_timeout : float
        As for ``S3Store``.
    request_timeout : float
        As for ``S3Store``.
    retry_timeout : float
        As for ``S3Store``.
    max_concurrency : int
        As for ``S3Store``.

    Examples
    --------
    >>> from zstores import open_store
    >>> open_store("https://example.org/data/run1.zarr")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    zstores.errors.UnsupportedOperationError: HTTPStore('https://example.org/data/run1.zarr')
    is read-only: open it with mode 'r', not 'a'
    """

    extra = "http"
    supports_deletes = False
    supports_create_if_absent = False
    supports_compare_and_swap = False
    _create_if_absent_refusal = _compare_and_swap_refusal = "HTTP is read-only here"

    def __init__(
        self,
        location: str,
        *,
        mode: Mode = "r",
        via: str = "obstore",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        retry_timeout: float = DEFAULT_RETRY_TIMEOUT,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        if mode != "r":
            raise UnsupportedOperationError(
                f"HTTPStore({redact_url(str(location))!r}) is read-only: open it with mode 'r', "
                f"not {mode!r}")
        options = {name: value for name, value in locals().items()
                   if name not in ("self", "location", "mode", "__class__")}
        # The listing from consolidated metadata: None until read, False if there is none.
        self._published_listing: PublishedListing | bool | None = None
        self._published_lock = threading.Lock()
        super().__init__(location, mode=mode, options=options)

    @property
    def scheme(self) -> str:  # type: ignore[override]
        return self._scheme

    def _split_location(self, location: str) -> tuple[str, str]:
        if not isinstance(location, str):
            raise TypeError(f"location must be a str, not {type(location).__name__}")
        scheme, separator, rest = location.partition("://")
        self._scheme = scheme.lower()
        if not separator or self._scheme not in ("http", "https"):
            raise StoreURLError(f"HTTPStore takes an http:// or https:// URL, not "
                                f"{redact_url(location)!r}")
        if "?" in rest or "#" in rest:
            raise StoreURLError(
                f"HTTPStore({redact_url(location)!r}): the URL may have no query or fragment "
                "(keys are joined to its path)")
        host, _, path = rest.partition("/")
        if not host:
            raise StoreURLError(f"{redact_url(location)!r} names no host")
        return host, "/".join(part for part in path.split("/") if part)

    def _base_url(self) -> str:
        return f"{self._scheme}://{self._container}/"

    def _make_engine(self) -> Any:
        options = self._options
        base = self._base_url()
        if options["via"] == "fsspec":
            return _fsspec_engine(self, self._scheme, base_url=base)
        obstore = import_obstore("http")

        def build(client: dict[str, Any], retry: dict[str, Any]) -> Any:
            return obstore.store.HTTPStore(base, client_options=client, retry_config=retry)

        return _obstore_engine(options, build, base, suffix_ranges=True)

    def _check_reachable(self) -> bool:
        # Without a listing nothing tells whether the URL holds a store: any
        # answer to a HEAD (a 404 too) shows the server is there.
        def translate(error: BaseException) -> Exception:
            return self._typed_error(error)

        call_translating(lambda: self._engine.head(self._root + ".zgroup", probe=True),
                         self._driver_errors, translate, self._secrets)
        return True

    def _typed_error(self, error: BaseException) -> Exception:
        typed = super()._typed_error(error)
        if isinstance(typed, UnsupportedOperationError):
            # GETs and HEADs are always supported: what a server refuses (405, 501)
            # is the listing, WebDAV's PROPFIND.  Said in one line, with the way out.
            return UnsupportedOperationError(
                f"{self._store_name()}: http:// stores cannot list keys here: there is no "
                f"consolidated metadata ({CONSOLIDATED_V2} or a {NODE_V3} with "
                "consolidated_metadata) at the URL, and the server answers no WebDAV PROPFIND; "
                "consolidate the hierarchy before publishing it (zstores consolidate PATH, or "
                "zarr.consolidate_metadata), or read it by known keys")
        return typed

    def _endpoint(self) -> str:
        return ""

    def _params(self) -> dict[str, Any]:
        return {"location": self._url(), **self._options}

    # ------------------------------------------------------------- listing
    # The methods below call ObjectStore's (which turn driver errors into typed
    # errors themselves); their own requests go through the decorated helpers.
    def _published(self) -> PublishedListing | None:
        """The listing from the consolidated metadata, read once; None if there is none.

        A broken consolidated document raises ``MetadataError`` naming its key.
        """
        with self._published_lock:
            if self._published_listing is None:
                names = [CONSOLIDATED_V2, NODE_V3]
                found = self._get_many_raw([self._root + name for name in names])
                published = [keys for name in names if self._root + name in found
                             for keys in [published_keys(name, found[self._root + name])]
                             if keys is not None]
                self._published_listing = self._new_listing(published) if published else False
            return self._published_listing or None

    @network_errors_as
    def _get_many_raw(self, paths: list[str]) -> dict[str, bytes]:
        return self._engine.get_many(paths)

    @network_errors_as
    def _new_listing(self, published: list[Any]) -> PublishedListing:
        return PublishedListing(published, self._head_many)

    def _head_many(self, keys: list[str]) -> dict[str, int]:
        sizes = self._engine.head_many([self._root + key for key in keys])
        return {self._key_of(path): size for path, size in sizes.items()}

    @network_errors_as
    def _sizes_under(self, published: PublishedListing, prefix: str) -> dict[str, int]:
        return published.sizes_under(prefix)

    @network_errors_as
    def _names_in(self, published: PublishedListing, prefix: str) -> set[str]:
        return published.names_in(prefix)

    def _is_folder(self, key: str, *, read: bool = True) -> bool:
        """Whether the consolidated hierarchy makes ``key`` a folder, which is never a key.

        ``read=False``: only if the consolidated metadata was read already (a
        get by a known key costs one request, not the metadata's too).
        """
        if read:
            published = self._published()
        else:
            published = self._published_listing or None  # type: ignore[assignment]
        return published is not None and published.is_folder(key)

    # A folder's name reads as missing without a request: a static server
    # answers a folder's URL with a page of links (or a redirect to one).
    def _get(self, key: str) -> bytes:
        if self._is_folder(key, read=False):
            raise KeyError(key)
        return super()._get(key)

    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        if self._is_folder(key, read=False):
            raise KeyError(key)
        return super()._get_range(key, start, length)

    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        return super()._get_many([key for key in keys if not self._is_folder(key, read=False)])

    def _stat(self, key: str) -> int | None:
        return None if self._is_folder(key) else super()._stat(key)

    def _contains(self, key: str) -> bool:
        return not self._is_folder(key) and super()._contains(key)

    def _list_prefix(self, prefix: str) -> list[str]:
        published = self._published()
        if published is None:
            return super()._list_prefix(prefix)
        return list(self._sizes_under(published, prefix))

    def _listdir(self, prefix: str) -> Iterable[str]:
        published = self._published()
        if published is None:
            return super()._listdir(prefix)
        return self._names_in(published, prefix)

    def _getsize_prefix(self, prefix: str) -> int:
        published = self._published()
        if published is None:
            return super()._getsize_prefix(prefix)
        return sum(self._sizes_under(published, prefix).values())

    def _len(self) -> int:
        return len(self._list_prefix(""))
