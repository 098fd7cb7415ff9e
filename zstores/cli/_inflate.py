"""How far a compressed value inflates, found without inflating it past a limit.

``verify`` decodes every stored chunk, and a chunk's metadata says how big
it may be; a 4 MiB value that inflates to gigabytes (a decompression bomb,
or a value written for another array) must be reported, not decoded: a
codec allocates whatever its input asks for.  ``inflates_past`` answers
before decoding, for the compressors that can be asked: blosc, LZ4 and zstd
state the decompressed size in a header (the size their decoders allocate),
zlib, gzip, bz2 and LZMA are run as streams 64 KiB at a time and stopped
at the limit, the output thrown away.  Other codecs are decoded as they are.
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable
from typing import Any

__all__ = ["inflates_past"]

_STEP = 1 << 16  # bytes of output per streaming step: the memory a check holds
_ZSTD_MAGIC = 0xFD2FB528
_UNKNOWN = -1  # a zstd frame that does not state its size


def inflates_past(codec_id: str, raw: bytes, limit: int) -> int | None:
    """A size above ``limit`` that ``raw`` inflates to, or ``None`` when within (or unknown).

    Parameters
    ----------
    codec_id : str
        The compressor's name: a numcodecs id (``"zlib"``, ``"blosc"`` ...)
        or a Zarr v3 codec name (``"gzip"``, ``"numcodecs.zstd"`` ...).
    raw : bytes
        The stored value.
    limit : int
        The most bytes it may inflate to.

    Returns
    -------
    int or None
        The stated size, or a lower bound of the real one (``limit + 1`` or
        more) when the stream was stopped; ``-1`` for a zstd frame that does
        not state its size (zstd would inflate it without bound).  A value
        that fails to decompress at all is ``None``: decoding reports it.

    Examples
    --------
    >>> bomb = zlib.compress(bytes(10_000_000))
    >>> len(bomb) < 10_000, inflates_past("zlib", bomb, 800) > 800
    (True, True)
    >>> inflates_past("gzip", zlib.compress(bytes(800)), 800) is None
    True
    """
    name = codec_id.removeprefix("numcodecs.")
    check = _CHECKS.get(name)
    return check(bytes(raw), limit) if check is not None else None


def _stated(size: int, limit: int) -> int | None:
    return size if size > limit else None


def _blosc(raw: bytes, limit: int) -> int | None:
    # Blosc header: version, versionlz, flags, typesize, nbytes, blocksize, cbytes (uint32
    # LE each).  A header whose cbytes is not the value's length is no blosc header at all
    # (cut short, overwritten): decoding reports that.
    if len(raw) < 16 or int.from_bytes(raw[12:16], "little") != len(raw):
        return None
    return _stated(int.from_bytes(raw[4:8], "little"), limit)


def _lz4(raw: bytes, limit: int) -> int | None:
    # numcodecs' LZ4 stores the decompressed size first (uint32 LE).
    return _stated(int.from_bytes(raw[:4], "little"), limit) if len(raw) >= 4 else None


def _zstd(raw: bytes, limit: int) -> int | None:
    """The first frame's content size (numcodecs allocates that much, or streams if unknown)."""
    if len(raw) < 5 or int.from_bytes(raw[:4], "little") != _ZSTD_MAGIC:
        return None  # not a zstd frame: decoding reports it
    descriptor = raw[4]
    single_segment = (descriptor >> 5) & 1
    size_flag = descriptor >> 6
    position = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    width = (1 if single_segment else 0, 2, 4, 8)[size_flag]
    if width == 0:
        return _UNKNOWN
    if len(raw) < position + width:
        return None
    size = int.from_bytes(raw[position:position + width], "little")
    return _stated(size + 256 if width == 2 else size, limit)


def _streamed(make: Callable[[], Any]) -> Callable[[bytes, int], int | None]:
    """A check that runs a decompressor object over ``raw``, ``_STEP`` bytes of output at a time."""

    def check(raw: bytes, limit: int) -> int | None:
        decompressor, total, data = make(), 0, raw
        try:
            while True:
                out = decompressor.decompress(data, _STEP)
                total += len(out)
                if total > limit:
                    return total
                data = getattr(decompressor, "unconsumed_tail", b"")
                if decompressor.eof or (not out and not data):
                    return None
        except (zlib.error, OSError, EOFError, lzma.LZMAError):
            return None  # not this format: decoding reports it

    return check


_CHECKS: dict[str, Callable[[bytes, int], int | None]] = {
    "blosc": _blosc,
    "lz4": _lz4,
    "zstd": _zstd,
    # wbits 47: a zlib or a gzip header, whichever the value has
    "zlib": _streamed(lambda: zlib.decompressobj(47)),
    "gzip": _streamed(lambda: zlib.decompressobj(47)),
    "bz2": _streamed(bz2.BZ2Decompressor),
    "lzma": _streamed(lzma.LZMADecompressor),
}
