"""``advsuite run``: run every task of a recipe."""

from __future__ import annotations

import argparse
from pathlib import Path

EPILOG = """examples:
  advsuite run recipes/quickstart.yaml
  advsuite run quickstart --output runs/quickstart
  accelerate launch -m suite run recipes/quickstart.yaml
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("run", help="run a recipe (YAML)", epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", help="recipe file, or the name of a shipped recipe (advsuite ls recipes)")
    parser.add_argument("--output", type=Path, help="output dir (default: runs/<recipe name>); one sub-dir per task")
    parser.add_argument("--overwrite", action="store_true", help="replace different runs in the output dir")
    parser.set_defaults(handler=handle)


def run_recipe(recipe_ref: str, output: Path | None, overwrite: bool) -> list:
    from suite.cli.common import run_tasks
    from suite.evaluation.recipe import load_recipe
    from suite.evaluation.recipes_dir import resolve_recipe

    recipe = load_recipe(resolve_recipe(recipe_ref))
    output = output or Path("runs") / recipe.name
    results = run_tasks(recipe.expanded_tasks(), recipe.seed, recipe.batch_size_for, output, overwrite, subdirs=True)
    from suite.report.table import adversary_rows, has_adversaries

    if has_adversaries(results):
        from suite.report.study import write_csv

        print(f"\nadversary table: {write_csv(adversary_rows(results), output / 'adversary_table.csv')}")
    if recipe.sweep is not None and recipe.sweep.batch_size:
        from suite.report.study import study_rows, study_table, write_study

        rows = study_rows(results)
        print(f"\n{study_table(rows)}")
        csv_path, png_path = write_study(rows, output, title=f"{recipe.name}: success rate vs batch size")
        print(f"\nstudy: {csv_path}, {png_path}")
    return results


def handle(args: argparse.Namespace) -> int:
    run_recipe(args.recipe, args.output, args.overwrite)
    return 0
