"""Two runs' outcomes on the same examples, paired: the records behind a comparison's p-values.

``advsuite compare`` (:mod:`suite.report.compare`) reads each run's ``records.jsonl`` beside its
``results.json``, keeps a row's per-example correctness only where the records reproduce the
row's number, and tests each difference on the examples:

- correctness 0 or 1 throughout: McNemar's exact test (McNemar, 1947, "Note on the sampling
  error of the difference between correlated proportions or percentages"): the two-sided
  binomial test at 1/2 of the examples only one run got right;
- fractional correctness (a randomized ensemble's exact expected correctness): the paired
  sign-flip (randomisation) test of the per-example differences, which for 0/1 values is the
  same sign test.

An evaluation's illusion-of-robustness findings (:mod:`suite.report.illusion`) test their
drops with :func:`paired_test` too, on the run's records in memory.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from suite.report.record_schema import RECORDS_FILE, RUN_KIND, record_problem, run_digest
from suite.report.results import Results

#: The sign-flip test enumerates every sign pattern up to this many non-zero differences.
EXACT_FLIPS = 16
SIGN_DRAWS = 20_000
#: A run's records reproduce one of its numbers when their mean is within this of it.
REPRODUCED = 1e-9

#: Per example id, its correctness under one row (clean, an attack, a worst case).
Outcomes = dict[str, float]


@dataclass(frozen=True)
class RunRecords:
    """A run's per-example records: each example's clean correctness and label, and per attack
    key its robust correctness by example id (examples not attacked are absent)."""

    clean: dict[str, tuple[float, int | None]]
    attacks: dict[str, dict[str, float]]


def read_records(path: Path, run: Results) -> RunRecords | str:
    """The records beside a run's ``results.json`` (``path``: the directory or the file), or why
    there are none to use: absent, unreadable, or not the run's examples."""
    path = Path(path)
    file = (path.parent if path.is_file() else path) / RECORDS_FILE
    if not file.is_file():
        return f"no {RECORDS_FILE} beside its results"
    clean: dict[str, tuple[float, int | None]] = {}
    attacks: dict[str, dict[str, float]] = {}
    whose = _run_digest(file.parent / "run.json")
    try:
        lines = [line for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
        for number, line in enumerate(lines):
            record = json.loads(line)
            kind, example = record.get("kind"), record.get("id")
            if kind == RUN_KIND:  # whose records follow: the run of the run.json beside them, where there is one
                if number > 0:
                    return f"its {RECORDS_FILE} names a run after its first line (files joined or edited)"
                if whose is not None and record.get("run") != whose:
                    return f"its {RECORDS_FILE} holds another run's records than its run.json describes"
                continue
            if number == 0 and whose is not None:  # a resume refuses such a file too (records.py)
                return (f"its {RECORDS_FILE} does not name its run on its first line (written before record files did, "
                        "or edited)")
            if kind in ("clean", "attack") and record_problem(record) is not None:  # what a resume refuses too
                raise ValueError(record)
            if kind == "clean":
                label = record.get("label")
                value = (float(record["correct"]), label if isinstance(label, int) else None)
                if clean.setdefault(example, value) != value:
                    return f"its {RECORDS_FILE} holds two clean records of example {example!r}"
            elif kind == "attack":
                value = float(record["robust"])
                if attacks.setdefault(record["attack"], {}).setdefault(example, value) != value:
                    return f"its {RECORDS_FILE} holds two records of example {example!r} under {record['attack']!r}"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return f"its {RECORDS_FILE} cannot be read as advsuite records"
    if len(clean) != run.dataset.n:
        return f"its {RECORDS_FILE} holds {len(clean)} clean records, not its n = {run.dataset.n}"
    return RunRecords(clean, attacks)


def _run_digest(path: Path) -> str | None:
    """The digest of the run ``path`` (a ``run.json``) describes, ``None`` without a readable one."""
    try:
        identity = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return run_digest(identity) if isinstance(identity, dict) else None


def row_outcomes(records: RunRecords, run: Results, rows: Mapping[tuple[str, str], tuple[str, float]],
                 label: int | None = None) -> dict[tuple[str, str], Outcomes]:
    """Per row, each example's correctness from ``records`` (of class ``label`` only, when given),
    for the rows whose numbers the records reproduce. ``rows`` maps each row (``("clean", "")``,
    ``(attack key, threat)``, ``("worst case", threat)``) to the run's own name for it (``clean``,
    an attack key, a threat label) and the number ``results.json`` gives it."""
    ids = [example for example, (_, known) in records.clean.items() if label is None or known == label]
    correct = {example: records.clean[example][0] for example in ids}

    def robust(key: str) -> Outcomes | None:
        attacked = records.attacks.get(key, {})
        if any(correct[example] > 0 and example not in attacked for example in ids):
            return None
        return {example: attacked[example] if correct[example] > 0 else 0.0 for example in ids}  # as the metrics

    found = {}
    for row, (own, value) in rows.items():
        if row[0] == "clean":
            values: Outcomes | None = correct
        elif row[0] == "worst case":
            group = run.threat_models.get(own)
            # Results written before threat_models: the worst case over every attack of the threat.
            keys = group.attacks if group is not None else [key for key, entry in run.attacks.items()
                                                            if entry.threat.label == own]
            parts = [robust(key) for key in keys] or [None]
            values = None if any(part is None for part in parts) else {
                example: min([correct[example], *(part[example] for part in parts)]) for example in ids}
        else:
            values = robust(own)
        if values and abs(sum(values.values()) / len(values) - value) <= REPRODUCED:
            found[row] = values
    return found


def paired_test(first: Outcomes, other: Outcomes) -> tuple[float, str] | None:
    """The two-sided p-value that two runs' correctness on the same examples has the same mean,
    and the test's name; ``None`` when they are not on the same examples.

    Correctness 0 or 1 throughout: McNemar's exact test, the binomial test at 1/2 of the
    examples only one run got right (p = 1 when there are none). Otherwise the paired sign-flip
    (randomisation) test of the per-example differences: every sign pattern up to
    :data:`EXACT_FLIPS` non-zero differences, else :data:`SIGN_DRAWS` seeded draws, p counting
    the observed pattern (so never 0).
    """
    if first.keys() != other.keys() or not first:
        return None
    differences = [other[example] - first[example] for example in first]
    if all(value in (0.0, 1.0) for value in (*first.values(), *other.values())):
        gained, lost = sum(d > 0 for d in differences), sum(d < 0 for d in differences)
        return _binomial_two_sided(min(gained, lost), gained + lost), "McNemar exact"
    import numpy as np

    nonzero = np.array([d for d in differences if d != 0.0])
    if not len(nonzero):
        return 1.0, "sign-flip"
    observed = abs(nonzero.sum())
    tolerance = 1e-12 * max(1.0, observed)
    if len(nonzero) <= EXACT_FLIPS:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(nonzero))))
        return float(np.mean(np.abs(signs @ nonzero) >= observed - tolerance)), "sign-flip exact"
    rng = np.random.default_rng(0)
    extreme = 0
    chunk = max(1, 1_000_000 // len(nonzero))  # draws at a time: at most 8 MB of signs
    for start in range(0, SIGN_DRAWS, chunk):
        signs = rng.choice((1.0, -1.0), size=(min(chunk, SIGN_DRAWS - start), len(nonzero)))
        extreme += int(np.sum(np.abs(signs @ nonzero) >= observed - tolerance))
    return (extreme + 1) / (SIGN_DRAWS + 1), f"sign-flip over {SIGN_DRAWS} draws"


def shown_p(p_value: float) -> str:
    """A p-value as the tables and messages show it: ``p=0.0078``, ``p<0.001``."""
    return "p<0.001" if p_value < 0.001 else f"p={p_value:.2g}"


def _binomial_two_sided(k: int, n: int) -> float:
    """P(X <= k or X >= n - k) for X ~ Binomial(n, 1/2), k <= n / 2: the exact two-sided p-value
    of the sign test, in integers and rounded once (0.13 s at n = 50,000)."""
    term, tail = 1, 0
    for i in range(k + 1):
        tail += term
        term = term * (n - i) // (i + 1)
    return min(1.0, 2 * tail / 2 ** n)
