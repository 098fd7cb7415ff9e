"""``zstores consolidate URL``: write ``.zmetadata``, every metadata document in one key.

The work is ``zstores.consolidate_metadata``'s: the document is what
zarr-python 2's ``consolidate_metadata`` writes (every ``.zarray``,
``.zgroup`` and ``.zattrs`` of the store, as sorted JSON with a 4-space
indent).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..wrappers import consolidate_metadata
from ._common import add_url, open_url, shown, subcommand
from ._meta import ARRAY_V2, CONSOLIDATED_V2, GROUP_V2
from ._output import EXIT_OK, CommandError, plural

__all__ = ["add_parser", "run"]


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
        if GROUP_V2 not in store and ARRAY_V2 not in store:
            raise CommandError(f"no zarr v2 group or array at the root of {shown(args.url)} "
                               f"({GROUP_V2} or {ARRAY_V2}): nothing to consolidate")
        count = len(consolidate_metadata(store).metadata["metadata"])
    print(f"wrote {CONSOLIDATED_V2} with {plural(count, 'metadata document')}")
    return EXIT_OK
