"""``advsuite leaderboard``: add results to leaderboard.json, show it, write its JSON Schema."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

EPILOG = """examples:
  advsuite leaderboard add runs/demo                     # every task of a recipe run
  advsuite leaderboard add runs/evaluate-run/results.json
  advsuite leaderboard add runs/*/results.json --leaderboard site/leaderboard.json
  advsuite leaderboard add runs/full-200/results.json --replace   # replace an entry evaluated on another n
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
    add.add_argument("--replace", action="store_true",
                     help="replace an entry of the same model, task and threat model that was evaluated on another "
                          "n or dataset (refused without it, so a smoke test never replaces a real entry)")
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


def _write_schema(output: Path, text: str) -> None:
    """Write the schema to ``output``, refusing (before writing) a directory or a missing parent."""
    from suite.errors import ConfigError
    from suite.paths import atomic_write_text

    if output.is_dir():
        raise ConfigError(f"--output {str(output)!r} is a directory; name the schema file, "
                          f"e.g. {str(output / 'schema.json')!r}")
    if not output.parent.is_dir():
        raise ConfigError(f"--output {str(output)!r}: the directory {str(output.parent)!r} does not exist")
    try:
        atomic_write_text(output, text)
    except OSError as error:
        raise ConfigError(f"cannot write {str(output)!r}: {error.strerror or error}") from error


def handle(args: argparse.Namespace) -> int:
    from suite.errors import ConfigError
    from suite.report import leaderboard
    from suite.text import printable

    if args.action == "schema":
        text = json.dumps(leaderboard.schema(), indent=2) + "\n"
        if args.output is None:
            print(text, end="")
        else:
            _write_schema(args.output, text)
        return 0
    path = args.leaderboard or leaderboard.DEFAULT_PATH
    if args.action == "add":
        files = [f for p in args.results for f in _results_files(p)]
        board, added, replaced = leaderboard.add(files, path, replace=args.replace)
        print(printable(f"{path}: {added} added, {replaced} replaced, {len(board.entries)} entries"))
        if path.name != leaderboard.DEFAULT_PATH.name:  # the page reads leaderboard.json unless told
            print(printable(f"page: {path.parent / leaderboard.page_address(path)} (served over HTTP)"))
        return 0
    from suite.report.table import format_rows

    if not path.exists():
        raise ConfigError(f"no leaderboard at {str(path)!r}; create it with `advsuite leaderboard add results.json`")
    rows = leaderboard.rows(leaderboard.load(path), args.task, args.threat_model, args.sort)
    if not rows:
        print("no entries match")
        return 0
    print(format_rows(list(rows[0]), [list(row.values()) for row in rows]))
    return 0
