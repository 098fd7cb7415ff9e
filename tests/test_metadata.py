"""zstores.metadata: one error, one set of key names and one node classification for all.

The hierarchy functions, the CLI, consolidated metadata, the migrations and
the synchronizers read metadata through this package; these tests pin what
they share (the error type users catch, the names, how a path is
classified) and that the old import paths still work.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import zstores
from zstores import MemoryStore, hierarchy
from zstores.errors import ZStoresError
from zstores.metadata import (
    ARRAY_V2,
    GROUP_V2,
    METADATA_NAMES,
    NODE_NAMES,
    NODE_V3,
    MetadataError,
    load_json,
    metadata_format,
)
from zstores.metadata import v2 as meta_v2
from zstores.metadata.checks import check_array_v2
from zstores.metadata.nodes import classify, find_node, read_node

V2_ARRAY = {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<i2", "compressor": None,
            "fill_value": 0, "order": "C", "filters": None}
V3_ARRAY = {"zarr_format": 3, "node_type": "array", "shape": [10], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
            "codecs": [{"name": "bytes"}], "fill_value": 0,
            "chunk_key_encoding": {"name": "default"}}


def encoded(document: object) -> bytes:
    return json.dumps(document).encode()


# ------------------------------------------------------------ the one error
def test_one_metadata_error_everywhere() -> None:
    from zstores.migrate_v3 import MetadataError as from_migrate_v3
    from zstores.wrappers import consolidated

    assert hierarchy.MetadataError is MetadataError
    assert from_migrate_v3 is MetadataError
    assert consolidated.MetadataError is MetadataError
    assert issubclass(MetadataError, ZStoresError) and issubclass(MetadataError, ValueError)


@pytest.mark.parametrize("value, message", [
    (b"{", r"^'a/\.zarray' is not JSON \(Expecting"),
    (b"caf\xe9", r"^'a/\.zarray' is not UTF-8 text \(unexpected end of data at byte 3\)"),
])
def test_load_json_names_the_key_and_the_rule(value: bytes, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        load_json(value, key="a/.zarray")


def test_migrate_1to2_of_undecodable_meta_is_a_metadata_error() -> None:
    store = {"meta": b"\xff not json"}
    with pytest.raises(MetadataError, match="'meta' is not UTF-8"):
        zstores.migrate_1to2(store)
    assert store == {"meta": b"\xff not json"}  # nothing written


def test_migrate_1to2_of_a_bad_dtype_is_a_metadata_error() -> None:
    meta = {"zarr_format": 1, "shape": [4], "chunks": [2], "dtype": 7, "compression": None,
            "compression_opts": None, "fill_value": 0, "order": "C"}
    store = {"meta": encoded(meta)}
    with pytest.raises(MetadataError, match="'dtype' must be a typestr"):
        zstores.migrate_1to2(store)
    assert list(store) == ["meta"]


def test_consolidated_of_undecodable_metadata_names_the_key() -> None:
    store = MemoryStore()
    hierarchy.init_group(store)
    store["a/.zarray"] = b"{"
    with pytest.raises(MetadataError, match=r"'a/\.zarray' is not JSON"):
        zstores.consolidate_metadata(store)


# -------------------------------------------------------------- key names
def test_key_names() -> None:
    assert (ARRAY_V2, GROUP_V2, NODE_V3) == NODE_NAMES == (".zarray", ".zgroup", "zarr.json")
    assert METADATA_NAMES == {".zarray", ".zgroup", ".zattrs", ".zmetadata", "zarr.json"}
    assert hierarchy.ARRAY_META_KEY == ARRAY_V2 and hierarchy.GROUP_META_KEY == GROUP_V2
    assert [metadata_format(k) for k in ("a/.zmetadata", "zarr.json", "a/zarr.jsonx", "0")] \
        == [2, 3, None, None]


# ------------------------------------------------------- classification
def test_classify_v2_nodes_keep_their_kind_with_their_problems() -> None:
    array = classify("a", ARRAY_V2, V2_ARRAY)
    assert (array.kind, array.zarr_format, array.problems) == ("array", 2, [])
    assert array.array is not None and array.array.grid == (2,)
    broken = classify("a", ARRAY_V2, {**V2_ARRAY, "order": "X"})
    assert broken.kind == "array" and broken.array is None
    assert broken.problems == ["'order' must be 'C' or 'F', not 'X'"]
    group = classify("g", GROUP_V2, {"zarr_format": 3})
    assert group.kind == "group" and group.problems == ["'zarr_format' is 3, not 2"]


def test_classify_v3_nodes() -> None:
    array = classify("a", NODE_V3, V3_ARRAY)
    assert (array.kind, array.zarr_format) == ("array", 3)
    assert array.array.chunk_key((2,)) == "c/2"
    assert classify("g", NODE_V3, {"zarr_format": 3, "node_type": "group"}).kind == "group"
    odd = classify("o", NODE_V3, {"zarr_format": 3, "node_type": "thing"})
    assert odd.kind == "other" and odd.problems == [
        "'node_type' is 'thing', not 'array' or 'group'"]
    unreadable = classify("o", NODE_V3, {**V3_ARRAY, "shape": "x"})
    assert unreadable.kind == "other" and unreadable.problems[0].startswith(
        "not a zarr v3 array document")
    with pytest.raises(ValueError, match="not a node's metadata key"):
        classify("a", ".zattrs", {})


def test_read_node_and_find_node() -> None:
    assert read_node("a", ARRAY_V2, b"{").problems[0].startswith("not JSON")
    assert read_node("a", ARRAY_V2, b"{").kind == "array"
    found = {"g/.zgroup": encoded({"zarr_format": 2}), "g/zarr.json": encoded(V3_ARRAY)}
    assert find_node("g", found).zarr_format == 2  # a v2 document wins, as readers look
    assert find_node("", {"zarr.json": encoded(V3_ARRAY)}).kind == "array"
    assert find_node("g", {"g/.zattrs": b"{}"}) is None


def test_cli_and_verify_agree_on_a_v3_document_of_no_node_type(tmp_path: Path) -> None:
    """One classification: ``ls`` and ``verify`` report the same rule for the same document."""
    url = str(tmp_path / "odd.zip")
    with zstores.open_store(url, mode="w") as store:
        hierarchy.init_group(store)
        store["odd/zarr.json"] = encoded({"zarr_format": 3, "node_type": "thing"})
    command = [sys.executable, "-m", "zstores"]
    listed = subprocess.run([*command, "ls", url, "--json"], capture_output=True, text=True,
                            check=False)  # exit 1: a node is unreadable
    checked = subprocess.run([*command, "verify", url, "--json"], capture_output=True,
                             text=True, check=False)  # exit 1: problems found
    entry = json.loads(listed.stdout)["entries"][0]
    problems = json.loads(checked.stdout)["problems"]
    rule = "'node_type' is 'thing', not 'array' or 'group'"
    assert entry["problem"] == rule
    assert any(rule in problem["message"] for problem in problems), problems


# ------------------------------------------------------------ v2 documents
def test_parse_dtype_round_trips_what_init_array_writes() -> None:
    store: dict[str, bytes] = {}
    dtype = np.dtype([("a", "<i4"), ("b", "<f8", (2, 3)), ("c", [("d", "|u1")])])
    hierarchy.init_array(store, shape=3, dtype=dtype, compressor=None)
    meta = json.loads(store[".zarray"])
    assert meta_v2.parse_dtype(meta["dtype"]) == dtype
    assert check_array_v2(meta) == []


def test_group_metadata_is_zarr2s() -> None:
    assert meta_v2.GROUP_METADATA == b'{\n    "zarr_format": 2\n}'


# ------------------------------------------------------------ import paths
def test_old_and_new_import_paths() -> None:
    from zstores.hierarchy import migrate_1to2 as from_hierarchy
    from zstores.migrate_v1 import migrate_1to2

    assert zstores.migrate_1to2 is from_hierarchy is migrate_1to2
    from zstores.migrate_v3 import migrate_2to3, plan_2to3

    assert zstores.migrate_2to3 is migrate_2to3 and zstores.plan_2to3 is plan_2to3
    assert {"migrate_2to3", "plan_2to3"} <= set(zstores.__all__) & set(dir(zstores))


def _usage_lines(doc: str) -> dict[str, str]:
    """Each subcommand's usage in the module docstring, continuation lines joined."""
    usages: dict[str, str] = {}
    name = None
    for raw in doc.splitlines():
        line = raw.strip()
        if line.startswith("zstores ") and not line.startswith("zstores --"):
            name = line.split()[1]
            usages[name] = line
        elif name and line and raw.startswith(" " * 8):  # a usage's continuation
            usages[name] += " " + line
        else:
            name = None
    return usages


def test_usage_lines_list_every_option() -> None:
    import zstores.cli

    # The module's usage line of each subcommand names every option its parser takes.
    usages = _usage_lines(zstores.cli.__doc__)
    parser = zstores.cli.build_parser()
    commands = next(action for action in parser._actions
                    if isinstance(action, argparse._SubParsersAction))
    assert set(usages) == set(commands.choices)
    for name, subparser in commands.choices.items():
        line = usages[name]

        def named(option: str, line: str = line) -> bool:
            return f"[{option}" in line or f"| {option}]" in line

        missing = {action.option_strings[-1] for action in subparser._actions
                   if action.option_strings and action.dest not in ("help", "debug")
                   and not any(named(option) for option in action.option_strings)}
        assert missing == set(), line
    line = usages["migrate"]
    assert "[--to 2|3]" in line and "[--dry-run]" in line and "[--remove-v2-metadata]" in line
