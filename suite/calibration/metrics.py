"""Calibration metrics of a classifier's softmax probabilities.

Confidence is the predicted-class probability ``max_k softmax(z)_k``. With ``B`` equal-width
bins over (0, 1] (bin ``b`` holds confidences in ``(b/B, (b+1)/B]``, B = 15 by default as in
Guo et al. 2017, "On Calibration of Modern Neural Networks", §2):

- ECE = Σ_b (n_b / N) · |acc_b − conf_b| (Guo et al., eq. 3);
- MCE = max over non-empty bins of |acc_b − conf_b| (eq. 5);
- NLL = mean over examples of −log p_y.

Probabilities are computed in float64 from the logits, so extreme temperatures (logits of size
1e2–1e3 or 1e-6) give exact metrics rather than float32 saturation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

BINS = 15


def _as_logits(logits: torch.Tensor | np.ndarray) -> np.ndarray:
    array = logits.detach().cpu().double().numpy() if isinstance(logits, torch.Tensor) else np.asarray(logits, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"logits must be N×C, got shape {array.shape}")
    return array


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def confidences(logits: torch.Tensor | np.ndarray) -> np.ndarray:
    """Predicted-class probability of each row."""
    return np.exp(log_softmax(_as_logits(logits)).max(axis=1))


def reliability(confidence: np.ndarray, correct: np.ndarray, bins: int = BINS) -> list[dict[str, Any]]:
    """Per-bin count, accuracy and mean confidence (equal-width bins over (0, 1])."""
    index = np.clip(np.ceil(confidence * bins).astype(int) - 1, 0, bins - 1)
    rows = []
    for b in range(bins):
        members = index == b
        count = int(members.sum())
        rows.append({
            "lower": b / bins,
            "upper": (b + 1) / bins,
            "count": count,
            "accuracy": float(correct[members].mean()) if count else None,
            "confidence": float(confidence[members].mean()) if count else None,
        })
    return rows


def calibration_metrics(logits: torch.Tensor | np.ndarray, labels: Sequence[int], bins: int = BINS) -> dict[str, Any]:
    """ECE, MCE, NLL, accuracy, mean confidence and reliability-diagram data.

    Args:
        logits: N×C logits of the served model.
        labels: N true class ids.
        bins: Number of equal-width confidence bins.
    """
    z = _as_logits(logits)
    y = np.asarray(labels, dtype=np.int64)
    if len(y) != len(z):
        raise ValueError(f"{len(z)} logit rows but {len(y)} labels")
    if len(y) == 0:
        raise ValueError("calibration metrics need at least one example")
    log_p = log_softmax(z)
    confidence = np.exp(log_p.max(axis=1))
    correct = (log_p.argmax(axis=1) == y).astype(np.float64)
    table = reliability(confidence, correct, bins)
    filled = [row for row in table if row["count"]]
    gaps = [abs(row["accuracy"] - row["confidence"]) for row in filled]
    return {
        "bins": bins,
        "n": int(len(y)),
        "accuracy": float(correct.mean()),
        "mean_confidence": float(confidence.mean()),
        "ece": float(sum(row["count"] / len(y) * gap for row, gap in zip(filled, gaps))),
        "mce": float(max(gaps)),
        "nll": float(-log_p[np.arange(len(y)), y].mean()),
        "reliability": table,
    }
