"""Plots written beside ``results.json``: the reliability diagram and the ``opt`` search Q(T)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

RELIABILITY_PNG = "reliability.png"
OPT_SEARCH_PNG = "opt_search.png"


def write_plots(results: dict[str, Any], directory: Path) -> list[str]:
    """Write the plots the results have data for; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    written = []
    if results.get("calibration"):
        _reliability(results, Path(directory) / RELIABILITY_PNG)
        written.append(RELIABILITY_PNG)
    searches = (results.get("adversary") or {}).get("opt") or {}
    if searches:
        _opt_search(results, searches, Path(directory) / OPT_SEARCH_PNG)
        written.append(OPT_SEARCH_PNG)
    return written


def _reliability(results: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    calibration = results["calibration"]
    rows = calibration["reliability"]
    width = 1.0 / calibration["bins"]
    figure, axis = plt.subplots(figsize=(4.5, 4.5))
    filled = [row for row in rows if row["count"]]
    axis.bar([row["lower"] for row in filled], [row["accuracy"] for row in filled], width=width, align="edge",
             edgecolor="black", label="accuracy")
    axis.bar([row["lower"] for row in filled], [row["confidence"] - row["accuracy"] for row in filled], width=width,
             bottom=[row["accuracy"] for row in filled], align="edge", color="tab:red", alpha=0.35, label="gap")
    axis.plot([0, 1], [0, 1], "k--", linewidth=1)
    axis.set(xlim=(0, 1), ylim=(0, 1), xlabel="confidence", ylabel="accuracy",
             title=f"{results['model']['name']}\nECE {calibration['ece']:.3f}  MCE {calibration['mce']:.3f}")
    axis.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _opt_search(results: dict[str, Any], searches: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    shown = set()
    for base, search in searches.items():
        if search["attack"] in shown:
            continue
        shown.add(search["attack"])
        points = sorted(search["evaluations"])
        axis.plot([t for t, _ in points], [q for _, q in points], "o-", label=search["attack"])
        axis.plot([search["temperature"]], [search["q"]], "k*", markersize=12)
    axis.set_xscale("log")
    axis.set(xlabel="adversary temperature T", ylabel="adversarial accuracy Q(T)",
             title=f"opt search: {results['model']['name']}")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
