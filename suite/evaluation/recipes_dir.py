"""The recipes shipped with the suite (``recipes/*.yaml``), by name."""

from __future__ import annotations

import sys
from pathlib import Path

from suite.errors import ConfigError
from suite.registry import Registry

# A source checkout (editable install) first, then where a wheel installs them.
RECIPES_DIRS = (Path(__file__).resolve().parents[2] / "recipes", Path(sys.prefix) / "share" / "advsuite" / "recipes")


def shipped_recipes() -> Registry:
    """A registry of shipped recipe files (name → path)."""
    registry: Registry = Registry("recipe", list_command="advsuite ls recipes")
    directory = next((d for d in RECIPES_DIRS if d.is_dir()), None)
    if directory is not None:
        for path in sorted(directory.glob("*.yaml")):
            first = next((line for line in path.read_text().splitlines() if line.startswith("description:")), "")
            registry.add(path.stem, path, help=first.partition(":")[2].strip().strip("'\""))
    return registry


def resolve_recipe(name_or_path: str) -> Path:
    """A recipe file from a path, or the name of a shipped recipe."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            problem = "is a directory, not a recipe file" if path.is_dir() else "does not exist"
            raise ConfigError(f"recipe file {name_or_path!r} {problem}")
        return path
    return shipped_recipes().get(name_or_path)
