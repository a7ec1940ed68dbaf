"""Orchestration: prepare every task first (all validation, no writes), then run them in order.

The CLI (``evaluate``, ``run``, ``demo``), the Python API and ``bench/`` all come through here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from suite.errors import ModelUnavailableError, SuiteError
from suite.progress import SAY_NOW

from suite.evaluation.options import RunOptions
from suite.evaluation.prepare import prepare
from suite.evaluation.recipe import TaskConfig
from suite.evaluation.runner import execute
from suite.report.results import Results

logger = logging.getLogger(__name__)


@contextmanager
def _held_until_prepared() -> Iterator[None]:
    """Hold what the suite logs while the tasks are prepared, and say it once every task is:
    a bad input found in preparation is then its one error line, not a warning about the radius
    or the data of a run that never starts (advsuite: one line and exit 2). A line logged with
    ``extra={SAY_NOW: True}`` is said at once: it tells why the wait is long (a built-in model
    trained at its first use)."""
    held: list[logging.LogRecord] = []
    suite_logger = logging.getLogger("suite")

    class Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if getattr(record, SAY_NOW, False) and propagate and suite_logger.parent is not None:
                suite_logger.parent.handle(record)
            else:
                held.append(record)

    hold, propagate = Hold(), suite_logger.propagate
    suite_logger.addHandler(hold)
    suite_logger.propagate = False
    try:
        yield
    finally:
        suite_logger.removeHandler(hold)
        suite_logger.propagate = propagate
    if propagate and suite_logger.parent is not None:  # prepared: said now, where they were going
        for record in held:
            suite_logger.parent.handle(record)


def run_tasks(tasks: Sequence[TaskConfig], options: RunOptions, skip_unavailable: bool = False) -> list[Results]:
    """Run ``tasks`` with ``options``; their results, in order.

    Every task is prepared before the first runs, so a bad name, file or output directory in
    the last task fails before anything is written. Under a multi-process launch only the main
    process gets the results; the others get an empty list.

    Args:
        skip_unavailable: A task whose model cannot be built here for a missing offline
            resource (:class:`~suite.errors.ModelUnavailableError`) is skipped with one line
            naming the fetch command, and the rest run (a recipe); else it is refused.
    """
    prepared = []
    with _held_until_prepared():
        for task in tasks:
            try:
                prepared.append(prepare(task, options))
            except ModelUnavailableError as error:
                if not skip_unavailable:
                    raise
                logger.warning("skipped task %r: %s", task.name, error)
            except SuiteError as error:
                _name(error, task, tasks)
                raise
    results = []
    for item in prepared:
        try:
            results.append(execute(item))
        except SuiteError as error:
            _name(error, item.config, tasks)
            raise
    return results if all(result is not None for result in results) else []


def _name(error: SuiteError, task: TaskConfig, tasks: Sequence[TaskConfig]) -> None:
    """Make ``error``'s message say which task it is about, where there are several (a recipe's:
    "certify works on image models" had not said which of them)."""
    message = error.args[0] if error.args else None
    if len(tasks) > 1 and isinstance(message, str) and not message.startswith(f"task {task.name!r}"):
        error.args = (f"task {task.name!r}: {message}", *error.args[1:])
