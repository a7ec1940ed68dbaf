"""``advsuite compare``: runs on the same examples side by side, with their differences."""

from __future__ import annotations

import argparse
from pathlib import Path

EPILOG = """examples:
  advsuite compare runs/pgd-at runs/beta-at                     # clean, each attack, worst case; B - A
  advsuite compare runs/pgd-at runs/beta-at runs/trades          # B - A and C - A
  advsuite compare runs/pgd-at/results.json runs/beta-at --per-class
  advsuite compare runs/pgd-at runs/beta-at --json > diff.json
Runs must have been evaluated on the same examples (dataset fingerprint, n and subsample seed);
give task directories of a recipe's output (runs/demo/<task>), not the recipe's directory.
Each difference is tested on the runs' paired outcomes (their records.jsonl): p is two-sided
(McNemar's exact test; the sign-flip test for randomized models), n.s. from 0.05 up. Without
usable records a difference is marked (within CIs) where the two 95% intervals overlap.
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("compare", help="compare runs on the same examples side by side",
                                   epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN",
                        help="run directories (or their results.json); the first is the reference the "
                             "others are subtracted from")
    parser.add_argument("--per-class", action="store_true",
                        help="the same rows for every class (from results.json's per_class)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON instead of a table")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    import json

    from suite.report import compare, compare_output
    from suite.report.paired import read_records

    names = [str(path) for path in args.runs]
    compare.check_count(names)
    runs = [compare.read_run(path) for path in args.runs]
    compare.check_same_examples(names, runs)
    records = [read_records(path, run) for path, run in zip(args.runs, runs)]
    for path, run, found in zip(args.runs, runs, records):
        if not isinstance(found, str):  # records of the run: its results must be what they give
            compare.check_records_give(path, run, found)
    if args.per_class:
        compare.check_per_class(names, runs)
        found = compare.class_rows(runs, records)
    else:
        found = compare.overall_rows(runs, records)
    if args.json:
        print(json.dumps(compare_output.as_json(names, runs, found, records), indent=2))
    else:
        print(compare_output.table(names, runs, found, records))
    return 0
