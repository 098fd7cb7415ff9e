"""Checking stored Zarr v3 chunks with zarr-python 3's own codecs, one value at a time.

``verify`` must say *which* stored value is damaged and *how* (a failed
checksum, a broken shard index, an inner chunk of a shard that does not
decode, a chunk of the wrong size), so it cannot simply read the array and
catch whatever zarr raises.  It opens each array through zarr's public API
(``zarr.open_array`` over ``zstores.zarr_store``), takes the codec objects zarr
built from the metadata (``Array.metadata.codecs``), and runs them itself,
codec by codec, through each codec's public ``decode`` and
``resolve_metadata`` (``zarr.abc.codec``).  Every codec zarr-python reads is
therefore decoded exactly as zarr decodes it, numcodecs' v3 codecs included;
only the shard layout (an index of ``(offset, length)`` pairs, fixed by the
sharding specification) is read here, so that each inner chunk is checked on
its own.

Works with zarr-python 3.1 through 3.4 (the internals it avoids changed in
between: chunk grids and ``get_chunk_spec`` moved).
"""

from __future__ import annotations

import asyncio
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base import Store
from ._inflate import inflates_past

__all__ = ["ChunkChecker", "INSTALL_HINT", "zarr_v3_problem"]

#: What to install to decode v3 chunks.
INSTALL_HINT = "pip install 'zstores[zarr]'"
_EMPTY = 2**64 - 1  # offset and length of an inner chunk the shard does not hold
_NUMCODECS_WARNING = "Numcodecs codecs are not in the Zarr version 3 specification"
_MESSAGE_LIMIT = 200  # characters of a codec's error message kept in a finding


def zarr_v3_problem() -> str | None:
    """Why v3 chunks cannot be decoded here, or ``None`` when zarr-python 3 is installed.

    Examples
    --------
    >>> zarr_v3_problem() is None  # the test environment has zarr-python 3
    True
    """
    try:
        import zarr
    except ImportError:
        return "zarr-python is not installed"
    if int(zarr.__version__.split(".")[0]) < 3:
        return f"zarr-python {zarr.__version__} reads Zarr v2 only"
    return None


def _name(codec: Any) -> str:
    """A codec's name as its metadata spells it (``"gzip"``, ``"numcodecs.zlib"`` ...)."""
    try:
        return str(codec.to_dict().get("name"))
    except Exception:  # noqa: BLE001 - a name is only for messages
        return type(codec).__name__


def _why(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if len(text) > _MESSAGE_LIMIT:
        text = text[:_MESSAGE_LIMIT] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _Damage(Exception):
    """A finding: ``kind`` is one of verify's problem kinds."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


@dataclass
class _Stages:
    """A codec chain split as the v3 specification orders it, each with its input spec."""

    array_array: list[tuple[Any, Any]]  # (codec, spec it decodes to)
    array_bytes: tuple[Any, Any]
    bytes_bytes: list[tuple[Any, Any]]


def _stages(codecs: Sequence[Any], spec: Any) -> _Stages:
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec

    array_array, bytes_bytes, array_bytes = [], [], None
    for codec in codecs:
        if isinstance(codec, ArrayArrayCodec):
            array_array.append((codec, spec))
        elif isinstance(codec, ArrayBytesCodec):
            array_bytes = (codec, spec)
        else:
            bytes_bytes.append((codec, spec))
        spec = codec.resolve_metadata(spec)
    if array_bytes is None:  # zarr refuses to open such an array; kept for clarity
        raise _Damage("bad_metadata", "the codecs have no array-to-bytes codec")
    return _Stages(array_array, array_bytes, bytes_bytes)


async def _decode_one(codec: Any, data: Any, spec: Any) -> Any:
    [decoded] = list(await codec.decode([(data, spec)]))
    return decoded


def _inflate_limit(spec: Any) -> int | None:
    """The most bytes a stored value of ``spec``'s shape may inflate to (``None``: no bound).

    Twice the chunk's bytes and 64 KiB leave room for what codecs add (a
    shard's index, checksums, headers, an incompressible inner chunk);
    variable-length data types have no size to bound by.
    """
    native = spec.dtype.to_native_dtype()
    if not native.itemsize or native.kind in "OT":  # objects, variable-length strings
        return None
    return 2 * math.prod(spec.shape) * native.itemsize + (1 << 16)


def _refuse_inflating(codec: Any, data: Any, limit: int, what: str) -> None:
    """Raise ``_Damage`` before a codec inflates ``data`` past ``limit`` bytes."""
    size = inflates_past(_name(codec), data.to_bytes(), limit)
    if size is None:
        return
    stated = "a size it does not state (zstd inflates that without bound)" if size < 0 \
        else f"more than {limit:,} bytes"
    raise _Damage("wrong_size", f"{what}{_name(codec)} inflates it to {stated}, past what a "
                  "chunk of this array can hold: not decoded (a decompression bomb, or a "
                  "value of another array)")


class ChunkChecker:
    """Decodes stored values of one v3 array and says what is wrong with each.

    Parameters
    ----------
    store : zstores.Store
        The open store (read through ``zstores.zarr_store``, read-only).
    path : str
        The array's path in the store.

    Raises
    ------
    ValueError
        zarr-python cannot open the array (the message says why).

    Examples
    --------
    >>> import numpy as np, zarr, zstores
    >>> store = zstores.MemoryStore()
    >>> array = zarr.create_array(zstores.zarr_store(store), shape=(4,), chunks=(2,),
    ...                           dtype="i4", compressors=zarr.codecs.GzipCodec())
    >>> array[:] = np.arange(4)
    >>> checker = ChunkChecker(store, "")
    >>> found = checker.problems({"c/0": store["c/0"], "c/1": b"garbage"})
    >>> list(found), found["c/1"][0], found["c/1"][1].startswith("gzip fails to decode")
    (['c/1'], 'decode_error', True)
    """

    def __init__(self, store: Store, path: str) -> None:
        import zarr
        from zarr.core.array_spec import ArrayConfig, ArraySpec
        from zarr.core.buffer import default_buffer_prototype

        from ..adapters import zarr_store

        try:
            with warnings.catch_warnings():  # said to writers; the data is already written
                warnings.filterwarnings("ignore", message=_NUMCODECS_WARNING)
                array = zarr.open_array(zarr_store(store, mode="r"), path=path, mode="r",
                                        zarr_format=3)
        except Exception as error:  # zarr raises many kinds
            raise ValueError(f"zarr-python cannot open it: {_why(error)}") from error
        self._prototype = default_buffer_prototype()
        self._config = ArrayConfig(order="C", write_empty_chunks=False)
        self._spec_class = ArraySpec
        metadata = array.metadata
        self.codecs = tuple(metadata.codecs)
        self.chunk_shape = tuple(array.shards or array.chunks)  # what one stored value holds
        self.spec = ArraySpec(self.chunk_shape, metadata.dtype, metadata.fill_value,
                              self._config, self._prototype)

    def problems(self, values: dict[str, bytes]) -> dict[str, tuple[str, str]]:
        """``{key: (kind, message)}`` for each damaged value; good ones are left out.

        Runs its own event loop: call it from a worker thread, not from a
        coroutine.
        """
        return asyncio.run(self._problems(values))

    async def _problems(self, values: dict[str, bytes]) -> dict[str, tuple[str, str]]:
        found = {}
        for key, raw in values.items():
            try:
                await self._check(bytes(raw), self.codecs, self.spec)
            except _Damage as damage:
                found[key] = (damage.kind, damage.message)
        return found

    # ------------------------------------------------------------ one value
    async def _check(self, raw: bytes, codecs: Sequence[Any], spec: Any) -> None:
        """Decode ``raw`` through ``codecs``; raise ``_Damage`` saying what failed."""
        stages = _stages(codecs, spec)
        data = await self._undo_bytes_codecs(self._prototype.buffer.from_bytes(raw),
                                             stages.bytes_bytes, "", _inflate_limit(spec))
        codec, codec_spec = stages.array_bytes
        if _name(codec) == "sharding_indexed":
            await self._check_shard(data.to_bytes(), codec, codec_spec)
            return  # every inner chunk decoded; the shard as a whole is their sum
        self._check_size(data, codec, codec_spec)
        try:
            array = await _decode_one(codec, data, codec_spec)
            for codec, codec_spec in reversed(stages.array_array):
                array = await _decode_one(codec, array, codec_spec)
        except Exception as error:  # noqa: BLE001 - any codec failure is the finding
            raise _Damage("decode_error", f"{_name(codec)} fails to decode: "
                          f"{_why(error)}") from None
        if tuple(array.shape) != tuple(spec.shape):
            raise _Damage("wrong_size", f"decodes to shape {tuple(array.shape)}; a chunk "
                          f"has shape {tuple(spec.shape)}")

    async def _undo_bytes_codecs(self, data: Any, stages: list[tuple[Any, Any]],
                                 what: str, limit: int | None = None) -> Any:
        for codec, spec in reversed(stages):
            if limit is not None:
                _refuse_inflating(codec, data, limit, what)
            try:
                data = await _decode_one(codec, data, spec)
            except Exception as error:  # noqa: BLE001 - any codec failure is the finding
                if _name(codec) == "crc32c":
                    raise _Damage("shard_index" if what else "checksum",
                                  f"{what}fails its crc32c checksum (overwritten or cut "
                                  "short)") from None
                raise _Damage("shard_index" if what else "decode_error",
                              f"{what}{_name(codec)} fails to decode: {_why(error)}") from None
            if data is None:
                raise _Damage("decode_error", f"{what}{_name(codec)} decodes to nothing")
        return data

    def _check_size(self, data: Any, codec: Any, spec: Any) -> None:
        """The ``bytes`` codec needs exactly shape x item size bytes: say so plainly."""
        if _name(codec) != "bytes":
            return
        itemsize = spec.dtype.to_native_dtype().itemsize
        expected = math.prod(spec.shape) * itemsize
        if itemsize and len(data) != expected:
            raise _Damage("wrong_size", f"decodes to {len(data)} bytes; a chunk of shape "
                          f"{tuple(spec.shape)} and data type {spec.dtype.to_native_dtype()} "
                          f"is {expected}")

    # --------------------------------------------------------------- shards
    async def _check_shard(self, shard: bytes, codec: Any, spec: Any) -> None:
        inner_shape = tuple(codec.chunk_shape)
        per_shard = tuple(s // c for s, c in zip(spec.shape, inner_shape, strict=True))
        offsets = await self._shard_index(shard, codec, spec, per_shard)
        inner_spec = self._spec_class(inner_shape, spec.dtype, spec.fill_value, self._config,
                                      self._prototype)
        for position, (offset, length) in zip(np.ndindex(*per_shard), offsets, strict=False):
            if offset == _EMPTY and length == _EMPTY:
                continue  # not stored in this shard: reads as the fill value
            where = f"inner chunk {position} of the shard: "
            if offset + length > len(shard):
                raise _Damage("shard_index", f"the shard index points {where.rstrip(': ')} "
                              f"past the end ({offset} + {length} > {len(shard)} bytes)")
            try:
                await self._check(shard[offset:offset + length], codec.codecs, inner_spec)
            except _Damage as damage:
                raise _Damage(damage.kind, where + damage.message) from None

    async def _shard_index(self, shard: bytes, codec: Any, spec: Any,
                           per_shard: tuple[int, ...]) -> np.ndarray:
        """The ``(offset, length)`` pairs of a shard, its index checked (checksum, size)."""
        count = math.prod(per_shard)
        stages = _stages(codec.index_codecs, spec)
        size = 16 * count
        for index_codec, index_spec in stages.bytes_bytes:
            size = index_codec.compute_encoded_size(size, index_spec)
        if len(shard) < size:
            raise _Damage("shard_index", f"{len(shard)} bytes, shorter than its shard index "
                          f"({size} bytes): cut short")
        at_start = str(getattr(codec.index_location, "value", codec.index_location)) == "start"
        encoded = shard[:size] if at_start else shard[len(shard) - size:]
        data = await self._undo_bytes_codecs(self._prototype.buffer.from_bytes(encoded),
                                             stages.bytes_bytes, "the shard index ")
        endian = (stages.array_bytes[0].to_dict().get("configuration") or {}).get(
            "endian", "little")
        raw = data.to_bytes()
        if len(raw) != 16 * count:
            raise _Damage("shard_index", f"the shard index holds {len(raw)} bytes, not "
                          f"{16 * count}")
        return np.frombuffer(raw, dtype=("<" if endian == "little" else ">") + "u8") \
            .reshape(count, 2).tolist()
