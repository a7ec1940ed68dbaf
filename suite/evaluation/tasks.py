"""Orchestration: prepare every task first (all validation, no writes), then run them in order.

The CLI (``evaluate``, ``run``, ``demo``), the Python API and ``bench/`` all come through here.
"""

from __future__ import annotations

from collections.abc import Sequence

from suite.evaluation.options import RunOptions
from suite.evaluation.prepare import prepare
from suite.evaluation.recipe import TaskConfig
from suite.evaluation.runner import execute
from suite.report.results import Results


def run_tasks(tasks: Sequence[TaskConfig], options: RunOptions) -> list[Results]:
    """Run ``tasks`` with ``options``; their results, in order.

    Every task is prepared before the first runs, so a bad name, file or output directory in
    the last task fails before anything is written. Under a multi-process launch only the main
    process gets the results; the others get an empty list.
    """
    prepared = [prepare(task, options) for task in tasks]
    results = [execute(item) for item in prepared]
    return results if all(result is not None for result in results) else []
