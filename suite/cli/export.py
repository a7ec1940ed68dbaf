"""``advsuite export``: a run's results as Hub model card metadata and ``.eval_results`` files."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from suite.cli.argtypes import output_dir

if TYPE_CHECKING:
    from suite.errors import WriteError

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
    parser.add_argument("--replace", action="store_true",
                        help="replace results exported before from another evaluation (another n, seed, dataset or "
                             "recipe) of the same model, dataset split and threat")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.errors import ConfigError, WriteError
    from suite.report import hub
    from suite.text import printable

    if args.pr and args.push is None:
        raise ConfigError("--pr opens a pull request on the repo --push names: give --push REPO_ID")
    try:
        done = hub.export(args.run_dir, args.to, push=args.push, create_pr=args.pr, replace=args.replace)
    except (WriteError, OSError) as error:
        refused = _refused(error, args)
        if refused is None:
            raise
        raise refused from error
    for reason in done.skipped:
        print(printable(f"skipped: {reason}"))
    print(printable(f"wrote: {', '.join(str(done.directory / name) for name in done.files)}"))
    if done.commit_url is not None:
        print(printable(f"pushed to {args.push}: {done.commit_url}"))
    return 0


def _refused(error: Exception, args: argparse.Namespace) -> WriteError | None:
    """The system refusing a write of the export, as a :class:`~suite.errors.WriteError` that says
    what is kept (``None`` for any other error). Each file is written atomically, so a file of
    ``--to`` is either whole or as it was; nothing is pushed before every file is written."""
    from suite.errors import WriteError, is_write_fault

    fault = error.error if isinstance(error, WriteError) else error
    if not is_write_fault(fault):
        return None
    path = Path(error.path if isinstance(error, WriteError) else fault.filename or args.to)
    if path == args.to or path in args.to.parents:  # --to itself could not be made
        kept = "nothing was written"
    else:
        kept = "the files written before it are whole and the others are as they were"
    return WriteError(path, fault, kept + ("; nothing was pushed" if args.push else ""))
