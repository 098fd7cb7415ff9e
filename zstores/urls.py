"""Open any store from a URL: ``open_store("lmdb:///data/x.lmdb?map_size=1073741824")``.

The scheme table ``SCHEMES`` is the one place that maps a scheme to a backend.
Third-party packages add schemes through the entry-point group
``zstores.stores``: the entry point's name is the scheme and its object a
callable (usually a ``Store`` subclass) called as ``factory(path, mode=mode,
**options)``, where ``path`` is what follows ``scheme://`` up to ``?``.

Query parameters become constructor options.  Their names are checked against
the constructor's keyword parameters and their text converted to the
parameter's annotated type (``int``, ``float``, ``bool``, ``str``, ``None``),
so ``?fsync=false`` is ``False``, never the truthy string ``"false"``.

Network backends (``redis://``, ``mongodb://``) receive the URL itself, less
the query parameters that are zstores options (their constructor's keyword
parameters such as ``prefix``, ``database`` or ``connect_timeout``); the
client library reads the rest.  The store checks those names against what its
client library really takes (redis-py's URL parameters, pymongo's URI
options) and refuses others with ``StoreURLError`` listing the known ones,
before any connection; it then checks that the server answers within
``connect_timeout`` seconds (``StoreConnectionError`` otherwise).  Passwords
never appear in an error message raised here.
"""

from __future__ import annotations

import dbm
import importlib
import importlib.metadata
import inspect
import os
import re
import types
import typing
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from .base import Mode, Store, check_mode
from .errors import StoreURLError
from .secrets import redact_url  # re-exported: documented as zstores.urls.redact_url

__all__ = [
    "ENTRY_POINT_GROUP",
    "PATH_ENDINGS",
    "SCHEMES",
    "Scheme",
    "StoreURLError",
    "is_read_only_url",
    "open_store",
    "redact_url",
]

#: The entry-point group third-party stores register their schemes in.
ENTRY_POINT_GROUP = "zstores.stores"


# ------------------------------------------------------------ option parsing
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_NONE = {"", "none", "null"}


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"expected a boolean ({', '.join(sorted(_TRUE | _FALSE))})")


def _parse_none(text: str) -> None:
    if text.strip().lower() not in _NONE:
        raise ValueError("expected none")


# Order matters: int before float, so "3" stays an int when both are allowed.
_PARSERS: dict[Any, Callable[[str], Any]] = {
    type(None): _parse_none,
    bool: _parse_bool,
    int: int,
    float: float,
    str: str,
}
_NAMES = {"None": type(None), "bool": bool, "int": int, "float": float, "str": str}


def _annotation_types(annotation: Any) -> list[Any] | None:
    """The plain types an annotation allows, in ``_PARSERS`` order; None if unknown."""
    if annotation is inspect.Parameter.empty:
        return [str]
    if isinstance(annotation, str):  # postponed annotations: "int | None"
        parts = [part.strip() for part in annotation.split("|")]
        if not all(part in _NAMES for part in parts):
            return None
        allowed = {_NAMES[part] for part in parts}
    elif annotation is None or annotation in _PARSERS:
        allowed = {type(None) if annotation is None else annotation}
    elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
        allowed = set(typing.get_args(annotation))
        if not allowed <= set(_PARSERS):
            return None
    else:
        return None
    return [kind for kind in _PARSERS if kind in allowed]


def _converter_for(annotation: Any) -> Callable[[str], Any] | None:
    kinds = _annotation_types(annotation)
    if kinds is None:
        return None
    parsers = [_PARSERS[kind] for kind in kinds]
    names = " or ".join("none" if kind is type(None) else kind.__name__ for kind in kinds)

    def convert(text: str) -> Any:
        for parse in parsers:
            try:
                return parse(text)
            except ValueError:
                continue
        raise ValueError(f"expected {names}")

    return convert


def _zip_compression(text: str) -> int:
    names = {"stored": zipfile.ZIP_STORED, "deflated": zipfile.ZIP_DEFLATED,
             "bzip2": zipfile.ZIP_BZIP2, "lzma": zipfile.ZIP_LZMA}
    lowered = text.strip().lower()
    if lowered in names:
        return names[lowered]
    if lowered.isdigit() and int(lowered) in names.values():
        return int(lowered)
    raise ValueError(f"expected one of {', '.join(names)} or their numbers")


def _dbm_flavour(text: str) -> Callable[..., Any]:
    flavours = ("dumb", "gnu", "ndbm", "sqlite3")
    name = text.strip().lower()
    if name in ("", "default"):
        from .stores.dbm import open_existing_or_dumb  # the store's default

        return open_existing_or_dumb
    if name == "dbm":
        return dbm.open
    if name not in flavours:
        raise ValueError(f"expected one of default, dbm, {', '.join(flavours)}")
    try:
        return importlib.import_module(f"dbm.{name}").open  # type: ignore[no-any-return]
    except ImportError:
        raise ValueError(f"dbm.{name} is not available in this Python") from None


# ----------------------------------------------------------- the scheme table
@dataclass(frozen=True)
class Scheme:
    """How a URL scheme opens a store.

    Attributes
    ----------
    target : str
        ``"module:attribute"`` of the store class or factory; imported on
        first use, so optional backends cost nothing until asked for.
    location : {"path", "url", "none"}
        What the factory's first argument is: the path part of the URL, the
        URL less the zstores options (network stores), or nothing.
    options : mapping
        Converters for options whose text the annotation cannot parse
        (``dbm://...?open=dumb``), or that the factory takes through
        ``**kwargs`` (``lmdb://...?writemap=true``).
    defaults : mapping
        Options applied unless given (``.mdb`` files are LMDB without a folder).
    read_only : bool
        Whether the store can only be read (``http(s)://``): tools open such
        a URL read-only instead of asking for writes it would refuse.
    """

    target: str
    location: str = "path"
    options: Mapping[str, Callable[[str], Any]] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    read_only: bool = False

    def load(self, scheme: str) -> Callable[..., Store]:
        module_name, _, attribute = self.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise StoreURLError(
                f"the {scheme}:// backend is not available: importing {module_name} "
                f"failed ({error}); install the extra it needs, e.g. zstores[{scheme}]"
            ) from None
        return getattr(module, attribute)  # type: ignore[no-any-return]


_LMDB_OPEN_OPTIONS = {name: _parse_bool for name in
                      ("writemap", "readahead", "meminit", "metasync", "map_async")}
_REDIS = Scheme("zstores.stores.redis:RedisStore", location="url")
_MONGODB = Scheme("zstores.stores.mongodb:MongoDBStore", location="url")
# Redis Cluster: redis+cluster://host:port,host:port/?prefix=... (each node a seed).
_REDIS_CLUSTER = Scheme("zstores.stores.redis:RedisClusterStore", location="url")
# Object stores: the path is "bucket/prefix"; every option is a constructor
# keyword.  http(s):// keeps the whole URL (host included).
_OBJECTS = "zstores.stores.objectstore:"
_HTTP = Scheme(_OBJECTS + "HTTPStore", location="url", read_only=True)

#: Every built-in scheme.  A plain path (no ``scheme://``) is looked up in
#: ``PATH_ENDINGS`` by its ending, and is a ``file`` store otherwise.
SCHEMES: dict[str, Scheme] = {
    "file": Scheme("zstores.stores.directory:DirectoryStore"),
    "nested": Scheme("zstores.stores.directory:NestedDirectoryStore"),
    "zip": Scheme("zstores.stores.zip:ZipStore", options={"compression": _zip_compression}),
    "dbm": Scheme("zstores.stores.dbm:DBMStore", options={"open": _dbm_flavour}),
    "lmdb": Scheme("zstores.stores.lmdb:LMDBStore", options=_LMDB_OPEN_OPTIONS),
    "sqlite": Scheme("zstores.stores.sqlite:SQLiteStore"),
    "redis": _REDIS,
    "rediss": _REDIS,
    "redis+cluster": _REDIS_CLUSTER,
    "rediss+cluster": _REDIS_CLUSTER,
    "mongodb": _MONGODB,
    "mongodb+srv": _MONGODB,
    "memory": Scheme("zstores.stores.memory:MemoryStore", location="none"),
    "n5": Scheme("zstores.wrappers.n5:N5Store"),  # an N5 folder, shown as Zarr format 2
    "s3": Scheme(_OBJECTS + "S3Store"),
    "gs": Scheme(_OBJECTS + "GCSStore"),
    "az": Scheme(_OBJECTS + "AzureStore"),
    "http": _HTTP,
    "https": _HTTP,
}

#: Plain-path endings (lower case) and the scheme plus default options they select.
PATH_ENDINGS: dict[str, tuple[str, Mapping[str, Any]]] = {
    ".zip": ("zip", {}),
    ".lmdb": ("lmdb", {}),
    ".mdb": ("lmdb", {"subdir": False}),  # the data file itself, as LMDB names it
    ".sqlite": ("sqlite", {}),
    ".sqlite3": ("sqlite", {}),
    ".db": ("sqlite", {}),
    ".n5": ("n5", {}),
}

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    found = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry_point.name.lower(), entry_point)
    return found


def _known_schemes(plugins: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}://" for name in sorted(set(SCHEMES) | set(plugins)))


def _split_query(query: str, shown: str) -> list[tuple[str, str, str]]:
    """``(name, decoded value, raw pair)`` for each ``name=value`` of a query string."""
    pairs = []
    seen = set()
    for raw in query.split("&"):
        if not raw:
            continue
        name, equals, value = raw.partition("=")
        name = unquote(name)
        if not equals:
            raise StoreURLError(f"query parameter {name!r} in {shown!r} has no value (name=value)")
        if name in seen:
            raise StoreURLError(f"query parameter {name!r} is given twice in {shown!r}")
        seen.add(name)
        pairs.append((name, unquote(value.replace("+", " ")), raw))
    return pairs


@dataclass(frozen=True)
class _Parsed:
    scheme: str
    spec: Scheme | None  # None: not built in (a plug-in's, or unknown)
    path: str  # as written: percent-encoded in a URL, literal in a plain path
    query: list[tuple[str, str, str]]
    shown: str  # the URL as messages may show it: no password
    is_url: bool


def _parse(url: str | os.PathLike[str]) -> _Parsed:
    if not isinstance(url, str):
        url = os.fsdecode(os.fspath(url))
    match = _SCHEME.match(url)
    if match is None:  # a plain path: its ending picks the backend
        lowered = url.lower().rstrip("/\\")
        for ending, (scheme, defaults) in PATH_ENDINGS.items():
            if lowered.endswith(ending):
                base = SCHEMES[scheme]
                spec = Scheme(base.target, base.location, base.options, defaults)
                return _Parsed(scheme, spec, url, [], url, is_url=False)
        return _Parsed("file", SCHEMES["file"], url, [], url, is_url=False)
    scheme = match.group(1).lower()
    path, _, query = url[match.end():].partition("?")
    shown = redact_url(url)
    return _Parsed(scheme, SCHEMES.get(scheme), path, _split_query(query, shown), shown, True)


def _backend(parsed: _Parsed) -> tuple[Callable[..., Store], Scheme]:
    """The factory and scheme entry for a parsed URL, from the table or a plug-in."""
    if parsed.spec is not None:
        return parsed.spec.load(parsed.scheme), parsed.spec
    plugins = _entry_points()
    entry_point = plugins.get(parsed.scheme)
    if entry_point is None:
        raise StoreURLError(
            f"unknown scheme {parsed.scheme!r} in {parsed.shown!r}; known schemes: "
            f"{_known_schemes(plugins)} (or a plain path)"
        )
    try:
        factory = entry_point.load()
    except Exception as error:  # noqa: BLE001 - a broken plug-in: say which one
        raise StoreURLError(
            f"the {parsed.scheme}:// backend of entry point {entry_point.value!r} (group "
            f"{ENTRY_POINT_GROUP!r}) failed to load: {type(error).__name__}: {error}"
        ) from None
    return factory, Scheme(entry_point.value)


@dataclass(frozen=True)
class _Signature:
    """What a factory accepts besides its location and ``mode``."""

    named: dict[str, inspect.Parameter]
    takes_kwargs: bool
    takes_mode: bool

    @classmethod
    def of(cls, factory: Callable[..., Any], has_location: bool) -> _Signature:
        try:
            parameters = list(inspect.signature(factory).parameters.values())
        except (TypeError, ValueError):  # a builtin without a signature: trust the caller
            return cls({}, True, True)
        takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in parameters)
        named = {p.name: p for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        if has_location:
            positional = [p for p in parameters
                          if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            if positional:
                named.pop(positional[0].name, None)
        takes_mode = named.pop("mode", None) is not None or takes_kwargs
        return cls(named, takes_kwargs, takes_mode)

    def known(self, spec: Scheme) -> str:
        return ", ".join(sorted(set(self.named) | set(spec.options))) or "none"


def _options_from_query(parsed: _Parsed, spec: Scheme, signature: _Signature) -> dict[str, Any]:
    """Query parameters as typed options; for a network URL, only the zstores ones."""
    options: dict[str, Any] = {}
    for name, text, _ in parsed.query:
        if name == "mode":
            raise StoreURLError(
                f"{parsed.shown!r}: give the mode as open_store(..., mode=...), not in the URL"
            )
        if name in spec.options:
            convert: Callable[[str], Any] | None = spec.options[name]
        elif name in signature.named:
            convert = _converter_for(signature.named[name].annotation)
        elif spec.location == "url":
            continue  # the client library's own option: it stays in the URL
        else:
            raise StoreURLError(
                f"unknown option {name!r} for {parsed.scheme}:// in {parsed.shown!r}; "
                f"known options: {signature.known(spec)}"
            )
        if convert is None:
            raise StoreURLError(
                f"option {name!r} of {parsed.scheme}:// cannot be given in a URL (its type is "
                f"{signature.named[name].annotation}); pass it to open_store as a keyword"
            )
        try:
            options[name] = convert(text)
        except ValueError as error:
            raise StoreURLError(
                f"option {name!r} of {parsed.scheme}:// in {parsed.shown!r} has the bad value "
                f"{text!r}: {error}"
            ) from None
    return options


def _check_keywords(parsed: _Parsed, spec: Scheme, signature: _Signature,
                    from_url: Mapping[str, Any], options: Mapping[str, Any]) -> None:
    for name in options:
        if name in from_url:
            raise StoreURLError(
                f"option {name!r} is given both in {parsed.shown!r} and as a keyword"
            )
        if name == "mode" or (name not in signature.named and not signature.takes_kwargs):
            raise StoreURLError(
                f"unknown option {name!r} for {parsed.scheme}://; known options: "
                f"{signature.known(spec)}"
            )


def _location(parsed: _Parsed, spec: Scheme, from_url: Mapping[str, Any]) -> str | None:
    """The factory's first argument: a path, a URL for a client library, or None."""
    if spec.location == "none":
        if parsed.path:
            raise StoreURLError(
                f"{parsed.scheme}:// takes no path, but {parsed.shown!r} has one"
            )
        return None
    if spec.location == "url":
        kept = [raw for name, _, raw in parsed.query if name not in from_url]
        return f"{parsed.scheme}://{parsed.path}" + (f"?{'&'.join(kept)}" if kept else "")
    if not parsed.path:
        raise StoreURLError(
            f"{parsed.shown!r} names no path; write {parsed.scheme}:///absolute/path or "
            f"{parsed.scheme}://relative/path"
        )
    return unquote(parsed.path) if parsed.is_url else parsed.path


def is_read_only_url(url: str | os.PathLike[str]) -> bool:
    """Whether the store a URL names can only be read, whatever the mode asked for.

    Tools that open any URL (``zfuse mount``, ``zstores cp``) ask this to
    open such a store read-only rather than fail on a write mode.  Plug-in
    schemes and plain paths are writable as far as this table knows.

    Parameters
    ----------
    url : str or os.PathLike
        A URL or plain path as ``open_store`` takes it.

    Returns
    -------
    bool

    Examples
    --------
    >>> from zstores.urls import is_read_only_url
    >>> is_read_only_url("https://example.org/data.zarr"), is_read_only_url("lmdb:///tmp/x.lmdb")
    (True, False)
    """
    spec = _parse(url).spec
    return spec is not None and spec.read_only


def open_store(url: str | os.PathLike[str], *, mode: Mode = "a", **options: Any) -> Store:
    """Open the store a URL or a plain path names.

    Parameters
    ----------
    url : str or os.PathLike
        ``scheme://path?option=value&...`` with a scheme from ``SCHEMES``
        (``file``, ``nested``, ``zip``, ``dbm``, ``lmdb``, ``sqlite``,
        ``redis``, ``rediss``, ``redis+cluster``, ``rediss+cluster``, ``mongodb``,
        ``memory``, ``n5``) or from an
        installed ``zstores.stores`` entry point; or a plain path, whose ending
        picks the backend (``.zip``, ``.lmdb``/``.mdb``, ``.sqlite``/
        ``.sqlite3``/``.db``, ``.n5``, else a folder).  Everything between ``scheme://`` and ``?``
        is the path, percent-decoded: ``lmdb:///abs/x.lmdb`` is absolute,
        ``lmdb://rel/x.lmdb`` relative to the working directory.
    mode : {"a", "r", "r+", "w", "w-"}
        The store's mode.
    **options
        Further constructor options as Python values; they may not repeat a
        query parameter.

    Returns
    -------
    Store

    Raises
    ------
    StoreURLError
        For an unknown scheme or option, a value of the wrong type, or a
        backend whose module cannot be imported.  The message lists what is
        known and never shows a password.
    StoreConnectionError
        For a network store whose server does not answer within its
        ``connect_timeout`` or refuses the credentials.

    Examples
    --------
    >>> import os, tempfile
    >>> from zstores.urls import open_store
    >>> path = os.path.join(tempfile.mkdtemp(), "data.sqlite")
    >>> with open_store(f"sqlite://{path}?table=arrays&timeout=5") as store:
    ...     store["foo/.zgroup"] = b"{}"
    ...     type(store).__name__, store.listdir()
    ('SQLiteStore', ['foo'])
    >>> open_store("memory://", fsync=True)
    Traceback (most recent call last):
    ...
    zstores.errors.StoreURLError: unknown option 'fsync' for memory://; known options: none
    """
    check_mode(mode)
    parsed = _parse(url)
    factory, spec = _backend(parsed)
    signature = _Signature.of(factory, has_location=spec.location != "none")
    from_url = _options_from_query(parsed, spec, signature)
    _check_keywords(parsed, spec, signature, from_url, options)
    location = _location(parsed, spec, from_url)
    arguments: dict[str, Any] = {**spec.defaults, **from_url, **options}
    if signature.takes_mode:
        arguments["mode"] = mode
    elif mode != "a":
        raise StoreURLError(
            f"the {parsed.scheme}:// backend takes no mode, so it cannot open with mode {mode!r}"
        )
    if location is None:
        return factory(**arguments)
    return factory(location, **arguments)
