"""Plots written beside ``results.json``: the reliability diagram, the ``opt`` search Q(T), and
robust accuracy against ε when a run evaluates several radii (``--eps 0.01,0.03,0.1``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from suite.report.figures import save_figure, tight_layout

RELIABILITY_PNG = "reliability.png"
OPT_SEARCH_PNG = "opt_search.png"
CURVE_PNG = "robustness_curve.png"


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
    curves = robustness_curves(results)
    if curves:
        _robustness_curve(results, curves, Path(directory) / CURVE_PNG)
        written.append(CURVE_PNG)
    return written


def robustness_curves(results: dict[str, Any]) -> dict[str, dict[str, list[tuple[float, float, list | None]]]]:
    """Per norm evaluated at two or more radii: per line (each attack and adversary, each
    distributional attack with its W_p and κ, and the worst case within each ε), the points
    (ε, accuracy, 95% interval or None), sorted by ε."""
    curves: dict[str, dict[str, list]] = {}
    for key, entry in (results.get("attacks") or {}).items():
        threat = entry["threat"]
        if threat.get("norm") is None or threat.get("eps") is None:
            continue
        line = entry.get("attack") or entry.get("base_attack") or key
        line = line if entry.get("adversary", "none") == "none" else f"{line}@{entry['adversary']}"
        curves.setdefault(threat["norm"], {}).setdefault(line, []).append(
            (threat["eps"], entry["robust_accuracy"], entry.get("robust_accuracy_ci")))
    for key, entry in (results.get("distributional") or {}).items():
        # Distributional attacks share the panel of their cost norm: Ω_∞ vs Ω_p at each ε.
        threat = entry["threat"]
        if threat.get("norm") is None or threat.get("eps") is None:
            continue
        kappa = threat.get("kappa")
        line = f"{entry.get('attack') or key} (W{threat['p']:g}" + (f", κ={kappa:g})" if kappa not in (None, 1) else ")")
        curves.setdefault(threat["norm"], {}).setdefault(line, []).append((threat["eps"], entry["accuracy"], None))
    for group in (results.get("threat_models") or {}).values():
        threat = group["threat"]
        if threat.get("norm") in curves and len(group["attacks"]) > 1:
            curves[threat["norm"]].setdefault("worst case", []).append(
                (threat["eps"], group["worst_case_robust_accuracy"], group.get("worst_case_robust_accuracy_ci")))
    return {
        norm: {line: sorted(points) for line, points in lines.items()}
        for norm, lines in curves.items()
        if len({eps for points in lines.values() for eps, _, _ in points}) >= 2
    }


def _robustness_curve(results: dict[str, Any], curves: dict[str, dict[str, list]], path: Path) -> None:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4.2), squeeze=False)
    for axis, (norm, lines) in zip(axes[0], sorted(curves.items())):
        for line, points in sorted(lines.items(), key=lambda item: item[0] == "worst case"):
            eps = [point[0] for point in points]
            accuracy = [100 * point[1] for point in points]
            # The worst case dashed and underneath, so an attack that is the worst case stays visible.
            style = {"color": "black", "linestyle": "--", "linewidth": 2.5, "zorder": 1} if line == "worst case" else {"zorder": 2}
            axis.plot(eps, accuracy, "o-" if line != "worst case" else "o", label=line, **style)
            if all(point[2] for point in points):
                axis.fill_between(eps, [100 * point[2][0] for point in points], [100 * point[2][1] for point in points],
                                  alpha=0.12, **({"color": "black"} if line == "worst case" else {}))
        axis.axhline(100 * results["clean_accuracy"], color="grey", linestyle=":", linewidth=1, label="clean")
        axis.set(xlabel=f"ε ({norm})", ylabel="robust accuracy (%)", ylim=(0, 100),
                 title=f"{results['model']['name']} on {results['dataset']['spec']} (n={results['dataset']['n']})")
        axis.legend(fontsize=8)
    tight_layout(figure)
    save_figure(figure, path, dpi=100)


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
    tight_layout(figure)
    save_figure(figure, path, dpi=100)


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
    tight_layout(figure)
    save_figure(figure, path, dpi=100)
