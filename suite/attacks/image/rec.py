"""Gradient attacks on randomized ensembles (``ensemble:`` models), after Dbouk & Shanbhag,
"Adversarial Vulnerability of Randomized Ensembles", ICML 2022, App. C.3.1:

- ``apgd_rec``: adaptive PGD, PGD on the expected loss Σ_i α_i·CE(f_i(x+δ), y) (eq. 63). This
  is how randomized ensembles are usually evaluated (Pinot et al. 2020); the paper proves it
  inconsistent (Thm 4.1, 4.2): from δ = 0 its gradient can vanish exactly (eq. 41) where an
  adversarial perturbation exists.
- ``apgd_rec_logits``: PGD on the loss of the expected logits, CE(Σ_i α_i f_i(x+δ), y) (eq. 64,
  "APGD-L").
- ``pgd_member``: PGD on one member's loss (the paper's PGD-1 attacks the robust member f_1 of a
  BAT ensemble and ignores the other).

The paper's "APGD" is adaptive PGD, not Croce & Hein's Auto-PGD: a fixed step, as eq. 61.

Every iterate is scored with the ensemble's exact expected accuracy L(x+δ, y, α) (eq. 1; the attack
solves eq. 3, its minimum over the ball). Deviations from the paper, in the attacker's favour as in
:mod:`.driver`: the iterate kept is the one with the lowest L (ties: the highest loss), not the
last one, and an example stops once L = 0 (``keep: loss`` is the paper's rule, for its Table 3: the
last iterate, and across restarts the highest expected loss, which can end above the L a single
restart reached, as Fig. 2 predicts). With ``rand_init: false`` the search starts at δ = 0, as in
the paper's analysis (Sec. 4); the default random start is what lets PGD escape the flat point of
eq. 41.

All three need an ensemble; :mod:`.arc` is the consistent attack (Algorithm 2). An evaluation's
worst case over ``arc`` and ``apgd_rec`` is what the suite reports: neither alone reaches the
minimum of L everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field

from suite.attacks.base import AttackOutput, register_attack
from suite.attacks.image.driver import NormChoiceAttack
from suite.attacks.image.loop import autocast
from suite.attacks.image.search import EVALUATION, HostCopy, SearchMode
from suite.data.base import Example
from suite.errors import ConfigError
from suite.losses import cross_entropy, reduce_loss
from suite.models.base import Classifier
from suite.models.ensemble import expected_accuracy, is_ensemble

#: L values closer than this are equal (L is a sum of float64 probabilities stored as float32).
L_TOLERANCE = 1e-6


def require_ensemble(attack: str, model: Classifier) -> None:
    """Refuse, in one line, a model that is not a randomized ensemble."""
    if not is_ensemble(model):
        raise ConfigError(f"attack {attack!r} attacks randomized ensembles; {model.info.name!r} is not one "
                          f"(use an ensemble: model, or another attack)")


class EnsembleState:
    """The ensemble's members with α_i > 0, their probabilities and the argsort by decreasing α."""

    def __init__(self, model: Classifier) -> None:
        self.active: list[int] = list(model.active)
        self.alphas: list[float] = [model.alphas[index] for index in self.active]
        # Algorithm 2, line 4: members in decreasing α (ties in member order).
        self.order: list[int] = sorted(range(len(self.active)), key=lambda position: -self.alphas[position])


class RECAttack(NormChoiceAttack):
    """Shared fields and loop of the REC attacks: ``norm``, ``eps``, ``steps``, ``step``,
    ``rand_init``, ``restarts``, ``keep``.

    Attributes:
        steps: Iterations K.
        step: Step size η in pixel units; default 2.5·ε/steps (Madry et al.; ε/8 at 20 steps). A
            deviation: the ARC paper's APGD runs 20 steps of ε/4 (App. B.2: 2/255 at 8/255).
        rand_init: Start from a uniform point of the ε-ball (default) or from δ = 0.
        restarts: Random starts; only examples with L > 0 restart (needs ``rand_init``).
        keep: Which point an example ends at. ``level`` (the default, the suite's deviation):
            the iterate of lowest L over every step and restart (ties: the highest loss), and
            an example stops at L = 0. ``loss``: the paper's, for its Table 3 ("APGD + RR"):
            each restart's last iterate, and across restarts the one of highest loss; every
            example runs every step of every restart.
    """

    requires: ClassVar[str] = "ensemble"

    steps: int = Field(20, ge=1)
    step: float | None = Field(None, gt=0, allow_inf_nan=False)
    rand_init: bool = True
    restarts: int = Field(1, ge=1)
    keep: Literal["level", "loss"] = "level"

    def params(self) -> dict[str, Any]:
        # ``keep`` came after runs were recorded: at its default it leaves their identity as it was.
        params = super().params()
        if self.keep == "level":
            params.pop("keep")
        return params

    @property
    def step_size(self) -> float:
        return self.step if self.step is not None else 2.5 * self.eps / self.steps

    def check_model(self, model: Classifier) -> None:
        require_ensemble(self.name, model)

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        return {"steps": self.steps, "restarts": self.restarts, "step_size": self.step_size,
                "rand_init": self.rand_init, "max_queries": (self.steps + 1) * self.restarts + 1}

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        require_ensemble(self.name, model)
        return super().run(model, examples, seed)

    def _loss(self, logits: torch.Tensor, y: torch.Tensor, state: EnsembleState) -> torch.Tensor:
        """Per-example loss to maximise from the M×N×C logits of the active members."""
        raise NotImplementedError

    def _members(self, state: EnsembleState) -> list[int] | None:
        """Members whose logits the loss needs besides the active ones (``None``: the active)."""
        return None

    @staticmethod
    def _confirmed(model, inputs: torch.Tensor, labels: torch.Tensor, state: EnsembleState,
                   expected: torch.Tensor) -> torch.Tensor:
        """``expected`` with the rows that autocast's pass calls broken (L = 0) computed again
        from float32 logits (no gradient), as scoring computes L."""
        rows = (expected <= L_TOLERANCE).nonzero().squeeze(1)
        if len(rows) == 0:
            return expected
        with torch.no_grad():
            logits = model.member_logits(inputs.detach()[rows], grad=False, members=list(state.active)).float()
        expected = expected.clone()
        expected[rows] = expected_accuracy(logits, labels[rows], model.alphas, state.active).to(expected)
        return expected

    def _perturb(self, model, x, y, generators, mode: SearchMode = EVALUATION):
        state = EnsembleState(model)
        n = len(x)
        best = x.clone()
        best_l = model.correctness(x, y).to(x.device)
        best_loss = torch.full((n,), float("-inf"), device=x.device)
        queries = torch.ones(n, dtype=torch.long, device=x.device)
        papers = self.keep == "loss"
        for restart in range(self.restarts):
            todo = torch.arange(n, device=x.device) if papers else (best_l > L_TOLERANCE).nonzero().squeeze(1)
            if len(todo) == 0 or (restart > 0 and not self.rand_init):
                break
            origin = x[todo]
            current = self._starts(origin, todo, generators) if self.rand_init else origin.clone()
            # The live rows' state, compacted (as in the shared search, GradientAttack._search):
            # ``rows`` are their indices in the batch; when rows stop, what they found is written
            # out and the rest are gathered once, so a step indexes nothing. The rows that stop
            # are read from a copy taken after the forward pass (HostCopy), so on CUDA the host
            # does not drain the device's queue at every step.
            rows, labels = todo, y[todo]
            kept, kept_l, kept_loss = best[todo], best_l[todo], best_loss[todo]
            for iteration in range(self.steps + 1):
                grad_needed = iteration < self.steps
                inputs = current.detach().requires_grad_(True) if grad_needed else current.clone()
                extra = self._members(state)
                with autocast(model.device, self.precision):
                    logits = model.member_logits(inputs, grad=grad_needed, members=extra).float()
                active_logits = logits[: len(state.active)]
                value = self._loss(logits, labels, state)
                # L from the same forward pass (the ensemble's own formula, on its active members).
                expected = expected_accuracy(active_logits.detach(), labels, model.alphas, state.active).to(x.device)
                if self.precision != "fp32" and not papers:  # a row is done only where float32 agrees (loop._confirmed)
                    expected = self._confirmed(model, inputs, labels, state, expected)
                if papers:  # the last iterate, if its loss beats the earlier restarts' (whatever its L)
                    better = (value.detach() > kept_loss) & (not grad_needed)
                else:
                    lower = expected < kept_l - L_TOLERANCE
                    tie = (expected - kept_l).abs() <= L_TOLERANCE
                    better = lower | (tie & (value.detach() > kept_loss))
                kept = torch.where(better.view((-1,) + (1,) * (best.dim() - 1)), inputs.detach(), kept)
                kept_l = torch.where(better, expected if papers else torch.minimum(kept_l, expected), kept_l)
                kept_loss = torch.where(better, value.detach(), kept_loss)
                # A live row is not done yet; the paper's rows run every step.
                done_host = HostCopy(expected <= (-1.0 if papers else L_TOLERANCE))
                if not grad_needed:
                    break
                (grad,) = torch.autograd.grad(reduce_loss(value, self.reduction, n), inputs)
                grad = grad.nan_to_num()  # a NaN step would be a NaN point (as in GradientAttack._search)
                points = inputs.detach()
                still = ~done_host.get()
                if not bool(still.all()):
                    stopped = (~still).nonzero().squeeze(1).to(x.device, non_blocking=True)
                    best[rows[stopped]], best_l[rows[stopped]] = kept[stopped], kept_l[stopped]
                    best_loss[rows[stopped]] = kept_loss[stopped]
                    queries[rows[stopped]] += iteration + 1  # every live row ran this restart's passes so far
                    moving = still.nonzero().squeeze(1).to(x.device, non_blocking=True)
                    rows, labels, origin = rows[moving], labels[moving], origin[moving]
                    kept, kept_l, kept_loss = kept[moving], kept_l[moving], kept_loss[moving]
                    points, grad = points[moving], grad[moving]
                    if len(rows) == 0:
                        break
                step = self.geometry.step(grad.float(), self.step_size)
                current = self._project(points + step, origin)
            best[rows], best_l[rows], best_loss[rows] = kept, kept_l, kept_loss
            queries[rows] += iteration + 1
        return best, queries


@register_attack("apgd_rec")
class APGDREC(RECAttack):
    """Adaptive PGD on a randomized ensemble: PGD on the expected loss Σ_i α_i·CE(f_i(x+δ), y)
    (Dbouk & Shanbhag 2022, eq. 63; Pinot et al. 2020). Inconsistent (Thm 4.1, 4.2): run it with
    ``arc`` and take the worst case.

    Defaults: L∞ ε 8/255 (``norm: l2``: 0.5), 20 steps of 2.5·ε/steps, random start, best iterate
    by L. ``rand_init: false`` is the paper's δ(0) = 0.
    """

    def _loss(self, logits, y, state):
        weights = torch.tensor(state.alphas, device=logits.device).view(-1, 1)
        losses = torch.stack([cross_entropy(member, y) for member in logits[: len(state.active)]])
        return (weights * losses).sum(dim=0)


@register_attack("apgd_rec_logits")
class APGDRECLogits(RECAttack):
    """PGD on the loss of the expected logits, CE(Σ_i α_i f_i(x+δ), y) (Dbouk & Shanbhag 2022,
    eq. 64, "APGD-L"). Defaults as ``apgd_rec``."""

    def _loss(self, logits, y, state):
        weights = torch.tensor(state.alphas, device=logits.device).view(-1, 1, 1)
        return cross_entropy((weights * logits[: len(state.active)]).sum(dim=0), y)


@register_attack("pgd_member")
class PGDMember(RECAttack):
    """PGD on one member of a randomized ensemble, scored on the ensemble (the paper's PGD-1,
    App. C.3.1, which attacks the robust member f_1 of a BAT ensemble).

    Attributes:
        member: Index of the member to attack (in the ensemble's order); default the member with
            the largest α (the first of them on a tie).
    """

    member: int | None = Field(None, ge=0)

    def _target(self, state: EnsembleState) -> int:
        return state.active[state.order[0]] if self.member is None else self.member

    def _members(self, state: EnsembleState) -> list[int] | None:
        target = self._target(state)
        return None if target in state.active else [*state.active, target]

    def _loss(self, logits, y, state):
        target = self._target(state)
        return cross_entropy(logits[state.active.index(target) if target in state.active else len(state.active)], y)

    def check_model(self, model: Classifier) -> None:
        super().check_model(model)
        if self.member is not None and self.member >= len(model.members):
            raise ConfigError(f"attack {self.name!r}: member {self.member} does not exist "
                              f"({model.info.name!r} has {len(model.members)} members, 0 to {len(model.members) - 1})")
