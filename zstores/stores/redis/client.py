"""The redis-py side of RedisStore and RedisClusterStore: the engine under ``store.py``.

Everything here speaks redis-py and knows nothing of ``Store`` (an engine
module never imports it): importing redis-py, the options a URL or a caller
may give the client (``client_url_options``), closing a client the store
made, SCAN's glob escaping, the durable writes of ``wait_replicas`` (a
connection pool pinning one connection per server to a write in progress,
then ``WAIT`` on each), where a client's keys live (``server_of``) and the
typed errors redis-py's exceptions become (``typed_redis_error``, which
``RedisSynchronizer`` uses too).
"""

from __future__ import annotations

import contextvars
import errno
import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

from ...errors import (
    ReplicationTimeoutError,
    StoreConnectionError,
    StoreFullError,
    StoreIOError,
)
from .._network import backend_error, check_connect_timeout

__all__ = ["DEFAULT_WAIT_TIMEOUT", "client_url_options", "glob_escape", "server_of",
           "typed_redis_error"]


def _import_redis() -> Any:
    try:
        import redis
    except ImportError:  # pragma: no cover - the extra is installed in tests
        raise ImportError(
            "RedisStore needs the redis package: pip install 'zstores[redis]'"
        ) from None
    return redis


# Connection options redis-py takes as text, so a URL can carry them
# (``?client_name=x``); parse_url hands every query parameter it has no parser
# for to the connection as a str.
_TEXT_OPTIONS = frozenset({
    "username", "password", "client_name", "lib_name", "lib_version", "encoding",
    "encoding_errors", "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs",
    "ssl_ca_path", "ssl_password", "ssl_ciphers",
})

# Set by the URL's address part, never by an option.
_ADDRESS = frozenset({"host", "port", "path", "connection_class"})

# Client options that lead a connection somewhere else than the URL's server
# or that only redis-py itself fills in.
_INTERNAL = re.compile(r"^(orig_|maint|maintenance_|oss_cluster_|himport_)")


def _init_parameters(cls: type) -> set[str]:
    """Keyword names ``cls(...)`` accepts, following ``**kwargs`` up the MRO."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        parameters = inspect.signature(init).parameters.values()
        names |= {p.name for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            break
    return names - {"self"}


def _client_keywords(scheme: str) -> frozenset[str]:
    """The keywords ``redis.Redis.from_url`` passes on for a ``scheme://`` URL."""
    connection = _import_redis().connection
    cls = {"rediss": connection.SSLConnection,
           "unix": connection.UnixDomainSocketConnection}.get(scheme, connection.Connection)
    names = _init_parameters(cls) | _init_parameters(connection.ConnectionPool)
    names.add("single_connection_client")
    return frozenset(name for name in names - _ADDRESS if not _INTERNAL.match(name))


def client_url_options(scheme: str) -> frozenset[str]:
    """The query options redis-py really accepts in a ``scheme://`` URL.

    Those ``redis.connection.parse_url`` converts (``socket_timeout``, ``db``
    ...) and those it passes on as text (``client_name``, ``ssl_ca_certs``
    ...), each only if the connection class of that scheme takes it.

    Examples
    --------
    >>> "socket_timeout" in client_url_options("redis")
    True
    >>> ("ssl_ca_certs" in client_url_options("redis"),
    ...  "ssl_ca_certs" in client_url_options("rediss"))
    (False, True)
    """
    parsed = frozenset(_import_redis().connection.URL_QUERY_ARGUMENT_PARSERS)
    return (parsed | _TEXT_OPTIONS) & _client_keywords(scheme)


# Characters SCAN's MATCH treats as glob syntax.
_GLOB = re.compile(rb"([*?\[\]\\^-])")


def glob_escape(text: bytes) -> bytes:
    """Escape SCAN MATCH's glob syntax so ``text`` matches only itself."""
    return _GLOB.sub(rb"\\\1", text)


def _close_client(client: Any) -> None:
    """Close a client the store made, and every connection it opened.

    ``RedisCluster.close`` closes each node's client but not its pool (a
    client given a pool leaves it open), so the connections stayed open.
    """
    client.close()
    nodes_manager = getattr(client, "nodes_manager", None)
    if nodes_manager is not None:
        for node in list(nodes_manager.nodes_cache.values()):
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()


# ------------------------------------------------------------- durability
#: The default of ``wait_timeout`` (seconds).
DEFAULT_WAIT_TIMEOUT = 5.0

# While a durable write (wait_replicas > 0) runs, the pools of the store's
# clients hand out one pinned connection per server to it: WAIT counts the
# replicas holding what *its own connection* wrote, so it must follow the
# write's commands on that connection.  id(pool) -> (pool, connection).
_PINNED: contextvars.ContextVar[dict[int, tuple[Any, Any]] | None] = contextvars.ContextVar(
    "zstores_redis_pinned", default=None)


@functools.cache
def _pinning_pool_class() -> type:
    """redis-py's ``ConnectionPool``, pinning one connection to a durable write in progress."""
    redis = _import_redis()

    class PinningConnectionPool(redis.ConnectionPool):  # type: ignore[misc, name-defined]
        def get_connection(self, *args: Any, **kwargs: Any) -> Any:
            pinned = _PINNED.get()
            if pinned is None:
                return super().get_connection(*args, **kwargs)
            entry = pinned.get(id(self))
            if entry is None:
                entry = pinned[id(self)] = (self, super().get_connection(*args, **kwargs))
            return entry[1]

        def release(self, connection: Any) -> None:
            pinned = _PINNED.get()
            entry = None if pinned is None else pinned.get(id(self))
            if entry is None or entry[1] is not connection:
                super().release(connection)

    return PinningConnectionPool


def _durable(method: Any) -> Any:
    """Decorate a write primitive so that, with ``wait_replicas``, it returns once the
    replicas confirmed it (Redis ``WAIT`` on each connection the write used).

    A write nested in another durable one (``rename`` of a folder calling
    ``setitems``) waits with the outer one.
    """

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not self._wait_replicas or _PINNED.get() is not None:
            return method(self, *args, **kwargs)
        pinned: dict[int, tuple[Any, Any]] = {}
        token = _PINNED.set(pinned)
        try:
            result = method(self, *args, **kwargs)
        except BaseException:
            _release_pinned(pinned, failed=True)
            raise
        finally:
            _PINNED.reset(token)
        _wait_for_replicas(pinned, self._wait_replicas, self._wait_timeout, self._store_name)
        return result

    return wrapper


#: The options of RedisStore itself (the rest go to redis-py).
_OWN_OPTIONS = ("cluster", "connect_timeout", "prefix", "wait_replicas", "wait_timeout")


def _check_wait(replicas: Any, timeout: Any) -> tuple[int, float]:
    """``wait_replicas`` (an int >= 0) and ``wait_timeout`` (seconds above 0), checked."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise ValueError(f"invalid wait_replicas {replicas!r}: it must be an int >= 0 "
                         "(the replicas each write waits for; 0: none)")
    try:
        seconds = check_connect_timeout(timeout)
    except ValueError:
        raise ValueError(f"invalid wait_timeout {timeout!r}: it must be a number of seconds "
                         "above 0") from None
    return replicas, seconds


def _release_pinned(pinned: dict[int, tuple[Any, Any]], *, failed: bool = False) -> None:
    """Give a durable write's pinned connections back to their pools.

    The entries leave ``pinned`` first: a pool releases a connection it
    finds still pinned to the running write as a no-op, and a failed write
    releases while ``_PINNED`` still names this dict.  (Released that way,
    a hundred failed writes left every pool full: "Too many connections".)
    A failed write's connection may hold unread answers, so it is closed.
    """
    entries = list(pinned.values())
    pinned.clear()
    for pool, connection in entries:
        if failed:
            connection.disconnect()
        pool.release(connection)


def _wait_for_replicas(pinned: dict[int, tuple[Any, Any]], replicas: int, timeout: float,
                       name: Callable[[], str]) -> None:
    """``WAIT replicas timeout`` on each connection a write used, then release them.

    ``replicas`` and ``timeout`` are the store's ``wait_replicas`` and
    ``wait_timeout``; ``name()`` names the store in the error.

    Raises
    ------
    ReplicationTimeoutError
        If a server saw fewer replicas confirm the write in time.
    """
    redis = _import_redis()
    short: list[str] = []
    failed = True
    try:
        for _, connection in pinned.values():
            connection.send_command("WAIT", replicas, max(1, round(timeout * 1000)))
            try:
                confirmed = int(connection.read_response())
            except redis.exceptions.ResponseError as error:
                # A replica's connection (the client asked it for the cluster's
                # layout) wrote nothing: nothing to wait for there.
                if "replica" in str(error).lower():
                    continue
                raise
            if confirmed < replicas:
                where = f"{getattr(connection, 'host', '?')}:{getattr(connection, 'port', '?')}"
                short.append(f"{where}: {confirmed}")
        failed = False
    finally:
        _release_pinned(pinned, failed=failed)
    if short:
        raise ReplicationTimeoutError(
            f"{name()}: the write was applied, but fewer replicas than "
            f"wait_replicas={replicas} confirmed it within wait_timeout="
            f"{timeout:g} s ({', '.join(short)}): a failover of that primary now "
            "could lose it (writing the same values again is safe)")


def server_of(client: Any) -> tuple[Any, ...]:
    """Where a redis-py client's keys live, comparable between clients: ``(host and port
    or socket, db)`` for one server, ``("redis-cluster", primaries sorted)`` for a cluster."""
    if hasattr(client, "nodes_manager"):
        return ("redis-cluster", tuple(sorted((node.host, node.port)
                                              for node in client.get_primaries())))
    options = client.connection_pool.connection_kwargs
    return (options.get("path") or (options.get("host"), options.get("port")),
            options.get("db", 0))


# redis-py's annotation of an error inside a pipeline: the command with every
# argument (values shown as "<memory at 0x...>", or whole).
_PIPELINE_NOTE = re.compile(r"^Command # (\d+) \((\S+)[^)]*\) of pipeline caused error: ",
                            re.DOTALL)


def _drop_pipeline_arguments(error: BaseException) -> None:
    """Keep only the command's name in redis-py's note on a pipeline's failed command.

    The note lists the command's arguments: values (a buffer shows as
    ``<memory at 0x...>``, bytes whole) that mean nothing in a message and
    may be large.  The exception's text is changed in place, as redis-py
    wrote it, so its traceback shows no value either.
    """
    if error.args and isinstance(error.args[0], str):
        text = _PIPELINE_NOTE.sub(r"command #\1 (\2) of a pipeline: ", error.args[0], count=1)
        if text != error.args[0]:
            error.args = (text, *error.args[1:])


def typed_redis_error(error: BaseException, name: str, secrets: list[str]) -> Exception:
    """The zstores error a redis-py exception becomes, naming ``name``, no password shown.

    Network failures and refused credentials are ``StoreConnectionError``;
    a server out of memory (``maxmemory`` with ``noeviction``) is a full
    store, ``StoreFullError``; a command the ACL forbids is ``StoreIOError``
    with ``EACCES``; anything else the server or client refuses is
    ``StoreIOError``.  ``RedisStore`` and ``RedisSynchronizer`` both use it.

    Parameters
    ----------
    error : BaseException
        A redis-py exception.
    name : str
        The store or synchronizer with its redacted URL, for the message.
    secrets : list of str
        Passwords to scrub from the driver's message.

    Examples
    --------
    >>> import redis
    >>> error = typed_redis_error(redis.exceptions.ResponseError("OOM command not allowed"),
    ...                           "RedisStore redis://h/0", [])
    >>> type(error).__name__, error.errno
    ('StoreFullError', 28)
    >>> str(error)
    '[Errno 28] RedisStore redis://h/0: the server is out of memory (maxmemory reached): ...'
    """
    exceptions = _import_redis().exceptions
    _drop_pipeline_arguments(error)
    if isinstance(error, exceptions.AuthenticationError):
        return backend_error(StoreConnectionError, name,
                             "the server refused the credentials", secrets, error)
    if isinstance(error, (exceptions.ConnectionError, exceptions.TimeoutError)):
        return backend_error(StoreConnectionError, name, "could not talk to the server",
                             secrets, error)
    if isinstance(error, (exceptions.ClusterDownError, exceptions.TryAgainError,
                          exceptions.SlotNotCoveredError)):
        return backend_error(StoreConnectionError, name,
                             "the cluster cannot serve the key now (a primary is down, "
                             "failing over or its slots are moving)", secrets, error)
    text = str(error)
    if isinstance(error, exceptions.OutOfMemoryError) or text.startswith("OOM") \
            or (isinstance(error, exceptions.ExecAbortError) and "OOM" in text):
        return backend_error(StoreFullError, name,
                             "the server is out of memory (maxmemory reached)", secrets, error)
    if isinstance(error, exceptions.NoPermissionError) or text.startswith("NOPERM"):
        return backend_error(StoreIOError, name, "the server denied the command",
                             secrets, error, errno.EACCES)
    return backend_error(StoreIOError, name, "the server refused the command", secrets, error)
