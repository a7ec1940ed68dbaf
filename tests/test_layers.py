"""The package's layers point one way (DESIGN; docs/architecture.md):

    cli → evaluation → {attacks, calibration, wdro, report} → models, data
        → losses, threat, registry, paths, seeding, launch → errors

Every ``import`` in ``suite/`` (module level or inside a function) is read from the source. A
module may import its own package, any lower layer, and, within one layer, only what the
``SIDEWAYS`` table allows. Nothing outside ``suite/models`` reaches into a model's ``.module``.
"""

from __future__ import annotations

import ast
from pathlib import Path

SUITE = Path(__file__).resolve().parents[1] / "suite"
#: Layer of every top-level package or module of ``suite``; higher layers may import lower ones.
LAYERS = {
    "errors": 0, "text": 0,
    "registry": 1, "losses": 1, "threat": 1, "paths": 1, "seeding": 1, "launch": 1, "intervals": 1,
    "strict_json": 1, "lazy": 1,
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
            if target in ("", source):  # `from suite import __version__`, or its own package
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


def test_no_file_is_much_over_400_lines():
    long = {str(path.relative_to(SUITE)): n for path in SUITE.rglob("*.py")
            if (n := len(path.read_text().splitlines())) > 420}
    assert not long, long
