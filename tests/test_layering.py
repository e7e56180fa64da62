"""The layering of docs/architecture.md holds: import-linter's contracts in pyproject.toml."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    # the interpreter's own script first: a venv need not be on PATH to have it
    beside = Path(sys.executable).parent / "lint-imports"
    exe = str(beside) if beside.is_file() else shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter not installed (pip install '.[test]')")
    done = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_foundation_modules_import_nothing_of_ours() -> None:
    """mrc.units, mrc.ev and mrc.packet sit below topology: they may import only the
    standard library, so any layer can use them without a cycle."""
    files = [ROOT / "mrc" / "units.py", ROOT / "mrc" / "packet.py",
             *sorted((ROOT / "mrc" / "ev").glob("*.py"))]
    for path in files:
        source = path.read_text()
        imports = [line for line in source.splitlines()
                   if line.startswith(("import ", "from ")) and "__future__" not in line]
        # the ev package's modules may use each other, nothing else of ours
        ours = [line for line in imports if (" mrc" in line or " topology" in line)
                and not line.startswith(("from mrc.ev ", "from mrc.ev.", "import mrc.ev"))]
        assert not ours, (path.name, ours)


def test_every_package_ships() -> None:
    """`pip install .` installs the packages listed in pyproject.toml: a package missing from
    the list would work from a checkout and be absent from an install."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for top in ("mrc", "topology") for init in (ROOT / top).rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


# ---------------------------------------------------------------------- import cycles
def _module_files() -> dict[str, Path]:
    """Every module under mrc/ and topology/ by dotted name (a package by its own name)."""
    out: dict[str, Path] = {}
    for top in ("mrc", "topology"):
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports, counting every import statement wherever
    it stands: module level, under ``if TYPE_CHECKING:``, inside a function. ``from a import
    b`` names ``a.b`` when that is a module, else ``a``."""
    files = _module_files()

    def ours(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        deps: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(ours(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    deps.add(full if full in files else ours(base))
        graph[module] = {dep for dep in deps if dep is not None and dep != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each
    as one cycle through it, written ``a -> b -> ... -> a``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for dep in edges:
                if dep not in index:
                    index[dep] = low[dep] = len(index)
                    stack.append(dep)
                    on_stack.add(dep)
                    work.append((dep, iter(sorted(graph[dep]))))
                    break
                if dep in on_stack:
                    low[node] = min(low[node], index[dep])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(_one_cycle(graph, set(component)))
    return found


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the first module of ``component`` (breadth first)."""
    start = min(component)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for dep in sorted(graph[node] & component):
                if dep == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [*reversed(path), start]
                if dep not in parent:
                    parent[dep] = node
                    nxt.append(dep)
        frontier = nxt
    raise AssertionError(f"no cycle in {sorted(component)}")  # pragma: no cover


def test_no_import_cycles() -> None:
    """No module imports itself back through others, even through imports made only for
    type checking or inside a function: each room can be read (and compiled) on top of the
    ones below it."""
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_cycle_finder() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    # an import made only for type checking counts (network names its elements that way)
    assert "mrc.sim.host" in _import_graph()["mrc.sim.network"]


# ---------------------------------------------------------------------- sizes
#: The most lines a module or a function may have: past them, split along meaning.
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def test_no_module_or_function_too_long() -> None:
    """Every module under mrc/ and topology/ has at most 500 lines and every function or
    method at most 80 (from its ``def`` to its last line, decorators not counted)."""
    long: list[str] = []
    for module, path in sorted(_module_files().items()):
        source = path.read_text()
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            long.append(f"{module}: {lines} lines")
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name} (line {node.lineno}): {length} lines")
    assert not long, "too long:\n" + "\n".join(long)
