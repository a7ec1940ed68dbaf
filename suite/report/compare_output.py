"""``advsuite compare``'s output: the table with its notes, and the same as JSON.

The rows come from :mod:`suite.report.compare`; each difference shows its paired p-value
(:mod:`suite.report.paired`), or, without one, ``(within CIs)`` where the two 95% intervals
overlap, with a note naming the run, the rows and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from suite.report.compare import Difference, Row, aliases, attack_identity
from suite.report.paired import RECORDS_FILE, RunRecords, shown_p
from suite.report.results import Results
from suite.report.table import format_rows, percent
from suite.text import printable

WITHIN = "(within CIs)"
#: Below this p-value a difference is not marked ``n.s.``.
SIGNIFICANCE = 0.05


def record_notes(names: Sequence[str], records: Sequence[RunRecords | str | None], found: Sequence[Row]) -> list[str]:
    """A line per run whose differences (or some of them) are judged by the intervals, saying
    why: no usable records, records that do not reproduce some of its rows, or examples whose
    ids differ from the first run's. Nothing when no records were read at all."""
    if not records:
        return []
    marks = letters(len(names))
    reasons = [why if isinstance(why, str) else None for why in records]
    notes = [f"note: {mark} ({name}): {why}, so differences with it are judged by the 95% intervals only"
             for mark, name, why in zip(marks, names, reasons) if why]
    unreproduced: dict[int, dict[str, None]] = {index: {} for index in range(len(names))}
    apart: dict[int, None] = {}
    for row in found:
        for index, difference in enumerate(row.differences(), start=1):
            if difference is None or difference.test is not None or reasons[0] or reasons[index]:
                continue
            lacking = [j for j in (0, index) if not row.outcomes or row.outcomes[j] is None]
            for j in lacking:
                unreproduced[j][f"{row.name} ({row.threat})" if row.threat else row.name] = None
            if not lacking:
                apart[index] = None
    notes += [f"note: {marks[index]} ({names[index]}): its {RECORDS_FILE} does not reproduce its results for "
              f"{', '.join(rows)}, so those differences are judged by the 95% intervals only"
              for index, rows in unreproduced.items() if rows]
    notes += [f"note: {marks[index]} ({names[index]}): its records name other examples than {marks[0]}'s, so its "
              "differences are judged by the 95% intervals only" for index in apart]
    return notes


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


def settings_notes(names: Sequence[str], runs: Sequence[Results]) -> list[str]:
    """A line per attack row whose runs ran the attack with other settings: the row's difference
    is then between two attacks, not two models (a run of 20 PGD steps against one of 1 showed
    as a model difference of 5 points, with nothing said)."""
    notes = []
    marks = letters(len(names))
    first: dict[tuple[str, str], tuple[str, Any]] = {}
    for mark, run, alias in zip(marks, runs, aliases(runs)):
        for key, entry in run.attacks.items():
            row = (alias.get(key, key), entry.threat.label)
            seen = first.setdefault(row, (mark, entry))
            if attack_identity(seen[1]) == attack_identity(entry):
                continue
            changed = sorted(name for name in {*seen[1].params, *entry.params}
                             if seen[1].params.get(name) != entry.params.get(name))
            what = ", ".join(f"{name} {seen[1].params.get(name)!r} in {seen[0]}, {entry.params.get(name)!r} in {mark}"
                             for name in changed[:4]) or "its attack or adversary"
            notes.append(f"note: {row[0]!r} ({row[1]}) ran with other settings ({what}): its row compares two "
                         "attacks, not only the models")
    return notes


def letters(count: int) -> list[str]:
    """Column names of ``count`` runs: A, B, ..., Z, R27, R28..."""
    return [chr(ord("A") + i) if i < 26 else f"R{i + 1}" for i in range(count)]


def table(names: Sequence[str], runs: Sequence[Results], found: Sequence[Row],
          records: Sequence[RunRecords | str | None] = ()) -> str:
    """The comparison as text: a legend naming each run, the table, and what its marks mean."""
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
    tested = {found.test for row in found for found in row.differences() if found is not None and found.test}
    untested = any(found is not None and found.test is None for row in found for found in row.differences())
    footer = [*worst_case_notes(names, runs), *settings_notes(names, runs), *record_notes(names, records, found),
              "differences in percentage points"
              + (f"; p: two-sided, paired on the examples of each {RECORDS_FILE} ({' / '.join(sorted(tested))}), "
                 f"n.s. from {SIGNIFICANCE}" if tested else "")
              + (f"; {WITHIN}: the two 95% intervals overlap" if untested else "")]
    return "\n".join([*(printable(line) for line in legend), "", body, "", *(printable(line) for line in footer)])


def _difference(found: Difference | None) -> str:
    """``-20.0 pp (p=0.0078)``, ``+1.2 pp (n.s., p=0.62)`` (``-`` when a run lacks the row); without
    a paired test, marked ``(within CIs)`` when the intervals overlap."""
    if found is None:
        return "-"
    text = f"{100 * found.value:+.1f} pp".replace("-0.0 pp", "+0.0 pp")
    if found.p_value is not None:
        return f"{text} ({'' if found.p_value < SIGNIFICANCE else 'n.s., '}{shown_p(found.p_value)})"
    return f"{text} {WITHIN}" if found.overlap else text


def as_json(names: Sequence[str], runs: Sequence[Results], found: Sequence[Row],
            records: Sequence[RunRecords | str | None] = ()) -> dict[str, Any]:
    """The comparison as data: the runs, per row each run's accuracy, interval, difference and
    paired p-value, and the notes (why a run's differences have no paired test)."""
    return {
        "runs": [{"run": name, "model": run.model.name, "task": run.task, "dataset": run.dataset.spec,
                  "split": run.dataset.split, "n": run.dataset.n, "fingerprint": run.dataset.fingerprint,
                  "seed": run.seed} for name, run in zip(names, runs)],
        "notes": [*worst_case_notes(names, runs), *settings_notes(names, runs), *record_notes(names, records, found)],
        "rows": [{"class": row.group or None, "row": row.name, "threat": row.threat or None, "n": list(row.sizes),
                  "accuracy": [None if cell is None else cell[0] for cell in row.cells],
                  "interval": [None if cell is None else cell[1] for cell in row.cells],
                  **{name: [None, *(None if found is None else getattr(found, attribute)
                                    for found in row.differences())]
                     for name, attribute in (("difference", "value"), ("within_intervals", "overlap"),
                                         ("p_value", "p_value"), ("test", "test"))}}
                 for row in found],
    }
