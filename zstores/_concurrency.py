"""How many threads zstores calls one store from at once.

The zarr-python 3 adapter runs a blocking store's calls on this many worker
threads (as many as asyncio's default executor, which zarr's LocalStore
uses); a network store whose connection pool is smaller would make the
surplus calls fail, so the stores refuse such a pool at open.

Examples
--------
>>> import os
>>> ADAPTER_THREADS == min(32, (os.cpu_count() or 1) + 4)
True
"""

from __future__ import annotations

import os

__all__ = ["ADAPTER_THREADS"]

#: Threads the adapters call a store from at once: ``min(32, cores + 4)``.
ADAPTER_THREADS = min(32, (os.cpu_count() or 1) + 4)
