# SPDX-License-Identifier: Apache-2.0
"""The layering the README's developer section promises, checked on the source: the TT port never
imports the reference, imports form no cycle (module-level ones, and function-level ones too), and no source
file (the packages, code/tools and code/scripts) outgrows 25 KB or lacks its SPDX line."""

from __future__ import annotations

import ast
from pathlib import Path

CODE = Path(__file__).resolve().parents[5]
PORT = CODE / "models" / "experimental" / "gr00t"
PACKAGES = (PORT, CODE / "gr00t_p150", CODE / "gr00t_client", CODE / "tools")
SERVER, BACKENDS = CODE / "gr00t_p150" / "server", CODE / "gr00t_p150" / "backends"
SCRIPTS = CODE / "scripts"  # not a package: its files are size- and licence-checked, not import-graphed
SPDX = "# SPDX-License-Identifier: Apache-2.0"


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


def all_sources() -> list[Path]:
    """Every .py file of the packages, code/tools and code/scripts."""
    return sorted({*sources(), *(p for p in SCRIPTS.rglob("*.py") if "__pycache__" not in p.parts)})


def import_graph(module_level_only: bool) -> dict[str, set[str]]:
    names = {module_name(p): p for p in sources()}
    return {m: {i for i in imports(p, module_level_only) if i in names and i != m} for m, p in names.items()}


def first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
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
        if m not in state and (cycle := visit(m, [])):
            return cycle[cycle.index(cycle[-1]):]  # from the module that closes the loop
    return None


def cycle_groups(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that reach each other (strongly connected components of more than one module)."""
    reach = {}
    for m in graph:
        seen, todo = set(), [m]
        while todo:
            for n in graph[todo.pop()]:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        reach[m] = seen
    groups = {tuple(sorted({m} | {n for n in reach[m] if m in reach[n]})) for m in graph if m in reach[m]}
    return sorted(list(g) for g in groups)


def test_the_tt_port_imports_nothing_from_the_reference():
    offenders = {module_name(p): sorted(m for m in imports(p, module_level_only=False) if ".gr00t.reference" in m)
                 for p in (PORT / "tt").rglob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}


def test_module_level_imports_form_no_cycle():
    graph = import_graph(module_level_only=True)
    assert (cycle := first_cycle(graph)) is None, " -> ".join(cycle)
    assert len(graph) > 80  # the scan saw the whole tree


def test_function_level_imports_form_no_cycle_either():
    """A deferred import (inside a function) hides a cycle from the module-level test but still ties the two
    modules together: every import, wherever it stands, counts here."""
    graph = import_graph(module_level_only=False)
    assert len(graph) > 80  # the scan saw the whole tree
    assert not (groups := cycle_groups(graph)), "import cycles: " + "; ".join(
        " <-> ".join(g) + f" (e.g. {' -> '.join(first_cycle({m: graph[m] & set(g) for m in g}))})" for g in groups)


def test_no_source_file_is_over_25_kb():
    sizes = {str(p.relative_to(CODE)): p.stat().st_size for p in all_sources()}
    assert len(sizes) > 80 and not {k: v for k, v in sizes.items() if v > 25 * 1024}


def test_every_source_file_starts_with_its_spdx_line():
    """The first line, or the second after a shebang: every .py of the packages, code/tools and code/scripts,
    and the shell scripts of code/scripts."""
    files = [*all_sources(), *SCRIPTS.rglob("*.sh")]
    missing = [str(p.relative_to(CODE)) for p in files
               if SPDX not in p.read_text(errors="replace").splitlines()[:2]]
    assert len(files) > 80 and not missing, missing


def test_backends_never_import_the_server():
    """Their settings arrive as arguments (``backends/registry.py``), so a backend never calls up into the server."""
    offenders = {module_name(p): sorted(m for m in imports(p, module_level_only=False) if m.startswith(
        "gr00t_p150.server")) for p in BACKENDS.rglob("*.py")}
    assert len(offenders) >= 4 and not {k: v for k, v in offenders.items() if v}


def test_only_the_engine_and_boot_reach_the_backend_or_the_policy():
    """Outside ``engine.py`` (the device owner) and ``boot.py`` (which opens the backend), server code asks the
    engine for what it needs: no ``.backend`` or ``.policy`` attribute anywhere else in the server."""
    found = []
    for path in sorted(SERVER.rglob("*.py")):
        if path.name in ("engine.py", "boot.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("backend", "policy"):
                found.append(f"{path.relative_to(CODE)}:{node.lineno} .{node.attr}")
    assert not found


def test_no_backend_member_is_probed_with_getattr():
    """The ``Backend`` protocol says what every backend has; nothing asks whether it has it."""
    protocol = next(n for n in ast.parse((BACKENDS / "base.py").read_text()).body
                    if isinstance(n, ast.ClassDef) and n.name == "Backend")
    members = {n.target.id for n in protocol.body if isinstance(n, ast.AnnAssign)}
    members |= {n.name for n in protocol.body if isinstance(n, ast.FunctionDef)}
    assert {"batchable", "rtc_variants", "stage", "prepare", "run"} <= members
    probes = []
    for path in sorted([*SERVER.rglob("*.py"), *BACKENDS.rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            if not (call and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2):
                continue
            if isinstance(node.args[1], ast.Constant) and node.args[1].value in members:
                probes.append(f"{path.relative_to(CODE)}:{node.lineno} {node.args[1].value}")
    assert not probes


def test_exception_types_of_the_server_live_in_one_module():
    """Every exception type of the server is defined in ``server/exceptions.py``."""
    defined = {}
    for path in sorted(SERVER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    getattr(b, "id", getattr(b, "attr", "")).endswith(("Error", "Exception", "Conflict"))
                    for b in node.bases):
                defined[node.name] = path.relative_to(SERVER).as_posix()
    outside = {k: v for k, v in defined.items() if v != "exceptions.py"}
    assert len(defined) >= 10 and not outside, outside
