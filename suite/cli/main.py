"""The ``advsuite`` command: one module per subcommand, heavy imports inside the commands."""

from __future__ import annotations

import argparse
import functools
import logging
import signal
import sys
from collections.abc import Sequence

from suite import __version__
from suite.cli import demo, evaluate, leaderboard, ls, prefetch, run, validate
from suite.errors import SuiteError
from suite.launch import launch

COMMANDS = (evaluate, run, validate, demo, leaderboard, ls, prefetch)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="advsuite",
        description="Adversarial robustness evaluation for HF text classifiers and timm vision models, with no illusions.",
    )
    parser.add_argument("--version", action="version", version=f"advsuite {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: user errors print one line and exit with status 2."""
    args = build_parser().parse_args(argv)
    try:
        place = launch()
    except SuiteError as error:
        print(f"advsuite: error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    where = place.label()
    # Under `accelerate launch` only the main process reports progress; every process reports errors.
    quiet = args.quiet or place.rank != 0
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format=f"advsuite{where}: %(message)s")
    for noisy in ("httpx", "urllib3", "filelock", "datasets", "transformers", "timm"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if where:
        signal.signal(signal.SIGTERM, functools.partial(_stopped, where))
    try:
        code = args.handler(args)
    except SuiteError as error:
        print(f"advsuite{where}: error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        print(f"advsuite{where}: interrupted; finished records are kept, rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    except Exception as error:
        if where:  # the launcher stops the other processes; say what happened in one line first
            print(f"advsuite{where}: failed: {type(error).__name__}: {error}; the run is stopped, finished records "
                  "are kept, rerun the same command (with any number of processes) to resume", file=sys.stderr)
        raise
    sys.exit(code or 0)


def _stopped(where: str, signum: int, frame) -> None:
    """SIGTERM from the launcher: another process failed (or the run was cancelled)."""
    print(f"advsuite{where}: stopped by the launcher (another process failed or the run was cancelled); finished "
          "records are kept, rerun the same command (with any number of processes) to resume", file=sys.stderr)
    sys.exit(128 + signum)
