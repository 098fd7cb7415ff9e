"""What the network stores share: scrubbing passwords, checking URL options, and
turning driver errors into typed zstores errors.  Imports no driver, so each
store works with only its own installed.

A network store (Redis, MongoDB) declares two things and decorates its
primitives with ``network_errors_as``:

- ``_driver_errors``: the base class(es) of its driver's exceptions;
- ``_typed_error(error)``: the zstores error (``StoreConnectionError``,
  ``StoreFullError``, ``StoreIOError`` ...) that a driver error becomes.

Examples
--------
>>> secrets_of("redis://user:pw@h:1/0?password=other")
['pw', 'other']
>>> error = backend_error(StoreConnectionError, "RedisStore redis://:***@h:1/0",
...                       "could not talk to the server", ["pw"],
...                       OSError("refused\\nwith pw"))
>>> str(error)
'RedisStore redis://:***@h:1/0: could not talk to the server: OSError: refused with ***'
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from ..errors import StoreConnectionError
from ..urls import StoreURLError, redact_url

__all__ = [
    "backend_error",
    "check_connect_timeout",
    "check_url_options",
    "connection_error",
    "mentions_secret",
    "network_errors_as",
    "query_names",
    "secrets_of",
]

F = TypeVar("F", bound=Callable[..., Any])
E = TypeVar("E", bound=BaseException)

#: The default of every network store's ``connect_timeout`` (seconds).
DEFAULT_CONNECT_TIMEOUT = 5.0


def secrets_of(url: str) -> list[str]:
    """The passwords a URL carries (raw and percent-decoded), to scrub from messages."""
    parts = urlsplit(url)
    found = []
    if parts.password:
        found += [parts.password, unquote(parts.password)]
    found += [v for n, v in parse_qsl(parts.query) if n.lower() == "password" and v]
    return list(dict.fromkeys(secret for secret in found if secret))


def mentions_secret(error: BaseException, secrets: Iterable[str]) -> bool:
    """True when ``str`` or ``repr`` of ``error`` or of an exception chained to it
    shows one of ``secrets``."""
    secrets = [secret for secret in secrets if secret]
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        text = f"{current!s} {current!r}"
        if any(secret in text for secret in secrets):
            return True
        pending += [current.__cause__, current.__context__]
    return False


def _one_line(text: str) -> str:
    return " ".join(text.split())


def backend_error(cls: type[E], store: str, what: str, secrets: Iterable[str],
                  error: BaseException, *args: Any, detail: str | None = None) -> E:
    """``cls`` with the message ``"<store>: <what>: <DriverError>: <driver message>"``.

    The driver's message (or ``detail``, a shorter account of it) is put on
    one line with every password scrubbed.  ``args`` come first (an errno for
    the ``OSError`` family).
    """
    detail = _one_line(str(error) if detail is None else detail)
    for secret in secrets:
        if secret:
            detail = detail.replace(secret, "***")
    message = f"{store}: {what}: {type(error).__name__}"
    return cls(*args, f"{message}: {detail}" if detail else message)


def connection_error(store: str, where: str, secrets: list[str], error: BaseException) -> StoreConnectionError:
    """A ``StoreConnectionError`` naming the store and its redacted URL."""
    return backend_error(StoreConnectionError, f"{store} {where}", "could not talk to the server",
                         secrets, error)


def network_errors_as(method: F) -> F:
    """Decorate a store method so driver errors (``self._driver_errors``) become
    the typed error ``self._typed_error(error)`` returns.

    The driver's exception is chained (``__cause__``) unless its text shows a
    password (``self._secrets()``); then it is dropped from the chain entirely,
    ``__context__`` included, so no traceback can print it.
    """

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except self._driver_errors as error:
            typed = self._typed_error(error)
            if not mentions_secret(error, self._secrets()):
                raise typed from error
        raise typed  # outside the handler: no __context__ either

    return wrapper  # type: ignore[return-value]


def check_connect_timeout(value: Any) -> float:
    """``connect_timeout`` as a float: a finite number of seconds above 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"invalid connect_timeout {value!r}: it must be a number of seconds above 0"
        )
    return float(value)


def query_names(url: str) -> list[str]:
    """The option names of a URL's query string, percent-decoded, in order."""
    query = urlsplit(url).query
    return [unquote(pair.partition("=")[0]) for pair in query.split("&") if pair]


def check_url_options(url: str, client: Collection[str], own: Collection[str],
                      library: str, store: str, *, case_insensitive: bool = False) -> None:
    """Refuse a URL option the client library does not take, as ``StoreURLError``.

    Parameters
    ----------
    url : str
        The URL the store was given (it may hold a password; messages show it redacted).
    client : collection of str
        The options the client library accepts in a URL (lower case when
        ``case_insensitive``).
    own : collection of str
        The store's own options (keywords of its constructor, URL options of
        ``open_store``): listed as known, and explained when found here.
    library, store : str
        The client library's and the store class's names, for the message.

    Examples
    --------
    >>> check_url_options("redis://h/0?socket_timeout=1", {"socket_timeout"}, {"prefix"},
    ...                   "redis-py", "RedisStore")
    >>> check_url_options("redis://:pw@h/0?prefx=a", {"db", "socket_timeout"}, {"prefix"},
    ...                   "redis-py", "RedisStore")
    Traceback (most recent call last):
    ...
    zstores.urls.StoreURLError: unknown option 'prefx' for redis:// in 'redis://:***@h/0?prefx=a'; known options: prefix (zstores) and db, socket_timeout (redis-py)
    """
    scheme = urlsplit(url).scheme
    for name in query_names(url):
        lookup = name.lower() if case_insensitive else name
        if lookup in client:
            continue
        shown = redact_url(url)
        if name in own:
            raise StoreURLError(
                f"option {name!r} in {shown!r} is a {store} option, not {library}'s: pass it "
                f"as {store}(url, {name}=...) (open_store takes it in the URL)"
            )
        note = " (case-insensitive)" if case_insensitive else ""
        raise StoreURLError(
            f"unknown option {name!r} for {scheme}:// in {shown!r}; known options: "
            f"{', '.join(sorted(own))} (zstores) and {', '.join(sorted(client))} ({library}){note}"
        )
