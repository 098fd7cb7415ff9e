"""What the network stores share: checking URL options, and turning driver
errors into typed zstores errors that never show a password (the scrubbing
itself is ``zstores.secrets``).  Imports no driver, so each store works with
only its own installed; the synchronizers use it too.

A network store (Redis, MongoDB) declares two things and decorates its
primitives with ``network_errors_as``:

- ``_driver_errors``: the base class(es) of its driver's exceptions;
- ``_typed_error(error)``: the zstores error (``StoreConnectionError``,
  ``StoreFullError``, ``StoreIOError`` ...) that a driver error becomes.

Examples
--------
>>> error = backend_error(StoreConnectionError, "RedisStore redis://:***@h:1/0",
...                       "could not talk to the server", ["pw"],
...                       OSError("refused\\nwith pw"))
>>> str(error)
'RedisStore redis://:***@h:1/0: could not talk to the server: OSError: refused with ***'
"""

from __future__ import annotations

import contextvars
import functools
import math
import os
import threading
from collections.abc import Callable, Collection, Iterable
from typing import Any, ClassVar, TypeVar
from urllib.parse import unquote, urlsplit

from ..errors import StoreConnectionError, StoreURLError
from ..secrets import mentions_secret, redact_url, scrub

__all__ = [
    "SharedClient",
    "backend_error",
    "call_translating",
    "check_connect_timeout",
    "check_url_options",
    "connection_error",
    "network_errors_as",
    "query_names",
    "reopen_unpickled",
    "unpickling",
]

F = TypeVar("F", bound=Callable[..., Any])
E = TypeVar("E", bound=BaseException)

#: The default of every network store's ``connect_timeout`` (seconds).
DEFAULT_CONNECT_TIMEOUT = 5.0


def backend_error(cls: type[E], store: str, what: str, secrets: Iterable[str],
                  error: BaseException, *args: Any, detail: str | None = None) -> E:
    """``cls`` with the message ``"<store>: <what>: <DriverError>: <driver message>"``.

    The driver's message (or ``detail``, a shorter account of it) is put on
    one line with every password scrubbed.  ``args`` come first (an errno for
    the ``OSError`` family).
    """
    detail = scrub(str(error) if detail is None else detail, secrets)
    message = f"{store}: {what}: {type(error).__name__}"
    return cls(*args, f"{message}: {detail}" if detail else message)


def connection_error(
    store: str, where: str, secrets: list[str], error: BaseException
) -> StoreConnectionError:
    """A ``StoreConnectionError`` naming the store and its redacted URL."""
    return backend_error(StoreConnectionError, f"{store} {where}", "could not talk to the server",
                         secrets, error)


def call_translating(call: Callable[[], Any],
                     driver_errors: type[BaseException] | tuple[type[BaseException], ...],
                     translate: Callable[[BaseException], BaseException],
                     secrets: Callable[[], Iterable[str]]) -> Any:
    """``call()``, its driver errors raised as ``translate(error)`` with no password in any chain.

    The driver's exception is chained (``__cause__``) unless its text, or
    that of an exception chained to it, shows one of ``secrets()``; then it
    is dropped from the chain entirely, ``__context__`` included, so no
    traceback can print it.  (A ``with`` block cannot do this: an exception
    raised in ``__exit__`` always gets the driver's as its ``__context__``.)

    Examples
    --------
    >>> def connect():
    ...     raise OSError("AUTH default pw refused")
    >>> try:
    ...     call_translating(connect, OSError, lambda e: StoreConnectionError("no"), lambda: ["pw"])
    ... except StoreConnectionError as error:
    ...     error.__cause__, error.__context__
    (None, None)
    """
    try:
        return call()
    except driver_errors as error:
        typed = translate(error)
        if not mentions_secret(error, secrets()):
            raise typed from error
    raise typed  # outside the handler: no __context__ either


def network_errors_as(method: F) -> F:
    """Decorate a store method so driver errors (``self._driver_errors``) become
    the typed error ``self._typed_error(error)`` returns.

    The driver's exception is chained (``__cause__``) unless its text shows a
    password (``self._secrets()``); then it is dropped from the chain entirely,
    ``__context__`` included, so no traceback can print it.
    """

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return call_translating(functools.partial(method, self, *args, **kwargs),
                                self._driver_errors, self._typed_error, self._secrets)

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
    ...                   "redis-py", "RedisStore")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    zstores.errors.StoreURLError: unknown option 'prefx' for redis:// in
    'redis://:***@h/0?prefx=a'; known options: prefix (zstores) and db, socket_timeout (redis-py)
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


# ------------------------------------------------------ clients per process
# True while reopen_unpickled builds a store: it then shares its client.
_UNPICKLING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "zstores_unpickling", default=False)


def unpickling() -> bool:
    """Whether the store being built is one ``reopen_unpickled`` reopens."""
    return _UNPICKLING.get()


def reopen_unpickled(cls: type, params: dict[str, Any], mode: str) -> Any:
    """``cls(**params, mode=mode)`` for a store unpickled: it connects nowhere now and
    shares one client per URL and options with the other stores of this process."""
    token = _UNPICKLING.set(True)
    try:
        return cls(**params, mode=mode)
    finally:
        _UNPICKLING.reset(token)


class SharedClient:
    """One driver client (one connection pool) per key (URL and options) for the stores
    unpickled in a process.

    A dask worker unpickling a store per task opens one pool, not one per
    task, and a scheduler that only moves the tasks opens none: the client is
    made on first use (``client()``).  Counted: the last store released
    closes it.  Entries are forgotten in a forked child, whose copies of the
    parent's sockets must not be shared.

    Examples
    --------
    >>> made = []
    >>> first = SharedClient.acquire(("doc", 1), lambda: made.append(1) or "client", print)
    >>> second = SharedClient.acquire(("doc", 1), lambda: "another", print)
    >>> first is second, made
    (True, [])
    >>> first.client(), second.client(), made
    ('client', 'client', [1])
    >>> first.release(); second.release()
    client
    """

    _entries: ClassVar[dict[Any, SharedClient]] = {}
    _lock = threading.Lock()

    def __init__(self, key: Any, make: Callable[[], Any], close: Callable[[Any], None]) -> None:
        self._key, self._make, self._close = key, make, close
        self._client: Any = None
        self._users = 0
        self._making = threading.Lock()

    @classmethod
    def acquire(cls, key: Any, make: Callable[[], Any],
                close: Callable[[Any], None]) -> SharedClient:
        """The entry for ``key`` (made now if there is none), counted as used once more."""
        with cls._lock:
            entry = cls._entries.get(key)
            if entry is None:
                entry = cls._entries[key] = cls(key, make, close)
            entry._users += 1
            return entry

    def client(self) -> Any:
        """The client, made by the first caller."""
        client = self._client
        if client is None:
            with self._making:
                if self._client is None:
                    self._client = self._make()
                client = self._client
        return client

    @property
    def made(self) -> bool:
        """Whether the client was made (a store asked for it)."""
        return self._client is not None

    def release(self) -> None:
        """One user fewer; the last one closes the client."""
        with self._lock:
            self._users -= 1
            if self._users > 0:
                return
            if self._entries.get(self._key) is self:
                del self._entries[self._key]
        if self._client is not None:
            self._close(self._client)
            self._client = None

    @classmethod
    def after_fork(cls) -> None:
        cls._entries = {}
        cls._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=SharedClient.after_fork)
