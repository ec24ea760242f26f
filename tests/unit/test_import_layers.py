"""No import circle among roost's modules.

Every ``import`` in every module of ``roost_core`` and ``roost_plugins`` counts, the lazy
ones inside functions too: a circle of lazy imports still means that no module of it can
be understood (or moved) without the others, which is how ``cli``, ``demo`` and ``view``
ended up taking pieces from each other. The graph is read from the source with ``ast``,
so nothing is imported and a circle cannot hide behind import order.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGES = ("roost_core", "roost_plugins")


def module_files(src: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``packages``."""
    modules = {}
    for package in packages:
        for path in sorted((src / package).rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules in ``known`` that module ``name`` imports, anywhere in its body.

    ``from package import sub`` counts as importing ``package.sub`` when ``sub`` is a
    module (importing a submodule is how a package's parts use each other, not a
    circle through the package), else as importing ``package``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            submodules = {f"{source}.{alias.name}" for alias in node.names} & known
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(source)
    return {module for module in found if module in known and module != name}


def import_graph(src: Path = SRC, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    modules = module_files(src, packages)
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_roost_is_part_of_an_import_circle():
    graph = import_graph()
    assert "roost_core.cli" in graph and "roost_plugins.reach" in graph
    assert circles(graph) == []


def test_demo_and_view_take_what_they_share_with_the_cli_from_cli_support():
    """``roost`` dispatches to ``demo`` and ``view`` (that edge points down); neither of them
    takes anything from ``cli`` or from the other, and the shared module none of the three."""
    graph = import_graph()
    top = {"roost_core.cli", "roost_core.demo", "roost_core.view"}
    for name in ("roost_core.demo", "roost_core.view"):
        assert not graph[name] & top, f"{name} imports {sorted(graph[name] & top)}"
        assert "roost_core.cli_support" in graph[name]
    assert "roost_core.cli_support" in graph["roost_core.cli"]
    assert not graph["roost_core.cli_support"] & top


def test_the_check_finds_a_circle_of_lazy_imports(tmp_path):
    """The detector itself: a circle made only of imports inside functions is found, and
    a package importing its own submodules is not a circle."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg import low\n")
    (package / "low.py").write_text("X = 1\n")
    (package / "a.py").write_text("def f():\n    from pkg.b import g\n    return g\n")
    (package / "b.py").write_text("from pkg import low\n\ndef g():\n    from . import a\n    return a\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.low", "pkg.a"}
    assert circles(graph) == [["pkg.a", "pkg.b"]]
