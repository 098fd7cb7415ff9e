"""RedisClusterStore: a RedisStore on a Redis Cluster, over ``client.py`` and ``cluster.py``.

``cluster.py`` holds the cluster's URLs, hash tags and per-primary SCAN;
importing this module makes ``RedisStore(url)`` give this class for a cluster
URL or client (``RedisStore._cluster_class``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from typing import Any

from ...base import Buffer, Mode
from ...errors import StoreConnectionError, StoreURLError, UnsupportedOperationError
from ...secrets import redact_url, secrets_of
from .._network import (
    DEFAULT_CONNECT_TIMEOUT,
    backend_error,
    call_translating,
    check_url_options,
    network_errors_as,
)
from . import cluster as redis_cluster
from .client import (
    _OWN_OPTIONS,
    DEFAULT_WAIT_TIMEOUT,
    _client_keywords,
    _durable,
    _import_redis,
    _init_parameters,
    _pinning_pool_class,
    client_url_options,
)
from .store import _MSET_BYTES, _SCAN_COUNT, DEFAULT_URL, RedisStore, _groups_by_size

__all__ = ["RedisClusterStore"]

# Keys copied per step of a rename across a cluster's slots.
_RENAME_BATCH = 1_000


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


RedisStore._cluster_class = RedisClusterStore
