"""``advsuite validate``: check a recipe without running it."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("validate", help="check a recipe (schema, names, hyperparameters)",
                                   epilog="example:\n  advsuite validate recipes/quickstart.yaml",
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", help="recipe file, or the name of a shipped recipe")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.evaluation.recipe import load_recipe
    from suite.evaluation.recipes_dir import resolve_recipe
    from suite.models.registry import MODEL_SCHEMES

    path = resolve_recipe(args.recipe)
    recipe = load_recipe(path)
    for task in recipe.expanded_tasks():
        MODEL_SCHEMES.get(task.model.spec.partition(":")[0])
    attacks = sum(len(task.attacks) for task in recipe.expanded_tasks())
    print(f"{path}: ok ({recipe.name}: {len(recipe.expanded_tasks())} task(s), {attacks} attack(s))")
    return 0
