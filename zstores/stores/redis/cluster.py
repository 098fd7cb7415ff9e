"""Redis Cluster machinery for ``RedisStore``: cluster URLs, hash tags, routing.

A Redis Cluster splits the key space into 16,384 hash slots spread over its
primaries; a key's slot is the CRC16 of its *hash tag* (the text between the
first ``{`` and the next ``}``, when not empty) or of the whole key.  A
command, script or ``MULTI``/``EXEC`` may only touch keys of one slot.

Everything here works on names and redis-py objects; it never imports
``Store`` (``store.py`` and ``cluster_store.py`` beside it hold the stores).

Examples
--------
>>> for node in split_cluster_url("redis+cluster://:pw@10.0.0.1:7000,10.0.0.2:7001/?x=1"):
...     print(node)
('redis://:pw@10.0.0.1:7000/0?x=1', '10.0.0.1', 7000)
('redis://:pw@10.0.0.2:7001/0?x=1', '10.0.0.2', 7001)
>>> store_hash_tag("{zarr}"), store_hash_tag("zarr"), store_hash_tag("a{}b{c}")
('zarr', None, None)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from ...errors import StoreURLError

__all__ = [
    "CLUSTER_SCHEMES",
    "as_cluster_url",
    "HASH_SLOTS",
    "is_cluster_node",
    "primaries_for",
    "scan_pages",
    "split_cluster_url",
    "store_hash_tag",
]

#: The number of hash slots of every Redis Cluster.
HASH_SLOTS = 16384

#: URL schemes naming a Redis Cluster, and the scheme of one node's URL.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def split_cluster_url(url: str) -> list[tuple[str, str, int]]:
    """``redis+cluster://[auth@]host:port[,host:port...]/[0][?query]``, one entry per node.

    Each entry is ``(node_url, host, port)``: the node's own URL as redis-py
    takes it (``redis://`` or ``rediss://``, the credentials and query
    kept) and its address.  Every node is a seed the client may ask for the
    cluster's layout, so one node down at open is no failure.

    Raises
    ------
    StoreURLError
        For no node, a node without a port, or a database other than 0
        (a cluster has only database 0).
    """
    scheme, _, rest = url.partition("://")
    node_scheme = CLUSTER_SCHEMES[scheme.lower()]
    netloc, slash, tail = rest.partition("/")
    if not slash:  # "host:port?query": the query hangs off the address
        netloc, question, query = netloc.partition("?")
        tail = question + query
    auth, at, hosts = netloc.rpartition("@")
    path, question, query = tail.partition("?")
    if path not in ("", "0"):
        raise StoreURLError(
            f"a Redis Cluster has only database 0, but the URL names database {path!r}: "
            f"write {scheme}://host:port,host:port/?prefix=..."
        )
    nodes = [_host_port(text, scheme) for text in hosts.split(",") if text]
    if not nodes:
        raise StoreURLError(
            f"a {scheme}:// URL names at least one node: {scheme}://host:port,host:port/")
    ending = f"?{query}" if question else ""
    return [(f"{node_scheme}://{auth}{at}{text}/0{ending}", host, port)
            for text, host, port in nodes]


def as_cluster_url(url: str) -> str:
    """A ``redis://`` or ``rediss://`` URL of cluster nodes as a ``redis+cluster://`` URL.

    A cluster URL is returned as it is; the database part (``/0``) is checked
    by ``split_cluster_url`` later.

    Examples
    --------
    >>> as_cluster_url("redis://:pw@h:7000,h:7001/0?prefix=x")
    'redis+cluster://:pw@h:7000,h:7001/0?prefix=x'
    """
    scheme, separator, rest = url.partition("://")
    for cluster_scheme, node_scheme in CLUSTER_SCHEMES.items():
        if scheme.lower() == node_scheme and separator:
            return f"{cluster_scheme}://{rest}"
    return url


def _host_port(text: str, scheme: str) -> tuple[str, str, int]:
    parsed = urlsplit(f"//{text}")
    try:
        port = parsed.port
    except ValueError:
        port = None
    if not parsed.hostname or port is None:
        raise StoreURLError(
            f"node {text!r} of a {scheme}:// URL is not host:port (every node needs its port)")
    return text, parsed.hostname, port


def store_hash_tag(prefix: str) -> str | None:
    """The hash tag every key of a store with this prefix shares, or None.

    A key is ``prefix + ":" + key``; when the prefix holds a complete,
    non-empty tag (``"{zarr}"``, ``"arrays{t1}"``), Redis hashes only that
    tag, so all the store's keys live in one slot on one primary.  A ``{``
    the prefix does not close, or an empty ``{}``, gives no shared tag.
    """
    opening = prefix.find("{")
    if opening < 0:
        return None
    closing = prefix.find("}", opening + 1)
    if closing < 0 or closing == opening + 1:
        return None
    return prefix[opening + 1:closing]


def is_cluster_node(client: Any) -> bool:
    """Whether the server a plain ``redis.Redis`` client talks to runs in cluster mode.

    ``INFO cluster`` answers ``cluster_enabled:1`` on a cluster node.  A
    server whose ACL denies ``INFO`` is taken as a plain server.
    """
    import redis

    try:
        section = client.info("cluster")
    except redis.exceptions.ResponseError:
        return False
    return bool(int(section.get("cluster_enabled", 0) or 0))


def primaries_for(cluster: Any, tag: str | None) -> list[Any]:
    """The primaries a listing must SCAN: the one owning ``tag``'s slot, else all.

    "All" is the owners of the 16,384 slots in the client's map, not its list
    of nodes: a listing that skipped a slot's owner would answer with part of
    the store.  A slot no node serves raises redis-py's ``SlotNotCoveredError``.
    """
    if tag is not None:
        return [cluster.get_node_from_key("{" + tag + "}")]
    import redis

    owners: dict[str, Any] = {}
    slots = cluster.nodes_manager.slots_cache  # slot -> [primary, replicas...]
    for slot in range(HASH_SLOTS):
        nodes = slots.get(slot)
        if not nodes:
            raise redis.exceptions.SlotNotCoveredError(
                f"slot {slot} is not served by any node the client knows of")
        owners.setdefault(nodes[0].name, nodes[0])
    return list(owners.values())


def scan_pages(cluster: Any, nodes: list[Any], pattern: bytes, count: int) -> Iterator[list[bytes]]:
    """SCAN every node in ``nodes`` for ``pattern``, one non-empty page at a time.

    Each node is walked with its own cursor through its own client (the
    node's connection pool), so a listing sees every primary's keys.
    """
    for node in nodes:
        client = node.redis_connection or cluster.get_redis_connection(node)
        cursor = 0
        while True:
            cursor, names = client.scan(cursor, match=pattern, count=count)
            if names:
                yield names
            if not cursor:
                break
