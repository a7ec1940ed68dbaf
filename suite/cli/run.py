"""``advsuite run``: run every task of a recipe."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.cli.argtypes import output_dir
from suite.cli.common import add_deterministic_flag, add_directory_flags, positive_int

EPILOG = """examples:
  advsuite run recipes/quickstart.yaml
  advsuite run quickstart --output runs/quickstart
  advsuite run ior_text --limit 10 --log-samples
  accelerate launch -m suite run recipes/quickstart.yaml
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("run", help="run a recipe (YAML)", epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", help="recipe file, or the name of a shipped recipe (advsuite ls recipes)")
    parser.add_argument("--output", type=output_dir, help="output dir (default: runs/<recipe name>); one sub-dir per task")
    add_directory_flags(parser)
    add_deterministic_flag(parser)
    parser.add_argument("--limit", type=positive_int, metavar="N",
                        help="quick run: at most N examples per task (default output runs/<recipe name>-limit<N>)")
    parser.add_argument("--log-samples", action="store_true",
                        help="also write samples.md per task: every example, clean and adversarial")
    parser.set_defaults(handler=handle)


def run_and_report(recipe_ref, output: Path | None, overwrite: bool, limit: int | None = None,
                   log_samples: bool = False, wait: bool = False, deterministic: bool = False) -> list:
    """Run a recipe (a file, a shipped recipe's name, or a loaded
    :class:`~suite.evaluation.recipe.Recipe`) with :func:`suite.run_recipe`, into ``output``
    (default ``runs/<recipe name>``); print its report and the recipe's tables."""
    from suite.evaluation.options import RunOptions
    from suite.evaluation.recipe_run import as_recipe, run_recipe

    recipe = as_recipe(recipe_ref)
    output = output or Path("runs") / (recipe.name if limit is None else f"{recipe.name}-limit{limit}")
    results = run_recipe(recipe, output, limit=limit, overwrite=overwrite, wait=wait, log_samples=log_samples,
                         deterministic=deterministic, command=RunOptions().command_line)
    if results:  # else not the main process of a multi-process launch
        _print_tables(recipe, results, output, log_samples)
    return results


#: Its earlier name, which tests still use (tests/test_text_training.py, test_illusion.py, ...).
run_loaded = run_and_report


def _print_tables(recipe, results: list, output: Path, log_samples: bool) -> None:
    """The report, then the tables :func:`suite.run_recipe` wrote (IoR, batch-size study, α sweep)."""
    from suite.cli.common import print_report
    from suite.evaluation.options import RunOptions
    from suite.report.ior import applies, format_table, ior_tables
    from suite.text import printable

    print_report(results, RunOptions(output=output, subdirs=True), log_samples)
    if applies(results):
        for title, rows in ior_tables(results).items():
            print(f"\n{title}\n{format_table(rows)}")
    if recipe.sweep is not None and recipe.sweep.batch_size:
        from suite.report.study import study_rows, study_table

        print(f"\n{study_table(study_rows(results, recipe.sweep.params))}")
    if recipe.sweep is not None and recipe.sweep.alphas:
        from suite.report.ensemble_sweep import alpha_rows, alpha_table

        print("\n" + "\n".join(printable(line) for line in alpha_table(alpha_rows(results)).splitlines()))  # names


def handle(args: argparse.Namespace) -> int:
    run_and_report(args.recipe, args.output, args.overwrite, args.limit, args.log_samples, args.wait, args.deterministic)
    return 0
