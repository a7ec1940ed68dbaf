"""``advsuite leaderboard``: add results to leaderboard.json, show it, write its JSON Schema."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

EPILOG = """examples:
  advsuite leaderboard add runs/demo                     # every task of a recipe run
  advsuite leaderboard add runs/evaluate-run/results.json
  advsuite leaderboard add runs/*/results.json --leaderboard site/leaderboard.json
  advsuite leaderboard show --threat-model linf --sort clean_accuracy
  python -m http.server --directory leaderboard   # then open http://localhost:8000
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("leaderboard", help="add results to the leaderboard, show it", epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="validate results.json files and merge them (same entry again: replaced)")
    add.add_argument("results", nargs="+", type=Path,
                     help="results.json files, run directories, or a recipe's output directory (one sub-dir per task)")
    show = actions.add_parser("show", help="print the leaderboard as a table")
    show.add_argument("--task", help="only this task (dataset/split, e.g. builtin:digits/test)")
    show.add_argument("--threat-model", help="only this threat model (linf, l2, word-level...)")
    show.add_argument("--sort", default="worst_case_robust_accuracy",
                      help="worst_case_robust_accuracy (default), clean_accuracy, or an attack name")
    schema = actions.add_parser("schema", help="print the JSON Schema of leaderboard.json")
    for sub in (add, show):
        sub.add_argument("--leaderboard", type=Path, help="leaderboard file (default: leaderboard/leaderboard.json)")
    schema.add_argument("--output", type=Path, help="write it to this file instead of stdout")
    parser.set_defaults(handler=handle)


def _results_files(path: Path) -> list[Path]:
    """A results file; a run directory's; or every task's of a recipe's output directory."""
    if not path.is_dir() or (path / "results.json").exists():
        return [path / "results.json" if path.is_dir() else path]
    found = sorted(path.glob("*/results.json"))
    if not found:
        from suite.errors import ConfigError

        raise ConfigError(f"{str(path)!r} holds no results.json (nor do its sub-directories)")
    return found


def handle(args: argparse.Namespace) -> int:
    from suite.paths import atomic_write_text
    from suite.report import leaderboard

    if args.action == "schema":
        text = json.dumps(leaderboard.schema(), indent=2) + "\n"
        if args.output is None:
            print(text, end="")
        else:
            atomic_write_text(args.output, text)
        return 0
    path = args.leaderboard or leaderboard.DEFAULT_PATH
    if args.action == "add":
        board, added, replaced = leaderboard.add([f for p in args.results for f in _results_files(p)], path)
        print(f"{path}: {added} added, {replaced} replaced, {len(board.entries)} entries")
        return 0
    from suite.errors import ConfigError
    from suite.report.table import format_rows

    if not path.exists():
        raise ConfigError(f"no leaderboard at {str(path)!r}; create it with `advsuite leaderboard add results.json`")
    rows = leaderboard.rows(leaderboard.load(path), args.task, args.threat_model, args.sort)
    if not rows:
        print("no entries match")
        return 0
    print(format_rows(list(rows[0]), [list(row.values()) for row in rows]))
    return 0
