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
files written before intervals were recorded, as the leaderboard does).

Each difference is tested on the runs' paired outcomes: the runs scored the same examples, so
the per-example records beside each ``results.json`` (``records.jsonl``) say which examples one
run got right and the other wrong. With correctness 0 or 1 that is McNemar's exact test (the
two-sided binomial test of the discordant examples at 1/2; McNemar, 1947); with fractional
correctness (randomized models) the paired sign-flip test of the per-example differences, exact
up to 16 non-zero differences, else over 20,000 seeded sign draws. A difference is shown with
its p-value, ``(n.s., p=0.45)`` from 0.05 up. Comparing the two 95% intervals instead is far
weaker on paired data: two runs 20 points apart on 40 examples, one breaking every example the
other breaks and 8 more, have overlapping intervals but p = 0.008. Where a run has no records, or
records that do not reproduce its ``results.json`` numbers, the difference falls back to the
intervals (``(within CIs)`` where they overlap) and a note says why. The table, its notes and
the JSON are written by :mod:`suite.report.compare_output`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.intervals import wilson_interval
from suite.report.paired import Outcomes, RunRecords, paired_test, row_outcomes
from suite.report.results_file import read_results
from suite.report.results import Results
from suite.report.verify import check_consistent, check_identity
from suite.text import printable

RESULTS_FILE = "results.json"

#: An accuracy and its 95% interval.
Measure = tuple[float, list[float]]


@dataclass(frozen=True)
class Difference:
    """One run's row minus the first run's: the gap, whether the 95% intervals overlap, and the
    paired test's p-value and name (``None`` where the records cannot give one)."""

    value: float
    overlap: bool
    p_value: float | None = None
    test: str | None = None


@dataclass(frozen=True)
class View:
    """What one run reports on one set of examples (all of them, or one class's)."""

    n: int
    clean: Measure
    #: Point-wise attacks by (key, threat label).
    attacks: dict[tuple[str, str], Measure]
    #: The worst case by threat label.
    worst: dict[str, Measure]
    #: Per row (``("clean", "")``, ``(attack key, threat)``, ``("worst case", threat)``), each
    #: example's correctness, from the run's records; only rows the records reproduce.
    outcomes: dict[tuple[str, str], Outcomes] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    """One line of the comparison: a measure of every run (``None`` where a run has none)."""

    group: str  # "" for the whole run, else the class name
    name: str  # "clean", an attack key, or "worst case"
    threat: str
    cells: tuple[Measure | None, ...]
    #: Each run's number of examples behind the row (``None`` where a run has none).
    sizes: tuple[int | None, ...]
    #: Each run's per-example correctness under the row (``None`` where its records give none).
    outcomes: tuple[Outcomes | None, ...] = ()

    def label(self) -> str:
        """The group as shown: ``3 (n=2)``."""
        return f"{self.group} (n={'/'.join(map(str, sorted({n for n in self.sizes if n is not None})))})"

    def differences(self) -> list[Difference | None]:
        """Per run after the first: its value minus the first run's, whether their intervals
        overlap, and the paired test on the examples (where both runs' records give the row)."""
        return list(self._differences)

    @cached_property
    def _differences(self) -> tuple[Difference | None, ...]:
        """:meth:`differences`, computed once (the table, its notes and the JSON all read them)."""
        first = self.cells[0]
        outcomes = self.outcomes or (None,) * len(self.cells)
        found = []
        for cell, paired in zip(self.cells[1:], outcomes[1:]):
            if first is None or cell is None:
                found.append(None)
                continue
            overlap = cell[1][0] <= first[1][1] and first[1][0] <= cell[1][1]
            tested = paired_test(outcomes[0], paired) if outcomes[0] is not None and paired is not None else None
            found.append(Difference(cell[0] - first[0], overlap, *(tested or (None, None))))
        return tuple(found)


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
    run = read_results(path)
    check_consistent(path, run)
    check_identity(path, run)  # (check_consistent holds every number inside its interval)
    return run


def check_count(names: Sequence[str]) -> None:
    """Refuse fewer than two runs (before reading any)."""
    if len(names) < 2:
        raise ConfigError(f"compare needs at least two runs; got {len(names)} ({', '.join(map(repr, names))}): "
                          "give the reference run and the runs to compare with it")


def check_same_examples(names: Sequence[str], runs: Sequence[Results]) -> None:
    """Refuse, naming both fingerprints, any run not evaluated on the first run's examples: by
    the results' dataset (fingerprint, columns, n, the subsample's seed) and, where both runs'
    ``run.json`` are beside them (``names`` are their paths), by the content hash of the evaluated
    examples each recorded (ids, inputs and labels: a fingerprint edited into a results file
    does not make other examples the same).

    That hash is of the inputs as the model took them: texts as they are, but images resized
    and cropped to the model's input size and preprocessing. So it is compared where that
    cannot differ: text models, or runs of one model spec. Two image models of other sizes or
    crops (ImageNet models at 224² and 288²) on the same split hash their examples apart, and
    are compared by the results' dataset alone."""
    check_count(names)
    first = runs[0].dataset
    digests = [_examples_digest(name) for name in names]
    for name, run, digest in zip(names[1:], runs[1:], digests[1:]):
        if not _same_inputs(runs[0], run):
            digest = None
        other = run.dataset
        if not first.fingerprint or not other.fingerprint:
            why = "a dataset fingerprint is unknown"
        elif first.fingerprint != other.fingerprint:
            why = "different datasets"
        elif first.columns != other.columns:  # one file read through other columns: other texts or labels
            why = f"different columns of the data: {printable(str(first.columns))} and {printable(str(other.columns))}"
        elif first.n != other.n:
            why = "different n"
        elif first.n < first.size and runs[0].seed != run.seed:
            why = f"different subsamples of the split: seeds {runs[0].seed} and {run.seed}"
        elif digests[0] and digest and digests[0] != digest:
            why = f"their run.json record other examples: {digests[0]} and {digest}"
        else:
            continue
        raise ConfigError(f"{names[0]!r} and {name!r} were not evaluated on the same examples ({why}): dataset "
                          f"fingerprints {first.fingerprint!r} and {other.fingerprint!r}, n={first.n} and "
                          f"n={other.n}; only runs on the same examples are compared")


def _same_inputs(first: Results, other: Results) -> bool:
    """Whether both runs' models took the examples' inputs alike: both text models (a text is
    not conformed to the model), or one model spec (one input size and preprocessing)."""
    from suite.models.registry import spec_modality

    texts = all(spec_modality(run.model.spec) == "text" for run in (first, other))
    return texts or (first.model.spec, first.model.revision) == (other.model.spec, other.model.revision)


def _examples_digest(name: str) -> str | None:
    """The evaluated examples' content hash the ``run.json`` beside a run recorded, if any."""
    from suite.paths import read_run_description

    path = Path(name)
    run_file = (path if path.is_dir() else path.parent) / "run.json"
    if not run_file.is_file():
        return None
    digest = read_run_description(run_file).get("examples")
    return digest if isinstance(digest, str) else None


def check_per_class(names: Sequence[str], runs: Sequence[Results]) -> None:
    """Refuse a run whose results hold no per-class breakdown."""
    for name, run in zip(names, runs):
        if not run.per_class:
            raise ConfigError(f"{name!r} predates per-class results (its results.json has no per_class): rerun it "
                              "with this advsuite to compare per class")


def _measure(value: float, interval: Sequence[float] | None, n: int) -> Measure:
    """``value`` with its interval (Wilson's from ``value`` and ``n`` where none was recorded)."""
    return (value, list(interval) if interval else list(wilson_interval(value * n, n)))


def attack_identity(entry: Any) -> tuple[Any, ...]:
    """What makes two attack entries the same attack, whatever their keys."""
    return (entry.attack, entry.adversary, entry.threat.label, json.dumps(entry.params, sort_keys=True, default=str))


def aliases(runs: Sequence[Results]) -> list[dict[str, str]]:
    """Per run, the key each attack is shown under: its own, or the key an earlier run gave the
    same attack (:func:`attack_identity`; only where the match is unique in both runs and the key is
    not one of the run's own)."""
    seen: dict[tuple[Any, ...], str] = {}
    shown = []
    for run in runs:
        counts = Counter(attack_identity(entry) for entry in run.attacks.values())
        mapping = {}
        for key, entry in run.attacks.items():
            identity = attack_identity(entry)
            unique = entry.attack is not None and counts[identity] == 1
            earlier = seen.get(identity) if unique else None
            mapping[key] = earlier if earlier is not None and earlier not in run.attacks else key
            if unique:
                seen.setdefault(identity, mapping[key])
        shown.append(mapping)
    return shown


def overall_view(run: Results, alias: dict[str, str] | None = None, records: RunRecords | None = None) -> View:
    """What ``run`` reports over all its examples (attack keys renamed by ``alias``), with each
    example's outcome per row where ``records`` reproduce the row."""
    n = run.dataset.n
    alias = alias or {}
    own = {(alias.get(key, key), entry.threat.label): key for key, entry in run.attacks.items()}
    attacks = {(alias.get(key, key), entry.threat.label): _measure(entry.robust_accuracy, entry.robust_accuracy_ci, n)
               for key, entry in run.attacks.items()}
    worst = {label: _measure(group.worst_case_robust_accuracy, group.worst_case_robust_accuracy_ci, n)
             for label, group in run.threat_models.items()}
    labels = {entry.threat.label for entry in run.attacks.values()}
    if not worst and run.worst_case_robust_accuracy is not None and len(labels) == 1:
        worst = {labels.pop(): _measure(run.worst_case_robust_accuracy, run.worst_case_robust_accuracy_ci, n)}
    clean = _measure(run.clean_accuracy, run.clean_accuracy_ci, n)
    return View(n=n, clean=clean, attacks=attacks, worst=worst,
                outcomes={} if records is None else row_outcomes(records, run, _named(clean, attacks, worst, own)))


def check_reproduced(path: Path, run: Results) -> bool:
    """Refuse, in one line, a ``results.json`` that disagrees with itself or with the run's
    identity (:mod:`suite.report.verify`), or whose numbers its records do not give, or that
    leaves out an attack its records hold (the file was changed after the run: a flipped byte
    may keep a number inside its interval). True when the records and the run's identity beside
    it were both there and checked: the file is verified."""
    from suite.report.paired import read_records

    path = Path(path)
    check_consistent(path, run)
    identified = check_identity(path, run)
    records = read_records(path, run)
    if isinstance(records, str):
        if records.startswith("no "):
            return False
        raise ConfigError(f"{str(path)!r}: {records}; rerun the same command to write the run again")
    check_records_give(path, run, records)
    return identified


def check_records_give(path: Path, run: Results, records: RunRecords) -> None:
    """Refuse, in one line, a ``results.json`` whose numbers its (readable) records do not give,
    or that leaves out an attack its records hold (:func:`check_reproduced`)."""
    reported = {*run.attacks, *run.distributional}
    unreported = sorted(set(records.attacks) - reported)
    if unreported:
        raise ConfigError(f"{str(path)!r}: its records.jsonl holds records of attack {printable(repr(unreported[0]))} "
                          "that results.json does not report: results.json was changed after the run; rerun the "
                          "same command to write it again from the records")
    view = overall_view(run, records=records)
    wanted = [("clean", ""), *view.attacks, *(("worst case", label) for label in view.worst)]
    missing = [row for row in wanted if row not in view.outcomes]
    if missing:
        name, threat = missing[0]
        value = view.clean[0] if name == "clean" else (view.worst[threat] if name == "worst case"
                                                        else view.attacks[(name, threat)])[0]
        row = name if not threat else f"{name} ({threat})"
        raise ConfigError(f"{str(path)!r}: its records.jsonl does not give its {printable(row)} of {value:g} (nor "
                          f"{len(missing) - 1} other number(s)): results.json was changed after the run; rerun the "
                          "same command to write it again from the records")


def class_view(run: Results, name: str, alias: dict[str, str] | None = None,
               records: RunRecords | None = None) -> View | None:
    """What ``run`` reports on the examples of class ``name`` (``None``: it has none), with each
    example's outcome per row where ``records`` reproduce the row."""
    entry = run.per_class.get(name)
    if entry is None:
        return None
    alias = alias or {}
    own = {(alias.get(key, key), run.attacks[key].threat.label if key in run.attacks else ""): key
           for key in entry.attacks}
    attacks = {(alias.get(key, key), run.attacks[key].threat.label if key in run.attacks else ""):
               (item.robust_accuracy, list(item.robust_accuracy_ci)) for key, item in entry.attacks.items()}
    worst = {label: (item.worst_case_robust_accuracy, list(item.worst_case_robust_accuracy_ci))
             for label, item in entry.threat_models.items()}
    clean = (entry.clean_accuracy, list(entry.clean_accuracy_ci))
    found = {} if records is None else row_outcomes(records, run, _named(clean, attacks, worst, own), entry.index)
    return View(n=entry.n, clean=clean, attacks=attacks, worst=worst, outcomes=found)


def _named(clean: Measure, attacks: dict[tuple[str, str], Measure], worst: dict[str, Measure],
           own: dict[tuple[str, str], str]) -> dict[tuple[str, str], tuple[str, float]]:
    """Each row of a view with the run's own name for it and its value (:func:`~suite.report.paired.row_outcomes`)."""
    return {("clean", ""): ("clean", clean[0]), **{row: (own[row], measure[0]) for row, measure in attacks.items()},
            **{("worst case", label): (label, measure[0]) for label, measure in worst.items()}}


def rows(views: Sequence[View | None], group: str = "") -> list[Row]:
    """Clean accuracy, then per threat (in order of first appearance) its attacks and worst case."""
    present = [view for view in views if view is not None]
    threats = list(dict.fromkeys([*(t for view in present for _, t in view.attacks), *(t for view in present
                                                                                       for t in view.worst)]))
    sizes = tuple(None if view is None else view.n for view in views)

    def outcomes(row: tuple[str, str]) -> tuple[Outcomes | None, ...]:
        return tuple(None if view is None else view.outcomes.get(row) for view in views)

    found = [Row(group, "clean", "", tuple(None if view is None else view.clean for view in views), sizes,
                 outcomes(("clean", "")))]
    for threat in threats:
        keys = dict.fromkeys(key for view in present for key, t in view.attacks if t == threat)
        for key in keys:
            found.append(Row(group, key, threat, tuple(None if view is None else view.attacks.get((key, threat))
                                                       for view in views), sizes, outcomes((key, threat))))
        if any(threat in view.worst for view in present):
            found.append(Row(group, "worst case", threat, tuple(None if view is None else view.worst.get(threat)
                                                                 for view in views), sizes,
                             outcomes(("worst case", threat))))
    return found


def class_rows(runs: Sequence[Results], records: Sequence[RunRecords | str | None] = ()) -> list[Row]:
    """:func:`rows` for every class any run lists (by class index, then name), each in its group;
    ``records`` (per run, from :func:`~suite.report.paired.read_records`) give the paired tests."""
    order: dict[str, int] = {}
    for run in runs:
        for name, entry in run.per_class.items():
            order.setdefault(name, entry.index)
    found = []
    renamed = aliases(runs)
    usable = _usable(records, len(runs))
    for name in sorted(order, key=lambda name: (order[name], name)):
        found.extend(rows([class_view(run, name, alias, kept) for run, alias, kept in zip(runs, renamed, usable)],
                          group=name))
    return found


def overall_rows(runs: Sequence[Results], records: Sequence[RunRecords | str | None] = ()) -> list[Row]:
    """:func:`rows` over every run's examples; ``records`` (per run, from
    :func:`~suite.report.paired.read_records`) give the paired tests."""
    return rows([overall_view(run, alias, kept)
                 for run, alias, kept in zip(runs, aliases(runs), _usable(records, len(runs)))])


def _usable(records: Sequence[RunRecords | str | None], count: int) -> list[RunRecords | None]:
    """Per run, its records where :func:`~suite.report.paired.read_records` found usable ones
    (none were read: ``None`` for every run)."""
    return [found if isinstance(found, RunRecords) else None for found in records] if records else [None] * count
