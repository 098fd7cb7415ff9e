"""The fsspec engine (``via="fsspec"``): an object store's requests through s3fs,
gcsfs, adlfs or fsspec's HTTP file system.

The same interface as ``ObstoreEngine``.  Every request is one coroutine of
the file system, run on fsspec's event loop and bounded in time (the library's
own retries happen inside the bound); batches gather one coroutine per object,
``max_concurrency`` in flight.  Listings are never cached: another process may
write the bucket at any time.

Why obstore is the default: it is what zarr-python 3's ``ObjectStore`` uses,
and its retries and timeouts are explicit options.  fsspec is here for what
obstore cannot do (anonymous GCS; GCS emulators, which answer only the JSON
API that gcsfs speaks) and for environments already configured for fsspec
(its ``~/.config/fsspec`` settings, s3fs's profiles).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

__all__ = ["FsspecEngine"]

_STATUS = re.compile(r"\b(401|403|404|416|429|501|503)\b")


def _library_errors() -> tuple[type[BaseException], ...]:
    """The client libraries' own exception bases the file systems let through
    (botocore's ``EndpointConnectionError``, azure-core's ``HttpResponseError``
    with its ``status_code``, aiohttp's ``ClientError``)."""
    bases = []
    for module, name in (("botocore.exceptions", "BotoCoreError"),
                         ("azure.core.exceptions", "AzureError"),
                         ("aiohttp", "ClientError")):
        try:
            bases.append(getattr(importlib.import_module(module), name))
        except ImportError:  # that file system is not installed: nothing of it to catch
            continue
    return tuple(bases)


def _import_fsspec(extra: str) -> Any:
    try:
        import fsspec
        import fsspec.asyn
    except ImportError:  # pragma: no cover - installed with the extras
        raise ImportError(f"via='fsspec' needs fsspec: pip install 'zstores[{extra}]'") from None
    return fsspec


class FsspecEngine:
    """Requests to one bucket through an (asynchronous) fsspec file system.

    Parameters
    ----------
    protocol : str
        ``"s3"``, ``"gs"``, ``"az"``, ``"http"`` or ``"https"``.
    container : str
        The bucket or container (for HTTP: the host).
    extra : str
        The zstores extra that installs the file system, for messages.
    max_concurrency : int
        Requests in flight at once in a batch.
    connect_timeout : float
        The bound of the check at open (``exists``).
    call_timeout : float, optional
        The bound of one request, its retries included (the store passes
        ``request_timeout + retry_timeout``); None: the library's own.
    base_url : str, optional
        HTTP only: the URL paths are joined to.
    filesystem : type, optional
        The file system class; by default the one fsspec registers for ``protocol``.
    **storage_options
        The file system's own options (credentials, endpoint).
    """

    def __init__(self, protocol: str, container: str, extra: str, *, max_concurrency: int,
                 connect_timeout: float, call_timeout: float | None = None,
                 base_url: str | None = None, filesystem: type | None = None,
                 **storage_options: Any) -> None:
        self._fsspec = _import_fsspec(extra)
        if filesystem is None:
            try:
                filesystem = self._fsspec.get_filesystem_class(protocol)
            except ImportError as error:
                raise ImportError(
                    f"via='fsspec' for {protocol}:// needs its file system ({error}): "
                    f"pip install 'zstores[{extra}]'") from None
        self._class = filesystem
        self._protocol = protocol
        if protocol not in _CONDITIONAL:
            self.conditional_refusal = (
                f"fsspec's {protocol}:// file system sends no conditional requests")
        self._storage_options = {name: value for name, value in storage_options.items()
                                 if value is not None}
        self._fs: Any = None
        self._fs_pid = 0
        self.container = container
        self.base = base_url.rstrip("/") + "/" if base_url else f"{container}/"
        self.max_concurrency = max_concurrency
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.driver_errors = (OSError, ValueError, RuntimeError, self._fsspec.FSTimeoutError,
                              *_library_errors())
        self.suffix_ranges = True
        self.refused_characters, self.refused_reason = "", ""
        if protocol == "az":
            # adlfs parses its paths as URLs: "a/?x" would be stored as "a/",
            # and "a/#" read as "a/".
            self.refused_characters = "?#"
            self.refused_reason = ("adlfs parses paths as URLs ('?' starts a query, '#' a "
                                   "fragment) and would reach another blob; use "
                                   "via='obstore' for such keys")

    @property
    def fs(self) -> Any:
        """The file system, made again in a forked child (fsspec's are not fork-safe)."""
        if self._fs is None or self._fs_pid != os.getpid():
            # A file system object of our own (fsspec's instance cache would
            # share one, and its credentials, between stores); no listings
            # cache, since other processes write the bucket too.
            self._fs = self._class(skip_instance_cache=True, use_listings_cache=False,
                                   **self._storage_options)
            self._fs_pid = os.getpid()
        return self._fs

    def classify(self, error: BaseException) -> str:
        """What an fsspec error means (the same kinds as ``_obstore.classify``)."""
        text = f"{type(error).__name__} {error}"
        if "NoSuchBucket" in text or "ContainerNotFound" in text or \
                "bucket does not exist" in text.lower():
            return "no_container"
        if isinstance(error, PermissionError) or text.startswith("OSError Forbidden"):
            return "denied"  # gcsfs raises a plain OSError("Forbidden: ...") for a 403
        if isinstance(error, FileNotFoundError):
            return "missing"
        code = getattr(error, "code", None) or getattr(error, "status", None) \
            or getattr(error, "status_code", None)  # azure-core's HttpResponseError
        if not isinstance(code, int) and (
                isinstance(error, (ConnectionError, TimeoutError, self._fsspec.FSTimeoutError))
                or "connect" in text.lower() or "ServiceRequestError" in text):
            return "connection"
        if "range is not satisfiable" in text or "InvalidRange" in text:
            return "range"  # s3fs: OSError(EINVAL, ...) for botocore's InvalidRange (HTTP 416)
        if not isinstance(code, int):
            status = _STATUS.search(text)
            code = int(status.group(1)) if status else 0
        return {401: "denied", 403: "denied", 404: "missing", 416: "range", 429: "throttled",
                501: "unsupported", 503: "throttled"}.get(code, "other")

    # ------------------------------------------------------------- running
    def _run(self, call: Callable[..., Awaitable[Any]], *args: Any,
             timeout: float | None = None, **kwargs: Any) -> Any:
        """``await call(*args, **kwargs)`` on fsspec's loop, within ``timeout`` (or the call's)."""
        fs = self.fs
        return self._fsspec.asyn.sync(fs.loop, call, *args,
                                      timeout=timeout or self.call_timeout, **kwargs)

    def _gather(self, call: Callable[..., Awaitable[Any]],
                argument_lists: list[tuple[Any, ...]]) -> list[Any]:
        """``call(*arguments)`` for every tuple, ``max_concurrency`` at once; results in order.

        Each call is bounded by ``call_timeout`` on its own; every call runs
        to its end before the first error is raised, so nothing is still
        writing behind the caller's back.
        """
        async def run_all() -> list[Any]:
            gate = asyncio.Semaphore(self.max_concurrency)

            async def one(arguments: tuple[Any, ...]) -> Any:
                async with gate:
                    return await asyncio.wait_for(call(*arguments), self.call_timeout)

            return await asyncio.gather(*(one(arguments) for arguments in argument_lists),
                                        return_exceptions=True)

        fs = self.fs
        results = self._fsspec.asyn.sync(fs.loop, run_all)
        for result in results:
            if isinstance(result, asyncio.TimeoutError):
                raise self._fsspec.FSTimeoutError(
                    f"a request took longer than {self.call_timeout:g} s") from result
            if isinstance(result, BaseException):
                raise result
        return results

    # ------------------------------------------------------------ one object
    def _full(self, path: str) -> str:
        return self.base + path

    async def _get_or_none(self, path: str) -> bytes | None:
        try:
            return bytes(await self.fs._cat_file(self._full(path)))
        except FileNotFoundError:
            return None

    def get(self, path: str) -> bytes | None:
        return self._run(self._get_or_none, path)

    async def _size_or_none(self, path: str) -> int | None:
        try:
            info = await self.fs._info(self._full(path))
        except FileNotFoundError:
            return None
        if info.get("type") == "directory":
            return None  # a prefix of other objects, not an object
        return int(info["size"])

    def head(self, path: str, *, probe: bool = False) -> int | None:
        return self._run(self._size_or_none, path,
                         timeout=self.connect_timeout if probe else None)

    def get_range(self, path: str, start: int, length: int | None) -> bytes | None:
        """Python-slice semantics; None when the object is missing."""
        if start >= 0 and length is not None:
            if length == 0:
                return None if self.head(path) is None else b""
            try:
                return self._run(self._range_or_none, path, start, start + length)
            except Exception as error:  # a range past the end: some services answer 416
                if self.classify(error) != "range":
                    raise
                return None if self.head(path) is None else b""
        size = self.head(path)  # a suffix or an open end: fsspec's ranges need the size
        if size is None:
            return None
        first = start if start >= 0 else max(size + start, 0)
        stop = size if length is None else min(first + length, size)
        if first >= stop:
            return b""
        return self._run(self._range_or_none, path, first, stop)

    async def _range_or_none(self, path: str, start: int, stop: int) -> bytes | None:
        try:
            return bytes(await self.fs._cat_file(self._full(path), start=start, end=stop))
        except FileNotFoundError:
            return None

    def put(self, path: str, value: bytes | memoryview) -> None:
        self._run(self.fs._pipe_file, self._full(path), bytes(value))

    async def _delete_or_skip(self, path: str) -> None:
        try:
            await self.fs._rm_file(self._full(path))
        except FileNotFoundError:
            pass  # already gone: what a delete wants

    def delete(self, paths: list[str]) -> None:
        """Delete objects, ``max_concurrency`` at once; missing ones are no error.

        One request per object: fsspec's bulk ``rm`` reads ``*``, ``?`` and
        ``[`` in a name as a glob, and a key may hold them.
        """
        if len(paths) == 1:
            self._run(self._delete_or_skip, paths[0])
        elif paths:
            self._gather(self._delete_or_skip, [(path,) for path in paths])

    def copy(self, source: str, target: str) -> None:
        self._run(self.fs._cp_file, self._full(source), self._full(target))

    # ------------------------------------------------------------- listings
    def list(self, folder: str) -> Iterator[tuple[str, int]]:
        """``(path, size)`` of every object under ``folder`` ("" or "a/b/")."""
        start = self._full(folder)
        for name, info in sorted(self._find_under(folder).items()):
            if info.get("type") != "directory" and name.startswith(start) and name != start:
                yield name[len(self.base):], int(info["size"])

    def _find_under(self, folder: str) -> dict[str, dict[str, Any]]:
        """Everything whose name starts with ``folder`` (names may go past it: "a/bc").

        Asked as ``find(bucket, prefix=...)``: adlfs answers ``find("bucket/a/")``
        with the object "a" alone when there is one, hiding the keys below it,
        and in object storage a key may also be a prefix.
        """
        within = self._full(folder)[len(self.container) + 1:]
        try:
            found = self._run(self.fs._find, self.container, prefix=within, detail=True,
                              withdirs=False)
        except FileNotFoundError:
            return {}
        if not isinstance(found, dict):  # adlfs answers a list of names in some cases
            found = {info["name"]: info for info in found if isinstance(info, dict)}
        return found

    def list_folder(self, folder: str, *, probe: bool = False) -> tuple[list[str], list[str]]:
        """Object paths and prefixes directly under ``folder`` (a delimiter listing)."""
        start = self._full(folder)
        try:
            entries = self._run(self.fs._ls, start.rstrip("/"), detail=True,
                                timeout=self.connect_timeout if probe else None)
        except FileNotFoundError:
            return [], []
        if any(info["name"].rstrip("/") == start.rstrip("/") for info in entries):
            # The object named like the folder: adlfs then answers it alone, even
            # with keys below "a/"; the children come from the listing below.
            return self._children_from_find(folder)
        objects, prefixes = [], []
        for info in entries:
            name = info["name"].rstrip("/")
            if not name.startswith(start) or len(name) == len(start):
                continue
            relative = name[len(self.base):]
            (prefixes if info.get("type") == "directory" else objects).append(relative)
        return objects, prefixes

    def _children_from_find(self, folder: str) -> tuple[list[str], list[str]]:
        start = self._full(folder)
        objects, prefixes = [], set()
        for name, info in self._find_under(folder).items():
            if info.get("type") == "directory" or not name.startswith(start) or name == start:
                continue
            child, slash, _ = name[len(start):].partition("/")
            relative = start[len(self.base):] + child
            if slash:
                prefixes.add(relative)
            else:
                objects.append(relative)
        return objects, sorted(prefixes)

    def exists(self, folder: str) -> bool:
        """Whether anything is under ``folder``; raises if the bucket itself is missing."""
        connect = getattr(self.fs, "connect", None)
        if callable(connect):
            # s3fs makes its client (botocore's service data: seconds on a busy
            # machine) on first use: made here, outside the bound on the answer.
            connect()
        objects, prefixes = self.list_folder(folder, probe=True)
        if objects or prefixes:
            return True
        try:  # nothing there: is there a bucket at all?
            self._run(self.fs._ls, self.base.rstrip("/"), timeout=self.connect_timeout)
        except FileNotFoundError:
            raise FileNotFoundError(f"NoSuchBucket: {self.container}") from None
        return False

    # --------------------------------------------------------------- batches
    def get_many(self, paths: list[str]) -> dict[str, bytes]:
        values = self._gather(self._get_or_none, [(path,) for path in paths])
        return {path: value for path, value in zip(paths, values, strict=True)
                if value is not None}

    def head_many(self, paths: list[str]) -> dict[str, int]:
        """The sizes of the objects that exist among ``paths`` (concurrent HEADs)."""
        sizes = self._gather(self._size_or_none, [(path,) for path in paths])
        return {path: size for path, size in zip(paths, sizes, strict=True) if size is not None}

    def put_many(self, items: list[tuple[str, bytes | memoryview]]) -> None:
        self._gather(self.fs._pipe_file,
                     [(self._full(path), bytes(value)) for path, value in items])

    def copy_many(self, moves: list[tuple[str, str]]) -> None:
        self._gather(self.fs._cp_file,
                     [(self._full(source), self._full(target)) for source, target in moves])

    # ---------------------------------------------------- conditional writes
    # Each library's own client, one request each (the conditions are the
    # service's: If-None-Match / If-Match on S3 and Azure, ifGenerationMatch
    # on GCS); a 412 (409 on a concurrent S3 create) means the condition failed.
    #: Why conditional requests are refused through this engine ("": they work).
    conditional_refusal = ""

    def put_if_absent(self, path: str, value: bytes | memoryview) -> bool:
        return bool(self._run(self._conditional_put, path, bytes(value), None))

    def put_if_matches(self, path: str, value: bytes | memoryview, *, e_tag: str | None = None,
                       version: str | None = None) -> bool:
        token = version if self._protocol == "gs" else e_tag
        if token is None:
            return False
        return bool(self._run(self._conditional_put, path, bytes(value), token))

    def get_versioned(self, path: str) -> tuple[bytes, str | None, str | None] | None:
        """The object's bytes with its ETag (GCS: generation); None if missing."""
        if self._protocol not in _CONDITIONAL:
            value = self.get(path)  # no version: the store digests the value
            return None if value is None else (value, None, None)
        return self._run(self._get_versioned, path)  # type: ignore[no-any-return]

    async def _get_versioned(self, path: str) -> tuple[bytes, str | None, str | None] | None:
        fs, key = self.fs, path
        try:
            if self._protocol == "s3":
                answer = await fs._call_s3("get_object", Bucket=self.container, Key=key)
                async with answer["Body"] as body:
                    return await body.read(), answer["ETag"], None
            if self._protocol == "gs":
                # The generation first, then the bytes of exactly that generation:
                # a 404 means it was replaced between the two (read again).
                for _ in range(_VERSIONED_READS):
                    meta = await fs._call("GET", "b/{}/o/{}", self.container, key, json_out=True)
                    generation = str(meta["generation"])
                    try:
                        _, value = await fs._call("GET", "b/{}/o/{}", self.container, key,
                                                  alt="media", generation=generation)
                    except FileNotFoundError:
                        continue
                    return bytes(value), None, generation
                raise OSError(f"{self._full(path)} kept being replaced while read")
            blob = fs.service_client.get_blob_client(self.container, key)
            async with blob:
                download = await blob.download_blob()
                return await download.readall(), download.properties.etag, None
        except FileNotFoundError:
            return None
        except Exception as error:  # the libraries name "not found" each their way
            if self.classify(error) == "missing":
                return None
            raise

    async def _conditional_put(self, path: str, value: bytes, token: str | None) -> bool:
        """PUT ``value`` if nothing is there (``token`` None) or while the object has
        the version ``token``; whether it was written."""
        fs, key = self.fs, path
        try:
            if self._protocol == "s3":
                condition = {"IfNoneMatch": "*"} if token is None else {"IfMatch": token}
                await fs._call_s3("put_object", Bucket=self.container, Key=key, Body=value,
                                  **condition)
            elif self._protocol == "gs":
                # A multipart upload (JSON metadata, then the bytes), as gcsfs's
                # own simple uploads: fake-gcs-server ignores the precondition of
                # a media upload.
                metadata = json.dumps({"name": key}).encode()
                boundary = _boundary(value)
                body = b"".join((
                    b"--", boundary, b"\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n",
                    metadata, b"\r\n--", boundary,
                    b"\r\nContent-Type: application/octet-stream\r\n\r\n", value,
                    b"\r\n--", boundary, b"--"))
                await fs._call("POST", f"{fs._location}/upload/storage/v1/b/{{}}/o",
                               self.container, uploadType="multipart",
                               ifGenerationMatch="0" if token is None else token, data=body,
                               headers={"Content-Type": "multipart/related; boundary="
                                        + boundary.decode()})
            else:
                from azure.core import MatchConditions

                blob = fs.service_client.get_blob_client(self.container, key)
                async with blob:
                    if token is None:
                        await blob.upload_blob(value, overwrite=False)
                    else:
                        await blob.upload_blob(value, overwrite=True, etag=token,
                                               match_condition=MatchConditions.IfNotModified)
        except Exception as error:  # each library names a failed condition its way
            if _condition_failed(error):
                return False
            if token is not None and self.classify(error) == "missing":
                return False  # replacing an object that is gone (some services say 404)
            raise
        return True

    def close(self) -> None:
        """Close the file system's HTTP session (gcsfs, fsspec's HTTP), if it opened one.

        Left open, gcsfs's finalizer closes it while the interpreter exits,
        which took 8 to 20 s of every ``zstores`` command on gs:// (measured).
        """
        fs, self._fs = self._fs, None
        session = getattr(fs, "_session", None)
        if session is None or self._fs_pid != os.getpid() or session.closed:
            return
        try:
            self._fsspec.asyn.sync(fs.loop, session.close, timeout=self.connect_timeout)
        except Exception:  # noqa: BLE001 - a session that cannot close is let go
            pass


def _boundary(value: bytes) -> bytes:
    """A multipart boundary that ``value`` does not contain."""
    while True:
        boundary = b"zstores-" + os.urandom(16).hex().encode()
        if boundary not in value:
            return boundary


# The protocols whose libraries send conditional requests here.
_CONDITIONAL = ("s3", "gs", "az")

# How often a GCS read of (generation, bytes) starts again when replaced between.
_VERSIONED_READS = 20


def _condition_failed(error: BaseException) -> bool:
    """Whether a library's error is the service refusing a condition (HTTP 412, or 409
    for S3's concurrent conditional create): gcsfs raises FileExistsError for 412,
    s3fs an OSError naming PreconditionFailed, azure-core ResourceExistsError /
    ResourceModifiedError (412 or 409)."""
    if isinstance(error, FileExistsError):
        return True
    code = getattr(error, "status_code", None)
    if code in (409, 412):
        return True
    text = f"{type(error).__name__} {error}"
    return any(marker in text for marker in (
        "PreconditionFailed", "ConditionalRequestConflict", "At least one of the pre-conditions",
        "ConditionNotMet", "BlobAlreadyExists", "ResourceExistsError", "ResourceModifiedError"))
