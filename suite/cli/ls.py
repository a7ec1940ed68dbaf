"""``advsuite ls``: list registered models, datasets, attacks and recipes."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("ls", help="list models, datasets, attacks or recipes")
    parser.add_argument("what", choices=("models", "datasets", "attacks", "recipes"))
    parser.set_defaults(handler=handle)


def _rows(what: str) -> list[tuple[str, str]]:
    if what == "models":
        from suite.models.registry import BUILTIN_MODELS, MODEL_SCHEMES

        return [(f"{name}:", MODEL_SCHEMES.describe(name)) for name in MODEL_SCHEMES] + [
            (f"builtin:{name}", BUILTIN_MODELS.describe(name)) for name in BUILTIN_MODELS
        ]
    if what == "datasets":
        import suite.data.builtin  # noqa: F401  (registers the built-in datasets)
        from suite.data.registry import BUILTIN_DATASETS

        return [("hf:", "Hugging Face dataset by name, or a local csv/json/parquet file or dir")] + [
            (f"builtin:{name}", BUILTIN_DATASETS.describe(name)) for name in BUILTIN_DATASETS
        ]
    if what == "attacks":
        from suite.attacks import ATTACKS

        return [(name, ATTACKS.describe(name)) for name in ATTACKS]
    from suite.evaluation.recipes_dir import shipped_recipes

    recipes = shipped_recipes()
    return [(name, recipes.describe(name)) for name in recipes]


def handle(args: argparse.Namespace) -> int:
    rows = _rows(args.what)
    width = max((len(name) for name, _ in rows), default=0)
    for name, description in rows:
        print(f"{name.ljust(width)}  {description}".rstrip())
    return 0
