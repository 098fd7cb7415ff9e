"""RedisStore: each key a Redis string named ``prefix + ":" + key``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ..base import Buffer, Mode, Store
from ..errors import StoreConnectionError
from ..keys import check_utf8_key
from ..urls import redact_url
from ._network import connection_error, network_errors_as, secrets_of

__all__ = ["RedisStore", "glob_escape"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"

#: Redis' largest string (``proto-max-bulk-len``'s default and hard limit).
MAX_STRING = 512 << 20

# Keys asked for per SCAN step; each step is one round trip.
_SCAN_COUNT = 1000

# Characters SCAN's MATCH treats as glob syntax.
_GLOB = re.compile(rb"([*?\[\]\\^-])")

# A byte range in one round trip: Python slice semantics (a negative start
# counts from the end, a length past the end is clipped) and nil for a missing
# key, which GETRANGE alone cannot tell from an empty value.
_RANGE_SCRIPT = """
local size = redis.call('STRLEN', KEYS[1])
if size == 0 and redis.call('EXISTS', KEYS[1]) == 0 then return false end
local first = tonumber(ARGV[1])
if first < 0 then first = math.max(size + first, 0) end
local stop = size
if ARGV[2] ~= '' then stop = math.min(first + tonumber(ARGV[2]), size) end
if first >= stop then return '' end
return redis.call('GETRANGE', KEYS[1], first, stop - 1)
"""

# Bytes of values per MSET: the server reads a whole command into its query
# buffer (at most 1 GiB) before running it, so larger batches become several
# MSETs in one MULTI/EXEC transaction.
_MSET_BYTES = 64 << 20

def _import_redis() -> Any:
    try:
        import redis
    except ImportError:  # pragma: no cover - the extra is installed in tests
        raise ImportError(
            "RedisStore needs the redis package: pip install 'zstores[redis]'"
        ) from None
    return redis


def glob_escape(text: bytes) -> bytes:
    """Escape SCAN MATCH's glob syntax so ``text`` matches only itself."""
    return _GLOB.sub(rb"\\\1", text)


def _groups_by_size(items: list[tuple[str, Buffer]], limit: int) -> list[list[tuple[str, Buffer]]]:
    """Split ``items`` into consecutive groups whose values add up to at most
    ``limit`` bytes (a larger value gets a group of its own)."""
    groups: list[list[tuple[str, Buffer]]] = [[]]
    size = 0
    for key, value in items:
        if groups[-1] and size + len(value) > limit:
            groups.append([])
            size = 0
        groups[-1].append((key, value))
        size += len(value)
    return groups


# ------------------------------------------------------------------- the store
class RedisStore(Store):
    """Keys and values as Redis strings named ``prefix + ":" + key``.

    The layout of zarr-python 2.18's ``RedisStore``, so either library reads
    what the other wrote.  Every operation is one round trip or a few:
    ``getitems`` is one ``MGET``; ``setitems`` is one ``MSET`` (one ``MULTI``/
    ``EXEC`` pipeline of several above 64 MiB of values), so other clients see
    all of the batch or none of it; ``delitems``
    is one ``DEL``; a key ``rename`` is Redis' atomic ``RENAME``; ``get_range``
    reads the range with ``GETRANGE`` on the server.  Listing walks ``SCAN``
    with ``MATCH`` on this store's escaped prefix (so ``*``, ``?`` and ``[`` in
    names match only themselves), never the blocking ``KEYS``; ``listdir``,
    ``rmdir``, ``getsize``, ``len`` and ``clear`` handle each SCAN page of up
    to 1,000 keys in one round trip and touch no key outside the prefix.

    Parameters
    ----------
    url : str or redis.Redis
        A ``redis://``, ``rediss://`` (TLS) or ``unix://`` URL as
        ``redis.Redis.from_url`` takes it, password included
        (``redis://:secret@host:6379/0``); or a ready ``redis.Redis`` client,
        which the store uses but never closes.
    prefix : str
        Every key is stored as ``prefix + ":" + key`` (zarr-python 2's
        default prefix is ``"zarr"`` too).  Stores whose prefixes nest
        (``"a"`` and ``"a:b"``) see each other's keys, as in zarr-python 2.
    mode : {"a", "r", "r+", "w", "w-"}
        A store *exists* when at least one key starts with ``prefix + ":"``:
        ``"r"`` and ``"r+"`` require one, ``"w-"`` refuses one, ``"w"``
        deletes every key under the prefix.  Mode ``"r"`` refuses writes
        before any round trip.
    **client_kwargs
        Passed to ``redis.Redis.from_url`` (``socket_timeout``,
        ``ssl_ca_certs``, ``ssl_cert_reqs`` ...); only with a URL.

    Notes
    -----
    A password never appears in ``repr``, in error messages or in logs; it is
    kept (in the URL) for pickling.  A store pickles its URL, prefix and
    options, never a connection, so it can be sent to worker processes
    (``supports_process_writers``) and reopens with mode ``"a"`` (``"r"`` if
    read-only); a store built from a ready client cannot
    be pickled (``TypeError``), because a client's credentials and options
    cannot be recovered faithfully.  When the server is down, restarting or
    refuses the credentials, the call raises ``StoreConnectionError`` (a
    ``ConnectionError``) naming the URL without its password; the next call
    reconnects by itself.  Values are limited to Redis' 512 MiB strings
    (``max_value_size``), checked before anything is sent.

    Examples
    --------
    >>> from zstores import RedisStore                    # doctest: +SKIP
    >>> store = RedisStore("redis://127.0.0.1:6379/0", prefix="demo")  # doctest: +SKIP
    >>> store.setitems({"a/.zarray": b"{}", "a/0.0": b"chunk"})        # doctest: +SKIP
    >>> store.listdir("a"), store.get_range("a/0.0", -3)  # doctest: +SKIP
    (['.zarray', '0.0'], b'unk')
    """

    supports_range_reads = True
    supports_process_writers = True
    max_value_size = MAX_STRING

    def __init__(
        self,
        url: str | Any = DEFAULT_URL,
        *,
        prefix: str = "zarr",
        mode: Mode = "a",
        **client_kwargs: Any,
    ) -> None:
        super().__init__(mode=mode)
        redis = _import_redis()
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"invalid prefix {prefix!r}: the prefix option must be a non-empty str")
        self._prefix = prefix
        self._base = prefix + ":"
        self._base_length = len(self._base.encode("utf-8"))
        self._client_kwargs = client_kwargs
        self._network_errors = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
        self._response_errors = redis.exceptions.ResponseError
        if isinstance(url, str):
            self._url: str | None = url
            self._owns_client = True
            self._client = redis.Redis.from_url(url, **client_kwargs)
        elif isinstance(url, redis.Redis):
            if client_kwargs:
                raise ValueError(
                    f"client options {sorted(client_kwargs)} apply only when the store "
                    "is built from a URL, not from a ready redis.Redis client"
                )
            self._url = None
            self._owns_client = False
            self._client = url
        else:
            raise TypeError(f"url must be a str or a redis.Redis client, not {type(url).__name__}")
        if self._client.connection_pool.connection_kwargs.get("decode_responses"):
            raise ValueError("RedisStore needs a client with decode_responses=False (values are bytes)")
        self._where = self._redacted_url()
        self._range = self._client.register_script(_RANGE_SCRIPT)
        if self._mode in ("r", "r+", "w-"):
            self._check_existence(self._exists())
        self._clear_if_mode_w()

    # ------------------------------------------------------------- helpers
    def _redacted_url(self) -> str:
        if self._url is not None:
            return redact_url(self._url)
        options = self._client.connection_pool.connection_kwargs
        if "path" in options:
            return f"unix://{options['path']}?db={options.get('db', 0)}"
        return f"redis://{options.get('host')}:{options.get('port')}/{options.get('db', 0)}"

    def _connection_error(self, error: BaseException) -> StoreConnectionError:
        secrets = secrets_of(self._url) if self._url else []
        password = self._client.connection_pool.connection_kwargs.get("password")
        if password:
            secrets.append(password)
        return connection_error(type(self).__name__, self._describe(), secrets, error)

    def _name(self, key: str) -> str:
        return self._base + key

    def _pattern(self, prefix: str) -> bytes:
        return glob_escape((self._base + prefix).encode("utf-8")) + b"*"

    def _pages(self, prefix: str) -> Iterator[list[bytes]]:
        """Full Redis names under ``prefix``, one SCAN page at a time (may repeat names)."""
        pattern, cursor = self._pattern(prefix), 0
        while True:
            cursor, names = self._client.scan(cursor, match=pattern, count=_SCAN_COUNT)
            if names:
                yield names
            if not cursor:
                return

    def _decode(self, name: bytes) -> str:
        return name[self._base_length:].decode("utf-8")

    @network_errors_as
    def _exists(self) -> bool:
        return any(True for _ in self._pages(""))

    # ------------------------------------------------------------ primitives
    def _key(self, key: str) -> str:
        return check_utf8_key(super()._key(key))

    @network_errors_as
    def _get(self, key: str) -> bytes:
        value = self._client.get(self._base + key)
        if value is None:
            raise KeyError(key)
        return value

    @network_errors_as
    def _set(self, key: str, value: Buffer) -> None:
        self._client.set(self._base + key, value)

    @network_errors_as
    def _delete(self, key: str) -> None:
        if not self._client.delete(self._base + key):
            raise KeyError(key)

    @network_errors_as
    def _contains(self, key: str) -> bool:
        return bool(self._client.exists(self._base + key))

    @network_errors_as
    def _list_prefix(self, prefix: str) -> list[str]:
        names: dict[bytes, None] = {}
        for page in self._pages(prefix):
            names.update(dict.fromkeys(page))
        return [self._decode(name) for name in names]

    # -------------------------------------------------------------- fast paths
    @network_errors_as
    def _get_range(self, key: str, start: int, length: int | None) -> bytes:
        value = self._range(
            keys=[self._base + key], args=[start, "" if length is None else length],
            client=self._client,
        )
        if value is None:
            raise KeyError(key)
        return value

    @network_errors_as
    def _get_many(self, keys: list[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        values = self._client.mget([self._base + key for key in keys])
        return {key: value for key, value in zip(keys, values) if value is not None}

    @network_errors_as
    def _set_many(self, items: list[tuple[str, Buffer]]) -> None:
        if not items:
            return
        groups = _groups_by_size(items, _MSET_BYTES)
        if len(groups) == 1:
            self._client.mset({self._base + key: value for key, value in groups[0]})
            return
        with self._client.pipeline(transaction=True) as pipe:
            for group in groups:
                pipe.mset({self._base + key: value for key, value in group})
            pipe.execute()

    @network_errors_as
    def _delete_many(self, keys: list[str]) -> None:
        if keys:
            self._client.delete(*[self._base + key for key in keys])

    @network_errors_as
    def _rmdir(self, prefix: str) -> None:
        for page in self._pages(prefix):
            self._client.unlink(*page)

    @network_errors_as
    def _getsize_key(self, key: str) -> int:
        return self._client.strlen(self._base + key)

    @network_errors_as
    def _getsize_prefix(self, prefix: str) -> int:
        seen: set[bytes] = set()
        total = 0
        for page in self._pages(prefix):
            fresh = [name for name in dict.fromkeys(page) if name not in seen]
            seen.update(fresh)
            with self._client.pipeline(transaction=False) as pipe:
                for name in fresh:
                    pipe.strlen(name)
                total += sum(pipe.execute())
        return total

    @network_errors_as
    def _rename_key(self, src: str, dst: str) -> None:
        try:
            self._client.rename(self._base + src, self._base + dst)
        except self._response_errors as error:
            if "no such key" in str(error).lower():
                raise KeyError(src) from None
            raise

    @network_errors_as
    def _rename_prefix(self, src_prefix: str, dst_prefix: str) -> None:
        keys = [self._decode(name) for page in self._pages(src_prefix) for name in page]
        # When the source lies inside the destination a target can be another
        # source key; its target is shorter, so moving shorter keys first
        # renames every source before anything overwrites it.
        moves = sorted(dict.fromkeys(keys), key=len)
        with self._client.pipeline(transaction=True) as pipe:
            for key in moves:
                pipe.rename(self._base + key, self._base + dst_prefix + key[len(src_prefix):])
            results = pipe.execute(raise_on_error=False)
        for result in results:
            # A key deleted by another client since the SCAN is simply gone.
            if isinstance(result, Exception) and "no such key" not in str(result).lower():
                raise result

    # ------------------------------------------------------------- lifecycle
    def _close(self) -> None:
        if self._owns_client:
            self._client.close()

    @property
    def prefix(self) -> str:
        """The prefix every key is stored under (without the ``:``)."""
        return self._prefix

    @property
    def client(self) -> Any:
        """The ``redis.Redis`` client the store talks through."""
        return self._client

    def _location(self) -> Any:
        options = self._client.connection_pool.connection_kwargs
        server = options.get("path") or (options.get("host"), options.get("port"))
        return ("redis", server, options.get("db", 0), self._prefix)

    def _describe(self) -> str:
        return f"{self._where} prefix {self._prefix!r}"

    def _mode_after_pickle(self) -> str:
        # A prefix with no keys does not exist, so even "r+" reopens as "a".
        return "r" if self._mode == "r" else "a"

    def _params(self) -> dict[str, Any]:
        if self._url is None:
            raise TypeError(
                f"cannot pickle {self!r}: it was built from a ready redis.Redis client, "
                "whose credentials and options cannot be recovered; build the store from "
                "a URL (RedisStore(url, prefix=..., **client_kwargs)) to pickle it"
            )
        return {"url": self._url, "prefix": self._prefix, **self._client_kwargs}
