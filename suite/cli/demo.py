"""``advsuite demo``: run the quickstart recipe on the built-in models, print the table and add
the results to a leaderboard under the run directory (``runs/demo/leaderboard/``, with its
page), so the demo never rewrites the tracked ``leaderboard/leaderboard.json`` of a clone."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from suite.cli.argtypes import output_dir
from suite.cli.common import add_directory_flags
from suite.text import printable


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="run recipes/quickstart.yaml offline on the built-in models")
    parser.add_argument("--output", type=output_dir, default=Path("runs/demo"), help="output dir (default: runs/demo)")
    add_directory_flags(parser)
    parser.add_argument("--leaderboard", type=Path,
                        help="leaderboard to add the results to (default: <output>/leaderboard/leaderboard.json)")
    parser.add_argument("--no-leaderboard", action="store_true", help="do not touch the leaderboard")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.cli.run import run_and_report

    results = run_and_report("quickstart", args.output, args.overwrite, wait=args.wait)
    if results and not args.no_leaderboard:
        from suite.report import leaderboard

        args.leaderboard = args.leaderboard or args.output / "leaderboard" / "leaderboard.json"
        files = [args.output / result.task / "results.json" for result in results]
        board, added, replaced = leaderboard.add(files, args.leaderboard)
        said = (f"leaderboard: {args.leaderboard} ({added} added, {replaced} replaced, {len(board.entries)} entries); "
                f"view it with: python -m http.server --directory {shlex.quote(str(args.leaderboard.parent))}")
        print("\n" + printable(said))
    return 0
