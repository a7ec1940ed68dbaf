"""The illusion-of-robustness tables of "Extreme Confidence and the Illusion of Robustness in
Adversarial Training" from a recipe's results, each cell a mean ± std over the seeds of a task.

Tasks replicated over seeds (``sweep: {seeds: [...]}``, named ``<task>-s<seed>``) are grouped
by ``<task>``; the std is the sample standard deviation (ddof = 1; the paper does not say which)
and is left out for a single seed.

- Table 1: clean accuracy and mean confidence of the predicted class on clean inputs and on
  each attack's adversarial inputs (out-of-the-box attack);
- Tables 3, 12 and 13: adversarial accuracy per attack under each adversary (none, cal, opt,
  platt);
- Table 11: ECE, MCE and mean confidence of the served model and after ``cal``'s temperature;
- Table 4: transfer: each task's own attacks next to the same attacks run on a source model
  (``transfer`` entries), scored on the task's model;
- Fig. 1: adversarial accuracy against mean confidence, from a task served at several
  temperatures (``temperatures:`` in the recipe, tasks ``<task>-T<t>``), written as
  ``confidence_sweep.png`` and kept out of the other tables.

``write_ior`` writes them as Markdown (``ior_tables.md``) and CSV (``ior_tables.csv``, one row
per table row, the table's title in the first column).
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from suite.paths import atomic_write_text
from suite.report.results import Results

_SEED = re.compile(r"^(?P<task>.+)-s(?P<seed>\d+)$")
_SEED_SUFFIX = re.compile(r"-s\d+$")
_TEMPERATURE = re.compile(r"^(?P<task>.+)-T(?P<t>[0-9][0-9.e-]*)$")
KINDS = ("none", "cal", "opt", "platt")


def group_seeds(results: Sequence[Results]) -> dict[str, list[Results]]:
    """Results by task, the replicates of one task (``<task>-s<seed>``) together, in order."""
    groups: dict[str, list[Results]] = {}
    for result in results:
        match = _SEED.match(result.task)
        groups.setdefault(match["task"] if match else result.task, []).append(result)
    # Replicates are one model family (its specs differ at most by a '-s<seed>') on one dataset.
    # Tasks only named alike (m-s1 on one model, m-s2 on another) were averaged as seeds of one;
    # they stay apart, each under its own name.
    kept: dict[str, list[Results]] = {}
    for name, runs in groups.items():
        if len({_family(run) for run in runs}) > 1:
            kept.update((run.task, [run]) for run in runs)
        else:
            kept[name] = runs
    return kept


def _family(result: Results) -> tuple[str, str, str]:
    return (_SEED_SUFFIX.sub("", result.model.spec), result.dataset.spec, result.dataset.split)


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
                # Geometric: the temperatures span decades (an arithmetic mean is the largest one).
                row["T_a"] = f"{statistics.geometric_mean(temperatures):.3g}" if temperatures else "-"
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


def table_4(groups: dict[str, list[Results]]) -> list[dict[str, str]]:
    """Per task with transfer entries: its own attacks (src = itself) and each source's."""
    rows = []
    for task, runs in groups.items():
        sources: dict[str, dict[str, list]] = {}
        for run in runs:
            for key, entry in run.attacks.items():
                if entry.access == "transfer":
                    source = _SEED.sub(r"\g<task>", str(entry.params.get("source", "?")))
                    sources.setdefault(source, {}).setdefault(str(entry.params.get("attack")), []).append(entry)
        if not sources:
            continue
        inner = list(dict.fromkeys(attack for by_attack in sources.values() for attack in by_attack))
        clean = mean_std([r.clean_accuracy for r in runs])
        own = {"tgt": task, "src": task, "clean": clean}
        for attack in inner:
            own[attack] = mean_std([e.robust_accuracy if (e := _entry(r, attack, "none")) else None for r in runs])
        rows.append(own)
        for source, by_attack in sources.items():
            row = {"tgt": task, "src": source, "clean": clean}
            for attack in inner:
                row[attack] = mean_std([e.robust_accuracy for e in by_attack.get(attack, [])])
            rows.append(row)
    return rows


def confidence_sweep(groups: dict[str, list[Results]]) -> list[dict[str, Any]]:
    """Fig. 1's points: per swept task and temperature, the mean clean confidence and each
    out-of-the-box attack's adversarial accuracy (means over seeds, as fractions)."""
    points = []
    for name, runs in groups.items():
        match = _TEMPERATURE.match(name)
        if match is None:
            continue
        point: dict[str, Any] = {"task": match["task"], "temperature": float(match["t"]), "seeds": len(runs),
                                 "mean_confidence": statistics.fmean(
                                     (r.calibration or {}).get("mean_confidence", float("nan")) for r in runs)}
        for attack in _attacks(runs):
            values = [e.robust_accuracy for r in runs if (e := _entry(r, attack, "none")) is not None]
            if values:
                point[attack] = statistics.fmean(values)
        points.append(point)
    return sorted(points, key=lambda point: (point["task"], point["temperature"]))


def applies(results: Sequence[Results]) -> bool:
    """Whether the run has anything these tables show: an aware adversary, a transfer attack, or
    a temperature sweep."""
    return any(entry.adversary != "none" or entry.access == "transfer" for result in results
               for entry in result.attacks.values()) or any(_TEMPERATURE.match(name) for name in group_seeds(results))


def ior_tables(results: Sequence[Results]) -> dict[str, list[dict[str, str]]]:
    all_groups = group_seeds(results)
    groups = {name: runs for name, runs in all_groups.items() if not _TEMPERATURE.match(name)}
    attacks = _attacks([run for runs in groups.values() for run in runs])
    tables = {
        "Table 1: clean accuracy and mean predicted-class confidence (%)": table_1(groups, attacks),
        "Tables 3, 12, 13: adversarial accuracy (%) by adversary": table_3(groups, attacks),
        "Table 11: calibration (%) of the served model and after cal": table_11(groups),
        "Table 4: transfer, adversarial accuracy (%) on tgt of texts crafted on src": table_4(groups),
    }
    sweep = confidence_sweep(all_groups)
    if sweep:
        tables["Fig. 1: adversarial accuracy (%) against mean confidence (%), over the served temperature"] = [
            {key: (f"{value:g}" if key == "temperature" else f"{100 * value:.2f}" if isinstance(value, float)
                   else str(value)) for key, value in point.items()} for point in sweep]
    return {title: rows for title, rows in tables.items() if rows}


def plot_confidence_sweep(points: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Fig. 1: adversarial accuracy against mean confidence, one line per (task, attack)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from suite.report.figures import save_figure, tight_layout

    figure, axis = plt.subplots(figsize=(6.5, 4.2))
    series: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for point in points:
        for key, value in point.items():
            if key not in ("task", "temperature", "seeds", "mean_confidence") and isinstance(value, float):
                series.setdefault((point["task"], key), []).append(point)
    for (task, attack), members in series.items():
        xs = [100 * member["mean_confidence"] for member in members]
        ys = [100 * member[attack] for member in members]
        axis.plot(xs, ys, marker="o", markersize=4, label=f"{task}: {attack}")
        for member, x, y in zip(members, xs, ys):
            axis.annotate(f"T={member['temperature']:g}", (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    axis.set_xlabel("mean predicted-class confidence on clean inputs (%)")
    axis.set_ylabel("adversarial accuracy (%)")
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend(fontsize="small")
    tight_layout(figure)
    save_figure(figure, path, dpi=110)
    return path


def format_table(rows: list[dict[str, str]]) -> str:
    from suite.report.table import format_rows
    from suite.text import printable

    if not rows:
        return "(no rows)"
    header = list(rows[0])
    return format_rows(header, [[printable(row.get(column, "-")) for column in header] for row in rows])


def write_ior(tables: dict[str, list[dict[str, str]]], directory: Path,
              results: Sequence[Results] = ()) -> list[Path]:
    """``ior_tables.md`` (every table), ``ior_tables.csv`` (every row, with its table) and, with
    a temperature sweep among ``results``, ``confidence_sweep.png`` (Fig. 1)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    sweep = confidence_sweep(group_seeds(results))
    if sweep:
        written.append(plot_confidence_sweep(sweep, directory / "confidence_sweep.png",
                                             "adversarial accuracy against confidence (Fig. 1)"))
    markdown = directory / "ior_tables.md"
    lines = []
    for title, rows in tables.items():
        lines += [f"## {title}", ""]
        if rows:
            header = list(rows[0])
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(_cell(row.get(column, "-")) for column in header) + " |" for row in rows]
        lines.append("")
    atomic_write_text(markdown, "\n".join(lines))
    path = directory / "ior_tables.csv"
    columns = ["table", *dict.fromkeys(key for rows in tables.values() for row in rows for key in row)]
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=columns, restval="")
    writer.writeheader()
    for title, rows in tables.items():
        writer.writerows({"table": title, **row} for row in rows)
    atomic_write_text(path, buffer.getvalue())
    return [markdown, path, *written]


def _cell(text: str) -> str:
    from suite.text import printable

    return printable(text).replace("|", "\\|")
