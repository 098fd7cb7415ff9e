"""``zstores consolidate URL``: write ``.zmetadata``, every metadata document in one key.

The document is what zarr-python 2's ``consolidate_metadata`` writes:
``{"metadata": {key: document, ...}, "zarr_consolidated_format": 1}``, JSON
with sorted keys and a 4-space indent, ASCII only, for every ``.zarray``,
``.zgroup`` and ``.zattrs`` key of the store.
"""

from __future__ import annotations

import argparse
import json
import numbers
from typing import Any

from ..base import Store
from ._common import add_url, batches, open_url, shown, subcommand
from ._meta import ARRAY_V2, ATTRS_V2, CONSOLIDATED_V2, GROUP_V2, BadMetadata, load_json
from ._output import EXIT_OK, CommandError, plural

__all__ = ["add_parser", "consolidated_document", "run"]

_CONSOLIDATED_NAMES = (ARRAY_V2, GROUP_V2, ATTRS_V2)


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommand(
        commands, "consolidate", common, help="write .zmetadata (consolidated metadata)",
        description="Gather every .zarray, .zgroup and .zattrs document of the store into "
        "the key .zmetadata, as zarr-python 2's consolidate_metadata does, so readers open "
        "the whole hierarchy with one read.  Run it again after changing metadata.",
        examples=["zstores consolidate data.zip", "zstores consolidate redis://localhost/0"],
    )
    add_url(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with open_url(args.url, "r+") as store:
        document = consolidated_document(store)
        if not document["metadata"]:
            raise CommandError(f"no zarr v2 metadata (.zarray, .zgroup, .zattrs) in "
                               f"{shown(args.url)}: nothing to consolidate")
        store[CONSOLIDATED_V2] = _json_bytes(document)
    count = len(document["metadata"])
    print(f"wrote {CONSOLIDATED_V2} with {plural(count, 'metadata document')}")
    return EXIT_OK


def is_metadata_key(key: str) -> bool:
    """Whether a key is one of the documents ``.zmetadata`` gathers."""
    return key.rpartition("/")[2] in _CONSOLIDATED_NAMES


def consolidated_document(store: Store) -> dict[str, Any]:
    """The ``.zmetadata`` document for every v2 metadata key of ``store``.

    Examples
    --------
    >>> import zstores
    >>> store = zstores.MemoryStore()
    >>> zstores.init_group(store, path="a")
    >>> sorted(consolidated_document(store)["metadata"])
    ['.zgroup', 'a/.zgroup']
    """
    keys = sorted(key for key in store if is_metadata_key(key))
    metadata = {}
    for batch in batches(keys, 256):
        for key, value in store.getitems(batch).items():
            try:
                metadata[key] = load_json(value)
            except BadMetadata as error:
                raise CommandError(f"{key}: {error}; fix or remove it first") from None
    return {"metadata": metadata, "zarr_consolidated_format": 1}


class _NumberEncoder(json.JSONEncoder):
    def default(self, o: Any) -> Any:
        if isinstance(o, numbers.Integral):
            return int(o)
        if isinstance(o, numbers.Real):
            return float(o)
        return super().default(o)


def _json_bytes(document: dict[str, Any]) -> bytes:
    """zarr-python 2's layout: sorted keys, 4-space indent, ASCII only."""
    return json.dumps(document, indent=4, sort_keys=True, ensure_ascii=True,
                      separators=(",", ": "), cls=_NumberEncoder).encode("ascii")
