"""Runs side by side (``advsuite compare``): each run's accuracies and their differences.

Runs are compared only when they were evaluated on the same examples: the same dataset
fingerprint (a content hash of the split, ``None`` when unknown), the same ``n``, and, when
``n`` is a subsample of the split, the same seed (which draws the subsample). Rows are clean
accuracy, each point-wise attack and the worst case per threat model; an attack row is keyed by
the attack's key *and* its threat label, so numbers at different threat models are never
subtracted: each run shows ``-`` where it has no such row. The same attack stored under another
key (``pgd_linf`` in a one-radius run, ``pgd_linf-eps0.03`` in a run over several radii) is
matched when its registered name, adversary, threat and hyperparameters are all the same
(:func:`aliases`).

Every accuracy carries its 95% interval (from the results; Wilson's from the accuracy and n for
files written before intervals were recorded, as the leaderboard does). A difference whose two
intervals overlap is marked ``(within CIs)``: the gap is smaller than the uncertainty.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.intervals import wilson_interval
from suite.report.results_file import read_results
from suite.report.results import Results
from suite.report.table import format_rows, percent
from suite.text import printable

RESULTS_FILE = "results.json"
WITHIN = "(within CIs)"

#: An accuracy and its 95% interval.
Measure = tuple[float, list[float]]


@dataclass(frozen=True)
class View:
    """What one run reports on one set of examples (all of them, or one class's)."""

    n: int
    clean: Measure
    #: Point-wise attacks by (key, threat label).
    attacks: dict[tuple[str, str], Measure]
    #: The worst case by threat label.
    worst: dict[str, Measure]


@dataclass(frozen=True)
class Row:
    """One line of the comparison: a measure of every run (``None`` where a run has none)."""

    group: str  # "" for the whole run, else the class name
    name: str  # "clean", an attack key, or "worst case"
    threat: str
    cells: tuple[Measure | None, ...]
    #: Each run's number of examples behind the row (``None`` where a run has none).
    sizes: tuple[int | None, ...]

    def label(self) -> str:
        """The group as shown: ``3 (n=2)``."""
        return f"{self.group} (n={'/'.join(map(str, sorted({n for n in self.sizes if n is not None})))})"

    def differences(self) -> list[tuple[float, bool] | None]:
        """Per run after the first: its value minus the first run's, and whether their intervals overlap."""
        first = self.cells[0]
        return [None if first is None or cell is None else
                (cell[0] - first[0], cell[1][0] <= first[1][1] and first[1][0] <= cell[1][1])
                for cell in self.cells[1:]]


def read_run(path: Path) -> Results:
    """The results of one run: a run directory or its ``results.json`` (validated, version 1
    upgraded). A recipe's output directory (one sub-directory per task) is refused, naming its
    tasks: a comparison is between two evaluations, not two recipes."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{str(path)!r} does not exist: give a run directory or its {RESULTS_FILE}")
    if path.is_dir() and path.name != RESULTS_FILE:
        tasks = sorted(sub.parent.name for sub in path.glob(f"*/{RESULTS_FILE}"))
        if not (path / RESULTS_FILE).exists() and tasks:
            raise ConfigError(f"{str(path)!r} is a recipe's output directory with tasks {', '.join(tasks)}: compare "
                              f"task directories, e.g. {str(path / tasks[0])!r}")
        if not (path / RESULTS_FILE).exists():
            raise ConfigError(f"{str(path)!r} holds no {RESULTS_FILE}: give a finished run's directory (`advsuite "
                              "evaluate --output DIR` writes it at the end)")
        path = path / RESULTS_FILE
    if path.is_dir():
        raise ConfigError(f"{str(path)!r} is a directory, not a results file")
    return read_results(path)


def check_count(names: Sequence[str]) -> None:
    """Refuse fewer than two runs (before reading any)."""
    if len(names) < 2:
        raise ConfigError(f"compare needs at least two runs; got {len(names)} ({', '.join(map(repr, names))}): "
                          "give the reference run and the runs to compare with it")


def check_same_examples(names: Sequence[str], runs: Sequence[Results]) -> None:
    """Refuse, naming both fingerprints, any run not evaluated on the first run's examples."""
    check_count(names)
    first = runs[0].dataset
    for name, run in zip(names[1:], runs[1:]):
        other = run.dataset
        if not first.fingerprint or not other.fingerprint:
            why = "a dataset fingerprint is unknown"
        elif first.fingerprint != other.fingerprint:
            why = "different datasets"
        elif first.n != other.n:
            why = "different n"
        elif first.n < first.size and runs[0].seed != run.seed:
            why = f"different subsamples of the split: seeds {runs[0].seed} and {run.seed}"
        else:
            continue
        raise ConfigError(f"{names[0]!r} and {name!r} were not evaluated on the same examples ({why}): dataset "
                          f"fingerprints {first.fingerprint!r} and {other.fingerprint!r}, n={first.n} and "
                          f"n={other.n}; only runs on the same examples are compared")


def check_per_class(names: Sequence[str], runs: Sequence[Results]) -> None:
    """Refuse a run whose results hold no per-class breakdown."""
    for name, run in zip(names, runs):
        if not run.per_class:
            raise ConfigError(f"{name!r} predates per-class results (its results.json has no per_class): rerun it "
                              "with this advsuite to compare per class")


def _measure(value: float, interval: Sequence[float] | None, n: int) -> Measure:
    """``value`` with its interval (Wilson's from ``value`` and ``n`` where none was recorded)."""
    return (value, list(interval) if interval else list(wilson_interval(value * n, n)))


def _identity(entry: Any) -> tuple[Any, ...]:
    """What makes two attack entries the same attack, whatever their keys."""
    return (entry.attack, entry.adversary, entry.threat.label, json.dumps(entry.params, sort_keys=True, default=str))


def aliases(runs: Sequence[Results]) -> list[dict[str, str]]:
    """Per run, the key each attack is shown under: its own, or the key an earlier run gave the
    same attack (:func:`_identity`; only where the match is unique in both runs and the key is
    not one of the run's own)."""
    seen: dict[tuple[Any, ...], str] = {}
    shown = []
    for run in runs:
        counts = Counter(_identity(entry) for entry in run.attacks.values())
        mapping = {}
        for key, entry in run.attacks.items():
            identity = _identity(entry)
            unique = entry.attack is not None and counts[identity] == 1
            earlier = seen.get(identity) if unique else None
            mapping[key] = earlier if earlier is not None and earlier not in run.attacks else key
            if unique:
                seen.setdefault(identity, mapping[key])
        shown.append(mapping)
    return shown


def overall_view(run: Results, alias: dict[str, str] | None = None) -> View:
    """What ``run`` reports over all its examples (attack keys renamed by ``alias``)."""
    n = run.dataset.n
    alias = alias or {}
    attacks = {(alias.get(key, key), entry.threat.label): _measure(entry.robust_accuracy, entry.robust_accuracy_ci, n)
               for key, entry in run.attacks.items()}
    worst = {label: _measure(group.worst_case_robust_accuracy, group.worst_case_robust_accuracy_ci, n)
             for label, group in run.threat_models.items()}
    labels = {entry.threat.label for entry in run.attacks.values()}
    if not worst and run.worst_case_robust_accuracy is not None and len(labels) == 1:
        worst = {labels.pop(): _measure(run.worst_case_robust_accuracy, run.worst_case_robust_accuracy_ci, n)}
    return View(n=n, clean=_measure(run.clean_accuracy, run.clean_accuracy_ci, n), attacks=attacks, worst=worst)


def class_view(run: Results, name: str, alias: dict[str, str] | None = None) -> View | None:
    """What ``run`` reports on the examples of class ``name`` (``None``: it has none)."""
    entry = run.per_class.get(name)
    if entry is None:
        return None
    alias = alias or {}
    attacks = {(alias.get(key, key), run.attacks[key].threat.label if key in run.attacks else ""):
               (item.robust_accuracy, list(item.robust_accuracy_ci)) for key, item in entry.attacks.items()}
    worst = {label: (item.worst_case_robust_accuracy, list(item.worst_case_robust_accuracy_ci))
             for label, item in entry.threat_models.items()}
    return View(n=entry.n, clean=(entry.clean_accuracy, list(entry.clean_accuracy_ci)), attacks=attacks, worst=worst)


def rows(views: Sequence[View | None], group: str = "") -> list[Row]:
    """Clean accuracy, then per threat (in order of first appearance) its attacks and worst case."""
    present = [view for view in views if view is not None]
    threats = list(dict.fromkeys([*(t for view in present for _, t in view.attacks), *(t for view in present
                                                                                       for t in view.worst)]))
    sizes = tuple(None if view is None else view.n for view in views)
    found = [Row(group, "clean", "", tuple(None if view is None else view.clean for view in views), sizes)]
    for threat in threats:
        keys = dict.fromkeys(key for view in present for key, t in view.attacks if t == threat)
        for key in keys:
            found.append(Row(group, key, threat, tuple(None if view is None else view.attacks.get((key, threat))
                                                       for view in views), sizes))
        if any(threat in view.worst for view in present):
            found.append(Row(group, "worst case", threat, tuple(None if view is None else view.worst.get(threat)
                                                                 for view in views), sizes))
    return found


def class_rows(runs: Sequence[Results]) -> list[Row]:
    """:func:`rows` for every class any run lists (by class index, then name), each in its group."""
    order: dict[str, int] = {}
    for run in runs:
        for name, entry in run.per_class.items():
            order.setdefault(name, entry.index)
    found = []
    renamed = aliases(runs)
    for name in sorted(order, key=lambda name: (order[name], name)):
        found.extend(rows([class_view(run, name, alias) for run, alias in zip(runs, renamed)], group=name))
    return found


def overall_rows(runs: Sequence[Results]) -> list[Row]:
    """:func:`rows` over every run's examples."""
    return rows([overall_view(run, alias) for run, alias in zip(runs, aliases(runs))])


def worst_case_notes(names: Sequence[str], runs: Sequence[Results]) -> list[str]:
    """A line per threat whose worst case the runs took over different attacks."""
    notes = []
    labels = dict.fromkeys(label for run in runs for label in run.threat_models)
    renamed = aliases(runs)
    for label in labels:
        sets = [tuple(alias.get(key, key) for key in run.threat_models[label].attacks)
                if label in run.threat_models else None for run, alias in zip(runs, renamed)]
        if len({attacks for attacks in sets if attacks is not None}) > 1:
            over = "; ".join(f"{letter} over {', '.join(attacks)}" for letter, attacks in zip(letters(len(names)), sets)
                             if attacks is not None)
            notes.append(f"note: the worst case under {label!r} is over different attacks: {over}")
    return notes


def letters(count: int) -> list[str]:
    """Column names of ``count`` runs: A, B, ..., Z, R27, R28..."""
    return [chr(ord("A") + i) if i < 26 else f"R{i + 1}" for i in range(count)]


def table(names: Sequence[str], runs: Sequence[Results], found: Sequence[Row]) -> str:
    """The comparison as text: a legend naming each run, the table, and what ``(within CIs)`` means."""
    marks = letters(len(runs))
    legend = [f"{mark}: {name}  (model {run.model.name}, task {run.task}, {run.dataset.spec}:{run.dataset.split}, "
              f"n={run.dataset.n}, seed {run.seed})" for mark, name, run in zip(marks, names, runs)]
    grouped = any(row.group for row in found)
    header = [*(["class"] if grouped else []), "row", "threat", *(f"{mark} acc [95% CI]" for mark in marks),
              *(f"{mark} - {marks[0]}" for mark in marks[1:])]
    lines = []
    for row in found:
        values = [percent(*cell) if cell is not None else "-" for cell in row.cells]
        lines.append([*([row.label()] if grouped else []), row.name, row.threat, *values,
                      *(_difference(found) for found in row.differences())])
    body = format_rows(header, [[printable(cell) for cell in line] for line in lines])
    footer = [*worst_case_notes(names, runs),
              f"differences in percentage points; {WITHIN}: the two 95% intervals overlap, the gap is within them"]
    return "\n".join([*(printable(line) for line in legend), "", body, "", *(printable(line) for line in footer)])


def _difference(found: tuple[float, bool] | None) -> str:
    """``+3.1 pp`` (``-`` when a run lacks the row), marked when the intervals overlap."""
    if found is None:
        return "-"
    text = f"{100 * found[0]:+.1f} pp".replace("-0.0 pp", "+0.0 pp")
    return f"{text} {WITHIN}" if found[1] else text


def as_json(names: Sequence[str], runs: Sequence[Results], found: Sequence[Row]) -> dict[str, Any]:
    """The comparison as data: the runs, and per row each run's accuracy, interval and difference."""
    return {
        "runs": [{"run": name, "model": run.model.name, "task": run.task, "dataset": run.dataset.spec,
                  "split": run.dataset.split, "n": run.dataset.n, "fingerprint": run.dataset.fingerprint,
                  "seed": run.seed} for name, run in zip(names, runs)],
        "rows": [{"class": row.group or None, "row": row.name, "threat": row.threat or None, "n": list(row.sizes),
                  "accuracy": [None if cell is None else cell[0] for cell in row.cells],
                  "interval": [None if cell is None else cell[1] for cell in row.cells],
                  "difference": [None, *(None if found is None else found[0] for found in row.differences())],
                  "within_intervals": [None, *(None if found is None else found[1] for found in row.differences())]}
                 for row in found],
    }
