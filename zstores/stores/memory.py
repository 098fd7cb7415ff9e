"""MemoryStore: a dict in this process."""

from __future__ import annotations

from collections.abc import Iterable

from ..base import Buffer, Mode, Store

__all__ = ["MemoryStore"]


class MemoryStore(Store):
    """Keys and values in a Python dict; gone when the object is.

    Pickling copies the data.  Thread-safe: every primitive is one dict
    operation, which the interpreter makes atomic.

    Parameters
    ----------
    mode : {"a", "r", "r+", "w", "w-"}
        A new MemoryStore is always empty, so the modes differ only in that
        ``"r"`` refuses writes.

    Examples
    --------
    >>> from zstores import MemoryStore
    >>> store = MemoryStore()
    >>> store["foo/.zgroup"] = b'{"zarr_format": 2}'
    >>> store.listdir()
    ['foo']
    """

    blocking = False

    persistent = False

    def __init__(self, *, mode: Mode = "a") -> None:
        super().__init__(mode=mode)
        self._data: dict[str, bytes] = {}

    def _get(self, key: str) -> bytes:
        return self._data[key]

    def _set(self, key: str, value: Buffer) -> None:
        self._data[key] = bytes(value)

    def _delete(self, key: str) -> None:
        del self._data[key]

    def _contains(self, key: str) -> bool:
        return key in self._data

    def _list_prefix(self, prefix: str) -> Iterable[str]:
        if not prefix:
            return list(self._data)
        return [key for key in list(self._data) if key.startswith(prefix)]

    def _getsize_key(self, key: str) -> int:
        return len(self._data[key])

    def _stat(self, key: str) -> int | None:
        value = self._data.get(key)
        return None if value is None else len(value)

    def _len(self) -> int:
        return len(self._data)

    def _clear(self) -> None:
        self._data.clear()
