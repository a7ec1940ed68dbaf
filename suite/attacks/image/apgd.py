"""APGD, the suite's own: Croce & Hein, "Reliable evaluation of adversarial robustness with an
ensemble of diverse parameter-free attacks", ICML 2020 (https://arxiv.org/abs/2003.01690),
Algorithm 1, with the cross-entropy (APGD-CE), DLR (APGD-DLR, Sec. 3.2 eq. 6) and targeted DLR
(APGD-T, Sec. 4 eq. 7) losses, under L∞ and L2.

The schedule (Sec. 3.1):

- η⁽⁰⁾ = 2ε; x⁽¹⁾ = P_S(x⁽⁰⁾ + η⁽⁰⁾·s(∇f(x⁽⁰⁾))) with s the steepest-ascent direction of the norm;
- then z⁽ᵏ⁺¹⁾ = P_S(x⁽ᵏ⁾ + η⁽ᵏ⁾·s(∇f(x⁽ᵏ⁾))) and
  x⁽ᵏ⁺¹⁾ = P_S(x⁽ᵏ⁾ + α(z⁽ᵏ⁺¹⁾ − x⁽ᵏ⁾) + (1 − α)(x⁽ᵏ⁾ − x⁽ᵏ⁻¹⁾)), momentum α = 0.75;
- checkpoints w_j = ⌈p_j·N_iter⌉ with p₀ = 0, p₁ = 0.22, p_{j+1} = p_j + max(p_j − p_{j−1} − 0.03, 0.06);
- at a checkpoint the step size halves and the iterate restarts from the best point x_max when
  Condition 1: Σ_{i=w_{j−1}}^{w_j−1} 1[f(x⁽ⁱ⁺¹⁾) > f(x⁽ⁱ⁾)] < ρ·(w_j − w_{j−1}), ρ = 0.75, or
  Condition 2: η⁽ʷʲ⁻¹⁾ ≡ η⁽ʷʲ⁾ and f_max⁽ʷʲ⁻¹⁾ ≡ f_max⁽ʷʲ⁾ (no halving and no progress since the last one).

Every quantity above is per example (per row), so no example's schedule depends on the others in
its batch; losses are per example and reduced by sum (:mod:`.driver`).

How this reads the paper, and where it departs from it or from the official code
(github.com/fra31/auto-attack, ``autopgd_base.py``, read for comparison):

1. The conditions are checked once f(x⁽ʷʲ⁾) is known, and a restart replaces x⁽ʷʲ⁾ by x_max (with
   its stored gradient, as the official code does, so a restart costs no extra pass); the next
   comparison of Condition 1 is then against f_max, the value of the point actually stepped from.
   The official code keeps comparing against the value before the restart.
2. Condition 1 uses the paper's strict "<"; the official code uses "≤". Its first window also
   compares f(x⁽¹⁾) with a zero-initialised slot instead of f(x⁽⁰⁾); here it is f(x⁽⁰⁾).
3. Condition 2 at the first checkpoint compares with f_max⁽⁰⁾ = f(x⁽⁰⁾) (η cannot have changed yet);
   the official code never applies Condition 2 at the first checkpoint.
4. Checkpoints follow the paper's p_j exactly (in hundredths, so 0.22·100 is 22, not 23). The
   official code's integer recurrence agrees with them only at 100, 200 and 300 iterations
   (recomputed for every N ≤ 300): at the default 100 both are 22, 41, 57, 70, 80, 87, 93, 99;
   at 50 the official checkpoints are 11, 21, 30, 38, 45 and these 11, 21, 29, 35, 40, 44, 47;
   at 30 (``auto``'s targeted searches) official 6, 11, 15, 18, 20 and then every step, these
   7, 13, 18, 21, 24, 27, 28. A side-by-side run at other than 100 steps follows two schedules.
5. Random starts are uniform in the ε-ball, then clamped to [0, 1]^d, from each example's own
   generator (``GradientAttack._starts``; the official code draws one point on the L2 sphere, or
   a rescaled cube point under L∞).
6. As everywhere in the suite, an example stops at its first misclassified iterate, and targets
   of APGD-T run most likely first, each only on the examples the earlier ones left unbroken
   (as in AutoAttack).
7. Few classes. DLR reads the third-largest logit and targeted DLR the fourth, so they are
   undefined below 3 and 4 classes (AutoAttack issues #70, #79). There the attack maximises the
   margin max_{j≠y} z_j − z_y (targeted: z_t − z_y) instead: like DLR it is blind to the scale
   of the logits, so an over-confident model cannot hide behind saturated softmax gradients. The
   loss actually used is recorded in the budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field

from suite.attacks.base import register_attack
from suite.attacks.image.driver import GradientAttack, NormChoiceAttack, top_targets
from suite.attacks.image.search import EVALUATION, Found, SearchMode, improves, on_examples
from suite.losses import LossName


def checkpoints(steps: int) -> list[int]:
    """The checkpoints W = {w_1, w_2, …} of Croce & Hein (Sec. 3.1) below ``steps`` (N_iter).

    w_j = ⌈p_j·N_iter⌉, p₀ = 0, p₁ = 0.22, p_{j+1} = p_j + max(p_j − p_{j−1} − 0.03, 0.06). The p_j
    are kept in hundredths, so the ceiling is exact; coinciding checkpoints (short runs) count once.
    """
    found: list[int] = []
    previous, current = 0, 22
    while True:
        point = -(-current * steps // 100)
        if point >= steps:
            return found
        if not found or point > found[-1]:
            found.append(point)
        previous, current = current, current + max(current - previous - 3, 6)


class StepSchedule:
    """Algorithm 1's bookkeeping for R rows: step sizes, x_max, and the checkpoint conditions.

    :meth:`observe` is called once per iteration k = 0, 1, … with the rows still moving, their
    iterates x⁽ᵏ⁾, gradients and objective values; it returns the (possibly restarted) points and
    gradients to step from. Rows only ever stop, so each call's rows are some of the last call's:
    the schedule then keeps the state of those rows only (``rows``), gathered once, and reads and
    replaces it whole at every step. ``halvings`` lists, per checkpoint, the rows whose step size
    halved.
    """

    def __init__(self, rows: int, steps: int, eta: float, rho: float, device: torch.device):
        self.rows = torch.arange(rows, device=device)
        self.eta = torch.full((rows,), float(eta), device=device)
        self.rho = rho
        points = checkpoints(steps)
        self.windows = dict(zip(points, (b - a for a, b in zip([0, *points], points))))
        self.k = 0
        self.last_value = torch.full((rows,), float("-inf"), device=device)
        self.best_value = torch.full((rows,), float("-inf"), device=device)
        self.increases = torch.zeros(rows, dtype=torch.long, device=device)
        self.eta_at_check = self.eta.clone()
        self.best_at_check = torch.full((rows,), float("-inf"), device=device)
        self.best_point: torch.Tensor | None = None
        self.best_grad: torch.Tensor | None = None
        self._halved: list[tuple[int, torch.Tensor, torch.Tensor]] = []

    @property
    def halvings(self) -> list[tuple[int, torch.Tensor]]:
        """Per checkpoint k, the rows whose step size halved there (read from the device only
        when asked: the search itself never waits for them)."""
        return [(k, rows[halve]) for k, rows, halve in self._halved]

    _STATE = ("eta", "last_value", "best_value", "increases", "eta_at_check", "best_at_check", "best_point", "best_grad")

    def follow(self, rows: torch.Tensor) -> torch.Tensor | None:
        """Keep the state of ``rows`` only (sorted, and some of the rows held); the positions of
        ``rows`` among the rows held, or ``None`` when they are all of them."""
        if len(rows) == len(self.rows):
            return None
        positions = torch.searchsorted(self.rows, rows)
        for name in self._STATE:
            store = getattr(self, name)
            if store is not None:
                setattr(self, name, store[positions])
        self.rows = rows
        return positions

    def observe(self, rows: torch.Tensor, points: torch.Tensor, grad: torch.Tensor, values: torch.Tensor,
                ) -> tuple[torch.Tensor, torch.Tensor]:
        k = self.k
        self.k += 1
        self.follow(rows)
        if self.best_point is None:
            self.best_point = torch.zeros_like(points)
            self.best_grad = torch.zeros_like(points)
        # Every quantity is per row, and the state is that of the rows handed, in order: it is
        # read and replaced whole, with no gather, scatter or read of the device between the
        # checkpoints (on a GPU each is a kernel launch, and at batch 64 the host's issuing of
        # them bounds a step). The caller's tensors are copied, never kept.
        if k == 0:
            self.best_at_check.copy_(values)  # f_max⁽⁰⁾ = f(x⁽⁰⁾)
        else:
            self.increases += values > self.last_value
        self.last_value.copy_(values)
        better = values > self.best_value
        self.best_value = torch.where(better, values, self.best_value).to(self.best_value.dtype)
        rowwise = better.view((-1,) + (1,) * (points.dim() - 1))
        self.best_point = torch.where(rowwise, points, self.best_point)
        self.best_grad = torch.where(rowwise, grad, self.best_grad)
        if k in self.windows:
            condition_1 = self.increases < self.rho * self.windows[k]
            condition_2 = (self.eta == self.eta_at_check) & (self.best_value <= self.best_at_check)
            halve = condition_1 | condition_2
            self.eta_at_check = self.eta.clone()
            self.best_at_check = self.best_value.clone()
            self.increases.zero_()
            self.eta = torch.where(halve, self.eta / 2, self.eta)
            self._halved.append((k, rows, halve))
            # The rows that halve restart from x_max, with its stored gradient (masked writes:
            # the same values as indexing, without reading how many restart).
            restart = halve.view(rowwise.shape)
            points = torch.where(restart, self.best_point, points)
            grad = torch.where(restart, self.best_grad, grad)
            self.last_value = torch.where(halve, self.best_value, self.last_value)
        return points, grad


def apgd_updater(attack: GradientAttack, steps: int, rho: float = 0.75, momentum: float = 0.75,
                 schedules: list[StepSchedule] | None = None) -> Callable:
    """``make_update(origin, start)`` for one restart of ``attack``'s search: Algorithm 1's step
    (its ε-ball, norm and projection), with a fresh :class:`StepSchedule` per restart (appended to
    ``schedules`` when given, for inspection). BETA uses it too, for its L2 default."""

    def make_update(origin: torch.Tensor, start: torch.Tensor) -> Callable:
        schedule = StepSchedule(len(origin), steps, 2 * attack.eps, rho, origin.device)
        if schedules is not None:
            schedules.append(schedule)
        shape = (-1,) + (1,) * (origin.dim() - 1)
        # The rows' own state, gathered once when rows stop (with the schedule's). Under L∞ the
        # set S, the ε-box around the origin within [0, 1]^d, is itself a box: P_S is one clamp
        # between its corners, computed once per search, and the origin is not needed.
        box = attack.geometry.name == "linf"
        held = ({"low": (origin - attack.eps).clamp_(min=0.0), "high": (origin + attack.eps).clamp_(max=1.0)}
                if box else {"origin": origin})
        held["previous"] = start

        def project(point: torch.Tensor) -> torch.Tensor:
            return point.clamp_(held["low"], held["high"]) if box else attack._project(point, held["origin"])

        def update(rows: torch.Tensor, points: torch.Tensor, grad: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
            first = schedule.k == 0
            positions = schedule.follow(rows)
            if positions is not None:
                held.update({name: value[positions] for name, value in held.items()})
            points, grad = schedule.observe(rows, points, grad, values)
            # Fused where the arithmetic allows (each operation is a pass over the images, and
            # on a GPU at a large batch those passes are what a step costs beyond the model's):
            # x + η·s(∇) in one pass, the momentum step x + α(z − x) as one interpolation.
            step = attack.geometry.step(grad, 1.0)
            z = project(torch.addcmul(points, step, schedule.eta.view(shape)))
            if first:
                moved = z
            else:
                moved = torch.lerp(points, z, momentum).add_(points - held["previous"], alpha=1 - momentum)
                moved = project(moved)
            # The driver never writes the points it hands (GradientAttack._search), so the last
            # iterate is kept as it is, with no copy.
            held["previous"] = points
            return moved

        return update

    return make_update


class _APGD(NormChoiceAttack):
    """Shared fields and the update rule of the APGD attacks (see the module docstring)."""

    #: 2: the fused step (:func:`apgd_updater`): the same search, rounded otherwise (under L∞ the
    #: projection is a clamp between the box's corners, so a point inside keeps its bits).
    #: 3: a randomized ensemble's iterates are kept by their exact L, and its examples stop only
    #: where no member is right (:func:`~suite.models.base.attack_level`; other models' records
    #: are unchanged).
    version: ClassVar[int] = 3
    steps: int = Field(100, ge=1)
    restarts: int = Field(1, ge=1)
    rho: float = Field(0.75, gt=0, le=1)
    momentum: float = Field(0.75, gt=0, le=1)

    _loss: ClassVar[LossName] = "ce"
    _targeted: ClassVar[bool] = False

    def loss_for(self, num_classes: int | None) -> LossName:
        """The loss run on a model with ``num_classes`` classes (the margin where DLR is undefined)."""
        if self._loss == "dlr" and num_classes is not None and num_classes < (4 if self._targeted else 3):
            return "margin"
        return self._loss

    def _rows(self, num_classes: int | None) -> int | None:
        return 1

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        rows = self._rows(num_classes)
        return {
            "steps": self.steps,
            "restarts": self.restarts,
            "targets": rows if self._targeted else None,
            "loss": self.loss_for(num_classes),
            "initial_step": 2 * self.eps,
            "max_queries": None if rows is None else (self.steps + 1) * self.restarts * rows + int(self._targeted),
        }

    def _updater(self, steps: int, schedules: list[StepSchedule] | None = None) -> Callable:
        return apgd_updater(self, steps, self.rho, self.momentum, schedules)

    def _perturb(self, model, x, y, generators, mode: SearchMode = EVALUATION):
        found = self.find(model, x, y, generators, mode)
        return found.adversarial, found.queries

    def find(self, model, x: torch.Tensor, y: torch.Tensor, generators: list[torch.Generator],
             mode: SearchMode = EVALUATION) -> Found:
        """The kept iterate of every example, what it scored, and the queries (the ensembles'
        entry point: they pass on what is still classified correctly)."""
        return self._restart_search(model, x, y, generators, steps=self.steps, restarts=self.restarts,
                                    loss=self.loss_for(len(model.labels)), make_update=self._updater(self.steps),
                                    mode=mode)


@register_attack("apgd_ce")
class APGDCE(_APGD):
    """APGD-CE (Croce & Hein, ICML 2020, Alg. 1): Auto-PGD on the cross-entropy.

    ``norm`` linf (default ε 8/255) or l2 (default ε 0.5); 100 steps, 1 restart, ρ = 0.75,
    momentum 0.75, initial step 2ε. Per-example schedules: results do not depend on the batch.
    """

    _loss: ClassVar[LossName] = "ce"


@register_attack("apgd_dlr")
class APGDDLR(_APGD):
    """APGD-DLR (Croce & Hein, ICML 2020, Alg. 1 and eq. 6): Auto-PGD on the DLR loss,
    −(z_y − max_{j≠y} z_j)/(z_π1 − z_π3), invariant to shifting and scaling the logits.

    Defaults as ``apgd_ce``. Binary models get the margin instead (DLR needs 3 classes).
    """

    _loss: ClassVar[LossName] = "dlr"


@register_attack("apgd_t")
class APGDT(_APGD):
    """APGD-T (Croce & Hein, ICML 2020, Sec. 4): Auto-PGD on the targeted DLR loss
    −(z_y − z_t)/(z_π1 − (z_π3 + z_π4)/2), towards each of the ``targets`` (default 9) most likely
    wrong classes in turn, each on the examples the earlier targets left unbroken.

    Defaults as ``apgd_ce`` per target. Models with fewer than 4 classes get the targeted margin
    z_t − z_y instead (the targeted DLR reads the 4th-largest logit).

    ``best_target_steps`` (default 0: none) adds a last search, not in the paper: on every
    example the sweep left unbroken, a fresh APGD-T run of that many steps towards the one
    target whose search came closest (the highest targeted DLR value it reached). ``auto``
    sweeps 9 targets with 30 steps and then gives the closest one 100: on the digits that only
    AutoAttack's 100-step targeted searches break, every 100-step break was towards the target
    closest after 30 steps (19 of 19 over 20 seeds; ``bench/held_out.py --trace-targets``).
    """

    _loss: ClassVar[LossName] = "dlr"
    _targeted: ClassVar[bool] = True

    targets: int = Field(9, ge=1)
    #: How the targets are chosen: ``logit`` (AutoAttack's), the most likely wrong classes; or
    #: ``linear`` (:func:`linear_targets`), the nearest decision boundaries of the linearised model.
    ranking: Literal["logit", "linear"] = "logit"
    best_target_steps: int = Field(0, ge=0)

    def _rows(self, num_classes: int | None) -> int | None:
        return self.targets if num_classes is None else min(self.targets, num_classes - 1)

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        budget = {**super().budget(num_classes), "ranking": self.ranking}
        if self.best_target_steps:
            budget["best_target_steps"] = self.best_target_steps
            if budget["max_queries"] is not None:
                budget["max_queries"] += (self.best_target_steps + 1) * self.restarts
        return budget

    def find(self, model, x, y, generators, mode: SearchMode = EVALUATION) -> Found:
        loss = self.loss_for(len(model.labels))
        if self.ranking == "linear":
            targets = linear_targets(model, x, y, self.targets, dual=1 if self.threat_norm.name == "linf" else 2)
        else:
            targets = top_targets(model, x, y, self.targets)
        found = Found.unbroken(x, y, queries=1)  # the clean pass ranking the targets
        # Per example, the target whose search came closest, and how close (its best targeted DLR value).
        closest = targets[:, 0].clone()
        reached = torch.full((len(x),), float("-inf"), device=x.device)
        stages = [(targets[:, rank : rank + 1], self.steps) for rank in range(targets.shape[1])]
        if self.best_target_steps:
            stages.append((None, self.best_target_steps))
        for stage_targets, steps in stages:
            todo = torch.arange(len(x), device=x.device)
            if mode.stop_on_success:
                todo = (found.levels > 0).nonzero().squeeze(1)
            if len(todo) == 0:
                break
            aims = closest.unsqueeze(1) if stage_targets is None else stage_targets
            result = self._restart_search(
                model, x[todo], y[todo], [generators[i] for i in todo.tolist()], steps=steps,
                restarts=self.restarts, loss=loss, make_update=self._updater(steps),
                targets=aims[todo], mode=on_examples(mode, todo), batch_rows=len(x),
            )
            if stage_targets is not None:
                nearer = result.values > reached[todo]
                reached[todo[nearer]] = result.values[nearer]
                closest[todo[nearer]] = stage_targets[todo[nearer], 0]
            found.keep(todo, result, improves(result.levels, result.values, found.levels[todo], found.values[todo]))
            found.queries[todo] += result.queries
        return found


def linear_targets(model, x: torch.Tensor, y: torch.Tensor, k: int, dual: float, pool: int = 20) -> torch.Tensor:
    """The k wrong classes with the nearest decision boundary of the model linearised at x, N×k,
    nearest first.

    MALT (Melamed, Yehudai & Shamir, "MALT Powers Up Adversarial Attacks", NeurIPS 2024) ranks
    targets by the distance (z_y − z_t)/‖∇ₓ(z_y − z_t)‖_* to the linearised boundary, with ‖·‖_*
    the dual norm of the threat (L1 for L∞, L2 for L2), instead of by the logit z_t: a class
    that is unlikely but close along the gradient gets attacked early. Candidates are the
    ``pool`` most likely wrong classes, so the cost is one forward pass and ``pool`` backward
    passes per example whatever the number of classes. Deviation: MALT's candidate pool and
    its use of the ranking inside its own attack are not reproduced; here the ranking only
    orders APGD-T's targets. Each example's gradient is its own (summed), so the ranking does
    not depend on the batch.
    """
    inputs = x.clone().requires_grad_(True)
    logits = model.logits(inputs, grad=True).float()
    classes = logits.shape[1]
    others = logits.detach().scatter(1, y.view(-1, 1), float("-inf"))
    candidates = others.argsort(dim=1, descending=True, stable=True)[:, : min(pool, classes - 1)]
    true = logits.gather(1, y.view(-1, 1)).squeeze(1)
    distances = []
    for column in range(candidates.shape[1]):
        gap = true - logits.gather(1, candidates[:, column : column + 1]).squeeze(1)
        (grad,) = torch.autograd.grad(gap.sum(), inputs, retain_graph=column < candidates.shape[1] - 1)
        distances.append(gap.detach() / grad.flatten(1).norm(p=dual, dim=1).clamp_min(1e-12))
    order = torch.stack(distances, dim=1).argsort(dim=1, stable=True)
    return candidates.gather(1, order[:, : min(k, classes - 1)])
