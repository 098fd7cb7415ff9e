"""Redis as a zstores Store: ``RedisStore`` and ``RedisClusterStore``."""

from .store import (
    RedisClusterStore,
    RedisStore,
    client_url_options,
    glob_escape,
    server_of,
    typed_redis_error,
)

__all__ = ["RedisClusterStore", "RedisStore", "client_url_options", "glob_escape",
           "server_of", "typed_redis_error"]
