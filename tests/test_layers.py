"""The package's layers point one way (DESIGN; docs/architecture.md):

    cli → evaluation → {attacks, calibration, wdro, report} → models, data
        → losses, threat, registry, paths, seeding, launch → errors, text, version

Every ``import`` in ``suite/`` (module level or inside a function) is read from the source. A
module may import its own package, any lower layer, and, within one layer, only what the
``SIDEWAYS`` table allows. No two files import each other, through any chain of imports. No
module reads the package root's namespace (``suite/__init__.py`` only re-exports, for users).
``bench/`` never imports the CLI. Nothing outside ``suite/models`` reaches into a model's
``.module``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suite"
BENCH = ROOT / "bench"
#: Layer of every top-level package or module of ``suite``; higher layers may import lower ones.
LAYERS = {
    "errors": 0, "text": 0, "version": 0,
    "registry": 1, "losses": 1, "threat": 1, "paths": 1, "seeding": 1, "launch": 1, "intervals": 1,
    "strict_json": 1, "lazy": 1, "collector": 1, "hub_probe": 1,
    "progress": 2,
    "models": 2, "data": 2,
    "attacks": 3, "calibration": 3, "wdro": 3, "report": 3,
    "evaluation": 4, "train": 4,
    "cli": 5, "__main__": 5,
}
#: Imports allowed between different packages of one layer (one way only).
SIDEWAYS = {("models", "data"), ("models", "progress"), ("__main__", "cli"), ("errors", "text")}


def _part(module: str) -> str:
    """The top-level part of ``suite.<part>...``, or ``""`` for the package root itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
    return [(name, line) for name, line in found if name == "suite" or name.startswith("suite.")]


def test_every_import_points_down_or_stays_in_its_package():
    problems = []
    for path in sorted(SUITE.rglob("*.py")):
        relative = path.relative_to(SUITE)
        if relative.parts == ("__init__.py",):
            continue  # the public API face: it lazily re-exports the evaluation layer
        source = relative.parts[0].removesuffix(".py")
        assert source in LAYERS, f"{relative}: add its package to LAYERS"
        for module, line in _imports(path):
            target = _part(module)
            if target in ("", source):  # the package root (its own test below), or its own package
                continue
            assert target in LAYERS, f"{relative}:{line}: unknown part {module}"
            upward = LAYERS[target] > LAYERS[source]
            sideways = LAYERS[target] == LAYERS[source] and (source, target) not in SIDEWAYS
            if upward or sideways:
                problems.append(f"{relative}:{line} imports {module} ({'up' if upward else 'sideways'})")
    assert not problems, "\n".join(problems)


def test_nothing_outside_models_touches_a_models_module():
    offenders = []
    for path in sorted(SUITE.rglob("*.py")):
        if path.relative_to(SUITE).parts[0] == "models":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        offenders += [f"{path.relative_to(SUITE)}:{node.lineno}" for node in ast.walk(tree)
                      if isinstance(node, ast.Attribute) and node.attr == "module"]
    assert not offenders, f".module used outside suite/models: {offenders}"


def test_no_file_is_over_420_lines():
    long = {str(path.relative_to(ROOT)): n for path in sorted(SUITE.rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > 420}
    assert not long, f"files over 420 lines (split them): {long}"


def _module_name(path: Path) -> str:
    """``suite/a/b.py`` → ``suite.a.b``; ``suite/a/__init__.py`` → ``suite.a``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module of ``from ... import`` (relative imports resolved against ``module``)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")[: len(module.split(".")) - node.level + is_package]
    return ".".join(base + ([node.module] if node.module else []))


def _import_graph() -> tuple[dict[str, Path], dict[str, dict[str, int]]]:
    """Every module of ``suite`` (its file) and the modules of ``suite`` it imports (first line).

    ``from suite.a import b`` imports the module ``suite.a.b`` when there is one, else a name of
    ``suite.a`` (its ``__init__.py``). Module-level, function-level and ``TYPE_CHECKING``
    imports all count.
    """
    files = {_module_name(path): path for path in sorted(SUITE.rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        edges = graph.setdefault(module, {})
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                base = _absolute(node, module, path.name == "__init__.py")
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if target in files and target != module:
                    edges.setdefault(target, node.lineno)
    return files, graph


def _components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _cycles(graph: dict[str, dict[str, int]], component: list[str], limit: int = 50) -> list[list[str]]:
    """The elementary cycles within one component, each from its smallest module (at most ``limit``)."""
    members = set(component)
    cycles: list[list[str]] = []
    for start in component:
        paths = [[start]]
        while paths and len(cycles) < limit:
            path = paths.pop()
            for child in sorted(graph[path[-1]], reverse=True):
                if child == start:
                    cycles.append(path + [start])
                elif child in members and child > start and child not in path:
                    paths.append(path + [child])
    return cycles[:limit]


def test_no_import_circles_between_files():
    files, graph = _import_graph()
    lines = []
    for component in _components(graph):
        lines.append(f"circle among {', '.join(str(files[m].relative_to(ROOT)) for m in component)}:")
        cycles = _cycles(graph, component)
        for cycle in cycles:
            steps = [f"{files[a].relative_to(ROOT)}:{graph[a][b]}" for a, b in zip(cycle, cycle[1:])]
            lines.append(f"    {' → '.join(steps)} → {files[cycle[0]].relative_to(ROOT)}")
        if len(cycles) == 50:
            lines.append("    ... (the first 50 circles of this group)")
    assert not lines, "import circles (a file imports, through these lines, a file that imports it):\n" + "\n".join(lines)


def _root_reads(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """Where ``source`` (of ``module``) reads the package root's names: ``from suite import X``
    (``from . import X`` at the top level), ``import suite``, or ``suite.X`` after ``import suite.x``."""
    tree = ast.parse(source)
    found, binds_root = [], False  # `import suite.x` (no `as`) binds the name `suite`
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _absolute(node, module, is_package) == "suite":
            found.append((node.lineno, f"from suite import {', '.join(alias.name for alias in node.names)}"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, "import suite") for alias in node.names if alias.name == "suite"]
            binds_root |= any(alias.name.startswith("suite.") and alias.asname is None for alias in node.names)
    if binds_root:
        found += [(node.lineno, f"suite.{node.attr} (through the package root)") for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "suite"]
    return found


def test_no_module_reads_the_package_root():
    """``suite/__init__.py`` re-exports for users; inside the package, import the module itself
    (``from suite.version import __version__``, ``import suite.strict_json as strict_json``)."""
    problems = [f"{path.relative_to(ROOT)}:{line}: {what}" for path in sorted(SUITE.rglob("*.py"))
                if path != SUITE / "__init__.py"
                for line, what in _root_reads(path.read_text(), _module_name(path), path.name == "__init__.py")]
    assert not problems, "modules reading suite/__init__.py's names:\n" + "\n".join(problems)


def _imports_the_cli(node: ast.AST) -> str | None:
    """The import of ``suite.cli`` that ``node`` is, in any spelling, or ``None``."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
          and isinstance(node.args[0].value, str)
          and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")):
        names = [node.args[0].value]
    else:
        return None
    return next((name for name in names if name == "suite.cli" or name.startswith("suite.cli.")), None)


def test_bench_uses_the_python_api_not_the_cli():
    """bench/ calls suite.evaluate, suite.run_recipe, suite.certify... (it may run the
    ``advsuite`` command as a subprocess, never import it)."""
    offenders = []
    for path in sorted(BENCH.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        offenders += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
                      for node in ast.walk(tree) if (name := _imports_the_cli(node)) is not None]
    assert not offenders, "bench/ imports the CLI (use the public API):\n" + "\n".join(offenders)


def test_the_checks_catch_every_spelling():
    """Each check above, on sources and graphs made up for it."""
    cli = ["import suite.cli", "import suite.cli.run as r", "from suite.cli.run import run_loaded",
           "from suite import cli", "importlib.import_module('suite.cli.main')"]
    assert [_imports_the_cli(ast.parse(line).body[0].value if "(" in line else ast.parse(line).body[0])
            for line in cli] == ["suite.cli", "suite.cli.run", "suite.cli.run", "suite.cli", "suite.cli.main"]
    assert _imports_the_cli(ast.parse("from suite.client import x").body[0]) is None
    assert _imports_the_cli(ast.parse("import suite").body[0]) is None
    reads = "from suite import __version__\nimport suite\nimport suite.a.b\nsuite.a.b.f()\nfrom . import x"
    assert [line for line, _ in _root_reads(reads, "suite.top")] == [1, 2, 5, 4]
    assert _root_reads("from . import x\nimport suite.a as a\na.f()", "suite.pkg.mod") == []
    graph = {"a": {"b": 1}, "b": {"c": 2, "a": 3}, "c": {"a": 4}, "d": {"e": 5}, "e": {"d": 6}, "f": {"a": 7}}
    assert _components(graph) == [["a", "b", "c"], ["d", "e"]]
    assert _cycles(graph, ["a", "b", "c"]) == [["a", "b", "a"], ["a", "b", "c", "a"]]
