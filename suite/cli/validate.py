"""``advsuite validate``: check a recipe without running it (and without loading torch)."""

from __future__ import annotations

import argparse

EPILOG = """examples:
  advsuite validate recipes/quickstart.yaml
  advsuite validate ior_text          # a shipped recipe, by name (advsuite ls recipes)
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("validate", help="check a recipe (schema, names, hyperparameters)", epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", help="recipe file, or the name of a shipped recipe")
    parser.set_defaults(handler=handle)


def check_names(task) -> None:
    """Refuse, in one line, a model scheme, built-in model or built-in dataset that does not exist,
    and an ``opt_attack`` with bad hyperparameters.

    Names are looked up without importing the loaders (``timm:`` and ``hf:`` would import timm or
    transformers); whether a Hub id or a local path exists is checked when the task runs.
    """
    import suite.data.builtin  # noqa: F401  (registers the built-in datasets)
    from suite.attacks import build_attack
    from suite.data.registry import BUILTIN_DATASETS
    from suite.errors import UnknownNameError
    from suite.models.registry import BUILTIN_MODELS, MODEL_SCHEMES

    for model in (task.model, *(task.model.members or ())):  # an ensemble's members too
        scheme, _, name = model.spec.partition(":")  # ModelConfig has checked both are there
        if scheme not in MODEL_SCHEMES:
            raise UnknownNameError(f"task {task.name!r}: {MODEL_SCHEMES.unknown_message(scheme)}")
        if scheme == "builtin" and name not in BUILTIN_MODELS:
            raise UnknownNameError(f"task {task.name!r}: {BUILTIN_MODELS.unknown_message(name)}")
    scheme, sep, name = task.dataset.spec.partition(":")
    if sep and scheme == "builtin" and name not in BUILTIN_DATASETS:
        raise UnknownNameError(f"task {task.name!r}: {BUILTIN_DATASETS.unknown_message(name)}")
    if task.adversary is not None and task.adversary.opt_attack is not None:
        build_attack(task.adversary.opt_attack.name, task.adversary.opt_attack.params)


def handle(args: argparse.Namespace) -> int:
    from suite.evaluation.recipe import load_recipe
    from suite.evaluation.recipes_dir import resolve_recipe
    from suite.text import printable

    path = resolve_recipe(args.recipe)
    recipe = load_recipe(path)  # the schema, and every attack's hyperparameters (build_attack)
    tasks = recipe.expanded_tasks()
    for task in tasks:
        check_names(task)
    attacks = sum(len(task.attacks) for task in tasks)
    print(f"{printable(path)}: ok ({recipe.name}: {len(tasks)} task(s), {attacks} attack(s))")
    return 0
