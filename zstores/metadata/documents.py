"""What every Zarr metadata document shares: its key names, its error, its decoding.

Key names are spelled here once; the rest of zstores uses these constants
(``ARRAY_V2`` rather than ``".zarray"``), so a search for a name finds every
place that reads or writes it.

Examples
--------
>>> metadata_format("a/b/.zarray"), metadata_format("zarr.json"), metadata_format("0.0")
(2, 3, None)
>>> load_json(b'{"zarr_format": 2}')
{'zarr_format': 2}
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ZStoresError

__all__ = [
    "ARRAY_V2",
    "ATTRS_V2",
    "CONSOLIDATED_V2",
    "GROUP_V2",
    "METADATA_NAMES",
    "NODE_NAMES",
    "NODE_V3",
    "V2_DOCUMENT_NAMES",
    "V2_NAMES",
    "MetadataError",
    "load_json",
    "metadata_format",
]

#: Format 2: an array's metadata document, relative to the array's path.
ARRAY_V2 = ".zarray"
#: Format 2: a group's metadata document.
GROUP_V2 = ".zgroup"
#: Format 2: the user attributes of an array or group.
ATTRS_V2 = ".zattrs"
#: Format 2: consolidated metadata (every document below a group, in one key).
CONSOLIDATED_V2 = ".zmetadata"
#: Format 3: a node's only metadata document (array or group, attributes inside).
NODE_V3 = "zarr.json"

#: The documents a format 2 consolidation gathers.
V2_DOCUMENT_NAMES = frozenset({ARRAY_V2, GROUP_V2, ATTRS_V2})
#: Every format 2 metadata key name.
V2_NAMES = V2_DOCUMENT_NAMES | {CONSOLIDATED_V2}
#: Key names that hold metadata rather than data, in either format.
METADATA_NAMES = V2_NAMES | {NODE_V3}
#: The names that make a path a node, in the order a reader looks for them
#: (a v2 array wins over a v2 group, which wins over a v3 node).
NODE_NAMES = (ARRAY_V2, GROUP_V2, NODE_V3)


class MetadataError(ZStoresError, ValueError):
    """A metadata document cannot be used: not JSON, wrong format, a field breaking the spec.

    The message names the key (where known) and the rule broken.  The CLI's
    former ``BadMetadata`` is this class.
    """


MetadataError.__module__ = "zstores.metadata"  # where users import it from


def metadata_format(key: str) -> int | None:
    """The Zarr format (2 or 3) whose metadata the key's last segment names; ``None`` for data.

    Examples
    --------
    >>> metadata_format(".zattrs"), metadata_format("c/zarr.json"), metadata_format("c/0")
    (2, 3, None)
    """
    name = key.rpartition("/")[2]
    if name in V2_NAMES:
        return 2
    return 3 if name == NODE_V3 else None


def load_json(value: bytes, key: str = "") -> Any:
    """Decode a metadata value (UTF-8 JSON); ``key`` names it in the error.

    Raises
    ------
    MetadataError
        If the value is not UTF-8 text or not JSON.

    Examples
    --------
    >>> load_json(b'[1, 2]')
    [1, 2]
    >>> load_json(b"{", key="a/.zarray")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    zstores.metadata.MetadataError: 'a/.zarray' is not JSON (Expecting ...)
    """
    where = f"{key!r} is " if key else ""
    try:
        return json.loads(bytes(value).decode("utf-8"))
    except UnicodeDecodeError as error:
        raise MetadataError(f"{where}not UTF-8 text ({error.reason} at byte "
                            f"{error.start})") from None
    except ValueError as error:
        raise MetadataError(f"{where}not JSON ({error})") from None
