"""The recipes shipped with the suite (``recipes/*.yaml``), by name."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

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
            described = first.partition(":")[2].strip().strip("'\"")
            if described[:1] in (">", "|"):  # a block scalar: its text is on the lines below
                loaded = yaml.safe_load(path.read_text())
                described = " ".join(str(loaded.get("description", "")).split()) if isinstance(loaded, dict) else ""
                described = described if len(described) <= 100 else described[:99].rstrip() + "…"
            registry.add(path.stem, path, help=described)
    return registry


def resolve_recipe(name_or_path: str) -> Path:
    """A recipe file from a path, or the name of a shipped recipe."""
    if not name_or_path.strip():
        raise ConfigError(f"the recipe is empty ({name_or_path!r}): name a recipe file or a shipped recipe "
                          "(advsuite ls recipes)")
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            problem = ("is a directory, not a recipe file" if path.is_dir() else "does not exist" if not path.exists()
                       else "is not a regular file")
            raise ConfigError(f"recipe file {name_or_path!r} {problem}")
        return path
    return shipped_recipes().get(name_or_path)
