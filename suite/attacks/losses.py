"""Per-example attack losses.

Attacks compute one loss per example and reduce by SUM: the gradient of a summed loss with
respect to example i is exactly that example's own gradient, whatever the batch size. A mean
would scale it by 1/N (Redgrave & Crum, "Generating adversarial samples in mini-batches may be
detrimental to adversarial robustness"), which weakens attacks in low precision.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy, shape N."""
    return F.cross_entropy(logits.float(), labels, reduction="none")
