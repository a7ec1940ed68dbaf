"""Learning curves of adversarial training, as in Robey et al. (ICLR 2024), Fig. 1: validation
accuracy, clean and under attack, per epoch, with the learning-rate decays marked; and the
robust curves of several runs side by side (``bench/training.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from suite.report.figures import save_figure, tight_layout


def learning_curves(log: Sequence[dict[str, Any]], path: Path, title: str, steps: int = 10,
                    lines: Sequence[tuple[str, str]] | None = None, ylabel: str = "validation accuracy (%)") -> None:
    """One run's ``train_log.jsonl`` as a PNG: validation accuracy (clean, PGD, BETA, both; or
    the ``(key, label)`` pairs of ``lines``, fractions shown as %) and the training loss, against
    the epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [entry["epoch"] for entry in log]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(6, 6), sharex=True, height_ratios=(3, 1))
    lines = lines or (("val_clean", "clean"), ("val_pgd", f"PGD-{steps}"), ("val_beta", f"BETA-{steps}"),
                      ("val_robust", "robust (both)"))
    for key, label in lines:
        top.plot(epochs, [100 * entry[key] for entry in log], marker="o", markersize=3, label=label)
    _decays(top, log)
    top.set_ylabel(ylabel)
    top.set_title(title)
    top.legend(loc="lower right", fontsize="small")
    top.grid(alpha=0.3)
    bottom.plot(epochs, [entry["loss"] for entry in log], color="black", marker="o", markersize=3)
    _decays(bottom, log)
    bottom.set_ylabel("training loss")
    bottom.set_xlabel("epoch")
    bottom.grid(alpha=0.3)
    tight_layout(figure)
    _save(figure, path)


def robust_curves(logs: Mapping[str, Sequence[dict[str, Any]]], path: Path, title: str, key: str = "val_robust") -> None:
    """The robust validation accuracy of several runs (one line per method) against the epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.5, 4))
    for name, log in logs.items():
        axis.plot([entry["epoch"] for entry in log], [100 * entry[key] for entry in log], marker="o", markersize=3,
                  label=name)
    if logs:
        _decays(axis, next(iter(logs.values())))
    axis.set_xlabel("epoch")
    axis.set_ylabel("robust validation accuracy (%)")
    axis.set_title(title)
    axis.legend(fontsize="small")
    axis.grid(alpha=0.3)
    tight_layout(figure)
    _save(figure, path)


def _decays(axis: Any, log: Sequence[dict[str, Any]]) -> None:
    """Dotted vertical lines where the learning rate drops."""
    for before, after in zip(log, log[1:]):
        if after["lr"] < before["lr"]:
            axis.axvline(after["epoch"] - 0.5, color="grey", linestyle=":", linewidth=1)


def _save(figure: Any, path: Path) -> None:
    save_figure(figure, path, dpi=110)
