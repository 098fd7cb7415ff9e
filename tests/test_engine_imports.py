"""The layering rule of docs/architecture.md: an engine module never imports ``Store``.

An engine module speaks one engine (py-lmdb, sqlite3, POSIX calls, obstore,
fsspec, the C library) and knows nothing of the ``Store`` contract: no import
of ``zstores.base``, directly or through another zstores module, at any level
(module top, inside a function, under ``TYPE_CHECKING``).  Read from the
source with ``ast``, so an import that only runs on some platform counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "zstores"

#: The engine modules (docs/architecture.md, "Engines apart from stores").
ENGINES = [
    "zstores/stores/lmdb/env.py",
    "zstores/stores/sqlite/connection.py",
    "zstores/stores/directory/posixfs.py",
    "zstores/stores/redis/client.py",
    "zstores/stores/redis/cluster.py",
    "zstores/stores/zip/archive.py",
    "zstores/stores/objectstore/_obstore.py",
    "zstores/stores/objectstore/_fsspec.py",
    "zstores/stores/_libc.py",
    "zstores/stores/_reserve.py",
]
FORBIDDEN = "zstores.base"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_path(name: str) -> Path | None:
    """The source file of zstores module ``name``, or None (not a zstores module)."""
    if name != "zstores" and not name.startswith("zstores."):
        return None
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(source: str, name: str, is_package: bool) -> set[str]:
    """Every module an import statement anywhere in ``source`` names (absolute)."""
    found: set[str] = set()
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                target = ".".join(parts + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # ``from . import x``: x may be a module of its own.
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def reaches(start: str, source: str, is_package: bool) -> list[str] | None:
    """The chain of zstores imports from ``start`` to ``FORBIDDEN``, or None."""
    seen = {start}
    queue: list[tuple[str, list[str], str, bool]] = [(start, [start], source, is_package)]
    while queue:
        name, chain, text, package = queue.pop()
        for target in sorted(imported_modules(text, name, package)):
            if target == FORBIDDEN or target.startswith(FORBIDDEN + "."):
                return [*chain, target]
            path = module_path(target)
            if path is None or target in seen:
                continue
            seen.add(target)
            # Importing a.b.c runs a/__init__ and a/b/__init__ too.
            parents = [p for p in _parents(target) if p not in seen]
            for parent in parents:
                seen.add(parent)
                parent_path = module_path(parent)
                if parent_path is not None:
                    queue.append((parent, [*chain, parent], parent_path.read_text(), True))
            queue.append((target, [*chain, target], path.read_text(),
                          path.name == "__init__.py"))
    return None


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


@pytest.mark.parametrize("relative", ENGINES)
def test_an_engine_module_never_imports_store(relative):
    path = ROOT / relative
    assert path.is_file(), f"{relative} is gone: update ENGINES and docs/architecture.md"
    chain = reaches(module_name(path), path.read_text(), path.name == "__init__.py")
    assert chain is None, f"{relative} imports Store: {' -> '.join(chain)}"


@pytest.mark.parametrize("line", [
    "from ...base import Store",
    "from ... import base",
    "import zstores.base",
    "def f():\n    from ...base import Buffer",
    "from ..lmdb import store",  # Store through the store module
])
def test_the_check_sees_an_import_of_store(line):
    # The check itself can fail: each of these, written in an engine module,
    # is caught (directly, inside a function, or through another module).
    assert reaches("zstores.stores.sqlite.connection", line, False) is not None
