"""The certificate report of ``advsuite certify``: a table, ``certificate.json`` and
``certificate.png`` (the bounds over ε with the attacks' losses between them)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import suite.strict_json as strict_json
from suite.paths import atomic_write_text, temporary_path
from suite.report.figures import save_figure, tight_layout
from suite.report.table import format_rows


def _number(value: float | None, toward: str = "") -> str:
    """``value`` to 4 significant digits; a bound rounded outward (``toward`` "down" for a lower
    bound, "up" for an upper one), so the printed number is still a bound."""
    if value is None:
        return "-"
    text = f"{value:.4g}"
    if toward and value != 0 and math.isfinite(value):
        step = 10.0 ** (math.floor(math.log10(abs(value))) - 3)
        shown = float(text)
        if (toward == "down" and shown > value) or (toward == "up" and shown < value):
            text = f"{(math.floor if toward == 'down' else math.ceil)(value / step) * step:.4g}"
    return text


def certificate_table(report: Mapping[str, Any]) -> str:
    """One row per ε: E_PN[ℓ], the bounds, the estimates and each attack's W_1 loss."""
    attacks = sorted({name for row in report["rows"] for name in row.get("attacks", {})})
    header = ["eps", "E[loss]", "lower bound", "lower cone bound", "lower est.", *(f"{name} loss" for name in attacks),
              "upper est.", "upper bound"]
    lines = [[f"{row['eps']:g}", _number(row["empirical"]), _number(row["lower_bound"], "down"), _number(row.get("lower_cone_bound"), "down"),
              _number(row["lower_estimate"]),
              *(_number(row["attacks"][name]["loss"]) if name in row.get("attacks", {}) else "-" for name in attacks),
              _number(row["upper_estimate"]), _number(row["upper_bound"], "up")] for row in report["rows"]]
    return format_rows(header, lines)


def write_certificate(report: Mapping[str, Any], directory: Path) -> tuple[Path, Path]:
    """Write ``certificate.json`` and ``certificate.png`` into ``directory``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    strict_json.check_finite(dict(report), "the certificate")
    text = strict_json.dumps(dict(report), "the certificate", indent=2) + "\n"
    rows = report["rows"]
    radii = [row["eps"] for row in rows]
    figure, axis = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    axis.plot(radii, [row["empirical"] for row in rows], color="grey", linestyle=":", label="E_PN[loss]")
    for key, label, style in (("upper_bound", "upper bound (certified)", "-"), ("upper_estimate", "E + L_N eps (estimate)", "--"),
                              ("lower_estimate", "E + l_N eps (estimate)", "--"), ("lower_bound", "lower bound (eq. 17)", "-"),
                              ("lower_cone_bound", "E + l eps, l in the activation cone (bound)", "-")):
        points = [(row["eps"], row.get(key)) for row in rows if row.get(key) is not None]
        if points:
            axis.plot(*zip(*points), linestyle=style, marker="o", markersize=3, label=label)
    for name in sorted({name for row in rows for name in row.get("attacks", {})}):
        points = [(row["eps"], row["attacks"][name]["loss"]) for row in rows if name in row.get("attacks", {})]
        axis.plot(*zip(*points), marker="x", linewidth=1, label=f"{name} (W1 loss)")
    if any(row["upper_bound"] is not None for row in rows):
        axis.set_yscale("log")
    axis.set_xlabel(f"eps (W1, cost {report['norm']})")
    axis.set_ylabel(f"expected {report['loss']} loss")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    axis.set_title(f"{report['model']}: WDRO certificate", fontsize=10)
    tight_layout(figure)
    # Both files change together or neither does: the plot is written whole under a temporary
    # name first, then the certificate, then the plot renamed into place (a rename needs no
    # space). A write refused between them left the new certificate beside the old one's plot.
    png_path = directory / "certificate.png"
    staged = save_figure(figure, temporary_path(png_path), format="png")
    try:
        json_path = atomic_write_text(directory / "certificate.json", text)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    os.replace(staged, png_path)
    return json_path, png_path
