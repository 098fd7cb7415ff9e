"""``zstores cp SRC DST [PATH]``: copy every key between any two stores, resumably.

Keys are copied in batches (``getitems`` from the source, ``setitems`` to the
destination) by a pool of threads; with ``--verify`` each batch is read back
and compared (one more round trip per batch).  Every
store writes each key atomically, so an interrupted copy leaves whole values
only; running the same command again skips the keys already identical and
copies the rest.  Metadata keys are copied before the others: a destination
that translates chunks by their array's metadata (``N5Store``) must know the
array before its chunks arrive.

Before writing anything, a copy that would leave a hierarchy zarr cannot
read is refused (see ``_merge``): Zarr v2 into a store holding v3 or the
reverse, or a different array (or a group) at an array's path.
``--if-exists overwrite`` copies anyway.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from ..base import Store
from ..errors import InvalidKeyError
from ..keys import RESERVED_PREFIX
from ..metadata.documents import metadata_format
from ._common import (
    INCOMPLETE_COPY,
    Pool,
    add_jobs,
    add_json,
    add_path,
    add_progress,
    add_url,
    batches,
    open_url,
    path_argument,
    shown,
    subcommand,
)
from ._merge import merge_conflict
from ._output import (
    EXIT_OK,
    EXIT_PROBLEMS,
    CommandError,
    Interrupted,
    UsageError,
    human_size,
    plural,
    print_json,
    progress_bar,
    progress_wanted,
    say,
)
from ._tree import keys_under

__all__ = ["add_parser", "run"]

BATCH_KEYS = 64  # keys per getitems/setitems round trip
_SHOWN_PROBLEMS = 20


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommand(
        commands, "cp", common, help="copy every key from one store to another",
        description="Copy every key under PATH (the whole store by default) from SRC to DST, "
        "any backends, in parallel (--verify: each value read back and compared).  Resumable: "
        "after an "
        "interruption (Ctrl-C exits with status 130) run the same command again; keys "
        "already identical in DST are skipped.  Keys are copied as they are, whatever the "
        "zarr format; but a copy into a DST that already holds the other Zarr format (v2 "
        "into v3 or the reverse) or a different array at the same path (shape, data type, "
        "chunks, codecs) is refused before anything is written, unless --if-exists "
        "overwrite.",
        examples=["zstores cp data/ sqlite:///backup/data.sqlite",
                  "zstores cp data.zip lmdb:///fast/data.lmdb results --jobs 8",
                  "zstores cp redis://host/0 data.zip --if-exists error"],
    )
    add_url(parser, "src", "the store to copy from")
    add_url(parser, "dst", "the store to copy to (created if missing)")
    add_path(parser, store="src")
    add_jobs(parser)
    parser.add_argument(
        "--if-exists", choices=("skip", "overwrite", "error"), default="skip",
        help="for a key already in DST: 'skip' (default) leaves an identical value alone "
        "and reports a different one without touching it; 'overwrite' writes every key, "
        "even into a DST holding the other Zarr format or a different array at PATH; "
        "'error' stops before copying anything if any key exists in DST")
    parser.add_argument(
        "--verify", action="store_true",
        help="read every value written back from DST and compare it with SRC's (one more "
        "round trip per batch); a difference is reported and leaves the copy unfinished")
    add_progress(parser)
    add_json(parser, "counts and bytes copied, skipped and verified, and every problem")
    parser.set_defaults(run=run)


@dataclass
class _Tally:
    """What the workers did; shared, so every finished batch counts after Ctrl-C too."""

    copied: int = 0
    copied_bytes: int = 0
    skipped: int = 0
    skipped_bytes: int = 0
    vanished: int = 0
    conflicts: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, other: _Tally) -> None:
        with self.lock:
            self.copied += other.copied
            self.copied_bytes += other.copied_bytes
            self.skipped += other.skipped
            self.skipped_bytes += other.skipped_bytes
            self.vanished += other.vanished
            self.conflicts += other.conflicts
            self.mismatches += other.mismatches

    @property
    def keys_done(self) -> int:
        return self.copied + self.skipped + len(self.conflicts) + len(self.mismatches) \
            + self.vanished


class _Copier:
    """Copies one batch of keys: read, compare (skip mode), write, read back (``verify``)."""

    def __init__(self, src: Store, dst: Store, if_exists: str, existing: set[str],
                 pool: Pool, tally: _Tally, verify: bool = False) -> None:
        self.src, self.dst, self.if_exists = src, dst, if_exists
        self.existing, self.pool, self.tally, self.verify = existing, pool, tally, verify

    def __call__(self, batch: list[str]) -> _Tally:
        done = _Tally()
        if not self.pool.stop.is_set():
            self._copy(batch, done)
        self.tally.add(done)
        return done

    def _copy(self, batch: list[str], done: _Tally) -> None:
        values = self.src.getitems(batch)
        done.vanished = len(batch) - len(values)  # deleted from SRC since the listing
        present = [key for key in values if self.dst.normalize(key) in self.existing] \
            if self.if_exists == "skip" else []
        old = self.dst.getitems(present) if present else {}
        to_write = {}
        for key, value in values.items():
            if key not in old:
                to_write[key] = value
            elif old[key] == value:
                done.skipped += 1
                done.skipped_bytes += len(value)
            else:
                done.conflicts.append(key)
        if not to_write or self.pool.stop.is_set():
            return
        self.dst.setitems(to_write)
        # setitems raises unless every value is stored whole: reading back
        # checks the store itself, on request.
        back = self.dst.getitems(list(to_write)) if self.verify else to_write
        for key, value in to_write.items():
            if key in back and back[key] == value:
                done.copied += 1
                done.copied_bytes += len(value)
            else:
                done.mismatches.append(key)


def run(args: argparse.Namespace) -> int:
    path = path_argument(args.path)
    with ExitStack() as stack:
        src = stack.enter_context(open_url(args.src, "r"))
        # Everything SRC can refuse is found before DST is opened: a copy that
        # fails there creates no DST (opening one in mode "a" makes it).
        keys = _source_keys(src, path, args.src)
        dst = stack.enter_context(open_url(args.dst, "a"))
        if src == dst:
            raise UsageError(f"SRC and DST are the same store ({shown(args.src)})")
        existing = _existing_keys(dst, path)
        if args.if_exists != "overwrite":
            _refuse_mixing(src, dst, keys, existing, path)
        if args.if_exists == "error":
            _refuse_existing(keys, existing, dst, args.dst)
        marked = _mark_incomplete(dst, args.src, path)
        try:
            tally = _copy_all(args, src, dst, keys, existing, path)
        except InvalidKeyError as error:  # DST's rule, not a usage error: exit status 1
            raise CommandError(f"{shown(args.dst)} refuses a key of SRC: {error}; the copy is "
                               "unfinished (copy into another backend, or "
                               "leave that key out with PATH)") from None
        complete = not tally.conflicts and not tally.mismatches
        if marked and complete:
            del dst[INCOMPLETE_COPY]
    return _report(args, tally, len(keys))


def _mark_incomplete(dst: Store, src_url: str, path: str) -> bool:
    """Mark DST an unfinished copy until every key is copied (``verify``, ``ls`` say so).

    A backend that cannot hold the reserved key (an N5 layout) is copied
    into unmarked, as before.
    """
    record = json.dumps({"src": shown(src_url), "path": path}).encode()
    try:
        dst[INCOMPLETE_COPY] = record
    except (ValueError, KeyError):
        return False
    return True


def _source_keys(src: Store, path: str, url: str) -> list[str]:
    # zstores' own records (fences, a copy marker) belong to SRC, not to its data.
    keys = [key for key in keys_under(src, path) if not key.startswith(RESERVED_PREFIX)]
    if path and path in src:
        keys.insert(0, path)
    if path and not keys:
        raise CommandError(f"nothing at {path!r} in {shown(url)}")
    return keys


def _existing_keys(dst: Store, path: str) -> set[str]:
    existing = {key for key in keys_under(dst, path) if not key.startswith(RESERVED_PREFIX)}
    if path and path in dst:
        existing.add(dst.normalize(path))
    return existing


def _refuse_mixing(src: Store, dst: Store, keys: list[str], existing: set[str],
                   path: str) -> None:
    """Stop before writing if the result would be a hierarchy zarr cannot read."""
    conflict = merge_conflict(src, dst, keys, existing, path)
    if conflict:
        raise CommandError(f"refusing to copy: {conflict}; nothing was copied "
                           "(--if-exists overwrite copies anyway)")


def _refuse_existing(keys: list[str], existing: set[str], dst: Store, url: str) -> None:
    clashes = [key for key in keys if dst.normalize(key) in existing]
    if clashes:
        raise CommandError(
            f"{plural(len(clashes), 'key')} already exist in {shown(url)} (first: "
            f"{clashes[0]!r}); nothing was copied (--if-exists error)")


def _copy_all(args: argparse.Namespace, src: Store, dst: Store, keys: list[str],
              existing: set[str], path: str) -> _Tally:
    tally = _Tally()
    show = progress_wanted(args.progress)
    key_bar = progress_bar(show, len(keys), "keys", "key")
    byte_bar = progress_bar(show, src.getsize(path) if show else None, "bytes", "B",
                            position=1, scale=True)
    try:
        with Pool(args.jobs) as pool:
            copier = _Copier(src, dst, args.if_exists, existing, pool, tally, args.verify)
            for phase in _metadata_first(keys):
                for done in pool.map(copier, batches(phase, BATCH_KEYS)):
                    key_bar.update(done.keys_done)
                    byte_bar.update(done.copied_bytes + done.skipped_bytes)
    except KeyboardInterrupt:
        raise Interrupted(
            f"copied {plural(tally.copied, 'key')} ({human_size(tally.copied_bytes)}) and "
            f"found {plural(tally.skipped, 'identical key')} of {len(keys):,} before Ctrl-C; "
            "run the same command again to finish (keys already copied are skipped)"
        ) from None
    finally:
        byte_bar.close()
        key_bar.close()
    return tally


def _metadata_first(keys: list[str]) -> list[list[str]]:
    """The keys in two phases: metadata documents, then everything else."""
    metadata = [key for key in keys if metadata_format(key) is not None]
    chosen = set(metadata)
    return [metadata, [key for key in keys if key not in chosen]]


_CONFLICT = ("exists in DST with a different value; left alone (--if-exists overwrite "
             "replaces it)")
_MISMATCH = "the value read back from DST differs from SRC"


def _report(args: argparse.Namespace, tally: _Tally, total: int) -> int:
    if args.json:
        return _report_json(args, tally, total)
    problems = [f"{key}: {_CONFLICT}" for key in tally.conflicts]
    problems += [f"{key}: {_MISMATCH}" for key in tally.mismatches]
    for line in problems[:_SHOWN_PROBLEMS]:
        say(f"zstores cp: {line}", file=sys.stderr)
    if len(problems) > _SHOWN_PROBLEMS:
        say(f"zstores cp: ... and {len(problems) - _SHOWN_PROBLEMS:,} more", file=sys.stderr)
    summary = f"copied {plural(tally.copied, 'key')} ({human_size(tally.copied_bytes)})"
    if tally.skipped:
        summary += (f", skipped {plural(tally.skipped, 'identical key')} "
                    f"({human_size(tally.skipped_bytes)})")
    verified = tally.copied + tally.skipped
    checked = "verified" if args.verify else "written or identical"
    summary += f"; {verified:,} of {plural(total, 'key')} {checked}"
    summary += f" ({human_size(tally.copied_bytes + tally.skipped_bytes)})"
    if tally.vanished:
        summary += f"; {plural(tally.vanished, 'key')} vanished from SRC while copying"
    say(f"{summary}: {shown(args.src)} -> {shown(args.dst)}")
    return EXIT_PROBLEMS if problems else EXIT_OK


def _report_json(args: argparse.Namespace, tally: _Tally, total: int) -> int:
    """``--json``: what ``_report`` says, every problem listed, exact key names."""
    problems = [{"key": key, "problem": _CONFLICT} for key in tally.conflicts]
    problems += [{"key": key, "problem": _MISMATCH} for key in tally.mismatches]
    print_json({
        "src": shown(args.src), "dst": shown(args.dst), "path": path_argument(args.path),
        "keys": total,
        "copied": {"keys": tally.copied, "bytes": tally.copied_bytes},
        "skipped": {"keys": tally.skipped, "bytes": tally.skipped_bytes},
        "verified": {"keys": tally.copied + tally.skipped,
                     "bytes": tally.copied_bytes + tally.skipped_bytes},
        "vanished": tally.vanished, "complete": not problems, "problems": problems})
    return EXIT_PROBLEMS if problems else EXIT_OK
