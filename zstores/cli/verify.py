"""``zstores verify URL [PATH]``: decode every chunk and check every key and document.

What counts as a problem (exit status 1):

- a chunk that fails to decode with its array's compressor and filters (v2)
  or codecs (v3, decoded by zarr-python 3's own codecs: see ``_v3chunks``),
  fails its crc32c checksum, or decodes to another size than the array's
  chunk shape and dtype give; a shard whose index is broken, or one of whose
  inner chunks is damaged;
- a key that belongs to no array (outside every array, or below an array
  without being a chunk of its grid);
- a metadata document that breaks the Zarr storage specification v2, an
  array or group nested inside an array, ``.zattrs`` of no node, and a
  ``.zmetadata`` (or a v3 group's ``consolidated_metadata``) that no longer
  matches the documents it gathered;
- a chunk that would inflate past its array's chunk size (not decoded: see
  ``_inflate``), a spec v1 array (``meta``: run ``zstores migrate``), and
  the marker of an unfinished ``zstores cp``;
- with ``--against SRC``: a key missing here, one SRC lacks, or one whose
  bytes differ from SRC's.

A missing chunk is no problem: the specification reads it as the fill
value.  Such chunks are counted in the report.  Decoding v3 chunks needs
zarr-python 3 (``zstores[zarr]``): without it, a store that holds v3 arrays
is refused with exit status 2 rather than passed unread.  Long lists of
problems are cut in the text output (``--json`` lists them all).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..base import Store
from ..keys import RESERVED_PREFIX, prefix_of
from ..metadata import (
    ATTRS_V2,
    CONSOLIDATED_V2,
    GROUP_V2,
    METADATA_NAMES,
    NODE_NAMES,
    NODE_V3,
    V2_DOCUMENT_NAMES,
    MetadataError,
    load_json,
)
from ..metadata.checks import check_consolidated
from ..metadata.consolidated import checked_document_v3
from ..metadata.nodes import Array, classify
from ._common import (
    INCOMPLETE_COPY,
    Pool,
    add_jobs,
    add_path,
    add_progress,
    add_url,
    batches,
    incomplete_copy,
    open_url,
    path_argument,
    shown,
    subcommand,
)
from ._completion import url_completer
from ._inflate import inflates_past
from ._output import (
    EXIT_OK,
    EXIT_PROBLEMS,
    CommandError,
    Interrupted,
    UsageError,
    human_size,
    plural,
    print_json,
    print_problems,
    progress_bar,
    progress_wanted,
    say,
)
from ._tree import keys_under, read_nodes
from ._v3chunks import INSTALL_HINT, ChunkChecker, zarr_v3_problem
from .info import is_nested

__all__ = ["add_parser", "chunk_problem", "run"]

V1_META = "meta"  # a spec v1 array's metadata (its attributes are in "attrs")
BATCH_CHUNKS = 16  # chunks per getitems round trip
SHOWN_PROBLEMS = 20  # problems printed before "... and N more" (--json has them all)
_BLOSC_HEADER = 16


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommand(
        commands, "verify", common, help="decode every chunk; report damage and stray keys",
        description="Decode every chunk of every array under PATH (the whole store by "
        "default) with its compressor and filters (Zarr v2) or its codecs (Zarr v3, through "
        "zarr-python 3: sharding, crc32c, blosc, zstd, gzip, numcodecs ...), in parallel, "
        "and report chunks that fail to decode, fail their checksum or decode to the wrong "
        "size (a chunk that would inflate past its size is not decoded), shards with a broken "
        "index or a damaged inner chunk, keys that belong to no array, metadata that breaks "
        "the Zarr specification (or stale consolidated metadata, v2 or v3), a spec v1 array "
        "(run zstores migrate) and an unfinished zstores cp.  With --against SRC, also every "
        "key missing, extra or different compared with SRC.  "
        "Missing chunks are fine (they read as the fill value) and are counted.  Exit status "
        "1 if anything is wrong; 2 if the store holds Zarr v3 arrays and zarr-python 3 is "
        "not installed (pip install 'zstores[zarr]').  The text output shows the first "
        f"{SHOWN_PROBLEMS} problems; --json lists them all.",
        examples=["zstores verify data.zip", ("zstores verify sqlite:///data/run1.sqlite "
                  "temperature --jobs 4"), "zstores verify data.lmdb --json"],
    )
    add_url(parser)
    add_path(parser)
    add_jobs(parser)
    add_progress(parser)
    against = parser.add_argument("--against", metavar="SRC",
                        help="also compare every key under PATH with the store SRC this one "
                        "was copied from: keys missing here, keys SRC does not have and "
                        "values that differ byte for byte are problems")
    against.completer = url_completer  # type: ignore[attr-defined]  # argcomplete
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(run=run)


# ------------------------------------------------------------------ findings
@dataclass
class Problem:
    key: str
    # decode_error, wrong_size, checksum, shard_index, stray_key, bad_metadata,
    # stale_consolidated, incomplete_copy, spec_v1, missing_from_copy, not_in_source,
    # differs_from_source
    kind: str
    message: str

    def as_json(self) -> dict[str, str]:
        return {"key": self.key, "kind": self.kind, "message": self.message}


@dataclass
class _ArrayState:
    """One array and what verify found for it."""

    path: str
    zarr_format: int
    array: Array | None  # None when its metadata is unusable
    found: int = 0  # keys that are chunks of its grid
    ok: int = 0
    bad: int = 0
    vanished: int = 0  # listed, then gone when read
    checker: ChunkChecker | None = None  # decodes v3 chunks (zarr-python 3)

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"path": self.path, "zarr_format": self.zarr_format,
                                    "decoded": self.decodes}
        if self.array is not None:
            document.update(nchunks=self.array.nchunks, chunks_missing=self.missing)
        document.update(chunks_found=self.found, chunks_ok=self.ok, chunks_bad=self.bad)
        return document

    @property
    def decodes(self) -> bool:
        return self.array is not None and (self.zarr_format == 2 or self.checker is not None)

    @property
    def missing(self) -> int:
        return self.array.nchunks - self.found + self.vanished if self.array else 0


@dataclass
class _Findings:
    arrays: dict[str, _ArrayState] = field(default_factory=dict)
    groups: set[str] = field(default_factory=set)
    problems: list[Problem] = field(default_factory=list)
    chunks: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    bytes_read: int = 0
    compared: int | None = None  # keys compared with --against SRC

    def problem(self, key: str, kind: str, message: str) -> None:
        self.problems.append(Problem(key, kind, message))


# ----------------------------------------------------------------- metadata
def _parent(key: str) -> str:
    return key.rpartition("/")[0]


def _read_metadata(store: Store, keys: list[str], findings: _Findings) -> dict[str, Any]:
    """Decoded metadata documents by key; undecodable ones become problems."""
    documents = {}
    for batch in batches(keys, 256):
        for key, value in store.getitems(batch).items():
            try:
                documents[key] = load_json(value)
            except MetadataError as error:
                findings.problem(key, "bad_metadata", f"breaks the spec: {error}")
    return documents


def _classify_nodes(documents: dict[str, Any], findings: _Findings) -> None:
    for key, meta in sorted(documents.items()):
        path, name = _parent(key), key.rpartition("/")[2]
        if name not in NODE_NAMES:
            continue
        node = classify(path, name, meta)
        spec = "the spec" if node.zarr_format == 2 else "the spec (v3)"
        for problem in node.problems:
            findings.problem(key, "bad_metadata", f"breaks {spec}: {problem}")
        if node.kind == "group":
            findings.groups.add(path)
        else:  # a v3 document of no known node type is judged as an unusable array
            findings.arrays[path] = _ArrayState(path, node.zarr_format, node.array)
    for path in sorted(findings.groups & set(findings.arrays)):
        findings.problem(prefix_of(path) + GROUP_V2, "bad_metadata",
                         f"{path or '/'} is both an array and a group")


def _owning_array(key: str, arrays: dict[str, Any]) -> str | None:
    """The deepest array whose prefix holds ``key``, or ``None``."""
    path = _parent(key)
    while True:
        if path in arrays:
            return path
        if not path:
            return None
        path = _parent(path)


def _check_nesting(documents: dict[str, Any], findings: _Findings) -> None:
    for key in sorted(documents):
        path, name = _parent(key), key.rpartition("/")[2]
        if name == ATTRS_V2 and path not in findings.arrays and path not in findings.groups:
            findings.problem(key, "stray_key", "attributes of no array or group")
        if name in NODE_NAMES and path:
            owner = _owning_array(path + "/x", {p: a for p, a in findings.arrays.items()
                                                if p != path})
            if owner is not None and owner != path:
                findings.problem(key, "bad_metadata",
                                 f"a node inside the array {owner or '/'} (arrays have no "
                                 "children)")


def _check_consolidated(documents: dict[str, Any], findings: _Findings) -> None:
    for key, meta in sorted(documents.items()):
        if key.rpartition("/")[2] == NODE_V3 and isinstance(meta, dict) \
                and meta.get("consolidated_metadata") is not None:
            _check_consolidated_v3(key, meta["consolidated_metadata"], documents, findings)
        if key.rpartition("/")[2] != CONSOLIDATED_V2:
            continue
        problems = check_consolidated(meta)
        for problem in problems:
            findings.problem(key, "bad_metadata", f"breaks the consolidated format: {problem}")
        if not problems:
            _compare_consolidated(key, meta["metadata"], documents, findings)


def _check_consolidated_v3(key: str, field: Any, documents: dict[str, Any],
                           findings: _Findings) -> None:
    """A v3 group's ``consolidated_metadata`` against the ``zarr.json`` documents below it.

    zarr-python opens a consolidated group from that listing alone, so an
    array added (or changed) since is invisible to it: as stale as a v2
    ``.zmetadata``.  Each side's own ``consolidated_metadata`` is left out
    of the comparison (zarr-python writes it in the listing only).
    """
    try:
        listing = checked_document_v3(field, key)["metadata"]
    except MetadataError as error:
        findings.problem(key, "bad_metadata", f"breaks the consolidated format: {error}")
        return
    base = prefix_of(_parent(key))
    listed = {f"{path}/{NODE_V3}": _without_listing(doc) for path, doc in listing.items()}
    actual = {k[len(base):]: _without_listing(doc) for k, doc in documents.items()
              if k.startswith(base) and k != key and k.rpartition("/")[2] == NODE_V3}
    _report_stale(key, listed, actual, findings)


def _without_listing(document: Any) -> Any:
    if isinstance(document, dict) and "consolidated_metadata" in document:
        return {k: v for k, v in document.items() if k != "consolidated_metadata"}
    return document


def _compare_consolidated(key: str, listed: dict[str, Any], documents: dict[str, Any],
                          findings: _Findings) -> None:
    base = prefix_of(_parent(key))
    actual = {k[len(base):]: doc for k, doc in documents.items() if k.startswith(base)
              and k.rpartition("/")[2] in V2_DOCUMENT_NAMES}
    _report_stale(key, listed, actual, findings)


def _report_stale(key: str, listed: dict[str, Any], actual: dict[str, Any],
                  findings: _Findings) -> None:
    differ = sorted(k for k in listed.keys() & actual.keys() if listed[k] != actual[k])
    unlisted = sorted(actual.keys() - listed.keys())
    gone = sorted(listed.keys() - actual.keys())
    parts = [f"{len(keys)} {what} (first: {keys[0]})" for keys, what in
             ((differ, "differ"), (unlisted, "not in it"), (gone, "listed but gone")) if keys]
    if parts:
        findings.problem(key, "stale_consolidated",
                         "stale: documents " + ", ".join(parts) + "; run zstores consolidate")


# ------------------------------------------------------------------- chunks
def _assign_keys(store: Store, keys: list[str], findings: _Findings) -> None:
    nested = is_nested(store)
    for key in keys:
        if key.rpartition("/")[2] in METADATA_NAMES:
            continue
        owner = _owning_array(key, findings.arrays)
        if owner is None:
            findings.problem(key, "stray_key", "belongs to no array")
            continue
        state = findings.arrays[owner]
        if state.array is None:
            continue  # its metadata is reported; its keys cannot be judged
        relative = key[len(prefix_of(owner)):]
        if not state.array.is_chunk_key(relative, nested):
            findings.problem(key, "stray_key", f"is no chunk of the array {owner or '/'} "
                             f"(grid {state.array.grid}, separator "
                             f"{state.array.separator!r})")
            continue
        state.found += 1
        if state.decodes:
            findings.chunks[owner].append(key)


def chunk_problem(raw: bytes, array: Array,
                  codecs: tuple[Any, list[Any]]) -> tuple[str, str] | None:
    """``(kind, message)`` if a stored chunk is damaged, ``None`` if it decodes fully.

    Examples
    --------
    >>> import numcodecs, numpy as np
    >>> array = Array("x", 2, (8,), (4,), np.dtype("<i4"), compressor={"id": "zlib"})
    >>> codecs = (numcodecs.Zlib(), [])
    >>> good = numcodecs.Zlib().encode(np.arange(4, dtype="<i4"))
    >>> chunk_problem(good, array, codecs) is None
    True
    >>> chunk_problem(numcodecs.Zlib().encode(b"abc"), array, codecs)
    ('wrong_size', 'decodes to 3 bytes; a chunk of shape (4,) and dtype int32 is 16')
    """
    from numcodecs.compat import ensure_ndarray_like

    compressor, filters = codecs
    if array.compressor and array.compressor.get("id") == "blosc":
        problem = _blosc_header_problem(raw)
        if problem:
            return "decode_error", problem
    if array.compressor and (limit := _inflate_limit(array)) is not None:
        size = inflates_past(str(array.compressor.get("id")), raw, limit)
        if size is not None:
            return "wrong_size", _inflate_message(size, limit, array)
    try:
        data = compressor.decode(raw) if compressor is not None else raw
        for codec in reversed(filters):
            data = codec.decode(data)
        decoded = ensure_ndarray_like(data)
    except Exception as error:  # noqa: BLE001 - any codec failure is the finding
        return "decode_error", f"fails to decode: {type(error).__name__}: {error}"
    if array.dtype.hasobject:
        if decoded.size != array.chunk_items:
            return "wrong_size", (f"decodes to {decoded.size} items; a chunk of shape "
                                  f"{array.chunks} holds {array.chunk_items}")
    elif decoded.nbytes != array.chunk_nbytes:
        return "wrong_size", (f"decodes to {decoded.nbytes} bytes; a chunk of shape "
                              f"{array.chunks} and dtype {array.dtype} is {array.chunk_nbytes}")
    return None


def _inflate_limit(array: Array) -> int | None:
    """The most bytes a v2 chunk's compressor may give (``None``: object data, no bound).

    Without filters that is the chunk's size; filters (``astype``, ``delta``
    ...) may widen or narrow the items, by up to 8 times.
    """
    if array.dtype.hasobject:
        return None
    return array.chunk_nbytes * (8 if array.filters else 1)


def _inflate_message(size: int, limit: int, array: Array) -> str:
    stated = "a size it does not state (zstd inflates that without bound)" if size < 0 \
        else f"more than {limit:,} bytes"
    return (f"inflates to {stated}; a chunk of shape {array.chunks} and dtype {array.dtype} "
            f"is {array.chunk_nbytes:,}: not decoded (a decompression bomb, or a value of "
            "another array)")


def _blosc_header_problem(raw: bytes) -> str | None:
    """Blosc's own header says how long the value must be: check before decoding."""
    if len(raw) < _BLOSC_HEADER:
        return f"fails to decode: {len(raw)} bytes, shorter than a blosc header"
    stated = int.from_bytes(bytes(raw[12:16]), "little")
    if stated != len(raw):
        return (f"fails to decode: the value is {len(raw)} bytes but its blosc header says "
                f"{stated} (cut short, or overwritten)")
    return None


def _codecs(array: Array) -> tuple[Any, list[Any]]:
    """Fresh codec objects (one set per task: codecs keep state)."""
    import numcodecs

    compressor = numcodecs.get_codec(dict(array.compressor)) if array.compressor else None
    return compressor, [numcodecs.get_codec(dict(c)) for c in array.filters or []]


@dataclass
class _Batch:
    path: str
    keys: list[str]


@dataclass
class _Decoded:
    path: str
    checked: int = 0
    ok: int = 0
    vanished: int = 0
    nbytes: int = 0
    problems: list[Problem] = field(default_factory=list)


def _decode_batch(store: Store, findings: _Findings, pool: Pool, batch: _Batch) -> _Decoded:
    result = _Decoded(batch.path)
    if pool.stop.is_set():
        return result
    state = findings.arrays[batch.path]
    values = store.getitems(batch.keys)
    result.vanished = len(batch.keys) - len(values)
    if state.checker is not None:  # zarr v3: zarr-python's codecs
        found = state.checker.problems(values)
    else:
        assert state.array is not None
        codecs = _codecs(state.array)
        found = {key: problem for key, raw in values.items()
                 if (problem := chunk_problem(raw, state.array, codecs)) is not None}
    result.checked = len(values)
    result.nbytes = sum(len(raw) for raw in values.values())
    result.ok = result.checked - len(found)
    result.problems = [Problem(key, *problem) for key, problem in found.items()]
    return result


def _decode_all(args: argparse.Namespace, store: Store, findings: _Findings) -> None:
    work = [_Batch(path, batch) for path, keys in sorted(findings.chunks.items())
            for batch in batches(keys, BATCH_CHUNKS)]
    total = sum(len(b.keys) for b in work)
    show = progress_wanted(args.progress)
    chunk_bar = progress_bar(show, total, "chunks", "chunk")
    byte_bar = progress_bar(show, None, "read", "B", position=1, scale=True)
    decoded = 0
    try:
        with Pool(args.jobs) as pool:
            for result in pool.map(lambda b: _decode_batch(store, findings, pool, b), work):
                state = findings.arrays[result.path]
                state.ok += result.ok
                state.bad += len(result.problems)
                state.vanished += result.vanished
                findings.problems += result.problems
                findings.bytes_read += result.nbytes
                decoded += result.checked + result.vanished
                chunk_bar.update(result.checked + result.vanished)
                byte_bar.update(result.nbytes)
    except KeyboardInterrupt:
        raise Interrupted(f"decoded {decoded:,} of {plural(total, 'chunk')} before Ctrl-C; "
                          "nothing was changed") from None
    finally:
        byte_bar.close()
        chunk_bar.close()


# ----------------------------------------------------------------- --against
def _compare_with_source(args: argparse.Namespace, store: Store, path: str, keys: list[str],
                         findings: _Findings) -> None:
    """Every key under PATH against SRC's: missing, extra, or with other bytes."""
    source_url = shown(args.against)
    with open_url(args.against, "r") as source:
        theirs = {key for key in keys_under(source, path) if not key.startswith(RESERVED_PREFIX)}
        ours = set(keys)
        for key in sorted(theirs - ours):
            findings.problem(key, "missing_from_copy", f"is in {source_url} but not here")
        for key in sorted(ours - theirs):
            findings.problem(key, "not_in_source", f"is not in {source_url}")
        common = sorted(theirs & ours)
        with Pool(args.jobs) as pool:
            for differ in pool.map(lambda batch: _differing(source, store, batch),
                                   batches(common, BATCH_CHUNKS)):
                for key in differ:
                    findings.problem(key, "differs_from_source",
                                     f"holds other bytes than in {source_url}")
    findings.compared = len(common)


def _differing(source: Store, store: Store, batch: list[str]) -> list[str]:
    theirs, ours = source.getitems(batch), store.getitems(batch)
    return [key for key in batch if theirs.get(key) != ours.get(key)]


# ---------------------------------------------------------------------- run
def run(args: argparse.Namespace) -> int:
    path = path_argument(args.path)
    findings = _Findings()
    with open_url(args.url, "r") as store:
        _refuse_inside_array(store, path)
        # zstores' own records (fences of synchronized writes) are no stray keys.
        keys = [key for key in keys_under(store, path) if not key.startswith(RESERVED_PREFIX)]
        if path and not keys:
            raise CommandError(f"nothing under {path!r} in {shown(args.url)}")
        _check_incomplete_copy(store, findings)
        metadata_keys = [k for k in keys if k.rpartition("/")[2] in METADATA_NAMES]
        documents = _read_metadata(store, metadata_keys, findings)
        _classify_nodes(documents, findings)
        _check_nesting(documents, findings)
        _check_consolidated(documents, findings)
        if not _spec_v1(store, path, keys, findings):
            _open_v3_arrays(store, findings)
            _assign_keys(store, keys, findings)
            _decode_all(args, store, findings)
        if args.against:
            _compare_with_source(args, store, path, keys, findings)
    findings.problems.sort(key=lambda p: p.key)
    if args.json:
        print_json(_json_report(path, findings))
    else:
        _print_report(findings)
    return EXIT_PROBLEMS if findings.problems else EXIT_OK


def _check_incomplete_copy(store: Store, findings: _Findings) -> None:
    unfinished = incomplete_copy(store)
    if unfinished:
        findings.problem(INCOMPLETE_COPY, "incomplete_copy", unfinished)


def _spec_v1(store: Store, path: str, keys: list[str], findings: _Findings) -> bool:
    """Report a spec v1 array (``meta``, ``attrs``) at PATH as one problem, not as stray keys."""
    key = prefix_of(path) + V1_META
    if key not in keys or findings.arrays or findings.groups:
        return False
    try:
        meta = load_json(store[key])
    except (KeyError, MetadataError):
        return False
    if not (isinstance(meta, dict) and meta.get("zarr_format") == 1):
        return False
    findings.problem(key, "spec_v1", "a Zarr spec v1 array, which zarr-python 2 and 3 cannot "
                     "read; run `zstores migrate` on it to convert it to spec v2")
    return True


def _refuse_inside_array(store: Store, path: str) -> None:
    parts = path.split("/") if path else []
    above = ["/".join(parts[:depth]) for depth in range(len(parts))]
    for node in read_nodes(store, above):
        if node.kind == "array":
            raise CommandError(f"{path!r} lies inside the array {node.path or '/'}; "
                               f"verify the array itself")


class MissingZarr(UsageError):
    """v3 arrays to decode and no zarr-python 3 to decode them with (exit status 2)."""


def _open_v3_arrays(store: Store, findings: _Findings) -> None:
    """Give each usable v3 array a checker; refuse to go on without zarr-python 3.

    Passing v3 chunks unread would report "no problems" for data never
    checked, so their presence without zarr-python 3 stops the command.
    """
    v3 = [state for _, state in sorted(findings.arrays.items())
          if state.zarr_format == 3 and state.array is not None]
    if not v3:
        return
    missing = zarr_v3_problem()
    if missing:
        raise MissingZarr(
            f"the store holds {plural(len(v3), 'zarr v3 array')} (first: "
            f"{v3[0].path or '/'}) and {missing}, so their chunks cannot be decoded; "
            f"install it with: {INSTALL_HINT}")
    for state in v3:
        try:
            state.checker = ChunkChecker(store, state.path)
        except ValueError as error:
            findings.problem(prefix_of(state.path) + NODE_V3, "bad_metadata", str(error))
            state.array = None  # its keys cannot be judged without usable metadata


def _problem_counts(problems: list[Problem]) -> str:
    """``"19,990 stray_key, 10 decode_error"``: what a cut list left out, by kind."""
    counts: dict[str, int] = defaultdict(int)
    for problem in problems:
        counts[problem.kind] += 1
    return ", ".join(f"{count:,} {kind}" for kind, count in
                     sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _totals(findings: _Findings) -> dict[str, int]:
    decoding = [s for s in findings.arrays.values() if s.decodes]
    return {
        "arrays": len(findings.arrays),
        "groups": len(findings.groups),
        "chunks_checked": sum(s.ok + s.bad for s in decoding),
        "chunks_ok": sum(s.ok for s in decoding),
        "chunks_bad": sum(s.bad for s in decoding),
        "chunks_missing": sum(s.missing for s in decoding),
        "bytes_read": findings.bytes_read,
        **({} if findings.compared is None else {"keys_compared": findings.compared}),
    }


def _json_report(path: str, findings: _Findings) -> dict[str, Any]:
    return {
        "ok": not findings.problems,
        "path": path,
        **_totals(findings),
        "problems": [p.as_json() for p in findings.problems],
        "array_details": [s.as_json() for _, s in sorted(findings.arrays.items())],
    }


def _print_report(findings: _Findings) -> None:
    print_problems([f"{problem.key}: {problem.message}" for problem in findings.problems],
                   SHOWN_PROBLEMS, _problem_counts(findings.problems))
    totals = _totals(findings)
    summary = (f"checked {plural(totals['arrays'], 'array')} and "
               f"{plural(totals['groups'], 'group')}: {totals['chunks_ok']:,} of "
               f"{plural(totals['chunks_checked'], 'chunk')} decoded "
               f"({human_size(totals['bytes_read'])} read)")
    if totals["chunks_missing"]:
        summary += (f", {plural(totals['chunks_missing'], 'chunk')} missing "
                    "(read as the fill value)")
    if findings.compared is not None:
        summary += f"; {plural(findings.compared, 'key')} compared with the source"
    say(summary)
    count = len(findings.problems)
    say(f"{plural(count, 'problem')} found" if count else "no problems found")
