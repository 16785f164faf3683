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
    "cli": {"core", "adapters", "comparison", "evaluation", "datasets"},
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
    assert _package_imports(PACKAGE / "comparison" / "run.py") >= {"evaluation", "adapters", "core"}
    assert _package_imports(PACKAGE / "adapters" / "surprise_algo.py") >= {"core", "adapters"}
    assert "core" in _package_imports(PACKAGE / "core" / "trainer.py")


def test_no_module_is_longer_than_400_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long
