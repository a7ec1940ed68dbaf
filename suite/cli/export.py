"""``advsuite export``: a run's results as Hub model card metadata and ``.eval_results`` files."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.cli.argtypes import output_dir

EPILOG = """examples:
  advsuite export runs/evaluate-run --to out/card                        # README.md + .eval_results/ in out/card
  advsuite export runs/quickstart/<task> --to out/card                   # one task of a recipe run
  advsuite export runs/bert-rt --to my-model --push my-org/bert-rt       # and upload them to the model repo
  advsuite export runs/bert-rt --to my-model --push my-org/bert-rt --pr  # as a pull request
An existing README.md in --to (or, with --push and none there, the repo's) is merged into: its other
metadata, its text and the results advsuite did not write are kept.
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("export", help="write results as a model card's model-index and .eval_results",
                                   epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                        help="run directory (or its results.json), or a recipe's output directory whose tasks "
                             "evaluated one model")
    parser.add_argument("--to", required=True, type=output_dir, metavar="DIR",
                        help="directory of the model card (README.md) and .eval_results/ (created if needed)")
    parser.add_argument("--push", metavar="REPO_ID", help="upload the written files to this Hub model repo")
    parser.add_argument("--pr", action="store_true", help="with --push: open a pull request instead of committing")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.errors import ConfigError
    from suite.report import hub
    from suite.text import printable

    if args.pr and args.push is None:
        raise ConfigError("--pr opens a pull request on the repo --push names: give --push REPO_ID")
    done = hub.export(args.run_dir, args.to, push=args.push, create_pr=args.pr)
    for reason in done.skipped:
        print(printable(f"skipped: {reason}"))
    print(printable(f"wrote: {', '.join(str(done.directory / name) for name in done.files)}"))
    if done.commit_url is not None:
        print(printable(f"pushed to {args.push}: {done.commit_url}"))
    return 0
