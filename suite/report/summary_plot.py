"""``summary.png``: every run's numbers in one figure, written beside ``results.json``.

One horizontal bar per row, accuracy in % on a 0–100 axis, each with its 95% interval as an
error bar where ``results.json`` has one (older files may not):

- ``clean``: clean accuracy (grey); a dotted line and a grey band carry it (and its interval)
  down the figure as the reference every other bar is read against;
- per threat model (``threat_models``, e.g. ``linf eps=0.03``): first its worst case over the
  point-wise attacks (red, outlined, bold label), then each attack of the group (blue);
- point-wise attacks in no threat-model group (files written before groups existed), in blue;
- distributional attacks (``distributional``): hatched orange, labelled ``(distributional)``.
  Their number is the accuracy on the adversarial *distribution*, another metric than a
  point-wise robust accuracy (and never part of a worst case), and has no interval.

The title names the model, the dataset and n. The figure is drawn with matplotlib's Agg
backend and written atomically (:func:`suite.report.figures.save_figure`).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUMMARY_PNG = "summary.png"
#: Where (in %) the column of printed values starts, right of the 100% mark.
VALUE_COLUMN = 102

#: Row kinds, their bar style and legend entry.
_STYLES = {
    "clean": ({"facecolor": "0.55"}, "clean accuracy"),
    "worst": ({"facecolor": "tab:red", "edgecolor": "black", "linewidth": 1.2}, "worst case of a threat model"),
    "attack": ({"facecolor": "tab:blue"}, "robust accuracy (point-wise attack)"),
    "distributional": ({"facecolor": "tab:orange", "hatch": "//", "edgecolor": "white"},
                       "accuracy on the adversarial distribution (another metric)"),
}


@dataclass(frozen=True)
class Bar:
    """One row of the figure: its label, kind (a key of ``_STYLES``), accuracy and 95% interval."""

    label: str
    kind: str
    accuracy: float
    interval: list[float] | None = None


def summary_bars(results: dict[str, Any]) -> list[Bar]:
    """The rows of the figure, top to bottom (accuracies as fractions)."""
    bars = [Bar("clean", "clean", results["clean_accuracy"], results.get("clean_accuracy_ci"))]
    attacks = results.get("attacks") or {}
    shown: set[str] = set()
    for label, group in (results.get("threat_models") or {}).items():
        bars.append(Bar(f"worst case, {label}", "worst", group["worst_case_robust_accuracy"],
                        group.get("worst_case_robust_accuracy_ci")))
        for key in group.get("attacks", []):
            if key in attacks and key not in shown:
                shown.add(key)
                bars.append(_attack_bar(key, attacks[key]))
    bars += [_attack_bar(key, entry) for key, entry in attacks.items() if key not in shown]
    bars += [Bar(f"{key} (distributional)", "distributional", entry["accuracy"])
             for key, entry in (results.get("distributional") or {}).items()]
    return bars


def _attack_bar(key: str, entry: dict[str, Any]) -> Bar:
    return Bar(key, "attack", entry["robust_accuracy"], entry.get("robust_accuracy_ci"))


def write_summary_plot(results: dict[str, Any], directory: Path) -> str:
    """Draw ``summary.png`` for ``results`` (``results.json`` as a dict) in ``directory``; its file name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from suite.report.figures import save_figure, tight_layout

    bars = summary_bars(results)
    height = 1.8 + 0.32 * len(bars)
    figure, axis = plt.subplots(figsize=(8, height))
    _draw_bars(axis, bars)
    _draw_reference(axis, bars[0])
    dataset = results["dataset"]
    title = f"{results['model']['name']} on {dataset['spec']}:{dataset.get('split', '')} (n={dataset['n']})"
    axis.set_title("\n".join(textwrap.wrap(title, 80)), fontsize=10)
    axis.set(xlim=(0, VALUE_COLUMN + 12), xticks=range(0, 101, 20), xlabel="accuracy (%), 95% intervals as error bars")
    kinds = [kind for kind in _STYLES if any(bar.kind == kind for bar in bars)]
    handles = [Patch(**_STYLES[kind][0], label=_STYLES[kind][1]) for kind in kinds]
    figure.legend(handles=handles, fontsize=7, loc="lower center", ncol=2, frameon=False)
    tight_layout(figure, rect=(0, 0.45 / height, 1, 1))  # room for the legend's two rows below
    save_figure(figure, Path(directory) / SUMMARY_PNG, dpi=100)
    return SUMMARY_PNG


def _draw_bars(axis: Any, bars: list[Bar]) -> None:
    """The bars top to bottom, their intervals, and each value in a column right of 100%."""
    positions = range(len(bars))
    for position, bar in zip(positions, bars):
        axis.barh(position, 100 * bar.accuracy, height=0.7, **_STYLES[bar.kind][0])
        if bar.interval is not None:
            low, high = (100 * value for value in bar.interval)
            axis.errorbar(100 * bar.accuracy, position, xerr=[[100 * bar.accuracy - low], [high - 100 * bar.accuracy]],
                          fmt="none", ecolor="black", capsize=3, linewidth=1)
        axis.text(VALUE_COLUMN, position, f"{100 * bar.accuracy:.1f}%", va="center", fontsize=8)
    axis.set_yticks(list(positions), [bar.label for bar in bars], fontsize=8)
    for tick, bar in zip(axis.get_yticklabels(), bars):
        if bar.kind == "worst":
            tick.set_fontweight("bold")
    axis.invert_yaxis()
    axis.grid(axis="x", alpha=0.3)


def _draw_reference(axis: Any, clean: Bar) -> None:
    """Clean accuracy as a dotted line (and its interval as a band) across every row."""
    axis.axvline(100 * clean.accuracy, color="0.3", linestyle=":", linewidth=1)
    if clean.interval is not None:
        axis.axvspan(100 * clean.interval[0], 100 * clean.interval[1], color="0.5", alpha=0.12, linewidth=0)
