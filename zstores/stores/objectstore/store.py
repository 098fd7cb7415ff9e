"""ObjectStore: the one Store over object storage (S3, GCS, Azure Blob, HTTP).

Keys are objects named ``<prefix>/<key>`` in one bucket (container, or base
URL), the layout zarr-python 2's ``FSStore`` and zarr-python 3's
``ObjectStore`` and ``FsspecStore`` use, so each reads what the others wrote.
The services differ only in how a client is configured (``services.py``);
everything a Store does is here, over an engine (``_obstore.py``, or
``_fsspec.py`` with ``via="fsspec"``) that sends the requests.
"""

from __future__ import annotations

import errno
import math
import re
from collections.abc import Iterable
from typing import Any, ClassVar
from urllib.parse import quote

from ...base import Buffer, Mode, Store, Version
from ...errors import (
    InvalidKeyError,
    StoreAccessError,
    StoreConnectionError,
    StoreIOError,
    StoreNotFoundError,
    StoreURLError,
    UnsupportedOperationError,
)
from ...keys import child_name, normalize_key
from ...readers import BufferReader, ValueReader
from ...secrets import redact_url, scrub
from .._network import (
    DEFAULT_CONNECT_TIMEOUT,
    SharedClient,
    backend_error,
    call_translating,
    check_connect_timeout,
    network_errors_as,
    reopen_unpickled,
    unpickling,
)
from ._obstore import classify

__all__ = ["ENGINES", "ObjectStore", "check_common_options"]

#: The libraries an object store can send its requests through (``via=``).
ENGINES = ("obstore", "fsspec")

#: How often replace_if with expected bytes compares again after a 412.
_CAS_ATTEMPTS = 20

#: Defaults of the options every object store takes.
DEFAULT_REQUEST_TIMEOUT = 30.0
DEFAULT_RETRY_TIMEOUT = 30.0
DEFAULT_MAX_CONCURRENCY = 64


def _close_engine(engine: Any) -> None:
    engine.close()


def _unpickle(cls: type[ObjectStore], params: dict[str, Any], mode: str) -> ObjectStore:
    """A pickled store reopened: no request now, one engine per bucket and options."""
    return reopen_unpickled(cls, params, mode)  # type: ignore[no-any-return]


def _positive_seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"invalid {name} {value!r}: it must be a number of seconds above 0")
    return float(value)


def check_common_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options every object store takes, checked; raises ``ValueError`` naming the bad one.

    Examples
    --------
    >>> check_common_options({"via": "obstore", "connect_timeout": 2, "request_timeout": 30,
    ...                       "retry_timeout": 30, "max_concurrency": 8})["connect_timeout"]
    2.0
    """
    checked = dict(options)
    if checked["via"] not in ENGINES:
        raise ValueError(f"invalid via {checked['via']!r}: expected one of {', '.join(ENGINES)}")
    checked["connect_timeout"] = check_connect_timeout(checked["connect_timeout"])
    for name in ("request_timeout", "retry_timeout"):
        checked[name] = _positive_seconds(name, checked[name])
    concurrency = checked["max_concurrency"]
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"invalid max_concurrency {concurrency!r}: it must be an int >= 1")
    return checked


#: Characters no object-store key may hold: obstore (Rust's object_store) can
#: neither write nor even list an object whose name has a control character.
#: Refused for every engine, so that a bucket stays readable by all of them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _short(error: BaseException) -> str:
    """The first line of a driver's message (obstore appends a multi-line debug dump)."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return first if len(first) <= 300 else first[:300] + "..."


class ObjectStore(Store):
    """Base class of the object stores: keys as objects ``<prefix>/<key>`` in a bucket.

    Not opened directly: use ``S3Store``, ``GCSStore``, ``AzureStore``,
    ``HTTPStore`` or ``open_store("s3://bucket/prefix")``.  A subclass names
    its ``scheme``, its ``extra`` and how to build an engine for its service
    (``_make_engine``); every Store method is implemented here.

    What object storage does and does not give (see docs/backends.md):
    a single ``set`` is atomic (readers see the old or the new object, never
    a part); ``getitems``/``setitems``/``delitems`` send their requests
    concurrently (``max_concurrency`` in flight) but are not transactions;
    ``rename`` is a copy then a delete, not atomic; ``listdir`` is one
    delimiter listing; ``get_range`` one range GET.
    """

    scheme: ClassVar[str] = ""
    #: The name of the extra that installs what this service needs.
    extra: ClassVar[str] = ""
    #: What the service calls its top-level namespace ("bucket", "container").
    container_word: ClassVar[str] = "bucket"
    #: Constructor options that are secrets: never shown, only pickled.
    secret_options: ClassVar[tuple[str, ...]] = ()

    supports_range_reads = True
    supports_process_writers = True
    persistent = True
    #: Conditional requests (``If-None-Match: *``, ``If-Match``); an instance
    #: whose engine cannot send them (fsspec's HTTP file system) says False.
    supports_create_if_absent = True
    supports_compare_and_swap = True
    #: What ``get_with_version`` gives: the object's ``"etag"`` (S3, Azure) or
    #: ``"generation"`` (GCS, where obstore calls it the version).
    _object_version: ClassVar[str] = "etag"

    def __init__(self, location: str, *, mode: Mode = "a", options: dict[str, Any]) -> None:
        super().__init__(mode=mode)
        self._options = check_common_options(options)
        self._container, self._prefix = self._split_location(location)
        self._root = self._prefix + "/" if self._prefix else ""
        self._engine: Any = None
        self._shared: SharedClient | None = None
        self._driver_errors: tuple[type[BaseException], ...] = (FileNotFoundError,)
        if unpickling():
            # Checked when the original store opened: no request now, and one
            # engine (one HTTP connection pool, one set of batch threads) per
            # bucket and options for the stores unpickled in this process.
            self._shared = SharedClient.acquire(
                (type(self), self._container, repr(sorted(self._options.items()))),
                self._make_engine, _close_engine)
            self._engine = self._shared.client()  # builds a client; connects nowhere
        else:
            self._engine = self._make_engine()
        self._driver_errors = self._engine.driver_errors
        self._refuse_conditional_writes(self._engine.conditional_refusal)
        if self._shared is not None:
            return
        exists = self._check_reachable()
        if self._mode in ("r", "r+", "w-"):
            self._check_existence(exists)
        self._clear_if_mode_w()

    # ------------------------------------------------------------ to override
    def _make_engine(self) -> Any:
        """The engine (``ObstoreEngine`` or ``FsspecEngine``) for this service and options."""
        raise NotImplementedError

    def _endpoint(self) -> str:
        """The endpoint the store talks to, as repr and messages show it ("" for the default)."""
        return self._options.get("endpoint_url") or ""

    # ------------------------------------------------------------- location
    def _split_location(self, location: str) -> tuple[str, str]:
        """``(bucket, prefix)`` from ``scheme://bucket/prefix`` or ``bucket/prefix``."""
        if not isinstance(location, str):
            raise TypeError(f"location must be a str, not {type(location).__name__}")
        text = location
        if "://" in text:
            scheme, _, text = text.partition("://")
            if scheme.lower() != self.scheme:
                raise StoreURLError(
                    f"{type(self).__name__} takes {self.scheme}://{self.container_word}/prefix, "
                    f"not {redact_url(location)!r}")
            if "?" in text:
                raise StoreURLError(
                    f"{type(self).__name__}({redact_url(location)!r}): give options as keywords "
                    "(open_store takes them in the URL)")
        container, _, prefix = text.partition("/")
        prefix = "/".join(part for part in prefix.split("/") if part)
        if not container:
            raise StoreURLError(
                f"{redact_url(location)!r} names no {self.container_word}: write "
                f"{self.scheme}://{self.container_word}/prefix")
        return container, prefix

    # --------------------------------------------------------------- errors
    def _store_name(self) -> str:
        return f"{type(self).__name__} {self._describe()}"

    def _secrets(self) -> list[str]:
        return [str(self._options[name]) for name in self.secret_options
                if self._options.get(name)]

    def _typed_error(self, error: BaseException) -> Exception:
        """The zstores error an engine's exception becomes (no secret shown)."""
        name, secrets, detail = self._store_name(), self._secrets(), _short(error)
        kind = self._engine.classify(error) if self._engine is not None else classify(error)
        if kind == "no_container":
            return backend_error(StoreNotFoundError, name,
                                 f"the {self.container_word} {self._container!r} does not exist",
                                 secrets, error, detail=detail)
        if kind == "denied":
            return backend_error(StoreAccessError, name,
                                 "the service refused the credentials or denied the request "
                                 "(HTTP 401/403)", secrets, error, detail=detail)
        if kind == "connection":
            return backend_error(StoreConnectionError, name, "could not talk to the service",
                                 secrets, error, detail=detail)
        if kind == "throttled":
            return backend_error(StoreIOError, name,
                                 "the service kept throttling requests (HTTP 429/503) after "
                                 "the retries", secrets, error, errno.EAGAIN, detail=detail)
        if kind == "unsupported":
            return backend_error(UnsupportedOperationError, name,
                                 "the service does not support this request", secrets, error,
                                 detail=detail)
        return backend_error(StoreIOError, name, "the request failed", secrets, error,
                             detail=detail)

    def _check_reachable(self) -> bool:
        """One listing within ``connect_timeout``: is the store there, does it hold keys?

        A missing bucket is ``StoreNotFoundError`` whatever the mode: zstores
        never creates buckets (a mistyped name would silently start a new
        bucket, with the provider's default region, policy and billing).
        """
        timeout = self._options["connect_timeout"]

        def translate(error: BaseException) -> Exception:
            typed = self._typed_error(error)
            if isinstance(typed, StoreNotFoundError):
                return StoreNotFoundError(
                    f"{self._store_name()}: the {self.container_word} {self._container!r} does "
                    f"not exist; create it with the provider's tools first (zstores never "
                    f"creates a {self.container_word})")
            if isinstance(typed, StoreConnectionError):
                return backend_error(
                    StoreConnectionError, self._store_name(),
                    f"no answer from the service within {timeout:g} s (connect_timeout)",
                    self._secrets(), error, detail=_short(error))
            return typed

        return bool(call_translating(lambda: self._engine.exists(self._root), self._driver_errors,
                                     translate, self._secrets))

    # ---------------------------------------------------------------- paths
    def _key(self, key: str) -> str:
        """``normalize_key``, then the characters object storage cannot name."""
        key = normalize_key(key)
        if _CONTROL.search(key):
            raise InvalidKeyError(
                f"invalid key {key!r} for {type(self).__name__}: object-store keys may not "
                "hold control characters (U+0000-U+001F, U+007F), which obstore cannot name")
        refused = self._engine.refused_characters
        if refused and any(character in key for character in refused):
            raise InvalidKeyError(
                f"invalid key {key!r} for {type(self).__name__} via={self._options['via']!r}: "
                f"{self._engine.refused_reason}")
        return key

    def _path(self, key: str) -> str:
        return self._root + key

    def _folder(self, prefix: str) -> str:
        """A primitive's prefix (``""`` or ``"a/b/"``) as the engine's folder path."""
        return self._root + prefix

    def _key_of(self, path: str) -> str:
        return path[len(self._root):]

    # ----------------------------------------------------------- primitives
    @network_errors_as
    def _get(self, key: str) -> bytes:
        value = self._engine.get(self._root + key)
        if value is None:
            raise KeyError(key)
        return value

    @network_errors_as
    def _set(self, key: str, value: Buffer) -> None:
        self._engine.put(self._root + key, value)

    @network_errors_as
    def _delete(self, key: str) -> None:
        # Services answer a DELETE of a missing object with success: ask first.
        if self._engine.head(self._root + key) is None:
            raise KeyError(key)
        self._engine.delete([self._root + key])

    @network_errors_as
    def _list_prefix(self, prefix: str) -> list[str]:
        return [self._key_of(path) for path, _ in self._engine.list(self._folder(prefix))]

    # ----------------------------------------------------------- fast paths
    @network_errors_as
    def _contains(self, key: str) -> bool:
        return self._engine.head(self._root + key) is not None

    @network_errors_as
    def _stat(self, key: str) -> int | None:
        return self._engine.head(self._root + key)

    def _getsize_key(self, key: str) -> int:
        size = self._stat(key)
        if size is None:
            raise KeyError(key)
        return size

    @network_errors_as
    def _read_pinned(self, path: str, start: int, stop: int, e_tag: str) -> bytes | None:
        """A range of ``path`` while it keeps ``e_tag`` (for ``_ETagReader``)."""
        return self._engine.get_range_if(path, start, stop, e_tag)

    @network_errors_as
    def _open_reader(self, key: str) -> ValueReader:
        # One ranged GET of the first PIN_WHOLE_BELOW bytes: a smaller object
        # is then held whole; a larger one keeps that piece and reads the
        # rest with If-Match on the ETag it started with, so a rewrite
        # meanwhile fails the read (412) instead of mixing two versions.
        engine = self._engine
        if not hasattr(engine, "get_range_if"):  # fsspec: no conditional reads
            return super()._open_reader(key)
        path = self._root + key
        found = engine.get_head(path, PIN_WHOLE_BELOW)
        if found is None:
            raise KeyError(key)
        head, size, e_tag = found
        token = None if e_tag is None else ("etag", e_tag)
        if len(head) >= size or e_tag is None:
            if len(head) < size:  # no ETag to pin the rest by: read it whole
                head = self._get(key)
            return BufferReader(key, head, token)
        return _ETagReader(self, key, path, head, size, e_tag)

    @network_errors_as
    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        value = self._engine.get_range(self._root + key, start, length)
        if value is None:
            raise KeyError(key)
        return value

    @network_errors_as
    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        found = self._engine.get_many([self._root + key for key in keys])
        return {self._key_of(path): value for path, value in found.items()}

    @network_errors_as
    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        if len(items) == 1:
            self._engine.put(self._root + items[0][0], items[0][1])
        elif items:
            self._engine.put_many([(self._root + key, value) for key, value in items])

    @network_errors_as
    def _delete_many(self, keys: list[str]) -> None:
        self._engine.delete([self._root + key for key in keys])

    @network_errors_as
    def _listdir(self, prefix: str) -> Iterable[str]:
        folder = self._folder(prefix)
        objects, prefixes = self._engine.list_folder(folder)
        return {child_name(path, folder) for path in objects + prefixes
                if path.startswith(folder) and len(path) > len(folder)}

    @network_errors_as
    def _rmdir(self, prefix: str) -> None:
        self._engine.delete([path for path, _ in self._engine.list(self._folder(prefix))])

    @network_errors_as
    def _getsize_prefix(self, prefix: str) -> int:
        return sum(size for _, size in self._engine.list(self._folder(prefix)))

    @network_errors_as
    def _len(self) -> int:
        return sum(1 for _ in self._engine.list(self._root))

    def _clear(self) -> None:
        self._rmdir("")

    @network_errors_as
    def _rename_key(self, src: str, dst: str) -> None:
        # Object storage has no rename: a server-side copy, then a delete.
        self._engine.copy(self._root + src, self._root + dst)
        self._engine.delete([self._root + src])

    @network_errors_as
    def _rename_prefix(self, src_prefix: str, dst_prefix: str) -> None:
        sources = [self._key_of(path) for path, _ in self._engine.list(self._folder(src_prefix))]
        moves = {key: dst_prefix + key[len(src_prefix):] for key in sources}
        targets = set(moves.values())
        pairs = [(self._root + key, self._root + moves[key]) for key in sources]
        if targets.isdisjoint(sources):
            self._engine.copy_many(pairs)  # all copies at once: no copy overwrites a source
        else:
            # Moving into an ancestor ("a/b" -> "a"): a target is also a source
            # key, shorter than its own source; copying shorter keys first
            # reads every source before anything overwrites it.
            for source, target in sorted(pairs, key=lambda pair: len(pair[0])):
                self._engine.copy(source, target)
        self._engine.delete([self._root + key for key in sources if key not in targets])

    # ---------------------------------------------------- conditional writes
    # The service decides: a PUT with If-None-Match: * (GCS ifGenerationMatch=0)
    # creates, one with If-Match: <ETag> (GCS ifGenerationMatch=<generation>)
    # replaces, or the service answers 412 and nothing is written.  These are
    # what a lease object for lock-free coordination stands on.
    def _refuse_conditional_writes(self, why: str) -> None:
        """Declare (on this instance) that the engine cannot send conditional requests."""
        if why:
            self.supports_create_if_absent = self.supports_compare_and_swap = False
            self._create_if_absent_refusal = self._compare_and_swap_refusal = why

    @network_errors_as
    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        return bool(self._engine.put_if_absent(self._root + key, value))

    @network_errors_as
    def _get_with_version(self, key: str) -> tuple[bytes, Version]:
        found = self._engine.get_versioned(self._root + key)
        if found is None:
            raise KeyError(key)
        value, e_tag, version = found
        token = version if self._object_version == "generation" else e_tag
        if token is None:
            # A service that gives no ETag (some HTTP servers): the value's digest.
            return value, self._version_of(value)
        return value, Version(self._object_version, token)

    @network_errors_as
    def _replace_if(self, key: str, expected: Buffer | Version, value: Buffer) -> bool:
        if isinstance(expected, Version):
            return self._put_if_version(key, expected, value)
        # Bytes: read the object's version with its value, compare here, then
        # replace only while that version stands.  A 412 means another writer
        # came between: compare again with what it wrote.
        for _ in range(_CAS_ATTEMPTS):
            try:
                current, version = self._get_with_version(key)
            except KeyError:
                return False
            if not self._holds(current, expected):
                return False
            if self._put_if_version(key, version, value):
                return True
        raise StoreIOError(
            errno.EAGAIN,
            f"{self._store_name()}: key {key!r} kept being rewritten during {_CAS_ATTEMPTS} "
            "attempts to compare and replace it")

    def _put_if_version(self, key: str, version: Version, value: Buffer) -> bool:
        if version.kind != self._object_version:
            raise ValueError(
                f"{self!r}: {version!r} is not a version this store gives (its versions are "
                f"the objects' {self._object_version}s; pass a Version from this store's "
                "get_with_version, or the expected bytes)")
        field = "version" if version.kind == "generation" else "e_tag"
        return bool(self._engine.put_if_matches(self._root + key, value,
                                                **{field: version.token}))

    # ------------------------------------------------------------ lifecycle
    def _close(self) -> None:
        if self._shared is not None:
            self._shared.release()
        elif self._engine is not None:
            self._engine.close()

    def __reduce__(self) -> tuple[Any, ...]:
        # Reopened through _unpickle: no request, one engine per process.
        return (_unpickle, (type(self), self._params(), self._mode_after_pickle()))

    @property
    def container(self) -> str:
        """The bucket (S3, GCS), container (Azure) or host (HTTP) the store is in."""
        return self._container

    @property
    def prefix(self) -> str:
        """The folder inside the bucket every key is under (``""`` for the whole bucket)."""
        return self._prefix

    @property
    def via(self) -> str:
        """The library the store's requests go through: ``"obstore"`` or ``"fsspec"``."""
        return str(self._options["via"])

    def _url(self) -> str:
        path = quote(f"{self._container}/{self._prefix}".rstrip("/"), safe="/@:")
        return f"{self.scheme}://{path}"

    def _location(self) -> Any:
        return (self.scheme, self._endpoint(), self._container, self._prefix)

    def _describe(self) -> str:
        endpoint = self._endpoint()
        where = self._url() + (f" at {endpoint}" if endpoint else "")
        return scrub(redact_url(where), self._secrets())

    def _params(self) -> dict[str, Any]:
        return {"location": f"{self._container}/{self._prefix}", **self._options}

    def _mode_after_pickle(self) -> str:
        # A prefix with no keys does not exist, so even "r+" reopens as "a".
        return "r" if self._mode == "r" else "a"


# Shared by the services' signatures (open_store reads the annotations).
COMMON_DEFAULTS: dict[str, Any] = {
    "via": "obstore",
    "connect_timeout": DEFAULT_CONNECT_TIMEOUT,
    "request_timeout": DEFAULT_REQUEST_TIMEOUT,
    "retry_timeout": DEFAULT_RETRY_TIMEOUT,
    "max_concurrency": DEFAULT_MAX_CONCURRENCY,
}


#: An object smaller than this is read whole when a reader opens it
#: (``open_reader``, an open file of a mount); the first this many bytes of a
#: larger one are kept and the rest read by range, pinned to its ETag.
PIN_WHOLE_BELOW = 8 << 20


class _ETagReader(ValueReader):
    """A large object pinned by its ETag: ranges read with ``If-Match`` (see ``open_reader``)."""

    def __init__(self, store: ObjectStore, key: str, path: str, head: bytes, size: int,
                 e_tag: str) -> None:
        self.key, self.size, self.version = key, size, ("etag", e_tag)
        self._store, self._path, self._head, self._e_tag = store, path, head, e_tag

    def read(self, start: int, length: int) -> bytes:
        stop = min(start + length, self.size)
        if stop <= start:
            return b""
        head = self._head
        if stop <= len(head):
            return head[start:stop]
        data = self._store._read_pinned(self._path, start, stop, self._e_tag)
        if data is None:
            raise StoreIOError(
                errno.ESTALE,
                f"{self.key!r} in {self._store!r} was replaced while open "
                "(its ETag changed); open it again")
        return data
