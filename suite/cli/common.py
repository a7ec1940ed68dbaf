"""Helpers shared by the subcommands that run tasks: argument types and the printed report."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def print_report(results: Sequence, options, log_samples: bool = False) -> None:
    """The results table, the adversary table, illusion lines, and where the files are."""
    from suite.report.table import adversary_table, has_adversaries, results_table

    print(results_table(results))
    if has_adversaries(results):
        print(f"\nrobust accuracy by adversary temperature (none = out of the box):\n{adversary_table(results)}")
    for result in results:
        if result.illusion is not None and result.illusion.flagged:
            print(f"\nILLUSION OF ROBUSTNESS: {result.model.name} ({result.task}): "
                  f"an aware adversary lowers robust accuracy by up to {100 * result.illusion.max_drop:.1f} pp")
    directories = [options.directory_for(result.task) for result in results]
    print(f"\nresults: {', '.join(str(directory / 'results.json') for directory in directories)}")
    if log_samples:
        print(f"samples: {', '.join(str(directory / 'samples.md') for directory in directories)}")
