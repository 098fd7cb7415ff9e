"""Every backend as a zstores URL: the one table the adapter and round-trip tests share.

Imported by the zarr-python 3 tests and by the zarr-python 2.18 suite (which
runs in the zarr 2 environment), so it imports nothing but the standard
library.  Network backends come from ``ZSTORES_TEST_REDIS_URL`` and
``ZSTORES_TEST_MONGODB_URL``; each use gets a fresh key prefix or database.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

#: Backends that need nothing but this machine.
LOCAL = ["memory", "directory", "nested", "zip", "dbm", "lmdb", "sqlite"]
#: Backends that need a server, named by an environment variable.
NETWORK = {"redis": "ZSTORES_TEST_REDIS_URL", "mongodb": "ZSTORES_TEST_MONGODB_URL"}
ALL = LOCAL + list(NETWORK)

_LOCAL_URLS = {
    "memory": "memory://",
    "directory": "file://{root}/data.zarr",
    "nested": "nested://{root}/nested.zarr",
    "zip": "zip://{root}/data.zip",
    "dbm": "dbm://{root}/data.dbm?open=dumb",
    "lmdb": "lmdb://{root}/data.lmdb",
    "sqlite": "sqlite://{root}/data.sqlite",
}


def _with_query(url: str, **params: str) -> str:
    query = "&".join(f"{name}={value}" for name, value in params.items())
    return url + ("&" if "?" in url else "?") + query


def missing_server(backend: str) -> str | None:
    """Why ``backend`` cannot be tested here, or None when it can."""
    variable = NETWORK.get(backend)
    if variable and not os.environ.get(variable):
        return f"{variable} is not set: no {backend} server to test against"
    return None


def backend_url(backend: str, root: Path | str) -> str:
    """A URL for a new, empty store of ``backend`` under the folder ``root`` (created)."""
    if backend in _LOCAL_URLS:
        Path(root).mkdir(parents=True, exist_ok=True)
        return _LOCAL_URLS[backend].format(root=Path(root).as_posix())
    base = os.environ[NETWORK[backend]]
    unique = "t" + uuid.uuid4().hex[:12]
    if backend == "redis":
        return _with_query(base, prefix=unique)
    return _with_query(base, database=unique, collection="zarr")
