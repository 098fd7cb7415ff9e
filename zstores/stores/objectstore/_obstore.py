"""The obstore engine: an object store's requests through obstore (Rust's object_store).

One engine object per store.  Every request uses obstore's blocking
functions, which release the GIL while they wait; batches (``get_many``,
``put_many``, ``copy_many``) run them in the engine's pool of
``max_concurrency`` threads, so 1,000 keys cost about 1,000 /
``max_concurrency`` round trips of time instead of 1,000.

Why threads and not obstore's async functions on an event loop of ours: an
async call finishes by running Python code (waking the loop) on one of
tokio's threads, and if that happens while the interpreter is exiting, the
thread is torn down inside Rust frames and the process aborts (SIGABRT,
exit status 134, about one run in eight of a command that used a batch).
A blocking call runs no Python on tokio's threads, and the pool's threads
are joined before the interpreter finalizes.

Paths here are whole object names inside the bucket (the store's prefix
already joined); the engine knows nothing of Zarr keys or modes.  A missing
object comes back as ``None``; every other obstore error propagates, and the
store turns it into a typed zstores error (``classify``).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import timedelta
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["ObstoreEngine", "classify", "import_obstore"]


def import_obstore(extra: str) -> Any:
    """The obstore module, or an ImportError naming the extra that installs it."""
    try:
        import obstore
        import obstore.exceptions
        import obstore.store
    except ImportError:  # pragma: no cover - the extra is installed in tests
        raise ImportError(
            f"object stores need the obstore package: pip install 'zstores[{extra}]'"
        ) from None
    return obstore


# ----------------------------------------------------------- error kinds
_STATUS = re.compile(r"status code: (\d{3})")
_MISSING_CONTAINER = ("NoSuchBucket", "ContainerNotFound", "bucket does not exist",
                      "The specified bucket does not exist", "ContainerBeingDeleted")
_CONNECTION = ("error sending request", "tcp connect error", "Connection refused",
               "timed out", "operation timed out", "dns error", "connection closed",
               "Connection reset")


def classify(error: BaseException) -> str:
    """What an obstore error means for a store.

    One of ``"missing"`` (no such object), ``"no_container"`` (no such bucket
    or container), ``"denied"`` (HTTP 401/403, refused credentials),
    ``"range"`` (HTTP 416: the range starts past the end), ``"not_partial"``
    (the server ignored a range and sent the whole object), ``"connection"``
    (unreachable, refused, timed out), ``"unsupported"`` (the service cannot
    do this), ``"throttled"`` (HTTP 429/503 after the retries ran out) or
    ``"other"``.  obstore raises a few exception classes and carries the
    HTTP status only in its message, hence the text checks.

    Examples
    --------
    >>> classify(FileNotFoundError("Object at location x not found"))
    'missing'
    >>> classify(RuntimeError("Server returned non-2xx status code: 416 Range Not Satisfiable"))
    'range'
    """
    text = str(error)
    if any(marker in text for marker in _MISSING_CONTAINER):
        return "no_container"
    name = type(error).__name__
    if name in ("PermissionDeniedError", "UnauthenticatedError"):
        return "denied"
    if isinstance(error, FileNotFoundError) or name == "NotFoundError":
        return "missing"
    status = _STATUS.search(text)
    code = int(status.group(1)) if status else 0
    if code in (401, 403):
        return "denied"
    if code == 416 or "but object was only" in text:  # obstore's own check of a range
        return "range"
    if code in (429, 503):
        return "throttled"
    if "non-partial response" in text or "NotPartial" in text \
            or "Range request not supported" in text:  # a 200 to a range: the whole value
        return "not_partial"
    if name == "NotSupportedError" or code in (405, 501):
        return "unsupported"
    if code == 404:
        return "missing"
    if any(marker in text for marker in _CONNECTION):
        return "connection"
    return "other"


def _is_missing(error: BaseException) -> bool:
    return classify(error) == "missing"


def duration(seconds: float) -> timedelta:
    """Seconds as the ``timedelta`` obstore's client and retry options take."""
    return timedelta(seconds=seconds)


# ----------------------------------------------------------------- engine
class ObstoreEngine:
    """Requests to one bucket (or container, or base URL) through an obstore store.

    Parameters
    ----------
    store : obstore.store.ObjectStore
        The obstore store for normal calls (the service's retries apply).
    probe : obstore.store.ObjectStore
        The same location with few retries and short timeouts, for the check
        at open, so a dead endpoint is reported within ``connect_timeout``.
    max_concurrency : int
        Requests in flight at once in a batch.
    suffix_ranges : bool
        The service answers ``bytes=-n`` (Azure does not: a HEAD first).
    bulk_delete : bool
        Delete many objects with the service's bulk request (S3's
        ``DeleteObjects``); otherwise with concurrent single DELETEs.
    """

    def __init__(self, store: Any, probe: Any, *, max_concurrency: int,
                 suffix_ranges: bool = True, bulk_delete: bool = True) -> None:
        self._obstore = import_obstore("s3")
        self.driver_errors = (self._obstore.exceptions.BaseError, FileNotFoundError)
        self.classify = classify
        self.store = store
        self.probe = probe
        self.max_concurrency = max_concurrency
        self.suffix_ranges = suffix_ranges
        self.bulk_delete = bulk_delete
        self.refused_characters = ""  # beyond the control characters ObjectStore refuses
        self.refused_reason = ""
        self._pool_lock = threading.Lock()
        self._threads: ThreadPoolExecutor | None = None
        self._threads_pid = 0

    # ------------------------------------------------------------ one object
    def get(self, path: str) -> bytes | None:
        try:
            return bytes(self._obstore.get(self.store, path).bytes())
        except FileNotFoundError as error:
            if _is_missing(error):
                return None
            raise

    def head(self, path: str, *, probe: bool = False) -> int | None:
        """The object's size, or None if there is none."""
        try:
            return int(self._obstore.head(self.probe if probe else self.store, path)["size"])
        except FileNotFoundError as error:
            if _is_missing(error):
                return None
            raise

    def get_range(self, path: str, start: int, length: int | None) -> bytes | None:
        """Python-slice semantics over range GETs; None when the object is missing."""
        if length == 0:
            return None if self.head(path) is None else b""
        if start < 0 and (length is not None or not self.suffix_ranges):
            size = self.head(path)  # a suffix of a known size, as a plain range
            if size is None:
                return None
            start = max(size + start, 0)
            if start >= size:
                return b""
        if start < 0:
            request: dict[str, Any] = {"suffix": -start}
        elif length is None:
            request = {"offset": start}
        else:
            request = (start, start + length)
        try:
            result = self._obstore.get(self.store, path, options={"range": request})
            return bytes(result.bytes())
        except FileNotFoundError as error:
            if _is_missing(error):
                return None
            raise
        except self._obstore.exceptions.BaseError as error:
            kind = classify(error)
            if kind == "range":  # the object exists and the range starts at or past its end
                return None if self.head(path) is None else b""
            if kind != "not_partial":
                raise
        # The server sent the whole object (an empty one answers a suffix so):
        # slice it here.
        value = self.get(path)
        if value is None:
            return None
        # Here start < 0 only with length None (a suffix): the slice needs no stop.
        return value[start:] if length is None else value[start:start + length]

    # ------------------------------------------------------ pinned readers
    def get_head(self, path: str, length: int) -> tuple[bytes, int, str | None] | None:
        """The first ``length`` bytes, the object's size and its ETag; None if it is missing."""
        try:
            result = self._obstore.get(self.store, path, options={"range": (0, length)})
        except FileNotFoundError as error:
            if _is_missing(error):
                return None
            raise
        except self._obstore.exceptions.BaseError as error:
            if classify(error) != "range":
                raise
            # An empty object has no byte 0 to start a range at: read it whole.
            found = self.get_versioned(path)
            return None if found is None else (found[0], len(found[0]), found[1])
        meta = result.meta
        return bytes(result.bytes())[:length], int(meta["size"]), meta.get("e_tag")

    def get_range_if(self, path: str, start: int, stop: int, e_tag: str) -> bytes | None:
        """Bytes ``[start, stop)`` while the object still has ``e_tag`` (``If-Match``);
        None once it has another or is gone."""
        try:
            result = self._obstore.get(self.store, path,
                                       options={"range": (start, stop), "if_match": e_tag})
        except self._obstore.exceptions.PreconditionError:
            return None
        except FileNotFoundError as error:
            if _is_missing(error):
                return None
            raise
        return bytes(result.bytes())[:stop - start]

    def put(self, path: str, value: bytes | memoryview) -> None:
        self._obstore.put(self.store, path, value)

    def delete(self, paths: list[str]) -> None:
        """Delete objects; missing ones are no error (bulk deletes where the service has them)."""
        if not paths:
            return
        if len(paths) == 1:  # as a str: a list, even of one, is a bulk request
            self._delete_one(paths[0])
            return
        if not self.bulk_delete:
            self._each(self._delete_one, [(path,) for path in paths])
            return
        try:
            self._obstore.delete(self.store, paths)
        except FileNotFoundError as error:
            if not _is_missing(error):
                raise
            for path in paths:  # one was missing: the service stops there; go one by one
                self._delete_one(path)

    def _delete_one(self, path: str) -> None:
        try:
            self._obstore.delete(self.store, path)
        except FileNotFoundError as error:
            if not _is_missing(error):
                raise

    def copy(self, source: str, target: str) -> None:
        self._obstore.copy(self.store, source, target, overwrite=True)

    # ---------------------------------------------------- conditional writes
    #: Why conditional requests are refused through this engine ("": they work).
    conditional_refusal = ""

    def put_if_absent(self, path: str, value: bytes | memoryview) -> bool:
        """PUT only if no object is there (``If-None-Match: *``, GCS
        ``ifGenerationMatch=0``); False when one is."""
        errors = self._obstore.exceptions
        try:
            self._obstore.put(self.store, path, value, mode="create")
        except (errors.AlreadyExistsError, errors.PreconditionError):
            return False
        return True

    def get_versioned(self, path: str) -> tuple[bytes, str | None, str | None] | None:
        """The object's bytes with its ETag and version (GCS: generation); None if missing."""
        try:
            result = self._obstore.get(self.store, path)
        except FileNotFoundError as error:
            if _is_missing(error):
                return None
            raise
        meta = result.meta
        return bytes(result.bytes()), meta.get("e_tag"), meta.get("version")

    def put_if_matches(self, path: str, value: bytes | memoryview, *, e_tag: str | None = None,
                       version: str | None = None) -> bool:
        """PUT only while the object has this ETag (``If-Match``) or version (GCS
        ``ifGenerationMatch``); False when it has another, or is missing."""
        errors = self._obstore.exceptions
        mode = {name: token for name, token in (("e_tag", e_tag), ("version", version))
                if token is not None}
        try:
            self._obstore.put(self.store, path, value, mode=mode)
        except (errors.PreconditionError, errors.AlreadyExistsError):
            return False
        except FileNotFoundError as error:
            if _is_missing(error):
                return False
            raise
        return True

    # ------------------------------------------------------------- listings
    # A folder is "" (the bucket) or "a/b/"; obstore names it "a/b" (or None)
    # and lists segment-wise, so "a/b" never matches "a/bc/x".
    def list(self, folder: str) -> Iterator[tuple[str, int]]:
        """``(path, size)`` of every object under ``folder``, one page at a time."""
        for batch in self._obstore.list(self.store, folder.rstrip("/") or None, chunk_size=1000):
            for meta in batch:
                yield meta["path"], int(meta["size"])

    def list_folder(self, folder: str, *, probe: bool = False) -> tuple[list[str], list[str]]:
        """Object paths and common prefixes directly under ``folder`` (a delimiter listing)."""
        store = self.probe if probe else self.store
        listing = self._obstore.list_with_delimiter(store, folder.rstrip("/") or None)
        return [meta["path"] for meta in listing["objects"]], list(listing["common_prefixes"])

    def exists(self, folder: str) -> bool:
        """Whether anything is under ``folder``; asked with the probe's short timeouts."""
        objects, prefixes = self.list_folder(folder, probe=True)
        return bool(objects or prefixes)

    def close(self) -> None:
        """Stop the batch threads (obstore's connection pool goes with the store object)."""
        with self._pool_lock:
            threads, self._threads = self._threads, None
        if threads is not None and self._threads_pid == os.getpid():
            threads.shutdown(wait=True)

    # --------------------------------------------------------------- batches
    def _pool(self) -> ThreadPoolExecutor:
        """The engine's threads, made on first use and again in a forked child."""
        with self._pool_lock:
            if self._threads is None or self._threads_pid != os.getpid():
                # A pool inherited through fork has no threads left: start a new one.
                self._threads = ThreadPoolExecutor(self.max_concurrency,
                                                   thread_name_prefix="zstores-objectstore")
                self._threads_pid = os.getpid()
            return self._threads

    def _each(self, call: Callable[..., T], pairs: list[tuple[Any, ...]]) -> list[T]:
        """``call(*pair)`` for every pair in the pool; results in order.

        Every request runs to its end before an error is raised, so a failed
        batch leaves no request still writing behind the caller's back.
        """
        futures = [self._pool().submit(call, *pair) for pair in pairs]
        wait(futures)
        for future in futures:
            error = future.exception()
            if error is not None:
                raise error
        return [future.result() for future in futures]

    def get_many(self, paths: list[str]) -> dict[str, bytes]:
        values = self._each(self.get, [(path,) for path in paths])
        return {path: value for path, value in zip(paths, values, strict=True)
                if value is not None}

    def head_many(self, paths: list[str]) -> dict[str, int]:
        """The sizes of the objects that exist among ``paths`` (concurrent HEADs)."""
        sizes = self._each(self.head, [(path,) for path in paths])
        return {path: size for path, size in zip(paths, sizes, strict=True) if size is not None}

    def put_many(self, items: list[tuple[str, bytes | memoryview]]) -> None:
        self._each(self.put, items)

    def copy_many(self, moves: list[tuple[str, str]]) -> None:
        self._each(self.copy, moves)
