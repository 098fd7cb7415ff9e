"""zarr-python adapters: ``zarr_store(store_or_url)`` returns what the installed zarr takes.

zarr-python 3 gets a ``zarr.abc.store.Store`` subclass (``adapters/zarr3.py``),
zarr-python 2.18 a ``zarr.storage.BaseStore`` subclass (``adapters/zarr2.py``);
both wrap a ``zstores.Store`` and call only its public methods.  zarr is
imported only when an adapter is asked for, so the core never depends on it.

What the adapters share lives in ``adapters/common.py`` (re-exported here).
"""

from __future__ import annotations

import os
from typing import Any

from ..base import Mode, Store, check_mode
from .common import (  # noqa: F401 - re-exported: what the adapters share
    Adapter,
    TransactionSlot,
    keys_with_prefix,
    refuse_without_transactions,
    size_under,
)

__all__ = ["zarr_store"]

#: What to do when zarr-python, the optional package the adapters serve, is missing.
MISSING_ZARR = "zarr_store needs zarr-python: pip install 'zstores[zarr]'"


def zarr_store(
    store_or_url: Store | str | os.PathLike[str], *, mode: Mode = "a", transaction: bool = False
) -> Any:
    """Wrap a store for the installed zarr-python (2.18 or 3.x).

    Parameters
    ----------
    store_or_url : zstores.Store, str or os.PathLike
        A store, or a URL or path for ``zstores.open_store``.  A store opened
        here from a URL belongs to the adapter: closing the adapter closes it.
        A store passed in stays the caller's to close.
    mode : {"a", "r", "r+", "w", "w-"}
        The mode a URL is opened with.  ``"r"`` also makes the adapter
        read-only over a writable store; otherwise the adapter is read-only
        exactly when the store is.
    transaction : bool
        Refuse, here and now, a store that cannot run transactions, so that
        ``with adapter.transaction():`` later cannot fail for that reason.
        Every adapter has ``transaction()``; this only checks early.  See
        docs/transactions.md, "Zarr arrays".

    Raises
    ------
    ModuleNotFoundError
        If zarr-python is not installed (``pip install 'zstores[zarr]'``).
    zstores.UnsupportedOperationError
        With ``transaction=True``, if the store has no transactions (a store
        opened here from a URL is closed again first).

    Returns
    -------
    zarr.abc.store.Store or zarr.storage.BaseStore
        ``zstores.adapters.zarr3.ZarrStore`` under zarr-python 3,
        ``zstores.adapters.zarr2.Zarr2Store`` under zarr-python 2.18.

    Examples
    --------
    >>> import os, tempfile, numpy as np, zarr
    >>> from zstores.adapters import zarr_store
    >>> path = os.path.join(tempfile.mkdtemp(), "data.lmdb")
    >>> array = zarr.open_array(zarr_store(f"lmdb://{path}"), mode="w",
    ...                         shape=(4, 4), chunks=(2, 2), dtype="i4")
    >>> array[:] = np.arange(16).reshape(4, 4)
    >>> int(zarr.open_array(zarr_store(path, mode="r"))[3, 3])
    15
    """
    check_mode(mode)
    try:
        import zarr
    except ModuleNotFoundError as error:
        if error.name != "zarr":
            raise  # zarr is there but something it needs is not: its own message says what
        raise ModuleNotFoundError(MISSING_ZARR, name="zarr") from None

    major = int(zarr.__version__.split(".")[0])
    if major >= 3:
        from .zarr3 import ZarrStore as adapter
    elif major == 2:
        from .zarr2 import Zarr2Store as adapter  # type: ignore[assignment]
    else:
        raise ImportError(f"zstores supports zarr-python 2.18 and 3, not {zarr.__version__}")
    store, owned = open_backend(store_or_url, mode)
    if transaction and not store.supports_transactions:
        if owned:
            store.close()
        refuse_without_transactions(store, "zarr_store(transaction=True)")
    read_only = True if mode == "r" else None
    return adapter(store, read_only=read_only, owns_store=owned)


def open_backend(store_or_url: Store | str | os.PathLike[str], mode: str) -> tuple[Store, bool]:
    """The store to wrap, and whether the adapter owns (and so closes) it."""
    if isinstance(store_or_url, Store):
        return store_or_url, False
    if isinstance(store_or_url, (str, os.PathLike)):
        from ..urls import open_store

        return open_store(store_or_url, mode=mode), True  # type: ignore[arg-type]
    raise TypeError(
        "zarr_store takes a zstores.Store, a URL or a path, not "
        f"{type(store_or_url).__name__} (wrap a plain mapping in zstores.MemoryStore first)"
    )
