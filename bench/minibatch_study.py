"""The mini-batch study (``recipes/batch_size_study.yaml``) at a size that fits a CPU.

The shipped recipe runs the paper's Table 1 attacks at 8 batch sizes x 5 seeds x {sum, mean} x
{fp32, fp16} on 256 digits per model: hours on 2 CPU cores (batch size 1 and fp16 autocast are
the slow parts), minutes on a GPU. This runs the same recipe over fewer batch sizes and examples:

    python bench/minibatch_study.py --limit 128 --batch-sizes 1,16,128 --only precision=fp32 --output /tmp/mb

It prints the study table (mean +- standard deviation over the seeds) and writes study.csv and
study.png into ``--output``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import suite
from suite.evaluation.recipe import load_recipe
from suite.report.study import study_rows, study_table

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "batch_size_study.yaml"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(","))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=128, help="examples per task (default 128)")
    parser.add_argument("--batch-sizes", type=_ints, default=(1, 16, 128), help="comma-separated (default 1,16,128)")
    parser.add_argument("--seeds", type=_ints, default=None, help="comma-separated (default: the recipe's five)")
    parser.add_argument("--tasks", default=None, help="comma-separated task names (default: all)")
    parser.add_argument("--only", action="append", default=[], metavar="PARAM=V1,V2",
                        help="keep only these values of a swept parameter, e.g. precision=fp32 (repeatable)")
    parser.add_argument("--output", type=Path, default=Path("runs/minibatch_study"))
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args()

    recipe = load_recipe(RECIPE)
    params = dict(recipe.sweep.params)
    for only in args.only:
        key, _, values = only.partition("=")
        params[key] = tuple(value for value in params[key] if str(value) in values.split(","))
    axes = {"batch_size": args.batch_sizes, "params": params, **({"seeds": args.seeds} if args.seeds else {})}
    sweep = recipe.sweep.model_copy(update=axes)
    tasks = recipe.tasks if args.tasks is None else tuple(t for t in recipe.tasks if t.name in args.tasks.split(","))
    study = recipe.model_copy(update={"sweep": sweep, "tasks": tasks})
    results = suite.run_recipe(study, args.output, limit=args.limit, overwrite=args.overwrite)
    print(study_table(study_rows(results, sweep.params)))
    print(f"\nstudy: {args.output / 'study.csv'}, {args.output / 'study.png'}")


if __name__ == "__main__":
    main()
