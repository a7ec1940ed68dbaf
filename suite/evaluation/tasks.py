"""Orchestration: prepare every task first (all validation, no writes), then run them in order.

The CLI (``evaluate``, ``run``, ``demo``), the Python API and ``bench/`` all come through here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from suite.errors import ModelUnavailableError

from suite.evaluation.options import RunOptions
from suite.evaluation.prepare import prepare
from suite.evaluation.recipe import TaskConfig
from suite.evaluation.runner import execute
from suite.report.results import Results

logger = logging.getLogger(__name__)


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
    for task in tasks:
        try:
            prepared.append(prepare(task, options))
        except ModelUnavailableError as error:
            if not skip_unavailable:
                raise
            logger.warning("skipped task %r: %s", task.name, error)
    results = [execute(item) for item in prepared]
    return results if all(result is not None for result in results) else []
