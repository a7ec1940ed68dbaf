"""Per-example attack objectives, all to be MAXIMISED by the attacker.

Every function returns one value per example (shape N). Attacks reduce them with
:func:`reduce_loss`, by SUM: the gradient of a summed loss with respect to example i is exactly
that example's own gradient, whatever the batch size. A mean scales it by 1/N, which in low
precision underflows and silently weakens the attack (Redgrave & Crum, "Generating adversarial
samples in mini-batches may be detrimental to adversarial robustness", 2023).

Logits are cast to float32 before any loss is computed, so a model run under fp16/bf16
autocast still gets an fp32 loss; only its backward pass runs in low precision.
"""

from __future__ import annotations

from typing import Literal

import torch

Reduction = Literal["sum", "mean"]
LossName = Literal["ce", "margin", "dlr"]


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy −log p_y(x), shape N (untargeted: maximise it)."""
    return torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")


def targeted_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p_t(x), shape N: maximising it pulls the input towards class ``targets``."""
    return -torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none")


def _gather(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return logits.gather(1, index.view(-1, 1)).squeeze(1)


def _best_other(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """max_{j≠y} f_j(x), shape N."""
    others = logits.scatter(1, labels.view(-1, 1), float("-inf"))
    return others.amax(dim=1)


def margin(logits: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
    """Negative margin, shape N; positive exactly when the example is misclassified (toward j).

    BETA (Robey et al., ICLR 2024, Algorithm 1): M_j(x) = f_j(x) − f_y(x) for a target j. With
    ``targets=None`` the maximum over targets, max_{j≠y} f_j(x) − f_y(x) (Carlini & Wagner's
    untargeted margin).
    """
    logits = logits.float()
    other = _best_other(logits, labels) if targets is None else _gather(logits, targets)
    return other - _gather(logits, labels)


def dlr(logits: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
    """Difference of Logits Ratio loss, shape N (Croce & Hein, "Reliable evaluation of adversarial
    robustness with an ensemble of diverse parameter-free attacks", ICML 2020, Sec. 3.2).

    Untargeted: −(z_y − max_{j≠y} z_j) / (z_π1 − z_π3), with z sorted decreasingly as π.
    Targeted:   −(z_y − z_t) / (z_π1 − (z_π3 + z_π4)/2).
    Both are invariant to shifting and rescaling the logits, so an overconfident or
    temperature-scaled model cannot hide behind saturated softmax gradients. Needs at least 3
    classes (4 for the targeted form); the constant 1e-12 keeps the ratio finite as in the paper.
    """
    logits = logits.float()
    ordered = logits.sort(dim=1, descending=True).values
    if targets is None:
        if logits.shape[1] < 3:
            raise ValueError("the DLR loss needs at least 3 classes")
        return -(_gather(logits, labels) - _best_other(logits, labels)) / (ordered[:, 0] - ordered[:, 2] + 1e-12)
    if logits.shape[1] < 4:
        raise ValueError("the targeted DLR loss needs at least 4 classes")
    scale = ordered[:, 0] - (ordered[:, 2] + ordered[:, 3]) / 2
    return -(_gather(logits, labels) - _gather(logits, targets)) / (scale + 1e-12)


def objective(name: LossName, logits: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
    """The named per-example objective; ``targets`` selects the targeted form."""
    if name == "ce":
        return cross_entropy(logits, labels) if targets is None else targeted_cross_entropy(logits, targets)
    if name == "margin":
        return margin(logits, labels, targets)
    if name == "dlr":
        return dlr(logits, labels, targets)
    raise ValueError(f"unknown loss {name!r}")


def reduce_loss(values: torch.Tensor, reduction: Reduction = "sum", batch_size: int | None = None) -> torch.Tensor:
    """Reduce per-example losses to the scalar that is differentiated.

    ``"sum"`` is what every attack uses. ``"mean"`` exists ONLY so that the mini-batch study
    (``recipes/batch_size_study.yaml``) can reproduce Redgrave & Crum's finding: dividing by the
    batch size N shrinks every example's gradient by 1/N and, in fp16, lets it underflow to zero.
    ``batch_size`` is the N the caller passes: the batch handed to the attack for the PGD loop
    (it stays fixed while examples that are already broken drop out of the computation).
    Without it N is the rows of ``values``, which is not always the batch: a targeted attack's
    rows are examples × targets (``pgd_t_*``: 48 for a batch of 16 and 3 targets), ``auto``'s
    later components see only the examples still unbroken, and ``wda`` its live rows. The
    study's recipes use ``fgm_*`` and ``pgd_*``, where N is the batch.
    """
    if reduction == "sum":
        return values.sum()
    if reduction == "mean":
        return values.sum() / (batch_size or len(values))
    raise ValueError(f"unknown reduction {reduction!r}")
