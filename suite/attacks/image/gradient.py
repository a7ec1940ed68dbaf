"""First-order white-box attacks: FGM and PGD, under L∞ and L2.

- FGM / FGSM: Goodfellow, Shlens & Szegedy, "Explaining and Harnessing Adversarial Examples",
  ICLR 2015 (https://arxiv.org/abs/1412.6572): one step of size ε along the steepest-ascent
  direction of the loss (sign of the gradient for L∞, normalised gradient for L2).
- PGD: Madry et al., "Towards Deep Learning Models Resistant to Adversarial Attacks", ICLR 2018
  (https://arxiv.org/abs/1706.06083): random start in the ε-ball, ``steps`` ascent steps of size
  ``alpha``, projection onto the ε-ball ∩ [0, 1]^d after each step.

Inputs are [0, 1] pixels, N×C×H×W; ε is measured in those units. The loss is the per-example
cross-entropy reduced by sum (see :mod:`suite.attacks.losses`).

Deviations from the papers, all standard practice: PGD stops on an example as soon as it is
misclassified and keeps that iterate (the papers run every step and return the last one); with
``restarts > 1`` only examples still correctly classified are restarted. An example that no
restart breaks returns its last iterate.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from pydantic import Field

from suite.attacks.base import Attack, AttackOutput, register_attack
from suite.attacks.image.norms import L2, Linf
from suite.attacks.losses import cross_entropy
from suite.data.base import Example
from suite.models.base import Classifier
from suite.seeding import example_generator


class GradientAttack(Attack):
    """Shared driver: batch the examples, run :meth:`_perturb`, score on the served model."""

    modality: ClassVar[str] = "image"
    norm: ClassVar[type] = Linf

    eps: float = Field(8 / 255, ge=0, allow_inf_nan=False)

    @property
    def threat_model(self) -> str:
        return self.norm.name

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        start = time.perf_counter()
        x = torch.stack([example.input for example in examples]).to(model.device, torch.float32)
        y = torch.tensor([example.label for example in examples], device=model.device)
        generators = [example_generator(seed, self.name, example.id) for example in examples]
        adversarial, predictions, queries = self._perturb(model, x, y, generators)
        sizes = self.norm.measure(adversarial - x)
        seconds = (time.perf_counter() - start) / len(examples)
        return [
            AttackOutput(
                success=bool(prediction != label),
                prediction=int(prediction),
                perturbation=float(size),
                queries=int(count),
                seconds=seconds,
                adversarial=adv.detach().cpu(),
            )
            for prediction, label, size, count, adv in zip(predictions, y, sizes, queries, adversarial)
        ]

    def _perturb(
        self, model: Classifier, x: torch.Tensor, y: torch.Tensor, generators: list[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Adversarial inputs, the served model's predictions on them, and queries per example."""
        raise NotImplementedError

    def _ascend(
        self, model: Classifier, x: torch.Tensor, y: torch.Tensor, start: torch.Tensor, steps: int, alpha: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Projected steepest ascent from ``start``; stops per example once it is misclassified.

        Returns:
            The adversarial iterates, the model's predictions on them, and queries per example.
            Every iterate returned was scored by the last forward pass that saw it.
        """
        current = start.clone()
        predictions = y.clone()
        done = torch.zeros(len(x), dtype=torch.bool, device=x.device)
        queries = torch.zeros(len(x), dtype=torch.long, device=x.device)
        for step in range(steps + 1):
            live = (~done).nonzero().squeeze(1)
            if len(live) == 0:
                break
            inputs = current[live].requires_grad_(step < steps)
            logits = model.logits(inputs, grad=step < steps)
            queries[live] += 1
            predictions[live] = logits.argmax(dim=1)
            done[live[predictions[live] != y[live]]] = True
            if step == steps:
                break
            loss = cross_entropy(logits, y[live]).sum()  # sum: each example keeps its own gradient
            (grad,) = torch.autograd.grad(loss, inputs)
            still = ~done[live]  # examples broken at this iterate keep it
            rows = live[still]
            moved = inputs.detach()[still] + self.norm.step(grad[still], alpha)
            current[rows] = (x[rows] + self.norm.project(moved - x[rows], self.eps)).clamp(0.0, 1.0)
        return current, predictions, queries


class _FGM(GradientAttack):
    def _perturb(self, model, x, y, generators):
        return self._ascend(model, x, y, x, steps=1, alpha=self.eps)

    def budget(self) -> dict[str, Any]:
        return {"steps": 1, "restarts": 1}


@register_attack("fgm")
class FGMLinf(_FGM):
    """FGSM (Goodfellow et al. 2015): one signed-gradient step of size eps; L-inf; pixels in [0,1]."""

    norm: ClassVar[type] = Linf


@register_attack("fgm_l2")
class FGML2(_FGM):
    """Fast gradient method (Goodfellow et al. 2015): one normalised-gradient step of L2 size eps."""

    norm: ClassVar[type] = L2
    eps: float = Field(0.5, ge=0, allow_inf_nan=False)


class _PGD(GradientAttack):
    steps: int = Field(20, ge=1)
    restarts: int = Field(1, ge=1)
    alpha: float | None = Field(None, gt=0, allow_inf_nan=False)

    @property
    def step_size(self) -> float:
        # Madry et al. use 2.5·ε/steps: enough to reach the boundary of the ball from anywhere.
        return self.alpha if self.alpha is not None else 2.5 * self.eps / self.steps

    def budget(self) -> dict[str, Any]:
        return {"steps": self.steps, "restarts": self.restarts, "step_size": self.step_size}

    def _perturb(self, model, x, y, generators):
        adversarial, predictions = x.clone(), y.clone()
        queries = torch.zeros(len(x), dtype=torch.long, device=x.device)
        for _ in range(self.restarts):
            rows = (predictions == y).nonzero().squeeze(1)
            if len(rows) == 0:
                break
            noise = torch.stack([self.norm.random_start(x.shape[1:], self.eps, generators[i]) for i in rows.tolist()])
            start = (x[rows] + noise.to(x.device)).clamp(0.0, 1.0)
            found, predicted, spent = self._ascend(model, x[rows], y[rows], start, self.steps, self.step_size)
            adversarial[rows], predictions[rows], queries[rows] = found, predicted, queries[rows] + spent
        return adversarial, predictions, queries


@register_attack("pgd_linf")
class PGDLinf(_PGD):
    """PGD (Madry et al. 2018), L-inf ball of radius eps, random start, restarts; pixels in [0,1]."""

    norm: ClassVar[type] = Linf


@register_attack("pgd_l2")
class PGDL2(_PGD):
    """PGD (Madry et al. 2018), L2 ball of radius eps, random start, restarts; pixels in [0,1]."""

    norm: ClassVar[type] = L2
    eps: float = Field(0.5, ge=0, allow_inf_nan=False)
