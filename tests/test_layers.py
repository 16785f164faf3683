"""Dependencies point one way (docs/conventions.md, docs/architecture.md): no module imports a higher layer."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mogp_surprise"
#: what each part of the package may import from the package itself
ALLOWED = {
    "core": {"core"},
    "evaluation": {"evaluation"},
    "datasets": {"datasets"},
    "adapters": {"core", "adapters"},
    "comparison": {"core", "adapters", "comparison", "evaluation", "datasets"},
    "cli": {"core", "adapters", "comparison", "evaluation", "datasets", "cli"},
}


def _part(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _package_imports(path: Path) -> set[str]:
    """The parts of the package that ``path`` imports (relative or absolute imports, at any depth)."""
    rel = path.relative_to(PACKAGE)
    here = list(rel.parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[:len(here) - (node.level - 1)] if node.level > 1 else here
            target = [*base, *(node.module.split(".") if node.module else [])]
            names = target or [alias.name for alias in node.names]
            out.add(names[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mogp_surprise."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("mogp_surprise."))
    return out


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if _part(p) in ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_higher_layer(path: Path) -> None:
    wrong = _package_imports(path) - ALLOWED[_part(path)] - {"_version"}
    assert not wrong, f"{path.relative_to(PACKAGE)} imports {sorted(wrong)}"


def test_the_scan_sees_imports() -> None:
    """The scan finds what these modules are known to import (so that the test above can fail)."""
    assert _package_imports(PACKAGE / "comparison" / "run.py") >= {"evaluation", "core"}
    assert _package_imports(PACKAGE / "comparison" / "algorithms.py") >= {"adapters", "core"}
    assert _package_imports(PACKAGE / "adapters" / "surprise_algo.py") >= {"core", "adapters"}
    assert "core" in _package_imports(PACKAGE / "core" / "trainer.py")


def test_no_module_is_longer_than_400_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _known(name: str) -> bool:
    base = PACKAGE.parent / Path(*name.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _import_graph() -> dict[str, set[str]]:
    """Every package module's imports of other package modules, wherever they stand (module level, inside a
    function, under ``if TYPE_CHECKING``)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    module = ".".join([*base, *(node.module.split(".") if node.module else [])])
                else:
                    module = node.module or ""
                if not module.startswith("mogp_surprise"):
                    continue
                for alias in node.names:  # `from . import checkpoint` names a module, not the package
                    if _known(f"{module}.{alias.name}"):
                        targets.add(f"{module}.{alias.name}")
                    elif _known(module):
                        targets.add(module)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.startswith("mogp_surprise.") and _known(a.name))
        graph[name] = targets - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through every strongly connected group of modules that import each other (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_in_the_package() -> None:
    """Not even through imports inside functions or under ``TYPE_CHECKING``: every module can be read on its
    own, below what it uses."""
    assert not _cycles(_import_graph())


def test_the_cycle_check_finds_a_cycle() -> None:
    """The check above can fail: a made-up graph with a cycle, and the real graph holds the known edges."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = _import_graph()
    assert "mogp_surprise.core.model" in graph["mogp_surprise.core.trainer"]
    assert "mogp_surprise.core.checkpoint" in graph["mogp_surprise.core.trainer"]  # `from . import checkpoint`
    assert "mogp_surprise.core.state" in graph["mogp_surprise.core.predictive"]
