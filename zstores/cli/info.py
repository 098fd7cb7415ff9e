"""``zstores info URL [PATH]``: an array's layout and storage, or a group's members.

An array's report is what zarr-python's ``.info`` shows.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from ..base import Store
from ..metadata import METADATA_NAMES
from ._common import (
    INCOMPLETE_COPY,
    add_path,
    add_url,
    incomplete_copy,
    open_url,
    path_argument,
    shown,
    subcommand,
)
from ._output import EXIT_OK, EXIT_PROBLEMS, CommandError, human_size, print_json, say
from ._tree import Node, children, keys_under, read_nodes

__all__ = ["add_parser", "array_report", "count_chunks", "is_nested", "run"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommand(
        commands, "info", common, help="describe an array or a group",
        description="For an array: type, dtype, shape, chunk shape, order, compressor and "
        "filters (Zarr v2) or codecs (Zarr v3; a sharded array also shows its shard shape, "
        "and its chunk shape is the inner chunks'), bytes, bytes stored, storage ratio and "
        "chunks (or shards) initialized, as zarr-python's Array.info shows them.  For a "
        "group: its members.  Exit status 1 if the metadata cannot be read.",
        examples=["zstores info data.zip temperature", "zstores info lmdb:///data/run1.lmdb",
                  "zstores info data.sqlite temperature --json"],
    )
    add_url(parser)
    add_path(parser)
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = path_argument(args.path)
    with open_url(args.url, "r") as store:
        [node] = read_nodes(store, [path])
        if node.problem:
            kind = "" if node.kind == "other" else f"{node.kind} "
            raise CommandError(f"{node.path or '/'}: unreadable {kind}metadata: "
                               f"{node.problem}")
        if node.kind == "array":
            report = array_report(store, node)
        elif node.kind == "other" and path and path in store:
            report = _key_report(store, path)
        elif node.kind == "group" or not path or store.listdir(path):
            report = _group_report(store, node)
        else:
            raise CommandError(f"nothing at {path!r} in {shown(args.url)}")
        unfinished = incomplete_copy(store)
        if unfinished:
            report.setdefault("problems", []).append(f"{INCOMPLETE_COPY}: {unfinished}")
    if args.json:
        print_json(report)
    else:
        _print_report(report)
    return EXIT_PROBLEMS if report.get("problems") else EXIT_OK


def is_nested(store: Store) -> bool:
    """Whether the store lists dotted chunk keys with ``/`` (NestedDirectoryStore)."""
    from ..stores.directory import NestedDirectoryStore

    return isinstance(store, NestedDirectoryStore)


def count_chunks(store: Store, node: Node) -> int:
    """How many keys under the array name a chunk of its grid."""
    assert node.array is not None
    prefix_length = len(node.path) + 1 if node.path else 0
    nested = is_nested(store)
    return sum(1 for key in keys_under(store, node.path)
               if node.array.is_chunk_key(key[prefix_length:], nested))


def _codec_text(config: dict[str, Any] | None) -> str:
    if config is None:
        return "None"
    import numcodecs

    return repr(numcodecs.get_codec(dict(config)))


def _v3_codec_text(codec: Any) -> str:
    """``gzip(level=5)``; a sharding codec shows its inner codecs the same way.

    Examples
    --------
    >>> _v3_codec_text({"name": "sharding_indexed", "configuration": {"chunk_shape": [4],
    ...     "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}})
    "sharding_indexed(chunk_shape=[4], codecs=[bytes(endian='little')])"
    """
    if not isinstance(codec, dict):
        return str(codec)
    options = ", ".join(f"{k}={_v3_option_text(v)}"
                        for k, v in (codec.get("configuration") or {}).items())
    return f"{codec.get('name')}({options})"


def _v3_option_text(value: Any) -> str:
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v
                                                 for v in value):
        return "[" + ", ".join(_v3_codec_text(v) for v in value) + "]"
    return repr(value)


def array_report(store: Store, node: Node) -> dict[str, Any]:
    """The facts ``info`` shows for an array, keyed by their JSON names."""
    array = node.array
    assert array is not None
    stored = store.getsize(node.path)
    report: dict[str, Any] = {
        "name": "/" + node.path,
        "type": f"zarr v{array.zarr_format} array",
        "data_type": str(array.dtype),
        "shape": list(array.shape),
    }
    if array.inner_chunks is not None:  # as zarr-python shows a sharded array
        report["shard_shape"] = list(array.chunks)
        report["chunk_shape"] = list(array.inner_chunks)
    else:
        report["chunk_shape"] = list(array.chunks)
    report["order"] = array.order
    if array.zarr_format == 2:  # codec configs in JSON, shown as numcodecs shows codecs
        report["compressor"] = array.compressor
        if array.filters:
            report["filters"] = array.filters
    else:
        report["codecs"] = array.codecs
    report["fill_value"] = array.fill_value
    report["store_type"] = type(store).__name__
    if array.itemsize:
        report["nbytes"] = array.nbytes
    report["nbytes_stored"] = stored
    if array.itemsize and stored:
        report["storage_ratio"] = round(array.nbytes / stored, 1)
    if array.inner_chunks is not None:  # a key holds a shard: count those
        report["shards_initialized"] = count_chunks(store, node)
        report["nshards"] = array.nchunks
        report["nchunks"] = array.nchunks * math.prod(
            s // c for s, c in zip(array.chunks, array.inner_chunks, strict=True) if c)
    else:
        report["chunks_initialized"] = count_chunks(store, node)
        report["nchunks"] = array.nchunks
    return report


def _key_report(store: Store, path: str) -> dict[str, Any]:
    """A key that is no node: its size, and the array whose chunk it is (if any)."""
    parts = path.split("/")
    above = read_nodes(store, ["/".join(parts[:depth]) for depth in range(len(parts))])
    owner = next((node for node in reversed(above) if node.kind == "array"), None)
    report: dict[str, Any] = {"name": "/" + path}
    if owner is None or owner.array is None:
        report["type"] = "metadata document" if parts[-1] in METADATA_NAMES else \
            "key (of no array)"
    else:
        relative = path[len(owner.path) + 1:] if owner.path else path
        chunk = owner.array.is_chunk_key(relative, is_nested(store))
        report["type"] = "chunk" if chunk else "metadata document" \
            if parts[-1] in METADATA_NAMES else "key (no chunk of the array's grid)"
        report["array"] = "/" + owner.path
    report["store_type"] = type(store).__name__
    report["nbytes_stored"] = store.getsize(path)
    return report


def _group_report(store: Store, node: Node) -> dict[str, Any]:
    members = children(store, node.path)
    arrays = [m.name for m in members if m.kind == "array"]
    groups = [m.name for m in members if m.kind == "group"]
    kind = f"zarr v{node.zarr_format} group" if node.kind == "group" else "no zarr metadata"
    report: dict[str, Any] = {
        "name": "/" + node.path,
        "type": kind,
        "store_type": type(store).__name__,
        "members": len(arrays) + len(groups),
        "arrays": arrays,
        "groups": groups,
    }
    problems = [f"{m.path}: {m.problem}" for m in members if m.problem]
    if problems:
        report["problems"] = problems
    return report


_LABELS = {
    "name": "Name", "type": "Type", "array": "Array", "data_type": "Data type", "shape": "Shape",
    "shard_shape": "Shard shape", "chunk_shape": "Chunk shape", "order": "Order",
    "compressor": "Compressor",
    "filters": "Filters", "codecs": "Codecs", "fill_value": "Fill value",
    "store_type": "Store type", "nbytes": "No. bytes", "nbytes_stored": "No. bytes stored",
    "storage_ratio": "Storage ratio", "chunks_initialized": "Chunks initialized",
    "shards_initialized": "Shards initialized",
    "members": "No. members", "arrays": "Arrays", "groups": "Groups",
    "problems": "Problems",
}


def _value_text(name: str, value: Any, report: dict[str, Any]) -> str:
    if name in ("shape", "chunk_shape", "shard_shape"):
        return str(tuple(value))
    if name in ("nbytes", "nbytes_stored"):
        return f"{value} ({human_size(value)})" if value >= 1024 else str(value)
    if name == "chunks_initialized":
        return f"{value}/{report['nchunks']}"
    if name == "shards_initialized":
        return f"{value}/{report['nshards']} ({report['nchunks']} inner chunks in all)"
    if name == "compressor":
        return _codec_text(value)
    if name == "filters":
        return ", ".join(_codec_text(config) for config in value)
    if name == "codecs":
        return ", ".join(_v3_codec_text(codec) for codec in value)
    if name in ("arrays", "groups", "problems"):
        return ", ".join(value)
    return str(value)


def _print_report(report: dict[str, Any]) -> None:
    rows = []
    for name, value in report.items():
        if name not in _LABELS:
            continue
        if name == "arrays":  # a group: the counts zarr-python shows before the names
            rows += [("No. arrays", str(len(value))), ("No. groups", str(len(report["groups"])))]
        if name in ("arrays", "groups") and not value:
            continue  # "No. arrays : 0" says it; an empty list of names would be a blank
        rows.append((_LABELS[name], _value_text(name, value, report)))
    width = max(len(label) for label, _ in rows)
    for label, text in rows:
        say(f"{label.ljust(width)} : {text}")
