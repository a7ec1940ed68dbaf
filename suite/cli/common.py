"""Helpers shared by the subcommands that run tasks."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def command_line() -> str:
    return " ".join(shlex.quote(part) for part in ["advsuite", *sys.argv[1:]])


def run_tasks(tasks, seed: int, batch_size_for, output: Path, overwrite: bool, subdirs: bool,
              log_samples: bool = False) -> list:
    """Prepare every task (all validation, no writes), then run them and print the table."""
    from suite.evaluation.runner import execute, prepare
    from suite.report.table import adversary_table, has_adversaries, results_table

    prepared = [
        prepare(task, seed, batch_size_for(task), output / task.name if subdirs else output, overwrite, log_samples)
        for task in tasks
    ]
    results = [execute(item, command=command_line()) for item in prepared]
    if not all(results):  # not the main process of a multi-process launch: it reports
        return []
    print(results_table(results))
    if has_adversaries(results):
        print(f"\nrobust accuracy by adversary temperature (none = out of the box):\n{adversary_table(results)}")
    flagged = [result for result in results if result.illusion is not None and result.illusion.flagged]
    for result in flagged:
        print(f"\nILLUSION OF ROBUSTNESS: {result.model.name} ({result.task}): "
              f"an aware adversary lowers robust accuracy by up to {100 * result.illusion.max_drop:.1f} pp")
    print(f"\nresults: {', '.join(str(item.store.directory / 'results.json') for item in prepared)}")
    if log_samples:
        print(f"samples: {', '.join(str(item.store.directory / 'samples.md') for item in prepared)}")
    return results
