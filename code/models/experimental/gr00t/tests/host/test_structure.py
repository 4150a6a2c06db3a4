# SPDX-License-Identifier: Apache-2.0
"""The layering the README's developer section promises, checked on the source: the TT port never
imports the reference, module-level imports form no cycle, and no source file outgrows 25 KB."""

from __future__ import annotations

import ast
from pathlib import Path

CODE = Path(__file__).resolve().parents[5]
PORT = CODE / "models" / "experimental" / "gr00t"
PACKAGES = (PORT, CODE / "gr00t_p150", CODE / "tools")


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(CODE).with_suffix("").parts).removesuffix(".__init__")


def imports(path: Path, module_level_only: bool) -> set[str]:
    """The modules ``path`` imports (relative imports resolved), at module level or anywhere."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}  # `from . import x` names a module
    return found


def sources() -> list[Path]:
    return sorted(p for root in PACKAGES for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_tt_port_imports_nothing_from_the_reference():
    offenders = {module_name(p): sorted(m for m in imports(p, module_level_only=False) if ".gr00t.reference" in m)
                 for p in (PORT / "tt").rglob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}


def test_module_level_imports_form_no_cycle():
    names = {module_name(p): p for p in sources()}
    graph = {m: {i for i in imports(p, module_level_only=True) if i in names and i != m} for m, p in names.items()}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*path, m, n]
            if n not in state and (cycle := visit(n, [*path, m])):
                return cycle
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            assert (cycle := visit(m, [])) is None, " -> ".join(cycle)
    assert len(graph) > 80  # the scan saw the whole tree


def test_no_source_file_is_over_25_kb():
    sizes = {str(p.relative_to(CODE)): p.stat().st_size for p in sources()}
    assert len(sizes) > 80 and not {k: v for k, v in sizes.items() if v > 25 * 1024}
