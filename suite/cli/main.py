"""The ``advsuite`` command: one module per subcommand, heavy imports inside the commands.

Start-up stays under a second or so: the subcommand modules import nothing heavy at the top,
and torch is deferred (:mod:`suite.lazy`) until a command first uses it, so ``advsuite ls``,
``advsuite validate`` and ``--help`` never load it (``bench/cli_startup.py`` measures this).
"""

from __future__ import annotations

import argparse
import errno
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from suite.version import __version__
from suite.collector import before_exit, quick_start
from suite.cli import certify, compare, demo, evaluate, export, leaderboard, ls, prefetch, run, train, validate
from suite.errors import OVERWRITING, SuiteError, WriteError, is_write_fault, rerun
from suite.launch import launch
from suite.lazy import DEFERRED, defer_import

COMMANDS = (evaluate, run, train, certify, validate, demo, leaderboard, export, compare, ls, prefetch)


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, like every other error of the CLI.

    argparse prints the whole usage block before the message (14 lines for ``evaluate``);
    here the message comes alone, with the command whose ``--help`` explains the flags.
    Subcommand parsers are built with this class too (``parser_class``).
    """

    def error(self, message: str) -> NoReturn:
        from suite.text import printable

        # The message quotes what the user typed: keep it on one line and free of controls.
        self.exit(2, f"advsuite: error: {printable(' '.join(message.split()))} (see `{self.prog} --help`)\n")


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="advsuite",
        description="Adversarial robustness evaluation for HF text classifiers and timm vision models, with no illusions.",
    )
    parser.add_argument("--version", action="version", version=f"advsuite {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``argv``; an unknown flag is reported by the subcommand it was given to."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
        commands.choices.get(args.command, parser).error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: user errors print one line and exit with status 2."""
    for name in DEFERRED:  # loaded on first use: `ls`, `validate` and `--help` never need torch
        defer_import(name)
    args = parse_args(argv)
    OVERWRITING[0] = bool(getattr(args, "overwrite", False))  # its messages say to resume without it
    try:
        place = launch()
    except SuiteError as error:
        print(f"advsuite: error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    where = place.label()
    # Under `accelerate launch` only the main process reports progress; every process reports errors.
    quiet = args.quiet or place.rank != 0
    _configure_logging(quiet, where)
    # SIGTERM (the launcher stopping the run, or `timeout`, `docker stop`, a batch scheduler):
    # one line and exit 143, after the run's own clean-up (a staged write removed, searches
    # stopped). The caller's own handler comes back when main returns (main called in-process).
    previous = None
    _SAID.clear()  # a call before this one (main called in-process) said its own
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, functools.partial(_stopped, where))
    try:
        _run(args, where)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace, where: str) -> NoReturn:
    """The command ``args`` names, each way it can end turned into its exit status."""
    try:
        with quick_start():  # no full scans of what the command imports and loads (until its run)
            code = args.handler(args)
    except SuiteError as error:
        _SAID.append(True)
        print(f"advsuite{where}: error: {_shortened(str(error))}", file=sys.stderr)
        sys.exit(error.exit_code)
    except BrokenPipeError:
        # The reader of our output left (`advsuite compare ... --json | head`): nothing to say to
        # it, and no traceback; later writes, and the flush at exit, go nowhere (the recipe of
        # Python's documentation, "Note on SIGPIPE"). The suite itself writes to no other pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(128 + signal.SIGPIPE)
    except (WriteError, OSError) as error:
        _SAID.append(True)
        bad_path = {errno.ENAMETOOLONG: "is too long (a name over 255 bytes, or a path over 4,096): give a shorter one",
                    # --output /proc/x, --to a-file/sub: a folder on the way cannot hold it
                    errno.ENOENT: "cannot be used (no such file or folder: a folder on the way is missing or cannot "
                                  "hold it): give another",
                    errno.ENOTDIR: "cannot be used (a part of it is a file, not a folder): give another"}
        if not isinstance(error, WriteError) and error.errno in bad_path and error.filename:  # a path given: bad input
            from suite.text import printable

            name = str(error.filename)
            shown = printable(repr(name if len(name) <= 80 else name[:80] + "..."))
            print(f"advsuite{where}: error: path {shown} {bad_path[error.errno]}", file=sys.stderr)
            sys.exit(2)
        if not isinstance(error, WriteError):
            if not is_write_fault(error):
                return _failed(error, where)
            # a write outside the suite's writers (a directory, a lock): name the file the system named
            error = WriteError(error.filename or "a file", error, "finished files are kept")
        print(f"advsuite{where}: {error}", file=sys.stderr)  # the system refused a write: not a bug, one line
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        print(rerun(f"advsuite{where}: interrupted; finished records are kept, rerun the same command to resume"),
              file=sys.stderr)
        sys.exit(130)
    except MemoryError:  # a file of gigabytes read whole, say: the limit, not a bug (a traceback of 30 lines)
        _SAID.append(True)
        print(f"advsuite{where}: error: out of memory (a file read whole, or a batch, too large for this machine); "
              "finished records are kept: free memory, or give a smaller input or --batch-size", file=sys.stderr)
        sys.exit(1)
    except Exception as error:
        _failed(error, where)
    sys.exit(code or 0)


def entry() -> None:
    """The ``advsuite`` console script and ``python -m suite``: :func:`main` in a process that
    ends with it, so the collector's scans at shutdown are skipped
    (:func:`~suite.collector.before_exit`). :func:`main` called in-process leaves its caller's
    collector alone."""
    try:
        main()
    finally:
        before_exit()


#: Set once this process has printed why it stops (the launcher's SIGTERM then adds nothing).
_SAID: list[bool] = []


#: The longest error line: messages quote values from files anyone can write (a model name of
#: 5 million characters made a 5 MB line).
LONGEST_ERROR = 2_000


def _shortened(message: str) -> str:
    if len(message) <= LONGEST_ERROR:
        return message
    return f"{message[:LONGEST_ERROR]}... ({len(message) - LONGEST_ERROR:,} characters more)"


def _failed(error: Exception, where: str) -> NoReturn:
    """A bug: keep the traceback (under the launcher, say what happened in one line first)."""
    if where:  # the launcher stops the other processes
        print(rerun(f"advsuite{where}: failed: {type(error).__name__}: {error}; the run is stopped, finished records "
                    "are kept, rerun the same command (with any number of processes) to resume"), file=sys.stderr)
    raise error


def _configure_logging(quiet: bool, where: str) -> None:
    from suite.text import PrintableFilter

    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format=f"advsuite{where}: %(message)s")
    for handler in logging.getLogger().handlers:  # names and paths in messages come from users
        if not any(isinstance(found, PrintableFilter) for found in handler.filters):
            handler.addFilter(PrintableFilter())
    # torch logs at INFO from an exit hook ("FakeTensor cache stats"), printed when a run is
    # stopped before torch's own logging is set up.
    for noisy in ("httpx", "urllib3", "filelock", "datasets", "transformers", "timm", "torch"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    _take_library_logs()


#: Libraries that give their root logger a handler of their own when their logging module is
#: imported (module, logger). Their warnings (the Hub's retries, transformers' load reports) were
#: printed twice, once by theirs and once by the suite's, and theirs printed what a server or a
#: config wrote without escaping it. The CLI takes their messages through its own handler only.
_OWN_HANDLERS = {"huggingface_hub.utils.logging": "huggingface_hub", "transformers.utils.logging": "transformers"}


def _take_library_logs() -> None:
    """Route the libraries of :data:`_OWN_HANDLERS` through the suite's handler: now for those
    already imported, and on import for the others (a finder on ``sys.meta_path`` that runs
    :func:`_take_logs` once the module has run). Only the CLI does this: the Python API leaves
    its caller's logging as it is."""
    for module in _OWN_HANDLERS:
        if module in sys.modules:
            _take_logs(module)
    if not any(isinstance(finder, _TakeLogsOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _TakeLogsOnImport())


def _take_logs(module: str) -> None:
    configure = getattr(sys.modules[module], "_configure_library_root_logger", None)
    if configure is not None:  # transformers adds its handler on first use, once: have it done now
        configure()
    logger = logging.getLogger(_OWN_HANDLERS[module])
    for handler in logger.handlers[:]:
        if type(handler) is logging.StreamHandler:
            logger.removeHandler(handler)
    logger.propagate = True


class _TakeLogsOnImport:
    """A ``sys.meta_path`` finder for the modules of :data:`_OWN_HANDLERS`: it finds them with
    the other finders and hands back their spec with a loader that calls :func:`_take_logs`
    after the module's own code."""

    def find_spec(self, name: str, path=None, target=None):
        if name not in _OWN_HANDLERS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ThenTakeLogs(spec.loader, name)
                return spec
        return None


class _ThenTakeLogs:
    """A loader that runs ``loader``'s module, then :func:`_take_logs`; anything else (source,
    resources) is ``loader``'s."""

    def __init__(self, loader, name: str) -> None:
        self._loader, self._name = loader, name

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _take_logs(self._name)

    def __getattr__(self, attr: str):
        return getattr(self._loader, attr)


def _stopped(where: str, signum: int, frame) -> None:
    """SIGTERM: from the launcher (another process failed, or the run was cancelled), or sent to
    this process alone. Said once: a process that already said why it stops exits without a
    second line. The exit unwinds the command (``SystemExit``), so what it was writing is
    removed or kept whole as on Ctrl-C."""
    if _SAID:  # already exiting (perhaps in an atexit hook, where SystemExit would print a traceback)
        os._exit(128 + signum)
    _SAID.append(True)
    if where:
        print(rerun(f"advsuite{where}: stopped by the launcher (another process failed or the run was cancelled); "
                    "finished records are kept, rerun the same command (with any number of processes) to resume"),
              file=sys.stderr)
    else:
        print(rerun("advsuite: stopped (SIGTERM); finished records are kept, rerun the same command to resume"),
              file=sys.stderr)
    sys.exit(128 + signum)
