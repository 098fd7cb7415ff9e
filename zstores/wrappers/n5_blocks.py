"""N5 data blocks <-> Zarr format 2 chunks: the byte translation ``N5Store`` applies.

An N5 block is a header and the block's values, big-endian, compressed as
the dataset's ``compression`` says::

    uint16 mode          0 default, 1 varlength, 2 object
    uint16 rank
    uint32 size[rank]    the block's shape, fastest-varying dimension first
    uint32 count         varlength mode only: the number of values
    ...                  the compressed values

A block at the edge of a dataset may be smaller than ``blockSize`` (the N5
Java library crops them; tensorstore and zarr-python 2 write them whole).
The Zarr view's chunk is always whole, little-endian, and compressed with the
compressor the view's ``.zarray`` names (``zstores.metadata.n5``): reading
pads a cropped block with zeros, writing writes the whole chunk in default
mode, as tensorstore and zarr-python 2 do.

Chunks handed to a Zarr reader are compressed at the fastest setting of the
view's compressor (gzip level 0, blosc clevel 0 ...): the reader decodes
them with the same codec at any level, and the store spends no time on a
compression the reader undoes at once.

Pure functions over bytes and numpy arrays; a block that cannot be read is a
``CorruptValueError`` naming the key.

Examples
--------
>>> import numpy as np
>>> spec = BlockSpec.of({"dimensions": [5, 4], "blockSize": [3, 2], "dataType": "uint16",
...                      "compression": {"type": "raw"}}, "a/attributes.json")
>>> spec.chunks, spec.dtype.str
((2, 3), '<u2')
>>> block = encode_block(np.arange(6, dtype="<u2").tobytes(), spec, "a/0.0")
>>> block[:12].hex(" ", 2)
'0000 0002 0000 0003 0000 0002'
>>> decode_block(block, spec, "a/0.0").tolist()
[[0, 1, 2], [3, 4, 5]]
"""

from __future__ import annotations

import gzip
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numcodecs
import numpy as np
from numcodecs.abc import Codec

from ..errors import CorruptValueError, InvalidValueError
from ..metadata import n5 as n5_metadata

__all__ = [
    "DEFAULT_MODE",
    "VARLENGTH_MODE",
    "BlockSpec",
    "decode_block",
    "decode_zarr_chunk",
    "encode_block",
    "encode_zarr_chunk",
]

#: A block whose values fill its shape.
DEFAULT_MODE = 0
#: A block whose header also gives its number of values (read when it fills the shape).
VARLENGTH_MODE = 1
_OBJECT_MODE = 2
_MODE_AND_RANK = struct.Struct(">HH")
_UINT32 = struct.Struct(">I")


@dataclass(frozen=True)
class BlockSpec:
    """What reading or writing one array's blocks needs, from its ``attributes.json``.

    Attributes
    ----------
    dtype : numpy.dtype
        The Zarr view's dtype (little-endian); N5 holds its big-endian twin.
    chunks : tuple of int
        The Zarr chunk shape (N5's ``blockSize`` reversed).
    compression : str
        The N5 compression, as canonical JSON (hashable: codecs are cached by it).
    compressor : str
        The Zarr view's compressor config, as canonical JSON (``null`` for none).
    """

    dtype: np.dtype
    chunks: tuple[int, ...]
    compression: str
    compressor: str

    @classmethod
    def of(cls, attributes: Mapping[str, Any], where: str) -> BlockSpec:
        """The spec of a dataset's attributes; ``MetadataError`` naming ``where`` if bad."""
        zarray = n5_metadata.array_to_zarr(attributes, where)
        return cls(
            dtype=np.dtype(zarray["dtype"]),
            chunks=tuple(zarray["chunks"]),
            compression=_canonical(attributes["compression"]),
            compressor=_canonical(zarray["compressor"]),
        )

    @property
    def rank(self) -> int:
        return len(self.chunks)

    @property
    def chunk_bytes(self) -> int:
        """The size in bytes of a whole, uncompressed chunk."""
        return int(np.prod(self.chunks)) * self.dtype.itemsize


def _canonical(document: Any) -> str:
    return json.dumps(document, sort_keys=True)


# ------------------------------------------------------------------ codecs
@lru_cache(maxsize=64)
def _zarr_codec(compressor: str) -> Codec | None:
    """The numcodecs codec of a compressor config given as JSON; None for ``null``."""
    config = json.loads(compressor)
    return None if config is None else numcodecs.get_codec(config)


#: The setting of each compressor that spends the least time compressing.
_FASTEST = {"gzip": {"level": 0}, "zlib": {"level": 0}, "blosc": {"clevel": 0},
            "zstd": {"level": 1}, "bz2": {"level": 1}, "lzma": {"preset": 0}}


@lru_cache(maxsize=64)
def _handoff_codec(compressor: str) -> Codec | None:
    """The view's compressor at its fastest setting: what chunks handed to readers use."""
    config = json.loads(compressor)
    if config is None:
        return None
    return numcodecs.get_codec({**config, **_FASTEST.get(config["id"], {})})


def _n5_codec(spec: BlockSpec) -> Codec | None:
    """The codec of the N5 stream: the view's compressor, at the dataset's own setting."""
    return _zarr_codec(spec.compressor)


def _compress(codec: Codec | None, values: np.ndarray) -> bytes:
    """``values`` compressed by ``codec``; the same bytes every time for the same values.

    numcodecs' GZip stamps the current time into the gzip header, so a chunk
    read twice (or copied and read back) would differ; gzip streams are
    written here with the time 0, as N5's Java writer does.
    """
    if codec is None:
        return values.tobytes()
    if codec.codec_id == "gzip":
        return gzip.compress(values.tobytes(), compresslevel=codec.level, mtime=0)
    return bytes(codec.encode(values))


# ------------------------------------------------------------------ header
def _header(data: memoryview, spec: BlockSpec, where: str) -> tuple[int, tuple[int, ...], int]:
    """``(mode, shape in Zarr order, header length)``, checked against the dataset."""
    if len(data) < _MODE_AND_RANK.size:
        raise CorruptValueError(f"{where!r}: an N5 block of {len(data)} bytes is shorter than "
                                "its header")
    mode, rank = _MODE_AND_RANK.unpack_from(data)
    if mode == _OBJECT_MODE:
        raise CorruptValueError(f"{where!r}: an N5 object-mode block (mode 2) holds serialized "
                                "objects, not array values")
    if mode not in (DEFAULT_MODE, VARLENGTH_MODE):
        raise CorruptValueError(f"{where!r}: N5 block header mode {mode} is not 0 (default) or "
                                "1 (varlength)")
    if rank != spec.rank:
        raise CorruptValueError(f"{where!r}: the N5 block header says {rank} dimensions, the "
                                f"dataset has {spec.rank}")
    length = _MODE_AND_RANK.size + 4 * rank + (4 if mode == VARLENGTH_MODE else 0)
    if len(data) < length:
        raise CorruptValueError(f"{where!r}: an N5 block of {len(data)} bytes is shorter than "
                                f"its {length}-byte header")
    sizes = struct.unpack_from(f">{rank}I", data, _MODE_AND_RANK.size)
    shape = tuple(sizes[::-1])
    if any(size > chunk for size, chunk in zip(shape, spec.chunks, strict=True)):
        raise CorruptValueError(f"{where!r}: the N5 block's shape {list(sizes)} exceeds the "
                                f"dataset's blockSize {list(spec.chunks[::-1])}")
    if mode == VARLENGTH_MODE:
        (count,) = _UINT32.unpack_from(data, length - 4)
        if count != int(np.prod(shape)):
            raise CorruptValueError(
                f"{where!r}: a varlength N5 block of shape {list(sizes)} holds {count} values; "
                "only one whose values fill its shape can be read as an array chunk")
    return mode, shape, length


def _decompressed(payload: memoryview, spec: BlockSpec, where: str) -> bytes | memoryview:
    codec = _n5_codec(spec)
    if codec is None:
        return payload
    try:
        return memoryview(codec.decode(payload)).cast("B")
    except Exception as error:  # each codec raises its own types
        compression = json.loads(spec.compression)["type"]
        raise CorruptValueError(f"{where!r}: the N5 block does not decompress as "
                                f"{compression} ({type(error).__name__}: {error})") from error


# -------------------------------------------------------------- N5 blocks
def decode_block(data: bytes | memoryview, spec: BlockSpec, where: str) -> np.ndarray:
    """A whole chunk (Zarr order, the view's dtype) from an N5 block's bytes.

    Raises
    ------
    CorruptValueError
        If the header is short or contradicts the dataset (rank, a shape
        larger than ``blockSize``, object mode, a varlength count that does not
        fill the shape), or the values do not decompress to the shape's size.
    """
    data = memoryview(data).cast("B")
    _, shape, length = _header(data, spec, where)
    values = _decompressed(data[length:], spec, where)
    expected = int(np.prod(shape)) * spec.dtype.itemsize
    if len(values) != expected:
        raise CorruptValueError(f"{where!r}: the N5 block holds {len(values)} bytes of values, "
                                f"its shape {list(shape[::-1])} needs {expected}")
    big_endian = np.frombuffer(values, dtype=spec.dtype.newbyteorder(">")).reshape(shape)
    if shape == spec.chunks:
        return big_endian.astype(spec.dtype)
    whole = np.zeros(spec.chunks, dtype=spec.dtype)
    whole[tuple(slice(0, size) for size in shape)] = big_endian
    return whole


def encode_block(values: bytes | memoryview | np.ndarray, spec: BlockSpec, where: str) -> bytes:
    """An N5 block (default mode, whole chunk) from a chunk's raw little-endian values."""
    array = np.frombuffer(values, dtype=spec.dtype)
    if array.nbytes != spec.chunk_bytes:
        raise InvalidValueError(f"{where!r}: a chunk of {array.nbytes} bytes of values; the "
                                f"array's chunks {list(spec.chunks)} of {spec.dtype} take "
                                f"{spec.chunk_bytes}")
    big_endian = array.astype(spec.dtype.newbyteorder(">"))
    header = _MODE_AND_RANK.pack(DEFAULT_MODE, spec.rank) + struct.pack(
        f">{spec.rank}I", *spec.chunks[::-1])
    return header + _compress(_n5_codec(spec), big_endian)


# ------------------------------------------------------------- Zarr chunks
def encode_zarr_chunk(chunk: np.ndarray, spec: BlockSpec) -> bytes:
    """The Zarr view's chunk: ``chunk``'s values compressed by the view's compressor."""
    return _compress(_handoff_codec(spec.compressor), np.ascontiguousarray(chunk))


def decode_zarr_chunk(value: bytes | memoryview, spec: BlockSpec, where: str) -> memoryview:
    """The raw little-endian values of a chunk written to the view.

    Raises
    ------
    InvalidValueError
        If the value does not decompress with the view's compressor, or to
        the size of a whole chunk (not a chunk of this array).
    """
    codec = _zarr_codec(spec.compressor)
    if codec is None:
        values = memoryview(value).cast("B")
    else:
        try:
            values = memoryview(codec.decode(value)).cast("B")
        except Exception as error:  # each codec raises its own types
            raise InvalidValueError(
                f"{where!r}: the chunk written does not decompress with the array's compressor "
                f"{json.loads(spec.compressor)['id']} ({type(error).__name__}: {error})"
            ) from error
    if len(values) != spec.chunk_bytes:
        raise InvalidValueError(f"{where!r}: the chunk written holds {len(values)} bytes of "
                                f"values; a chunk {list(spec.chunks)} of {spec.dtype} holds "
                                f"{spec.chunk_bytes}")
    return values
