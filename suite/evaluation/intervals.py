"""Confidence intervals live in :mod:`suite.intervals` (the bottom layer: the report and the
leaderboard use them too)."""

from suite.intervals import accuracy_interval, bootstrap_interval, wilson_interval

__all__ = ["accuracy_interval", "bootstrap_interval", "wilson_interval"]
