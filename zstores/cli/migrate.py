"""``zstores migrate URL [--to 2|3]``: upgrade Zarr metadata in place, chunks untouched.

``--to 2`` (the default, as before) turns a spec v1 array at the root into
spec v2 (``zstores.migrate_1to2``).  ``--to 3`` writes a ``zarr.json``
beside every ``.zgroup``/``.zarray`` of a format 2 hierarchy
(``zstores.migrate_v3.migrate_2to3``), consolidated metadata included;
``--dry-run`` prints what would be written, ``--remove-v2-metadata`` deletes
the v2 documents afterwards.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..metadata import ARRAY_V2, MetadataError
from ..migrate_v1 import migrate_1to2, plan_1to2
from ..migrate_v3 import BrokenMetadataError, Migration, migrate_2to3
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
        commands, "migrate", common, help="upgrade Zarr metadata (v1 -> v2, or v2 -> v3)",
        description="Upgrade the Zarr metadata of the store in place; chunks are never "
        "rewritten.  --to 2 (the default): the spec v1 array at the root becomes spec v2 "
        "('meta' -> '.zarray' with a numcodecs compressor, 'attrs' -> '.zattrs').  --to 3: "
        "every group and array of a Zarr format 2 hierarchy gets a format 3 zarr.json (its "
        ".zattrs as attributes, dtype, fill value, order, filters and compressor as codecs, "
        "chunk keys kept by the 'v2' chunk key encoding) and a group with .zmetadata gets "
        "format 3 consolidated metadata.  Arrays format 3 cannot express (object or "
        "structured dtypes ...) stop it before anything is written.  The v2 documents stay "
        "unless --remove-v2-metadata is given.",
        examples=["zstores migrate old-array/", "zstores migrate data.zarr --to 3 --dry-run",
                  "zstores migrate sqlite:///data.sqlite --to 3 --remove-v2-metadata",
                  "zstores migrate data.zarr --to 3 --dry-run --json"],
    )
    add_url(parser)
    parser.add_argument("--to", type=int, choices=(2, 3), default=2,
                        help="the format to migrate to: 2 from spec v1 (default), 3 from v2")
    parser.add_argument("--dry-run", action="store_true",
                        help="print what would be written and removed, write nothing")
    parser.add_argument("--skip-broken", action="store_true",
                        help="with --to 3: leave arrays and groups whose metadata breaks the "
                        "specification as they are and migrate the rest (without it, one "
                        "broken document stops the whole migration before anything is "
                        "written)")
    parser.add_argument("--remove-v2-metadata", action="store_true",
                        help="with --to 3: delete .zarray, .zgroup, .zattrs and .zmetadata "
                        "once every zarr.json is written (zarr-python 2 can no longer read it)")
    add_json(parser, "every document written, as JSON, and every key removed or skipped")
    add_progress(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.to == 3:
        return _run_to_3(args)
    if args.remove_v2_metadata or args.skip_broken:
        raise CommandError("--remove-v2-metadata and --skip-broken apply to --to 3 only")
    return _run_to_2(args)


def _run_to_2(args: argparse.Namespace) -> int:
    with open_url(args.url, "r" if args.dry_run else "r+") as store:
        if "meta" not in store:
            if ARRAY_V2 in store:
                if args.json:
                    print_json(_document(args, {}, [], unchanged=[ARRAY_V2]))
                else:
                    say(f"{shown(args.url)} already holds a spec v2 array; nothing to do")
                return EXIT_OK
            raise CommandError(f"no spec v1 array in {shown(args.url)}: there is no 'meta' "
                               "key at the root")
        had_attrs = "attrs" in store
        try:
            if args.dry_run:
                written = plan_1to2(store)
            else:
                with StageBars(progress_wanted(args.progress)) as bars:
                    written = migrate_1to2(store, progress=bars)
        except MetadataError as error:
            raise CommandError(f"{error}; nothing was written") from None
    if args.json:
        print_json(_document(args, written, ["meta", "attrs"] if had_attrs else ["meta"]))
        return EXIT_OK
    if args.dry_run:
        for key, value in written.items():
            say(f"would write {key} ({plural(len(value), 'byte')})")
            for line in value.decode("utf-8").splitlines():
                say("  " + line)
        say("would remove meta" + (", attrs" if had_attrs else ""))
        return EXIT_OK
    moved = "meta -> .zarray" + (", attrs -> .zattrs" if had_attrs else "")
    say(f"migrated {shown(args.url)} to spec v2: {moved}")
    return EXIT_OK


def _run_to_3(args: argparse.Namespace) -> int:
    with open_url(args.url, "r" if args.dry_run else "r+") as store:
        try:
            with StageBars(progress_wanted(args.progress)) as bars:
                result = migrate_2to3(store, dry_run=args.dry_run,
                                      remove_v2_metadata=args.remove_v2_metadata,
                                      skip_broken=args.skip_broken, progress=bars)
        except BrokenMetadataError as error:
            if args.json:
                print_json({**_document(args, {}, []), "problems": [
                    {"key": key, "problem": why} for key, why in error.problems]})
            for key, why in [] if args.json else error.problems:
                say(f"{key}: {why}")
            raise CommandError(
                f"{plural(len(error.problems), 'metadata document')} "
                f"{'break' if len(error.problems) > 1 else 'breaks'} the Zarr specification; "
                "nothing was written (zstores verify shows them; --skip-broken migrates the "
                "rest)") from None
        except MetadataError as error:
            raise CommandError(f"{error}; nothing was written") from None
        except OSError as error:  # a full disk, a lost server ... while writing or removing
            raise CommandError(f"{type(error).__name__}: {error}; the chunks are untouched: run "
                               "the same command again to finish the migration") from error
    if args.json:
        print_json(_document(
            args, result.written, result.removed, unchanged=result.unchanged,
            skipped=[{"key": key, "problem": why} for key, why in result.skipped],
            arrays=result.arrays, groups=result.groups, consolidated=result.consolidated))
    else:
        _report(result, shown(args.url), args.dry_run)
    return EXIT_OK


def _document(args: argparse.Namespace, written: dict[str, bytes], removed: list[str],
              **more: Any) -> dict[str, Any]:
    """The ``--json`` report: each document written (parsed), each key removed."""
    return {"url": shown(args.url), "to": args.to, "dry_run": args.dry_run,
            "written": {key: json.loads(value) for key, value in written.items()},
            "removed": list(removed), **more}


def _report(result: Migration, url: str, dry_run: bool) -> None:
    would = "would write" if dry_run else "wrote"
    for key, why in result.skipped:
        say(f"{'would skip' if dry_run else 'skipped'} {key}: {why}")
    for key, value in result.written.items():
        say(f"{would} {key} ({plural(len(value), 'byte')})")
        if dry_run:
            for line in value.decode("ascii").splitlines():
                say("  " + line)
    for key in result.unchanged:
        say(f"{key} already up to date")
    for key in result.removed:
        say(f"{'would remove' if dry_run else 'removed'} {key}")
    consolidated = (f", consolidated metadata in {len(result.consolidated)} "
                    f"{'group' if len(result.consolidated) == 1 else 'groups'}"
                    if result.consolidated else "")
    verb = "would migrate" if dry_run else "migrated"
    say(f"{verb} {url} to Zarr format 3: {plural(result.arrays, 'array')}, "
          f"{plural(result.groups, 'group')}{consolidated}")
