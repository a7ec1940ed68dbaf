"""The illusion-of-robustness tables of "Extreme Confidence and the Illusion of Robustness in
Adversarial Training" from a recipe's results, each cell a mean ± std over the seeds of a task.

Tasks replicated over seeds (``sweep: {seeds: [...]}``, named ``<task>-s<seed>``) are grouped
by ``<task>``; the std is the sample standard deviation (ddof = 1; the paper does not say which)
and is left out for a single seed.

- Table 1: clean accuracy and mean confidence of the predicted class on clean inputs and on
  each attack's adversarial inputs (out-of-the-box attack);
- Tables 3, 12 and 13: adversarial accuracy per attack under each adversary (none, cal, opt,
  platt);
- Table 11: ECE, MCE and mean confidence of the served model and after ``cal``'s temperature.

``write_ior`` writes them as Markdown (``ior_tables.md``) and CSV (``ior_tables.csv``, one row
per table row, the table's title in the first column).
"""

from __future__ import annotations

import csv
import re
import statistics
from collections.abc import Sequence
from pathlib import Path

from suite.report.results import Results

_SEED = re.compile(r"^(?P<task>.+)-s(?P<seed>\d+)$")
KINDS = ("none", "cal", "opt", "platt")


def group_seeds(results: Sequence[Results]) -> dict[str, list[Results]]:
    """Results by task, the replicates of one task (``<task>-s<seed>``) together, in order."""
    groups: dict[str, list[Results]] = {}
    for result in results:
        match = _SEED.match(result.task)
        groups.setdefault(match["task"] if match else result.task, []).append(result)
    return groups


def mean_std(values: Sequence[float | None], scale: float = 100.0, digits: int = 2) -> str:
    """``mean ± std`` of the values (×``scale``), ``-`` when there are none."""
    present = [scale * value for value in values if value is not None]
    if not present:
        return "-"
    mean = statistics.fmean(present)
    if len(present) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(present):.{digits}f}"


def _attacks(results: Sequence[Results]) -> list[str]:
    """Base attack names, in first-seen order."""
    names: list[str] = []
    for result in results:
        for key, entry in result.attacks.items():
            base = entry.base_attack or key
            if entry.access != "transfer" and base not in names:
                names.append(base)
    return names


def _entry(result: Results, attack: str, kind: str):
    for key, entry in result.attacks.items():
        if (entry.base_attack or key) == attack and entry.adversary == kind and entry.access != "transfer":
            return entry
    return None


def table_1(groups: dict[str, list[Results]], attacks: list[str]) -> list[dict[str, str]]:
    rows = []
    for task, runs in groups.items():
        row = {"task": task, "seeds": str(len(runs)), "clean": mean_std([r.clean_accuracy for r in runs]),
               "P(c|x_clean)": mean_std([(r.calibration or {}).get("mean_confidence") for r in runs], digits=3)}
        for attack in attacks:
            entries = [_entry(r, attack, "none") for r in runs]
            row[f"P(c|x_adv) {attack}"] = mean_std([e.mean_confidence if e else None for e in entries], digits=3)
        rows.append(row)
    return rows


def table_3(groups: dict[str, list[Results]], attacks: list[str]) -> list[dict[str, str]]:
    rows = []
    for task, runs in groups.items():
        for kind in KINDS:
            entries = {attack: [_entry(r, attack, kind) for r in runs] for attack in attacks}
            if not any(e for values in entries.values() for e in values):
                continue
            row = {"task": task, "adversary": "-" if kind == "none" else kind,
                   "clean": mean_std([r.clean_accuracy for r in runs])}
            for attack, values in entries.items():
                row[attack] = mean_std([e.robust_accuracy if e else None for e in values])
            if kind in ("cal", "opt"):
                temperatures = [e.adversary_temperature for values in entries.values() for e in values
                                if e and e.adversary_temperature is not None]
                row["T_a"] = f"{statistics.fmean(temperatures):.3g}" if temperatures else "-"
            else:
                row["T_a"] = "-"
            rows.append(row)
    return rows


def table_11(groups: dict[str, list[Results]]) -> list[dict[str, str]]:
    rows = []
    for task, runs in groups.items():
        for label, pick in (("-", lambda r: r.calibration), ("+cal", lambda r: r.calibration_after.get("cal"))):
            metrics = [pick(r) for r in runs]
            if not any(metrics):
                continue
            rows.append({
                "task": task, "calibration": label,
                "ECE": mean_std([(m or {}).get("ece") for m in metrics]),
                "MCE": mean_std([(m or {}).get("mce") for m in metrics]),
                "P(c|x_clean)": mean_std([(m or {}).get("mean_confidence") for m in metrics], digits=3),
                "accuracy": mean_std([(m or {}).get("accuracy") for m in metrics]),
            })
    return rows


def ior_tables(results: Sequence[Results]) -> dict[str, list[dict[str, str]]]:
    groups = group_seeds(results)
    attacks = _attacks(results)
    return {
        "Table 1: clean accuracy and mean predicted-class confidence (%)": table_1(groups, attacks),
        "Tables 3, 12, 13: adversarial accuracy (%) by adversary": table_3(groups, attacks),
        "Table 11: calibration (%) of the served model and after cal": table_11(groups),
    }


def format_table(rows: list[dict[str, str]]) -> str:
    from suite.report.table import format_rows
    from suite.text import printable

    if not rows:
        return "(no rows)"
    header = list(rows[0])
    return format_rows(header, [[printable(row.get(column, "-")) for column in header] for row in rows])


def write_ior(tables: dict[str, list[dict[str, str]]], directory: Path) -> tuple[Path, Path]:
    """``ior_tables.md`` (every table) and ``ior_tables.csv`` (every row, with its table)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    markdown = directory / "ior_tables.md"
    lines = []
    for title, rows in tables.items():
        lines += [f"## {title}", ""]
        if rows:
            header = list(rows[0])
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(_cell(row.get(column, "-")) for column in header) + " |" for row in rows]
        lines.append("")
    markdown.write_text("\n".join(lines), encoding="utf-8")
    path = directory / "ior_tables.csv"
    columns = ["table", *dict.fromkeys(key for rows in tables.values() for row in rows for key in row)]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")
        writer.writeheader()
        for title, rows in tables.items():
            writer.writerows({"table": title, **row} for row in rows)
    return markdown, path


def _cell(text: str) -> str:
    from suite.text import printable

    return printable(text).replace("|", "\\|")
