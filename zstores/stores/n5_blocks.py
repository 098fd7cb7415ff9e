"""The former place of the N5 block codec, now ``zstores.wrappers.n5_blocks``.

Kept so that ``zstores.stores.n5_blocks`` still imports; nothing else lives here.
"""

from ..wrappers.n5_blocks import (
    BlockSpec,
    decode_block,
    decode_zarr_chunk,
    encode_block,
    encode_zarr_chunk,
)

__all__ = ["BlockSpec", "decode_block", "decode_zarr_chunk", "encode_block", "encode_zarr_chunk"]
