"""The old path of ``zstores.stores.redis.cluster``: Redis Cluster URLs, hash tags, routing."""

from .redis.cluster import (
    CLUSTER_SCHEMES,
    HASH_SLOTS,
    as_cluster_url,
    is_cluster_node,
    primaries_for,
    scan_pages,
    split_cluster_url,
    store_hash_tag,
)

__all__ = ["CLUSTER_SCHEMES", "HASH_SLOTS", "as_cluster_url", "is_cluster_node",
           "primaries_for", "scan_pages", "split_cluster_url", "store_hash_tag"]
