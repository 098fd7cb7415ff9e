"""Running zarr-python 3's own ``zarr.testing.store.StoreTests`` without pytest-asyncio."""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any


def run_async_tests(cls: type) -> type:
    """Run zarr's ``async def`` tests and fixtures on an event loop of their own.

    zarr's suite expects pytest-asyncio; this gives each async test a fresh
    loop with ``asyncio.run`` instead, leaving the test bodies untouched.
    """
    for name in dir(cls):
        test = getattr(cls, name)
        if name.startswith("test_") and inspect.iscoroutinefunction(test):
            setattr(cls, name, _synchronous(test))
    return cls


def _synchronous(test: Any) -> Any:
    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(test(*args, **kwargs))

    return run
