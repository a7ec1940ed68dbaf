"""PGD, untargeted and multi-targeted.

- PGD: Madry et al., "Towards Deep Learning Models Resistant to Adversarial Attacks", ICLR 2018
  (https://arxiv.org/abs/1706.06083): random start in the ε-ball, ``steps`` ascent steps of size
  ``alpha``, projection onto the ε-ball ∩ [0, 1]^d after each step.
- Multi-targeted PGD: Gowal et al., "An Alternative Surrogate Loss for PGD-based Adversarial
  Testing", 2019 (https://arxiv.org/abs/1910.09338): PGD on the margin towards each of the top-k
  target classes.

The search loop, early stopping and best-iterate rule are the driver's (:mod:`.driver`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from pydantic import Field

from suite.attacks.base import register_attack
from suite.attacks.image.driver import GradientAttack, top_targets
from suite.attacks.image.search import EVALUATION, SearchMode
from suite.attacks.image.norms import L2, Linf
from suite.losses import LossName
from suite.threat import MAX_RADIUS


class _PGD(GradientAttack):
    _targeted: ClassVar[bool] = False
    #: 2: a randomized ensemble's iterates are kept by their exact L, and its examples stop only
    #: where no member is right (:func:`~suite.models.base.attack_level`).
    version: ClassVar[int] = 2

    steps: int = Field(20, ge=1)
    restarts: int = Field(1, ge=1)
    alpha: float | None = Field(None, gt=0, allow_inf_nan=False)
    random_start: bool = True
    loss: LossName = "ce"

    @property
    def step_size(self) -> float:
        # Madry et al. use 2.5·ε/steps: enough to reach the boundary of the ball from anywhere.
        return self.alpha if self.alpha is not None else 2.5 * self.eps / self.steps

    def _targets(self, model, x, y) -> torch.Tensor | None:
        return None

    def _rows_per_example(self, num_classes: int | None) -> int:
        return 1

    def rows_per_example(self, num_classes: int) -> int | None:
        return self._rows_per_example(num_classes)

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        rows = self._rows_per_example(num_classes)  # None: all targets of an unknown class count
        extra = int(self._targeted)  # the clean pass ranking the targets
        return {
            "steps": self.steps,
            "restarts": self.restarts,
            "step_size": self.step_size,
            "targets": rows if self._targeted else None,
            "max_queries": None if rows is None else (self.steps + 1) * self.restarts * rows + extra,
        }

    def _perturb(self, model, x, y, generators, mode: SearchMode = EVALUATION):
        targets = self._targets(model, x, y)  # N×K, or None (untargeted)
        return self._restarts(
            model, x, y, generators, steps=self.steps, restarts=self.restarts, loss=self.loss,
            make_update=lambda origin, start: self._ascent(origin, self.step_size),
            targets=targets, random_start=self.random_start, queries_spent=0 if targets is None else 1, mode=mode,
        )


@register_attack("pgd_linf")
class PGDLinf(_PGD):
    """PGD (Madry et al. 2018) in the L∞ ball of radius ``eps`` (default 8/255); pixels in [0, 1].

    Defaults: 20 steps of 2.5·ε/steps, random start, 1 restart, cross-entropy (``loss``: ce,
    margin or dlr).
    """

    norm: ClassVar[type] = Linf


@register_attack("pgd_l2")
class PGDL2(_PGD):
    """PGD (Madry et al. 2018) in the L2 ball of radius ``eps`` (default 0.5); pixels in [0, 1].

    Defaults: 20 steps of 2.5·ε/steps, random start, 1 restart, cross-entropy (``loss``: ce,
    margin or dlr).
    """

    norm: ClassVar[type] = L2
    eps: float = Field(0.5, ge=0, le=MAX_RADIUS, allow_inf_nan=False)


class _TargetedPGD(_PGD):
    targets: int | None = Field(9, ge=1)
    loss: LossName = "margin"
    _targeted: ClassVar[bool] = True

    def _targets(self, model, x, y):
        return top_targets(model, x, y, self.targets)

    def _rows_per_example(self, num_classes):
        if self.targets is None:
            return (num_classes - 1) if num_classes else None
        return min(self.targets, num_classes - 1) if num_classes else self.targets


@register_attack("pgd_t_linf")
class TargetedPGDLinf(_TargetedPGD):
    """Multi-targeted PGD (Gowal et al. 2019), L∞ ball of radius ``eps`` (default 8/255).

    PGD towards each of the ``targets`` (default 9; null = all) most likely wrong classes, on the
    targeted ``loss`` (margin f_t − f_y by default; ce = log p_t, dlr = targeted DLR); the best
    target is kept. Budget per target as for ``pgd_linf``.
    """

    norm: ClassVar[type] = Linf


@register_attack("pgd_t_l2")
class TargetedPGDL2(_TargetedPGD):
    """Multi-targeted PGD (Gowal et al. 2019), L2 ball of radius ``eps`` (default 0.5)."""

    norm: ClassVar[type] = L2
    eps: float = Field(0.5, ge=0, le=MAX_RADIUS, allow_inf_nan=False)
