"""``zstores consolidate URL``: every metadata document of the hierarchy in one key.

The work is ``zstores.consolidate_metadata``'s.  Zarr format 2: the key
``.zmetadata``, what zarr-python 2's ``consolidate_metadata`` writes (every
``.zarray``, ``.zgroup`` and ``.zattrs``, as sorted JSON with a 4-space
indent).  Zarr format 3: the root ``zarr.json`` gains a
``consolidated_metadata`` field listing every node's ``zarr.json``, what
zarr-python 3's ``consolidate_metadata`` writes.  A hierarchy holding both
(as ``zstores migrate --to 3`` leaves it) is consolidated in both.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..metadata import ARRAY_V2, CONSOLIDATED_V2, GROUP_V2, NODE_V3
from ..wrappers import consolidate_metadata
from ._common import add_json, add_progress, add_url, open_url, shown, subcommand
from ._output import (
    EXIT_OK,
    CommandError,
    StageBars,
    plural,
    print_json,
    progress_wanted,
    say,
)

__all__ = ["add_parser", "run"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommand(
        commands, "consolidate", common, help="write consolidated metadata (v2 and v3)",
        description="Gather every metadata document of the store into one key, so readers "
        "open the whole hierarchy with one read: for Zarr format 2 the key .zmetadata (every "
        ".zarray, .zgroup and .zattrs, as zarr-python 2's consolidate_metadata writes it); "
        "for Zarr format 3 the consolidated_metadata field of the root zarr.json (every "
        "node's zarr.json, as zarr-python 3's consolidate_metadata writes it).  Run it again "
        "after changing metadata.",
        examples=["zstores consolidate data.zip", "zstores consolidate redis://localhost/0",
                  "zstores consolidate sqlite:///v3-data.sqlite --json"],
    )
    add_url(parser)
    add_json(parser, "each key written, its format and how many documents it holds")
    add_progress(parser)
    parser.set_defaults(run=run)


def _formats(store: Any, url: str) -> list[int]:
    """The formats present at the root: 2 (.zgroup or .zarray), 3 (zarr.json)."""
    formats = [2] if GROUP_V2 in store or ARRAY_V2 in store else []
    if NODE_V3 in store:
        formats.append(3)
    if not formats:
        raise CommandError(f"no zarr group or array at the root of {shown(url)} ({GROUP_V2}, "
                           f"{ARRAY_V2} or {NODE_V3}): nothing to consolidate")
    return formats


def run(args: argparse.Namespace) -> int:
    written = []
    with open_url(args.url, "r+") as store, StageBars(progress_wanted(args.progress)) as bars:
        for zarr_format in _formats(store, args.url):
            count = len(consolidate_metadata(store, zarr_format=zarr_format, progress=bars)
                        .metadata["metadata"])
            key = CONSOLIDATED_V2 if zarr_format == 2 else NODE_V3
            written.append({"key": key, "zarr_format": zarr_format, "documents": count})
    if args.json:
        print_json({"url": shown(args.url), "written": written})
        return EXIT_OK
    for entry in written:
        where = entry["key"] + ("" if entry["zarr_format"] == 2 else " (consolidated_metadata)")
        say(f"wrote {where} with {plural(entry['documents'], 'metadata document')}")
    return EXIT_OK
