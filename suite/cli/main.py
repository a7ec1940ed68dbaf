"""The ``advsuite`` command: one module per subcommand, heavy imports inside the commands."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from suite import __version__
from suite.cli import demo, evaluate, ls, prefetch, run, validate
from suite.errors import SuiteError

COMMANDS = (evaluate, run, validate, demo, ls, prefetch)


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
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="advsuite: %(message)s")
    for noisy in ("httpx", "urllib3", "filelock", "datasets", "transformers", "timm"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        code = args.handler(args)
    except SuiteError as error:
        print(f"advsuite: error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        print("advsuite: interrupted; finished records are kept, rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    sys.exit(code or 0)
