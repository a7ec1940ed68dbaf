"""``advsuite demo``: run the quickstart recipe on the built-in models and print the table."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="run recipes/quickstart.yaml offline on the built-in models")
    parser.add_argument("--output", type=Path, default=Path("runs/demo"), help="output dir (default: runs/demo)")
    parser.add_argument("--overwrite", action="store_true", help="replace a different run in the output dir")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.cli.run import run_recipe

    run_recipe("quickstart", args.output, args.overwrite)
    return 0
