"""``advsuite ls``: list registered models, datasets, attacks and recipes, and where each comes
from (``advsuite`` for the suite's own entries, ``<distribution> <version>`` for a plugin's)."""

from __future__ import annotations

import argparse

#: One row: what to type, where it comes from, what it is.
Row = tuple[str, str, str]


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("ls", help="list models, datasets, attacks or recipes (and where each comes from)")
    parser.add_argument("what", choices=("models", "datasets", "attacks", "recipes"))
    parser.set_defaults(handler=handle)


def _registry_rows(registry, prefix: str = "", suffix: str = "") -> list[Row]:
    return [(f"{prefix}{name}{suffix}", registry.origin(name), registry.describe(name)) for name in registry]


def _with_threat(description: str, threat) -> str:
    """A robust built-in's description, with the threat model it was trained for (RobustBench
    lists every model with its threat model): what it is evaluated at when no --eps is given."""
    return description if threat is None else f"{description} [trained for {threat.label}]"


def _rows(what: str) -> list[Row]:
    from suite.registry import BUILTIN

    if what == "models":
        from suite.models.registry import BUILTIN_MODELS, MODEL_SCHEMES

        from suite.models.card import BUILTIN_THREAT_MODELS

        builtins = [(name, origin, _with_threat(description, BUILTIN_THREAT_MODELS.get(name[len("builtin:"):])))
                    for name, origin, description in _registry_rows(BUILTIN_MODELS, prefix="builtin:")]
        return _registry_rows(MODEL_SCHEMES, suffix=":") + builtins
    if what == "datasets":
        import suite.data.builtin  # noqa: F401  (registers the built-in datasets)
        from suite.data.registry import BUILTIN_DATASETS

        hub = ("hf:", BUILTIN, "Hugging Face dataset by name, or a local csv/json/parquet file or dir")
        return [hub] + _registry_rows(BUILTIN_DATASETS, prefix="builtin:")
    if what == "attacks":
        from suite.attacks import ATTACKS

        return _registry_rows(ATTACKS)
    from suite.evaluation.recipes_dir import shipped_recipes

    return _registry_rows(shipped_recipes())


def handle(args: argparse.Namespace) -> int:
    from suite.text import printable

    rows = _rows(args.what)
    name_width = max((len(name) for name, _, _ in rows), default=0)
    origin_width = max((len(origin) for _, origin, _ in rows), default=0)
    for name, origin, description in rows:
        # A plugin's name, origin and summary come from its package metadata: escaped like all output.
        print(printable(f"{name.ljust(name_width)}  {origin.ljust(origin_width)}  {description}".rstrip()))
    return 0
