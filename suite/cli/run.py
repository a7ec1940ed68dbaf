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


def _limited(task, limit: int):
    """``task`` evaluating at most ``limit`` examples (a seeded subsample, as ``n`` is); an
    adversary fits its temperatures on at most ``limit`` examples of its split, and its ``opt``
    search runs on at most ``limit`` examples too."""
    n = limit if task.dataset.n is None else min(task.dataset.n, limit)
    update = {"dataset": task.dataset.model_copy(update={"n": n})}
    if task.adversary is not None:
        capped = {"opt_n": min(task.adversary.opt_n, limit)}
        if task.adversary.split is not None:  # else it fits on the evaluated examples, capped above
            capped["n"] = limit if task.adversary.n is None else min(task.adversary.n, limit)
        update["adversary"] = task.adversary.model_copy(update=capped)
    return task.model_copy(update=update)


def run_recipe(recipe_ref: str, output: Path | None, overwrite: bool, limit: int | None = None,
               log_samples: bool = False, wait: bool = False, deterministic: bool = False) -> list:
    from suite.evaluation.recipe import load_recipe
    from suite.evaluation.recipes_dir import resolve_recipe

    return run_loaded(load_recipe(resolve_recipe(recipe_ref)), output, overwrite, limit, log_samples, wait,
                      deterministic)


def run_loaded(recipe, output: Path | None, overwrite: bool, limit: int | None = None, log_samples: bool = False,
               wait: bool = False, deterministic: bool = False) -> list:
    """Run a validated :class:`~suite.evaluation.recipe.Recipe`; print its report (and its study
    table, for a batch-size sweep; its α table and plot, for an ensemble's α sweep)."""
    from suite.cli.common import print_report
    from suite.evaluation.options import RunOptions
    from suite.evaluation.tasks import run_tasks

    output = output or Path("runs") / (recipe.name if limit is None else f"{recipe.name}-limit{limit}")
    tasks = recipe.expanded_tasks()
    if limit is not None:
        tasks = [_limited(task, limit) for task in tasks]
    options = RunOptions(seed=recipe.seed, batch_size=recipe.batch_size, output=output, subdirs=True,
                         overwrite=overwrite, wait=wait, log_samples=log_samples, deterministic=deterministic)
    results = run_tasks(tasks, options, skip_unavailable=True)
    if not results:  # not the main process of a multi-process launch
        return results
    print_report(results, options, log_samples)
    from suite.report.table import adversary_rows, has_adversaries

    if has_adversaries(results):
        from suite.report.study import write_csv

        print(f"\nadversary table: {write_csv(adversary_rows(results), output / 'adversary_table.csv')}")
    from suite.report.ior import applies, format_table, ior_tables, write_ior

    if applies(results):
        tables = ior_tables(results)
        for title, rows in tables.items():
            print(f"\n{title}\n{format_table(rows)}")
        from suite.text import printable

        files = write_ior(tables, output, results)
        print(f"\nillusion-of-robustness tables: {', '.join(printable(str(path)) for path in files)}")
    if recipe.sweep is not None and recipe.sweep.batch_size:
        from suite.report.study import study_rows, study_table, write_study

        rows = study_rows(results, recipe.sweep.params)
        print(f"\n{study_table(rows)}")
        csv_path, png_path = write_study(rows, output, title=f"{recipe.name}: success rate vs batch size")
        print(f"\nstudy: {csv_path}, {png_path}")
    if recipe.sweep is not None and recipe.sweep.alphas:
        from suite.report.ensemble_sweep import alpha_rows, alpha_table, write_alpha_sweep

        from suite.text import printable

        rows = alpha_rows(results)
        print("\n" + "\n".join(printable(line) for line in alpha_table(rows).splitlines()))  # model names: escaped
        csv_path, png_path = write_alpha_sweep(rows, output, title=f"{recipe.name}: robust accuracy vs alpha")
        print(f"\nalpha sweep: {printable(str(csv_path))}, {printable(str(png_path))}")
    return results


def handle(args: argparse.Namespace) -> int:
    run_recipe(args.recipe, args.output, args.overwrite, args.limit, args.log_samples, args.wait, args.deterministic)
    return 0
