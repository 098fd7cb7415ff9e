"""RedisStore: each key a Redis string named ``prefix + ":" + key``.

The store over its engine, ``client.py`` (redis-py's clients, durable
writes, typed errors); ``cluster_store.py`` builds ``RedisClusterStore`` on it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote

from ..._concurrency import ADAPTER_THREADS
from ...base import Buffer, Mode, Store, Version
from ...errors import StoreConnectionError, StoreURLError, TransactionConflictError
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
from .client import (
    _OWN_OPTIONS,
    DEFAULT_WAIT_TIMEOUT,
    _check_wait,
    _client_keywords,
    _close_client,
    _durable,
    _import_redis,
    _pinning_pool_class,
    client_url_options,
    glob_escape,
    server_of,
    typed_redis_error,
)

if TYPE_CHECKING:
    from ...transactions import ChangeSet

__all__ = ["DEFAULT_URL", "MAX_STRING", "RedisStore"]

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
# Names per UNLINK of a commit's deleted keys.
_UNLINK_BATCH = 10_000

# How often a commit whose watched keys were written meanwhile checks its
# reads again before giving up: each retry means another client wrote one of
# the keys read (perhaps with the same value) between the check and EXEC.
_COMMIT_ATTEMPTS = 20


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
    #: What a cluster URL or client makes: RedisClusterStore, set by
    #: cluster_store.py (built on this class, so this module does not import it;
    #: the package imports both).
    _cluster_class: ClassVar[type[RedisStore]]

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
            cls = RedisStore._cluster_class
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
