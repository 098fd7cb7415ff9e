"""RedisStore: each key a Redis string named ``prefix + ":" + key``."""

from __future__ import annotations

import contextvars
import errno
import functools
import inspect
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..._concurrency import ADAPTER_THREADS
from ...base import Buffer, Mode, Store, Version
from ...errors import (
    ReplicationTimeoutError,
    StoreConnectionError,
    StoreFullError,
    StoreIOError,
    StoreURLError,
    TransactionConflictError,
    UnsupportedOperationError,
)
from ...secrets import redact_url, scrub, secrets_of
from .._network import (
    DEFAULT_CONNECT_TIMEOUT,
    SharedClient,
    backend_error,
    call_translating,
    check_connect_timeout,
    check_url_options,
    network_errors_as,
    reopen_unpickled,
    unpickling,
)
from . import cluster as redis_cluster

if TYPE_CHECKING:
    from ...transactions import ChangeSet

__all__ = ["RedisClusterStore", "RedisStore", "client_url_options", "glob_escape",
           "server_of", "typed_redis_error"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"

#: Redis' largest string (``proto-max-bulk-len``'s default and hard limit).
MAX_STRING = 512 << 20

# Keys asked for per SCAN step; each step is one round trip.  The server
# visits this many slots per step (about a millisecond of its time for
# 10,000), so listings of many keys take few round trips: at 1,000 a listing
# of 100,000 keys took 2-3x as long as zarr-python 2's one KEYS call.
_SCAN_COUNT = 10_000
# Any text joined by this separator splits back into the keys: no key has a NUL.
_NUL = "\x00"

# Characters SCAN's MATCH treats as glob syntax.
_GLOB = re.compile(rb"([*?\[\]\\^-])")

# A byte range in one round trip: Python slice semantics (a negative start
# counts from the end, a length past the end is clipped) and nil for a missing
# key, which GETRANGE alone cannot tell from an empty value.
_RANGE_SCRIPT = """
local size = redis.call('STRLEN', KEYS[1])
if size == 0 and redis.call('EXISTS', KEYS[1]) == 0 then return false end
local first = tonumber(ARGV[1])
if first < 0 then first = math.max(size + first, 0) end
local stop = size
if ARGV[2] ~= '' then stop = math.min(first + tonumber(ARGV[2]), size) end
if first >= stop then return '' end
return redis.call('GETRANGE', KEYS[1], first, stop - 1)
"""

# A key's size, or -1 if there is no such key, in one round trip: STRLEN alone
# answers 0 for a missing key (the same test as the range script's first lines).
_STAT_SCRIPT = """
local size = redis.call('STRLEN', KEYS[1])
if size == 0 and redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return size
"""

# Compare-and-swap in one atomic step: KEYS[1] is set to ARGV[3] only if it
# holds ARGV[2] (ARGV[1] "value") or a value whose SHA-1 is ARGV[2] (ARGV[1]
# "sha1": a Version from get_with_version).  1 if it was set, else 0.
_REPLACE_IF_SCRIPT = """
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if ARGV[1] == 'sha1' then
  if redis.sha1hex(current) ~= ARGV[2] then return 0 end
elseif current ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3])
return 1
"""

# Bytes of values per MSET: the server reads a whole command into its query
# buffer (at most 1 GiB) before running it, so larger batches become several
# MSETs in one MULTI/EXEC transaction.
_MSET_BYTES = 64 << 20

# Deletes, inside a commit's MULTI/EXEC, every key matching the SCAN patterns
# ARGV[1..n] (cleared prefixes, escaped).  The listing runs in the same atomic
# step as the deletes, so a key another client adds under a cleared prefix
# before the commit is deleted too, and one added after it stays: the order
# of a serial execution.  UNLINK takes at most 1,000 names per call (Lua's
# unpack has a stack limit; SCAN's COUNT is only a hint).
_CLEAR_SCRIPT = """
for i = 1, #ARGV do
  local cursor = '0'
  repeat
    local page = redis.call('SCAN', cursor, 'MATCH', ARGV[i], 'COUNT', 1000)
    cursor = page[1]
    local names = page[2]
    for first = 1, #names, 1000 do
      redis.call('UNLINK', unpack(names, first, math.min(first + 999, #names)))
    end
  until cursor == '0'
end
return 0
"""

# Keys copied per step of a rename across a cluster's slots.
_RENAME_BATCH = 1_000

# Names per UNLINK of a commit's deleted keys.
_UNLINK_BATCH = 10_000

# How often a commit whose watched keys were written meanwhile checks its
# reads again before giving up: each retry means another client wrote one of
# the keys read (perhaps with the same value) between the check and EXEC.
_COMMIT_ATTEMPTS = 20


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


def _unpickle(cls: type[RedisStore], params: dict[str, Any], mode: str) -> RedisStore:
    """A pickled store reopened: no connection now, one client per URL and options."""
    return reopen_unpickled(cls, params, mode)  # type: ignore[no-any-return]


def _names_cluster(url: Any) -> bool:
    """Whether ``RedisStore(url)`` means a Redis Cluster: its URL scheme, or its client."""
    if isinstance(url, str):
        return url.partition("://")[0].lower() in redis_cluster.CLUSTER_SCHEMES
    try:
        from redis.cluster import RedisCluster
    except ImportError:  # pragma: no cover - the extra is installed in tests
        return False
    return isinstance(url, RedisCluster)


def _groups_by_size(items: list[tuple[str, Buffer]], limit: int) -> list[list[tuple[str, Buffer]]]:
    """Split ``items`` into consecutive groups whose values add up to at most
    ``limit`` bytes (a larger value gets a group of its own)."""
    groups: list[list[tuple[str, Buffer]]] = [[]]
    size = 0
    for key, value in items:
        if groups[-1] and size + len(value) > limit:
            groups.append([])
            size = 0
        groups[-1].append((key, value))
        size += len(value)
    return groups


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
    def wrapper(self: RedisStore, *args: Any, **kwargs: Any) -> Any:
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
        self._wait_for_replicas(pinned)
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


# ------------------------------------------------------------------- the store
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


class RedisStore(Store):
    """Keys and values as Redis strings named ``prefix + ":" + key``.

    The layout of zarr-python 2.18's ``RedisStore``, so either library reads
    what the other wrote.  Every operation is one round trip or a few:
    ``getitems`` is one ``MGET``; ``setitems`` is one ``MSET`` (one ``MULTI``/
    ``EXEC`` pipeline of several above 64 MiB of values), so other clients see
    all of the batch or none of it; ``delitems``
    is one ``DEL``; a key ``rename`` is Redis' atomic ``RENAME``; ``get_range``
    reads the range with ``GETRANGE`` on the server.  Listing walks ``SCAN``
    with ``MATCH`` on this store's escaped prefix (so ``*``, ``?`` and ``[`` in
    names match only themselves), never the blocking ``KEYS``; ``listdir``,
    ``rmdir``, ``getsize``, ``len`` and ``clear`` handle each SCAN page of up
    to 1,000 keys in one round trip and touch no key outside the prefix.

    Parameters
    ----------
    url : str or redis.Redis or redis.RedisCluster
        A ``redis://``, ``rediss://`` (TLS) or ``unix://`` URL as
        ``redis.Redis.from_url`` takes it, password included
        (``redis://:secret@host:6379/0``); or a ready ``redis.Redis`` client,
        which the store uses but never closes.  A server in cluster mode is
        refused at open, naming the URL to write: a ``redis+cluster://``
        URL, or a ready ``redis.RedisCluster`` client, gives a
        ``RedisClusterStore``.
    prefix : str
        Every key is stored as ``prefix + ":" + key`` (zarr-python 2's
        default prefix is ``"zarr"`` too).  Stores whose prefixes nest
        (``"a"`` and ``"a:b"``) see each other's keys, as in zarr-python 2.
    mode : {"a", "r", "r+", "w", "w-"}
        A store *exists* when at least one key starts with ``prefix + ":"``:
        ``"r"`` and ``"r+"`` require one, ``"w-"`` refuses one, ``"w"``
        deletes every key under the prefix.  Mode ``"r"`` refuses writes
        before any round trip.
    connect_timeout : float
        Seconds the check at open may take: the store sends one ``PING`` on
        a connection of its own (no retries) and refuses to open, with
        ``StoreConnectionError``, when the server does not answer in time,
        refuses the connection or the credentials.  A URL option of
        ``open_store`` too (``redis://host/0?connect_timeout=2``).
    wait_replicas : int
        Replicas each write waits for (default 0: none).  Redis replicates
        asynchronously: a write is acknowledged once the primary applied it,
        and a primary that fails before its replicas received the write
        loses it in the failover (its replica, promoted, never had it).
        With ``wait_replicas=N`` every write (``set``, ``setitems``,
        deletes, renames, the compare-and-swap primitives, transaction
        commits) returns only once Redis' ``WAIT`` saw ``N`` replicas
        confirm it, on every primary it touched; so an acknowledged write
        survives the failure of its primary while one of those replicas
        lives.  A URL option of ``open_store`` too (``?wait_replicas=1``).
        Only with a URL, not a ready client.
    cluster : bool
        True: the URL's ``redis://`` or ``rediss://`` servers are nodes of
        a Redis Cluster, as with a ``redis+cluster://`` URL
        (``redis://host:port,host:port/?prefix=x&cluster=true``): for tools
        that take no ``+`` in a scheme (xarray treats such a string as a
        local path).
    wait_timeout : float
        Seconds ``WAIT`` may take (default 5).  When fewer than
        ``wait_replicas`` replicas confirmed in time the write raises
        ``ReplicationTimeoutError`` (an ``OSError``, ``ETIMEDOUT``): it was
        applied on the primary, but may not survive a failover.
    **client_kwargs
        Passed to ``redis.Redis.from_url`` (``socket_timeout``,
        ``ssl_ca_certs``, ``ssl_cert_reqs`` ...); only with a URL.  Unknown
        names, here or in the URL's query, are refused (``StoreURLError``)
        with the list of those redis-py takes (``client_url_options``); so is
        a ``max_connections`` below the threads the zarr adapter calls a
        store from at once (``min(32, cores + 4)``).

    Notes
    -----
    A password never appears in ``repr``, in error messages or in logs; it is
    kept (in the URL) for pickling.  A store pickles its URL, prefix and
    options, never a connection, so it can be sent to worker processes
    (``supports_process_writers``) and reopens with mode ``"a"`` (``"r"`` if
    read-only).  Unpickling connects nowhere: the stores unpickled in one
    process with the same URL and options share one client, made on first
    use and closed with the last of them, so a dask worker running many
    tasks holds one connection pool.  A store built from a ready client cannot
    be pickled (``TypeError``), because a client's credentials and options
    cannot be recovered faithfully.

    No redis-py exception reaches the caller: when the server is down,
    restarting or refuses the credentials, the call raises
    ``StoreConnectionError`` (a ``ConnectionError``) naming the URL without
    its password, and the next call reconnects by itself; a server out of
    memory (``maxmemory`` with the ``noeviction`` policy) raises
    ``StoreFullError`` (``ENOSPC``): the refused write changed nothing, and
    deleting keys frees room; a command the server's ACL denies raises
    ``StoreIOError`` with ``EACCES``, any other refusal ``StoreIOError``.
    The redis-py exception is chained unless its text shows a password.
    Values are limited to Redis' 512 MiB strings (``max_value_size``),
    checked before anything is sent.

    Examples
    --------
    >>> from zstores import RedisStore                    # doctest: +SKIP
    >>> store = RedisStore("redis://127.0.0.1:6379/0", prefix="demo")  # doctest: +SKIP
    >>> store.setitems({"a/.zarray": b"{}", "a/0.0": b"chunk"})        # doctest: +SKIP
    >>> store.listdir("a"), store.get_range("a/0.0", -3)  # doctest: +SKIP
    (['.zarray', '0.0'], b'unk')
    """

    supports_range_reads = True
    supports_process_writers = True
    supports_transactions = True
    # Redis keeps one version of each key: a consistent view of many keys while
    # writers go on would mean copying them all (see docs/transactions.md).
    supports_snapshots = False
    supports_create_if_absent = True  # SET NX
    supports_compare_and_swap = True  # a Lua script: compare and SET in one atomic step
    _version_kind = "sha1"  # what the server's redis.sha1hex computes
    max_value_size = MAX_STRING

    def __new__(
        cls,
        url: str | Any = DEFAULT_URL,
        *,
        prefix: str = "zarr",
        mode: Mode = "a",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        wait_replicas: int = 0,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
        cluster: bool = False,
        **client_kwargs: Any,
    ) -> RedisStore:
        # A cluster URL or client makes a RedisClusterStore (the same
        # parameters as __init__'s, so open_store reads the options off either).
        if cls is RedisStore and (cluster or _names_cluster(url)):
            cls = RedisClusterStore
        return super().__new__(cls)

    def __init__(
        self,
        url: str | Any = DEFAULT_URL,
        *,
        prefix: str = "zarr",
        mode: Mode = "a",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        wait_replicas: int = 0,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
        cluster: bool = False,
        **client_kwargs: Any,
    ) -> None:
        super().__init__(mode=mode)
        redis = _import_redis()
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(
                f"invalid prefix {prefix!r}: the prefix option must be a non-empty str")
        self._connect_timeout = check_connect_timeout(connect_timeout)
        self._wait_replicas, self._wait_timeout = _check_wait(wait_replicas, wait_timeout)
        self._prefix = prefix
        self._base = prefix + ":"
        self._base_length = len(self._base.encode("utf-8"))
        self._client_kwargs = client_kwargs
        # SlotNotCoveredError and its family are not RedisErrors.
        self._driver_errors = (redis.exceptions.RedisError,
                               redis.exceptions.RedisClusterException)
        self._response_errors = redis.exceptions.ResponseError
        self._url: str | None = None
        self._client_now: Any = None  # see the _client property
        self._shared: SharedClient | None = None
        self._committer: Any = None  # the client commits use (_commit_client)
        if isinstance(url, str):
            self._url = url
            self._owns_client = True
            self._where = redact_url(url)
            if unpickling():
                # Checked when the original store opened: share this process's
                # client for the URL and options, connected on first use.
                self._owns_client = False
                self._shared = SharedClient.acquire(
                    (type(self), url, repr(sorted(client_kwargs.items())),
                     self._wait_replicas > 0),
                    functools.partial(self._client_from_url, redis, url, client_kwargs),
                    _close_client)
                self._committer = self._commit_client(redis)
                return
            self._client_now = self._client_from_url(redis, url, client_kwargs)
        elif isinstance(url, self._client_class(redis)):
            if client_kwargs or self._wait_replicas:
                options = sorted(client_kwargs) + (["wait_replicas"] if self._wait_replicas else [])
                raise ValueError(
                    f"client options {options} apply only when the store "
                    f"is built from a URL, not from a ready {type(url).__name__} client"
                )
            self._owns_client = False
            self._client_now = url
            self._where = self._redacted_url()
        else:
            raise TypeError(f"url must be a str, a redis.Redis or a redis.RedisCluster client, "
                            f"not {type(url).__name__}")
        if self._connection_kwargs().get("decode_responses"):
            raise ValueError(
                "RedisStore needs a client with decode_responses=False (values are bytes)")
        # Made now (no connection until a commit), not at the first commit:
        # two threads committing at once would each make one.
        self._committer = self._commit_client(redis)
        try:
            self._check_pool_size()
            self._ping()
            if self._mode in ("r", "r+", "w-"):
                self._check_existence(self._exists())
            self._clear_if_mode_w()
        except BaseException:
            if self._owns_client:
                _close_client(self._client)
            raise

    @property
    def _client(self) -> Any:
        """The redis-py client; a store unpickled in this process gets the shared one
        (``SharedClient``) on first use."""
        client = self._client_now
        if client is None and self._shared is not None:
            client = self._client_now = self._shared.client()
        return client

    @functools.cached_property
    def _range(self) -> Any:
        return self._client.register_script(_RANGE_SCRIPT)

    @functools.cached_property
    def _stat_script(self) -> Any:
        return self._client.register_script(_STAT_SCRIPT)

    def __reduce__(self) -> tuple[Any, ...]:
        # Unpickled through _unpickle: no connection, and a client shared per process.
        params = self._params()
        return (_unpickle, (type(self), params, self._mode_after_pickle()))

    # ------------------------------------------------------------- opening
    def _client_class(self, redis: Any) -> type:
        """The redis-py client class a ready client must be."""
        return redis.Redis  # type: ignore[no-any-return]

    def _connection_kwargs(self) -> dict[str, Any]:
        """The options every connection of the client is made with."""
        return self._client.connection_pool.connection_kwargs  # type: ignore[no-any-return]

    def _pool_limit(self) -> int | None:
        """The most connections the client opens to one server (None: redis-py's default)."""
        return self._client.connection_pool.max_connections  # type: ignore[no-any-return]

    def _check_pool_size(self) -> None:
        """Refuse a connection pool smaller than the threads the adapters call the store from.

        redis-py's pool raises ``MaxConnectionsError`` for a call beyond
        ``max_connections`` instead of waiting, so a zarr write of many chunks
        would fail part-way; better refused at open, naming the minimum.
        """
        limit = self._pool_limit()
        if limit is not None and limit < ADAPTER_THREADS:
            raise StoreURLError(
                f"{self._store_name()}: max_connections={limit} is below {ADAPTER_THREADS}, the "
                "threads zstores' zarr adapter calls a store from at once here (min(32, cores + "
                "4)), whose calls beyond the pool would fail with 'Too many connections': give "
                f"max_connections={ADAPTER_THREADS} or more, or leave it out")

    def _client_from_url(self, redis: Any, url: str, client_kwargs: dict[str, Any]) -> Any:
        """A client for ``url``, its options checked against what redis-py takes."""
        scheme = url.partition("://")[0].lower()
        own = _OWN_OPTIONS
        check_url_options(url, client_url_options(scheme), own, "redis-py", "RedisStore")
        known = _client_keywords(scheme)
        for name in client_kwargs:
            if name not in known:
                raise StoreURLError(
                    f"unknown option {name!r} for RedisStore at {self._where}; known options: "
                    f"{', '.join(own)} (zstores) and {', '.join(sorted(known))} (redis-py)"
                )
        # parse_url's ValueError: "Invalid value for 'db' in connection URL."
        return call_translating(
            functools.partial(self._plain_client, redis, url, client_kwargs), ValueError,
            lambda error: StoreURLError(
                f"RedisStore cannot use {self._where}: {scrub(str(error), secrets_of(url))}"),
            lambda: secrets_of(url))

    def _plain_client(self, redis: Any, url: str, client_kwargs: dict[str, Any]) -> Any:
        """``redis.Redis.from_url(url, **client_kwargs)``; its pool pins connections
        to durable writes when the store waits for replicas."""
        if not self._wait_replicas:
            return redis.Redis.from_url(url, **client_kwargs)
        options = dict(client_kwargs)
        single = options.pop("single_connection_client", False)
        client = redis.Redis(connection_pool=_pinning_pool_class().from_url(url, **options),
                             single_connection_client=single)
        client.auto_close_connection_pool = True
        return client

    def _wait_for_replicas(self, pinned: dict[int, tuple[Any, Any]]) -> None:
        """``WAIT wait_replicas wait_timeout`` on each connection a write used, then release them.

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
                connection.send_command("WAIT", self._wait_replicas,
                                        max(1, round(self._wait_timeout * 1000)))
                try:
                    confirmed = int(connection.read_response())
                except redis.exceptions.ResponseError as error:
                    # A replica's connection (the client asked it for the cluster's
                    # layout) wrote nothing: nothing to wait for there.
                    if "replica" in str(error).lower():
                        continue
                    raise
                if confirmed < self._wait_replicas:
                    where = f"{getattr(connection, 'host', '?')}:{getattr(connection, 'port', '?')}"
                    short.append(f"{where}: {confirmed}")
            failed = False
        finally:
            _release_pinned(pinned, failed=failed)
        if short:
            raise ReplicationTimeoutError(
                f"{self._store_name()}: the write was applied, but fewer replicas than "
                f"wait_replicas={self._wait_replicas} confirmed it within wait_timeout="
                f"{self._wait_timeout:g} s ({', '.join(short)}): a failover of that primary now "
                "could lose it (writing the same values again is safe)")

    def _ping(self) -> None:
        """One PING within ``connect_timeout`` seconds, on a connection of its own.

        A connection of its own, so the bound holds whatever the client's own
        timeouts and retries are; the client's pool stays as the caller set it.
        """
        redis = _import_redis()
        if not self._owns_client:
            pool = self._client.connection_pool
            probe_pool = pool.__class__(connection_class=pool.connection_class,
                                        **pool.connection_kwargs)
        else:
            probe_pool = redis.ConnectionPool.from_url(self._url, **self._client_kwargs)
        timeout = self._connect_timeout
        probe_pool.connection_kwargs.update(socket_connect_timeout=timeout, socket_timeout=timeout)
        probe = redis.Redis(connection_pool=probe_pool,
                            retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))

        def translate(error: BaseException) -> Exception:
            if isinstance(error, redis.exceptions.TimeoutError):
                return backend_error(
                    StoreConnectionError, self._store_name(),
                    f"no answer from the server within {timeout:g} s (connect_timeout)",
                    self._secrets(), error)
            return self._typed_error(error)

        try:
            call_translating(probe.ping, redis.exceptions.RedisError, translate, self._secrets)
            is_node = call_translating(functools.partial(redis_cluster.is_cluster_node, probe),
                                       redis.exceptions.RedisError, translate, self._secrets)
        finally:
            probe_pool.disconnect()
        if is_node:
            raise StoreURLError(self._cluster_node_refusal())

    def _cluster_node_refusal(self) -> str:
        """Why a plain URL on a cluster node is refused, and the URL to write instead."""
        options = self._connection_kwargs()
        scheme = "rediss+cluster" if self._where.startswith("rediss") else "redis+cluster"
        prefix = quote(self._prefix, safe="")
        return (f"{self._store_name()}: the server is a Redis Cluster node (cluster_enabled:1), "
                "where a plain URL reaches only the keys of that node's slots: write "
                f"{scheme}://{options.get('host')}:{options.get('port')}/?prefix={prefix} "
                "(or pass a redis.RedisCluster client)")

    # ------------------------------------------------------------- helpers
    def _redacted_url(self) -> str:
        if self._url is not None:
            return redact_url(self._url)
        options = self._connection_kwargs()
        if "path" in options:
            return f"unix://{options['path']}?db={options.get('db', 0)}"
        return f"redis://{options.get('host')}:{options.get('port')}/{options.get('db', 0)}"

    def _store_name(self) -> str:
        return f"{type(self).__name__} {self._describe()}"

    def _secrets(self) -> list[str]:
        """Every password this store knows of, to keep out of messages."""
        secrets = secrets_of(self._url) if self._url else []
        # _client_now: never make a shared client just to word an error about it.
        if self._client_now is not None:
            password = self._connection_kwargs().get("password")
            if password:
                secrets.append(password)
        return secrets

    def _typed_error(self, error: BaseException) -> Exception:
        """The zstores error a redis-py exception becomes (``typed_redis_error``)."""
        return typed_redis_error(error, self._store_name(), self._secrets())

    def _name(self, key: str) -> str:
        return self._base + key

    def _pattern(self, prefix: str) -> bytes:
        return glob_escape((self._base + prefix).encode("utf-8")) + b"*"

    def _pages(self, prefix: str) -> Iterator[list[bytes]]:
        """Full Redis names under ``prefix``, one SCAN page at a time (may repeat names)."""
        pattern, cursor = self._pattern(prefix), 0
        while True:
            cursor, names = self._client.scan(cursor, match=pattern, count=_SCAN_COUNT)
            if names:
                yield names
            if not cursor:
                return

    def _decode(self, name: bytes) -> str:
        return name[self._base_length:].decode("utf-8")

    @network_errors_as
    def _exists(self) -> bool:
        return any(True for _ in self._pages(""))

    # ------------------------------------------------------------ primitives
    @network_errors_as
    def _get(self, key: str) -> bytes:
        value = self._client.get(self._base + key)
        if value is None:
            raise KeyError(key)
        return value

    @network_errors_as
    @_durable
    def _set(self, key: str, value: Buffer) -> None:
        self._client.set(self._base + key, value)

    @network_errors_as
    @_durable
    def _delete(self, key: str) -> None:
        if not self._client.delete(self._base + key):
            raise KeyError(key)

    @network_errors_as
    def _contains(self, key: str) -> bool:
        return bool(self._client.exists(self._base + key))

    @network_errors_as
    def _list_prefix(self, prefix: str) -> list[str]:
        names: dict[bytes, None] = {}
        for page in self._pages(prefix):
            names.update(dict.fromkeys(page))
        return [self._decode(name) for name in names]

    # -------------------------------------------------------------- fast paths
    @network_errors_as
    def _listdir(self, prefix: str) -> list[str]:
        found: set[bytes] = set()
        for page in self._pages(prefix):
            found.update(page)
        if not found:
            return []
        # The names cut and decoded at once: one join, one decode, one split
        # (C-level) instead of a decode and a child_name call per key.
        cut = self._base_length + len(prefix.encode("utf-8"))
        text = b"\x00".join([name[cut:] for name in found]).decode("utf-8")
        if "/" not in text:  # no sub-folder: the names are the keys
            return text.split(_NUL)
        return list(dict.fromkeys(name.partition("/")[0] for name in text.split(_NUL)))

    @network_errors_as
    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        value = self._range(
            keys=[self._base + key], args=[start, "" if length is None else length],
            client=self._client,
        )
        if value is None:
            raise KeyError(key)
        return value

    @network_errors_as
    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        values = self._client.mget([self._base + key for key in keys])
        return {key: value for key, value in zip(keys, values, strict=True) if value is not None}

    @network_errors_as
    @_durable
    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        if not items:
            return
        groups = _groups_by_size(items, _MSET_BYTES)
        if len(groups) == 1:
            self._client.mset({self._base + key: value for key, value in groups[0]})
            return
        with self._client.pipeline(transaction=True) as pipe:
            for group in groups:
                pipe.mset({self._base + key: value for key, value in group})
            pipe.execute()

    @network_errors_as
    @_durable
    def _delete_many(self, keys: list[str]) -> None:
        if keys:
            self._client.delete(*[self._base + key for key in keys])

    @network_errors_as
    @_durable
    def _rmdir(self, prefix: str) -> None:
        for page in self._pages(prefix):
            self._client.unlink(*page)

    @network_errors_as
    def _getsize_key(self, key: str) -> int:
        return self._client.strlen(self._base + key)

    @network_errors_as
    def _stat(self, key: str) -> int | None:
        size = self._stat_script(keys=[self._base + key])
        return None if size < 0 else size

    @network_errors_as
    def _getsize_prefix(self, prefix: str) -> int:
        seen: set[bytes] = set()
        total = 0
        for page in self._pages(prefix):
            fresh = [name for name in dict.fromkeys(page) if name not in seen]
            seen.update(fresh)
            with self._client.pipeline(transaction=False) as pipe:
                for name in fresh:
                    pipe.strlen(name)
                total += sum(pipe.execute())
        return total

    @network_errors_as
    @_durable
    def _rename_key(self, src: str, dst: str) -> None:
        try:
            self._client.rename(self._base + src, self._base + dst)
        except self._response_errors as error:
            if "no such key" in str(error).lower():
                raise KeyError(src) from None
            raise

    @network_errors_as
    @_durable
    def _rename_prefix(self, src_prefix: str, dst_prefix: str) -> None:
        keys = [self._decode(name) for page in self._pages(src_prefix) for name in page]
        # When the source lies inside the destination a target can be another
        # source key; its target is shorter, so moving shorter keys first
        # renames every source before anything overwrites it.
        moves = sorted(dict.fromkeys(keys), key=len)
        with self._slot_client().pipeline(transaction=True) as pipe:
            for key in moves:
                pipe.rename(self._base + key, self._base + dst_prefix + key[len(src_prefix):])
            results = pipe.execute(raise_on_error=False)
        for result in results:
            # A key deleted by another client since the SCAN is simply gone.
            if isinstance(result, Exception) and "no such key" not in str(result).lower():
                raise result

    # ------------------------------------------------------ conditional writes
    # Sent once through the commit client (no retries): a retried SET NX whose
    # first attempt landed would answer False for the caller's own value.
    @network_errors_as
    @_durable
    def _set_if_absent(self, key: str, value: Buffer) -> bool:
        name = self._base + key
        return bool(self._committer_for(name).set(name, value, nx=True))

    @network_errors_as
    @_durable
    def _replace_if(self, key: str, expected: Buffer | Version, value: Buffer) -> bool:
        if isinstance(expected, Version):
            if expected.kind != self._version_kind:
                self._holds(b"", expected)  # raises, naming the kinds
            how, token = "sha1", expected.token.encode()
        else:
            how, token = "value", expected
        name = self._base + key
        return bool(self._committer_for(name).eval(_REPLACE_IF_SCRIPT, 1, name, how, token, value))

    # ------------------------------------------------------------ transactions
    @network_errors_as
    @_durable
    def _commit_changes(self, changes: ChangeSet) -> None:
        """Check the reads and apply the changes in one ``MULTI``/``EXEC``.

        The keys read are ``WATCH``ed, read back with one ``MGET`` and
        checked; then one ``MULTI``/``EXEC`` clears the prefixes (a Lua
        script listing and deleting them inside the atomic step), deletes
        and sets the keys.  If a watched key is written between the check
        and ``EXEC``, Redis runs nothing and the check is done again.  Redis
        refuses the whole ``EXEC`` when a queued write does not fit under
        ``maxmemory`` (``EXECABORT``), and runs it without interruption
        otherwise, so nothing is ever half applied.
        """
        watch_error = _import_redis().exceptions.WatchError
        read = list(changes.reads)
        names = [self._base + key for key in read]
        committer = self._committer_for(names[0] if names else self._base)
        for _ in range(_COMMIT_ATTEMPTS):
            with committer.pipeline(transaction=True) as pipe:
                try:
                    if names:
                        pipe.watch(*names)
                        current = dict(zip(read, pipe.mget(names), strict=True))
                        changes.check(current.get, self)
                        pipe.multi()
                    self._queue_changes(pipe, changes)
                    pipe.execute()
                    return
                except watch_error as error:
                    lost = error.__context__
                    if lost is not None and isinstance(lost, self._driver_errors):
                        # redis-py turns a connection lost while watching into
                        # a WatchError: it is a failure, not a conflict.
                        raise lost from None
        raise TransactionConflictError(
            f"{self!r}: the keys the transaction read kept being written by other clients "
            f"during {_COMMIT_ATTEMPTS} attempts to commit; nothing was committed: run the "
            "transaction again",
            tuple(read),
        )

    def _queue_changes(self, pipe: Any, changes: ChangeSet) -> None:
        """Queue the changes on a ``MULTI`` pipeline: prefixes cleared, then key writes."""
        if changes.cleared:
            patterns = [self._pattern(prefix) for prefix in changes.cleared]
            pipe.eval(_CLEAR_SCRIPT, 0, *patterns)
        deleted = [self._base + key for key, value in changes.writes.items() if value is None]
        for first in range(0, len(deleted), _UNLINK_BATCH):
            pipe.unlink(*deleted[first:first + _UNLINK_BATCH])
        written = [(key, value) for key, value in changes.writes.items() if value is not None]
        if written:
            for group in _groups_by_size(written, _MSET_BYTES):
                pipe.mset({self._base + key: value for key, value in group})

    def _committer_for(self, name: str) -> Any:
        """The no-retry client (``_commit_client``) that reaches the key ``name``."""
        return self._committer

    def _slot_client(self) -> Any:
        """The client a ``MULTI``/``EXEC`` over several of the store's keys goes through."""
        return self._client

    def _commit_client(self, redis: Any) -> Any:
        """A client on the store's server whose connections never retry a command.

        redis-py retries a ``MULTI``/``EXEC`` whose connection failed (a
        client from ``redis.Redis(...)`` does by default): after a failure
        whose outcome is unknown, a retry could apply the transaction a
        second time, over what other clients committed since.  A commit is
        sent once; a lost connection is ``StoreConnectionError``.
        """
        pool = self._client.connection_pool
        options = dict(pool.connection_kwargs)
        options.update(retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0),
                       retry_on_error=[], retry_on_timeout=False)
        return redis.Redis(connection_pool=pool.__class__(
            connection_class=pool.connection_class, **options))

    # ------------------------------------------------------------- lifecycle
    @network_errors_as
    def _close(self) -> None:
        self._close_committers()
        if self._shared is not None:
            self._shared.release()
        elif self._owns_client:
            _close_client(self._client)

    def _close_committers(self) -> None:
        if self._committer is not None:
            self._committer.connection_pool.disconnect()

    @property
    def prefix(self) -> str:
        """The prefix every key is stored under (without the ``:``)."""
        return self._prefix

    @property
    def client(self) -> Any:
        """The ``redis.Redis`` client the store talks through."""
        return self._client

    def server(self) -> tuple[Any, ...]:
        """Where the store's keys live (``server_of`` its client), as
        ``RedisSynchronizer.server()`` says it for its locks."""
        return server_of(self._client)

    def _location(self) -> Any:
        options = self._connection_kwargs()
        server = options.get("path") or (options.get("host"), options.get("port"))
        return ("redis", server, options.get("db", 0), self._prefix)

    def _describe(self) -> str:
        return f"{self._where} prefix {self._prefix!r}"

    def _mode_after_pickle(self) -> str:
        # A prefix with no keys does not exist, so even "r+" reopens as "a".
        return "r" if self._mode == "r" else "a"

    def _params(self) -> dict[str, Any]:
        if self._url is None:
            raise TypeError(
                f"cannot pickle {self!r}: it was built from a ready redis.Redis client, "
                "whose credentials and options cannot be recovered; build the store from "
                "a URL (RedisStore(url, prefix=..., **client_kwargs)) to pickle it"
            )
        params = {"url": self._url, "prefix": self._prefix,
                  "connect_timeout": self._connect_timeout, **self._client_kwargs}
        if self._wait_replicas:
            params.update(wait_replicas=self._wait_replicas, wait_timeout=self._wait_timeout)
        return params


# ------------------------------------------------------------- Redis Cluster
class RedisClusterStore(RedisStore):
    """A ``RedisStore`` on a Redis Cluster: the same layout, every primary used.

    ``RedisStore`` makes one of these when given a ``redis+cluster://`` or
    ``rediss+cluster://`` URL, ``redis+cluster://[:password@]host:port[,host:port...]/?prefix=zarr``
    (each node a seed the client may learn the cluster's layout from), or a
    ready ``redis.RedisCluster`` client; ``open_store`` takes the same URLs.
    Keys are ``prefix + ":" + key`` as on one server, each routed to the
    primary owning its hash slot.

    Placement is the prefix's choice, fixed when the store is created: a
    prefix holding a hash tag (``"{zarr}"``, ``"arrays{run7}"``) puts every
    key of the store in the tag's slot, on one primary, and a plain prefix
    spreads the keys over every primary.  Any reader opening the same prefix
    finds the same keys: the placement needs no record of its own.

    - With a tagged prefix everything is atomic as on one server:
      ``transaction()``, ``setitems`` (one ``MSET``), ``rename`` of a folder
      (one ``MULTI``/``EXEC``), and listings scan that one primary.
    - With a spread prefix, single keys and the compare-and-swap primitives
      (``set_if_not_exists``, ``replace_if``) are atomic; ``getitems``,
      ``setitems`` and ``delitems`` send one command per slot, pipelined to
      every primary at once, each slot's part atomic but not the batch;
      ``rename`` copies, then deletes the sources (a crash midway leaves
      both copies, never neither); listings ``SCAN`` every primary; and
      ``transaction()`` is refused (``UnsupportedOperationError``), as no
      cluster command can commit keys of several slots together.

    Examples
    --------
    >>> from zstores import open_store                                      # doctest: +SKIP
    >>> store = open_store("redis+cluster://127.0.0.1:7000/?prefix=%7Bdemo%7D", mode="w")
    ...                                                                     # doctest: +SKIP
    >>> store.setitems({"a/0": b"1", "a/1": b"2"})                          # doctest: +SKIP
    >>> type(store).__name__, store.supports_transactions, sorted(store.listdir("a"))
    ...                                                                     # doctest: +SKIP
    ('RedisClusterStore', True, ['0', '1'])
    >>> store.clear(); store.close()                                        # doctest: +SKIP
    """

    supports_snapshots = False

    def __init__(
        self,
        url: str | Any = DEFAULT_URL,
        *,
        prefix: str = "zarr",
        mode: Mode = "a",
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        wait_replicas: int = 0,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
        cluster: bool = False,
        **client_kwargs: Any,
    ) -> None:
        if isinstance(prefix, str):
            self._tag = redis_cluster.store_hash_tag(prefix)
            # Only a store whose keys share one slot can commit them together.
            self.supports_transactions = self._tag is not None
        if cluster and isinstance(url, str):
            url = redis_cluster.as_cluster_url(url)
        self._committers: dict[tuple[str, int], Any] = {}
        self._committers_lock = threading.Lock()
        self._probed = False
        self._layout_stale = False
        super().__init__(url, prefix=prefix, mode=mode, connect_timeout=connect_timeout,
                         wait_replicas=wait_replicas, wait_timeout=wait_timeout, **client_kwargs)

    # ------------------------------------------------------------- opening
    def _client_class(self, redis: Any) -> type:
        return redis.RedisCluster  # type: ignore[no-any-return]

    def _connection_kwargs(self) -> dict[str, Any]:
        return self._client.get_connection_kwargs()  # type: ignore[no-any-return]

    def _pool_limit(self) -> int | None:
        # Per node; None: redis-py's default for a cluster (100 per node).
        return self._connection_kwargs().get("max_connections")

    def _client_from_url(self, redis: Any, url: str, client_kwargs: dict[str, Any]) -> Any:
        """Probe a seed node (bounded by ``connect_timeout``), then make the cluster client.

        The probe comes first because ``redis.RedisCluster`` asks the seeds
        for the cluster's layout as it is made, with no bound of ours.
        """
        nodes = redis_cluster.split_cluster_url(url)
        scheme = nodes[0][0].partition("://")[0]
        own = _OWN_OPTIONS
        known = client_url_options(scheme) - {"db", "single_connection_client"}
        check_url_options(url, known, own, "redis-py", "RedisStore")
        cluster_options = _init_parameters(redis.RedisCluster) - {
            "host", "port", "url", "startup_nodes", "cache", "event_dispatcher",
            "policy_resolver", "maint_notifications_config", "address_remap"}
        for name in client_kwargs:
            if name not in _client_keywords(scheme) | cluster_options:
                raise StoreURLError(
                    f"unknown option {name!r} for RedisStore at {self._where}; known options: "
                    f"{', '.join(own)} (zstores) and "
                    f"{', '.join(sorted(known | cluster_options))} (redis-py)")
        self._probe_seeds(redis, nodes, client_kwargs)
        seeds = [redis.cluster.ClusterNode(host, port) for _, host, port in nodes[1:]]
        if self._wait_replicas:  # each node's pool pins connections to durable writes
            client_kwargs = {**client_kwargs, "connection_pool_class": _pinning_pool_class()}
        make = functools.partial(redis.RedisCluster.from_url, nodes[0][0], startup_nodes=seeds,
                                 **client_kwargs)
        return call_translating(make, (redis.exceptions.RedisError,
                                       redis.exceptions.RedisClusterException, ValueError),
                                self._typed_error, lambda: secrets_of(url))

    def _probe_seeds(self, redis: Any, nodes: list[tuple[str, str, int]],
                     client_kwargs: dict[str, Any]) -> None:
        """PING the seeds in turn, within ``connect_timeout`` each, until one
        answers; refuse a server that is not a cluster node."""
        timeout = self._connect_timeout
        scheme = nodes[0][0].partition("://")[0]
        options = {name: value for name, value in client_kwargs.items()
                   if name in _client_keywords(scheme)}
        options.update(socket_connect_timeout=timeout, socket_timeout=timeout,
                       retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
        failure: BaseException | None = None
        for node_url, host, port in nodes:
            probe = redis.Redis.from_url(node_url, **options)
            try:
                probe.ping()
                if not redis_cluster.is_cluster_node(probe):
                    raise StoreURLError(
                        f"{self._store_name()}: the server at {host}:{port} is not a Redis "
                        "Cluster node (cluster_enabled:0): write redis://host:port/0?prefix=... "
                        "for a single server")
                self._probed = True
                return
            except redis.exceptions.RedisError as error:
                failure = error
            finally:
                probe.close()
        assert failure is not None
        if isinstance(failure, redis.exceptions.TimeoutError):
            raise backend_error(
                StoreConnectionError, self._store_name(),
                f"no seed node answered within {timeout:g} s (connect_timeout)",
                self._secrets(), failure) from None
        raise self._typed_error(failure) from None

    def _ping(self) -> None:
        # From a URL the seeds were probed already; a ready client learnt the
        # cluster's layout when it was made: PING its primaries.
        if not self._probed:
            redis = _import_redis()
            call_translating(
                functools.partial(self._client.ping, target_nodes=redis.RedisCluster.PRIMARIES),
                self._driver_errors, self._typed_error, self._secrets)

    def _redacted_url(self) -> str:
        if self._url is not None:
            return redact_url(self._url)
        nodes = ",".join(f"{node.host}:{node.port}" for node in self._client.get_primaries())
        return f"redis+cluster://{nodes}/"

    def _location(self) -> Any:
        # From the URL when there is one: comparing stores connects nowhere.
        if self._url is not None:
            seeds = [(host, port) for _, host, port in redis_cluster.split_cluster_url(self._url)]
        else:
            seeds = [(node.host, node.port) for node in self._client.get_primaries()]
        return ("redis-cluster", tuple(sorted(seeds)), self._prefix)

    # ------------------------------------------------------------ commits
    def _commit_client(self, redis: Any) -> Any:
        return None  # one per primary, made on first use (_committer_for)

    def _committer_for(self, name: str) -> Any:
        """A no-retry client on the primary owning ``name``'s slot now.

        Asked at each call, so a commit after a failover goes to the new primary.
        """
        self._refresh_layout_if_stale()
        node = self._client.get_node_from_key(name)
        address = (node.host, node.port)
        with self._committers_lock:
            committer = self._committers.get(address)
            if committer is None:
                redis = _import_redis()
                node_client = node.redis_connection or self._client.get_redis_connection(node)
                pool = node_client.connection_pool
                options = dict(pool.connection_kwargs)
                options.update(retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0),
                               retry_on_error=[], retry_on_timeout=False)
                committer = redis.Redis(connection_pool=pool.__class__(
                    connection_class=pool.connection_class, **options))
                self._committers[address] = committer
        return committer

    def _slot_client(self) -> Any:
        # Only a tagged store's keys share a slot: its primary's client.
        return self._committer_for(self._base)

    def _close_committers(self) -> None:
        with self._committers_lock:
            for committer in self._committers.values():
                committer.connection_pool.disconnect()
            self._committers.clear()

    def transaction(self, *, bind_thread: bool = True) -> Any:
        if self._tag is None and not self.closed:
            raise UnsupportedOperationError(
                f"{self!r} cannot run transactions: its prefix {self._prefix!r} spreads the "
                "keys over the cluster's slots, and Redis Cluster commits only keys of one "
                "slot together; a prefix with a hash tag, such as "
                f"{'{' + self._prefix + '}'!r}, keeps a store in one slot")
        return super().transaction(bind_thread=bind_thread)

    # ------------------------------------------------------------ listings
    def _pages(self, prefix: str) -> Iterator[list[bytes]]:
        self._refresh_layout_if_stale()
        nodes = redis_cluster.primaries_for(self._client, self._tag)
        return redis_cluster.scan_pages(self._client, nodes, self._pattern(prefix), _SCAN_COUNT)

    # ------------------------------------------------------------ failover
    # SCANs and the no-retry commit clients reach a node directly, past
    # redis-py's routing, which refreshes the slot map only when its own
    # commands fail: after a failover they would keep asking the dead
    # primary.  A connection failure or a cluster refusal marks the map
    # stale, and the next call reads the layout again first.
    def _typed_error(self, error: BaseException) -> Exception:
        redis = _import_redis()
        if isinstance(error, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                              redis.exceptions.ClusterError, redis.exceptions.AskError,
                              redis.exceptions.TryAgainError,
                              redis.exceptions.RedisClusterException)):
            self._layout_stale = True
        return super()._typed_error(error)

    def _refresh_layout_if_stale(self) -> None:
        if self._layout_stale:
            self._client.nodes_manager.initialize()
            self._layout_stale = False

    # ------------------------------------------------------------ single keys
    # redis-py's RedisCluster spends about twice the client CPU of a plain
    # client on a command (the slot determined twice, per-command metrics ...:
    # 125-165 against 80 us per GET here).  A single-key command goes straight
    # to the client of the primary owning its slot in the cluster client's own
    # slot map; only a redirect or a failure takes redis-py's full route, which
    # follows MOVED and ASK, refreshes the map and retries.
    @functools.cached_property
    def _rerouted(self) -> tuple[type[BaseException], ...]:
        exceptions = _import_redis().exceptions
        return (exceptions.AskError, exceptions.TryAgainError, exceptions.ClusterDownError,
                exceptions.ConnectionError, exceptions.TimeoutError)

    def _route(self, name: str, call: Any) -> Any:
        """``call(client)`` on the client of ``name``'s primary; through the cluster
        client's full routing if the slot map may be wrong."""
        client = self._client
        if not self._layout_stale:
            nodes = client.nodes_manager.slots_cache.get(client.keyslot(name))
            node = nodes[0].redis_connection if nodes else None
            if node is not None:
                try:
                    return call(node)
                except self._rerouted:
                    pass  # the full route below finds out what changed
        return call(client)

    @network_errors_as
    def _get(self, key: str) -> bytes:
        name = self._base + key
        value = self._route(name, lambda client: client.get(name))
        if value is None:
            raise KeyError(key)
        return value  # type: ignore[no-any-return]

    @network_errors_as
    @_durable
    def _set(self, key: str, value: Buffer) -> None:
        name = self._base + key
        self._route(name, lambda client: client.set(name, value))

    @network_errors_as
    @_durable
    def _delete(self, key: str) -> None:
        name = self._base + key
        if not self._route(name, lambda client: client.delete(name)):
            raise KeyError(key)

    @network_errors_as
    def _contains(self, key: str) -> bool:
        name = self._base + key
        return bool(self._route(name, lambda client: client.exists(name)))

    @network_errors_as
    def _getsize_key(self, key: str) -> int:
        name = self._base + key
        return self._route(name, lambda client: client.strlen(name))  # type: ignore[no-any-return]

    @network_errors_as
    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        name, args = self._base + key, [start, "" if length is None else length]
        value = self._route(name, lambda client: self._range(keys=[name], args=args,
                                                             client=client))
        if value is None:
            raise KeyError(key)
        return value  # type: ignore[no-any-return]

    @network_errors_as
    def _stat(self, key: str) -> int | None:
        name = self._base + key
        size = self._route(name, lambda client: self._stat_script(keys=[name], client=client))
        return None if size < 0 else size

    # ------------------------------------------------------------ batches
    @network_errors_as
    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        self._refresh_layout_if_stale()
        names = [self._base + key for key in keys]
        values = self._mget_by_primary(names)
        if values is None:  # the slot map may be wrong: redis-py's full route
            values = self._client.mget_nonatomic(names)
        return {key: value for key, value in zip(keys, values, strict=True) if value is not None}

    def _mget_by_primary(self, names: list[str]) -> list[Any] | None:
        """The values of ``names`` (None where missing): one ``MGET`` per slot, all of
        a primary's sent at once on one of its connections, every primary's sent
        before any answer is read.  None if the slot map turns out wrong or a
        primary fails (nothing is changed by a read: the caller asks again).

        redis-py's ``mget_nonatomic`` does the same through its cluster pipeline,
        which spends about three times the client CPU (1.8 ms for 100 keys here)
        resolving each command's routing policy.
        """
        client = self._client
        slots_cache = client.nodes_manager.slots_cache
        by_primary: dict[str, tuple[Any, dict[int, list[int]]]] = {}
        for index, name in enumerate(names):
            slot = client.keyslot(name)
            nodes = slots_cache.get(slot)
            if not nodes or nodes[0].redis_connection is None:
                return None
            entry = by_primary.get(nodes[0].name)
            if entry is None:
                entry = by_primary[nodes[0].name] = (nodes[0].redis_connection, {})
            entry[1].setdefault(slot, []).append(index)
        values: list[Any] = [None] * len(names)
        sent: list[tuple[Any, Any, list[list[int]]]] = []
        failed = False
        try:
            for node, slots in by_primary.values():
                pool = node.connection_pool
                connection = pool.get_connection()
                groups = list(slots.values())
                sent.append((pool, connection, groups))
                connection.send_packed_command(connection.pack_commands(
                    [("MGET", *[names[index] for index in group]) for group in groups]))
            for _, connection, groups in sent:
                for group in groups:
                    for index, value in zip(group, connection.read_response(), strict=True):
                        values[index] = value
        except (*self._rerouted, self._response_errors):
            failed = True
        finally:
            for pool, connection, _ in sent:
                if failed:  # answers may be left unread on it
                    connection.disconnect()
                pool.release(connection)
        return None if failed else values

    @network_errors_as
    @_durable
    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        if not items:
            return
        self._refresh_layout_if_stale()
        groups = _groups_by_size(items, _MSET_BYTES)
        if self._tag is not None and len(groups) > 1:
            # One slot: several MSETs in one MULTI/EXEC on its primary.
            with self._slot_client().pipeline(transaction=True) as pipe:
                for group in groups:
                    pipe.mset({self._base + key: value for key, value in group})
                pipe.execute()
            return
        for group in groups:
            # One MSET per slot, pipelined to every primary at once.
            self._client.mset_nonatomic({self._base + key: value for key, value in group})

    @network_errors_as
    @_durable
    def _delete_many(self, keys: list[str]) -> None:
        if keys:
            self._refresh_layout_if_stale()
            self._client.delete(*[self._base + key for key in keys])  # split by slot

    @network_errors_as
    @_durable
    def _rmdir(self, prefix: str) -> None:
        for page in self._pages(prefix):
            self._client.unlink(*page)  # redis-py splits it by slot

    # ------------------------------------------------------------ renames
    @network_errors_as
    @_durable
    def _rename_key(self, src: str, dst: str) -> None:
        source, target = self._base + src, self._base + dst
        if self._client.keyslot(source) == self._client.keyslot(target):
            super()._rename_key(src, dst)
            return
        # Across slots: copy, then delete; a crash between leaves both.
        value = self._client.get(source)
        if value is None:
            raise KeyError(src)
        self._client.set(target, value)
        self._client.delete(source)

    @network_errors_as
    @_durable
    def _rename_prefix(self, src_prefix: str, dst_prefix: str) -> None:
        if self._tag is not None:  # one slot: one MULTI/EXEC of RENAMEs, as on one server
            super()._rename_prefix(src_prefix, dst_prefix)
            return
        keys = sorted(dict.fromkeys(self._decode(name) for page in self._pages(src_prefix)
                                    for name in page), key=len)
        moves = {key: dst_prefix + key[len(src_prefix):] for key in keys}
        # Copy everything (shorter keys first: see Store._rename_prefix), then
        # delete the sources that are not targets: a crash never loses a value.
        for first in range(0, len(keys), _RENAME_BATCH):
            batch = keys[first:first + _RENAME_BATCH]
            values = self._get_many(batch)
            self._set_many([(moves[key], values[key]) for key in batch if key in values])
        targets = set(moves.values())
        self._delete_many([key for key in keys if key not in targets])
