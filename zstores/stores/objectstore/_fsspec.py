"""The fsspec engine (``via="fsspec"``): an object store's requests through s3fs,
gcsfs, adlfs or fsspec's HTTP file system.

The same interface as ``ObstoreEngine``; batches use fsspec's own concurrent
calls (``cat`` and ``pipe`` of many paths, ``rm`` of a list), which run on
fsspec's event loop.  Why obstore is the default: it is what zarr-python 3's
``ObjectStore`` uses, it needs no event loop of ours for single calls, and
its retries and timeouts are explicit options; fsspec is here for what
obstore cannot do (anonymous GCS) and for environments already configured
for fsspec (its ``~/.config/fsspec`` settings, s3fs's profiles).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

__all__ = ["FsspecEngine"]

_STATUS = re.compile(r"\b(401|403|404|416|429|501|503)\b")


def _import_fsspec(extra: str) -> Any:
    try:
        import fsspec
    except ImportError:  # pragma: no cover - installed with the extras
        raise ImportError(f"via='fsspec' needs fsspec: pip install 'zstores[{extra}]'") from None
    return fsspec


class FsspecEngine:
    """Requests to one bucket through an fsspec file system.

    Parameters
    ----------
    protocol : str
        ``"s3"``, ``"gs"``, ``"az"``, ``"http"`` or ``"https"``.
    container : str
        The bucket or container (for HTTP: the host).
    extra : str
        The zstores extra that installs the file system, for messages.
    max_concurrency : int
        fsspec's ``batch_size`` for the batch calls.
    connect_timeout : float
        Unused by some file systems; kept for symmetry with obstore.
    base_url : str, optional
        HTTP only: the URL paths are joined to.
    **storage_options
        The file system's own options (credentials, endpoint).
    """

    def __init__(self, protocol: str, container: str, extra: str, *, max_concurrency: int,
                 connect_timeout: float, base_url: str | None = None,
                 **storage_options: Any) -> None:
        fsspec = _import_fsspec(extra)
        try:
            cls = fsspec.get_filesystem_class(protocol)
        except ImportError as error:
            raise ImportError(
                f"via='fsspec' for {protocol}:// needs its file system ({error}): "
                f"pip install 'zstores[{extra}]'") from None
        options = {name: value for name, value in storage_options.items() if value is not None}
        # A file system object of our own: fsspec's instance cache would share
        # one between stores (and their credentials) otherwise.
        self.fs = cls(skip_instance_cache=True, **options)
        self.container = container
        self.base = base_url.rstrip("/") + "/" if base_url else f"{container}/"
        self.batch_size = max_concurrency
        self.driver_errors = (OSError, ValueError, RuntimeError)
        self.suffix_ranges = True

    def classify(self, error: BaseException) -> str:
        """What an fsspec error means (the same kinds as ``_obstore.classify``)."""
        text = f"{type(error).__name__} {error}"
        if "NoSuchBucket" in text or "ContainerNotFound" in text or \
                "bucket does not exist" in text.lower():
            return "no_container"
        if isinstance(error, PermissionError):
            return "denied"
        if isinstance(error, FileNotFoundError):
            return "missing"
        if isinstance(error, (ConnectionError, TimeoutError)) or "connect" in text.lower():
            return "connection"
        status = _STATUS.search(text)
        code = int(status.group(1)) if status else 0
        return {401: "denied", 403: "denied", 404: "missing", 416: "range", 429: "throttled",
                501: "unsupported", 503: "throttled"}.get(code, "other")

    # ------------------------------------------------------------ one object
    def _full(self, path: str) -> str:
        return self.base + path

    def get(self, path: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self._full(path)))
        except FileNotFoundError:
            return None

    def head(self, path: str, *, probe: bool = False) -> int | None:
        try:
            info = self.fs.info(self._full(path))
        except FileNotFoundError:
            return None
        if info.get("type") == "directory":
            return None
        return int(info["size"])

    def get_range(self, path: str, start: int, length: int | None) -> bytes | None:
        size = self.head(path)  # fsspec's ranges need the size for a suffix or a clip
        if size is None:
            return None
        first = start if start >= 0 else max(size + start, 0)
        stop = size if length is None else min(first + length, size)
        if first >= stop:
            return b""
        return bytes(self.fs.cat_file(self._full(path), start=first, end=stop))

    def put(self, path: str, value: bytes | memoryview) -> None:
        self.fs.pipe_file(self._full(path), bytes(value))

    def delete(self, paths: list[str]) -> None:
        if not paths:
            return
        try:
            self.fs.rm([self._full(path) for path in paths])
        except FileNotFoundError:
            for path in paths:
                try:
                    self.fs.rm_file(self._full(path))
                except FileNotFoundError:
                    pass

    def copy(self, source: str, target: str) -> None:
        self.fs.copy(self._full(source), self._full(target))

    # ------------------------------------------------------------- listings
    def list(self, folder: str) -> Iterator[tuple[str, int]]:
        try:
            found = self.fs.find(self._full(folder), detail=True, withdirs=False)
        except FileNotFoundError:
            return
        self.fs.invalidate_cache()
        for name, info in sorted(found.items()):
            if info.get("type") != "directory" and name.startswith(self.base):
                yield name[len(self.base):], int(info["size"])

    def list_folder(self, folder: str, *, probe: bool = False) -> tuple[list[str], list[str]]:
        try:
            entries = self.fs.ls(self._full(folder), detail=True, refresh=True)
        except FileNotFoundError:
            return [], []
        objects, prefixes = [], []
        for info in entries:
            name = info["name"].rstrip("/")
            if not name.startswith(self.base):
                continue
            relative = name[len(self.base):]
            (prefixes if info.get("type") == "directory" else objects).append(relative)
        return objects, prefixes

    def exists(self, folder: str) -> bool:
        if not self.fs.exists(self.base.rstrip("/")):
            raise FileNotFoundError(f"NoSuchBucket: {self.container}")
        objects, prefixes = self.list_folder(folder)
        return bool(objects or prefixes)

    # --------------------------------------------------------------- batches
    def get_many(self, paths: list[str]) -> dict[str, bytes]:
        full = [self._full(path) for path in paths]
        found = self.fs.cat(full, on_error="omit", batch_size=self.batch_size)
        return {path: bytes(found[name]) for path, name in zip(paths, full, strict=True)
                if name in found and not isinstance(found[name], BaseException)}

    def put_many(self, items: list[tuple[str, bytes | memoryview]]) -> None:
        self.fs.pipe({self._full(path): bytes(value) for path, value in items},
                     batch_size=self.batch_size)

    def copy_many(self, moves: list[tuple[str, str]]) -> None:
        for source, target in moves:
            self.copy(source, target)

    def close(self) -> None:
        """fsspec file systems hold sessions on their own loop; nothing to do per store."""
