"""The import graph of ``zstores`` (outside ``testing/``): no circle, and arrows point down.

Read from the source with ``ast``, so it sees every import the code can run:
at module level and inside functions (a lazy import closes a circle as
surely as an eager one, only later).  Imports under ``if TYPE_CHECKING:``
never run and are left out: an annotation may name a type from anywhere
(``Store.transaction`` returns a ``Transaction``, which is a ``Store``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "zstores"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                inside.update(id(child) for child in ast.walk(statement))
    return inside


def import_graph() -> dict[str, set[str]]:
    """Module -> the ``zstores`` modules it imports (a package counts as its ``__init__``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_only(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = graph.setdefault(name, set())
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    if submodule in modules:
                        targets.add(submodule)
                    elif source in modules:
                        targets.add(source)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def _outside_testing(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    def kept(module: str) -> bool:
        return not module.startswith("zstores.testing")

    return {module: {t for t in targets if kept(t)}
            for module, targets in graph.items() if kept(module)}


def test_the_scan_sees_lazy_imports_and_finds_a_circle():
    graph = import_graph()
    assert "zstores.transactions" in graph["zstores"]          # module level
    assert "zstores.urls" in graph["zstores.adapters"]          # inside a function
    assert "zstores.transactions" not in graph["zstores.base"]  # only under TYPE_CHECKING
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle_outside_testing():
    assert _circles(_outside_testing(import_graph())) == []


#: Old module paths kept importable, each a re-export of the module that moved.
ALIASES = {"zstores.stores.n5": "zstores.wrappers.n5",
           "zstores.stores.n5_blocks": "zstores.wrappers.n5_blocks"}


@pytest.mark.parametrize("low, high", [("zstores.stores", "zstores.wrappers")])
def test_no_arrow_from_a_store_up_to_the_wrappers(low, high):
    arrows = [(module, target) for module, targets in import_graph().items()
              if (module.startswith(low + ".") or module == low) and module not in ALIASES
              for target in targets if target.startswith(high + ".") or target == high]
    assert arrows == []


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_an_alias_only_re_exports_the_module_that_moved(alias):
    tree = ast.parse(_modules()[alias].read_text(encoding="utf-8"))
    for statement in tree.body:
        if isinstance(statement, ast.ImportFrom):
            assert statement.level == 2 and ALIASES[alias].endswith(f".{statement.module}")
        else:  # the docstring and __all__
            assert isinstance(statement, (ast.Expr, ast.Assign)), ast.unparse(statement)
    assert import_graph()[alias] == {ALIASES[alias]}
