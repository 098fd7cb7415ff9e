"""``zstores ls URL [PATH] [-r]``: a group's members, or the whole tree below it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._common import (
    add_path,
    add_url,
    incomplete_copy,
    open_url,
    path_argument,
    shown,
    subcommand,
)
from ._output import EXIT_OK, EXIT_PROBLEMS, CommandError, print_json, say, visible
from ._tree import Node, children, read_nodes, walk

__all__ = ["add_parser", "run"]


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = subcommand(
        commands, "ls", common, help="list a group's members, or the whole tree (-r)",
        description="List the arrays and groups directly under PATH (the root by default), "
        "or with -r the whole tree below it.  Arrays show their shape and dtype, groups end "
        "with '/'; keys without zarr metadata are shown as they are.  Reads Zarr v2 and v3.  "
        "Exit status 1 if some metadata cannot be read.",
        examples=["zstores ls data.zip", "zstores ls sqlite:///data/run1.sqlite results -r",
                  "zstores ls data.lmdb --json"],
    )
    add_url(parser)
    add_path(parser)
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="show every node below PATH as a tree")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = path_argument(args.path)
    with open_url(args.url, "r") as store:
        [root] = read_nodes(store, [path])
        is_key = bool(path) and path in store
        if root.kind == "other" and path and not is_key and not store.listdir(path):
            raise CommandError(f"nothing at {path!r} in {shown(args.url)}")
        if args.recursive:
            entries = [(depth, node, last) for depth, node, last in walk(store, root)][1:]
        elif root.kind == "array":
            entries = []
        else:
            below = children(store, path)
            entries = [(1, node, i == len(below) - 1) for i, node in enumerate(below)]
        unfinished = incomplete_copy(store)
    nodes = [root] + [node for _, node, _ in entries]
    if args.json:
        print_json({**root.as_json(), "entries": [node.as_json() for node in nodes[1:]]})
    elif args.recursive:
        _print_tree(root, entries)
    elif root.kind == "array" or (is_key and not entries):  # one array, or a plain key
        say(_line(root, "/" if not path else path))
    else:
        _print_columns([node for _, node, _ in entries])
    if unfinished:  # after the listing, which is what the store holds so far
        say(f"zstores ls: warning: {unfinished}", file=sys.stderr)
    return EXIT_PROBLEMS if any(node.problem for node in nodes) else EXIT_OK


def _label(node: Node, name: str) -> str:
    name = visible(name)  # escaped before padding: columns line up as shown
    return name + "/" if node.kind == "group" and not name.endswith("/") else name


def _line(node: Node, name: str, width: int = 0) -> str:
    label = _label(node, name)
    if node.kind == "group" and not node.problem:
        return label
    return f"{label.ljust(width)}  {node.describe()}"


def _print_columns(nodes: list[Node]) -> None:
    width = max((len(_label(node, node.name)) for node in nodes), default=0)
    for node in nodes:
        say(_line(node, node.name, width))


def _branches() -> tuple[str, str, str, str]:
    """Tree drawing characters, in ASCII when stdout cannot show box drawing."""
    try:
        "├└│─".encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return "|-- ", "`-- ", "|   ", "    "
    return "├── ", "└── ", "│   ", "    "


def _print_tree(root: Node, entries: list[tuple[int, Node, bool]]) -> None:
    middle, last_branch, through, blank = _branches()
    say(_line(root, root.path or "/"))
    open_levels: list[bool] = []  # per depth: does a sibling still follow?
    for depth, node, last in entries:
        del open_levels[depth - 1:]
        indent = "".join(through if more else blank for more in open_levels)
        say(indent + (last_branch if last else middle) + _line(node, node.name))
        open_levels.append(not last)
