"""Redis as a zstores Store: ``RedisStore`` (``store.py``) and ``RedisClusterStore``
(``cluster_store.py``) over their engine, ``client.py``.

``client.py`` holds what speaks redis-py: the client options a URL may carry,
the connection pool pinning a durable write's connections and the ``WAIT``
after it, and the typed errors redis-py's exceptions become; ``cluster.py``
holds Redis Cluster's URLs, hash tags and per-primary SCAN.  Neither imports
``Store``.
"""

from .client import DEFAULT_WAIT_TIMEOUT as DEFAULT_WAIT_TIMEOUT
from .client import client_url_options, glob_escape, server_of, typed_redis_error
from .cluster_store import RedisClusterStore
from .store import DEFAULT_URL as DEFAULT_URL
from .store import MAX_STRING as MAX_STRING
from .store import RedisStore

# Pickles made before this module became a package name its unpickler here.
from .store import _unpickle as _unpickle

__all__ = ["RedisClusterStore", "RedisStore", "client_url_options", "glob_escape",
           "server_of", "typed_redis_error"]
