"""The shared driver of the suite's own first-order image attacks (one file per family beside it:
:mod:`.fgm`, :mod:`.pgd`, :mod:`.beta`, :mod:`.apgd`; the ensembles of :mod:`.auto`). Its search
loop is :func:`.loop.run_search`.

Inputs are [0, 1] pixels, N×C×H×W; ε is measured in those units. Per-example objectives come
from :mod:`suite.losses` and are reduced by SUM, so an example's gradient does not depend on the
batch it is in. All randomness of an example comes from ``(seed, attack name, example id)``.

Deviations from the papers, all standard practice and all in the attacker's favour: an example
stops as soon as one of its iterates is misclassified, and that iterate is kept (the papers run
every step and return the last one); otherwise the iterate with the highest objective is kept
("best iterate"); with ``restarts > 1`` only examples still correctly classified are restarted.
On a randomized model's view (:class:`~suite.models.randomized.Randomized`) an example is
misclassified only when none of the draws its logits average decides for the label
(:func:`~suite.models.base.attack_decide`), and the search runs every step, as EOT PGD does.
Under ``precision: fp16|bf16`` the search runs under autocast, and a row autocast calls
broken is decided again on float32 logits before it stops or counts as broken
(:func:`.loop._confirmed`). The attack returns its kept iterate and no verdict: the evaluation
layer scores it on the served model in float32, so success is never decided in low precision.

Adversarial training (:mod:`suite.train`) runs the same attacks in :data:`TRAINING` mode
(:class:`SearchMode`): every step is taken, the LAST iterate is returned as in the papers'
inner maximisations, and a method may swap the objective (TRADES' KL divergence).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, model_validator

from suite.attacks.base import Attack, AttackOutput, Threat
from suite.attacks.image.loop import Precision, run_search
from suite.attacks.image.norms import COST_NORMS, L2, L2Floored, L2FlooredPixels, Linf, random_starts
from suite.attacks.image.search import (EVALUATION, TRAINING, Found, Search, SearchMode, improves, on_examples,
                                        select_rows)
from suite.data.base import Example
from suite.losses import LossName, Reduction
from suite.models.base import Classifier
from suite.seeding import example_generator
from suite.threat import MAX_RADIUS

#: Default ε per threat model when an attack is given none.
DEFAULT_EPS = {"linf": 8 / 255, "l2": 0.5, "l1": 12.0}  # l1 (distributional attacks): RobustBench's CIFAR-10 radius


def with_default_eps(data: Any) -> Any:
    """Raw attack parameters with ``eps`` defaulted from their ``norm`` (for attacks with a
    ``norm`` parameter; used as a pydantic ``mode="before"`` validator)."""
    if isinstance(data, dict) and "eps" not in data:
        norm = data.get("norm", data.get("norm_name", "linf"))
        if norm in DEFAULT_EPS:
            return {**data, "eps": DEFAULT_EPS[norm]}
    return data


def image_outputs(geometry: type, x: torch.Tensor, adversarial: torch.Tensor, queries: torch.Tensor,
                  seconds: float) -> list[AttackOutput]:
    """One :class:`AttackOutput` per example of an image batch (wall time shared evenly)."""
    sizes = geometry.measure(adversarial - x)
    return [
        AttackOutput(adversarial=adv.detach().cpu(), perturbation=float(size), queries=int(count),
                     seconds=seconds / len(x))
        for size, count, adv in zip(sizes, queries, adversarial)
    ]




class GradientAttack(Attack):
    """Shared driver: batch the examples, run :meth:`_perturb`, return the kept iterates.

    Fields shared by every gradient attack:
        eps: Radius of the threat model's ball, in [0, 1] pixel units.
        precision: ``fp32`` (default), or ``fp16`` / ``bf16`` autocast for the search.
        reduction: ``sum`` (default). ``mean`` exists only for the mini-batch study.
        l2_step: ``rescaled`` (default): an L2 step normalises the gradient after rescaling it
            by its largest entry, so its length never depends on the gradient's scale.
            ``floored`` (:class:`~.norms.L2Floored`, L2 attacks only) is the mini-batch paper's
            g/√max(1e-12, Σg²), which shrinks the step of a tiny gradient: for its study only.
            It floors the gradient of [0, 1] inputs; ``floored_pixels``
            (:class:`~.norms.L2FlooredPixels`) floors it in the paper's own units, the gradient of
            0–255 pixels as its official code feeds them: 255 times higher on the suite's scale.
    """

    modality: ClassVar[str] = "image"
    norm: ClassVar[type] = Linf

    eps: float = Field(8 / 255, ge=0, le=MAX_RADIUS, allow_inf_nan=False)
    precision: Precision = "fp32"
    reduction: Reduction = "sum"
    l2_step: Literal["rescaled", "floored", "floored_pixels"] = "rescaled"

    @model_validator(mode="after")
    def _l2_step_on_l2(self) -> GradientAttack:
        if self.l2_step != "rescaled" and self.threat_norm is not L2:
            raise ValueError(f"l2_step: {self.l2_step} applies to L2 attacks only "
                             f"(this one is {self.threat_norm.name})")
        return self

    @property
    def threat_norm(self) -> type:
        """The norm of the threat model (:mod:`.norms`)."""
        return self.norm

    @property
    def geometry(self) -> type:
        """The threat model's geometry, with the ``l2_step`` rule."""
        return {"floored": L2Floored, "floored_pixels": L2FlooredPixels}.get(self.l2_step, self.threat_norm)

    @property
    def threat(self) -> Threat:
        return Threat(norm=self.geometry.name, eps=self.eps)

    @property
    def loss_reduction(self) -> str:
        return self.reduction

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        start = time.perf_counter()
        x = torch.stack([example.input for example in examples]).to(model.device, torch.float32)
        y = torch.tensor([example.label for example in examples], device=model.device)
        generators = [example_generator(seed, self.name, example.id) for example in examples]
        adversarial, queries = self._perturb(model, x, y, generators)
        return image_outputs(self.geometry, x, adversarial, queries, time.perf_counter() - start)

    def perturb(self, model: Classifier, x: torch.Tensor, y: torch.Tensor, generators: list[torch.Generator],
                mode: SearchMode = TRAINING) -> torch.Tensor:
        """Adversarial inputs for a batch of [0, 1] images ``x`` with labels ``y`` (one generator
        per example), searched in ``mode``: what adversarial training calls."""
        return self._perturb(model, x, y, generators, mode)[0]

    def _perturb(
        self, model: Classifier, x: torch.Tensor, y: torch.Tensor, generators: list[torch.Generator],
        mode: SearchMode = EVALUATION,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Adversarial inputs and queries per example."""
        raise NotImplementedError

    # -- the shared search loop -------------------------------------------------------------

    def _project(self, point: torch.Tensor, origin: torch.Tensor) -> torch.Tensor:
        """Closest point of the ε-ball around ``origin`` ∩ [0, 1]^d (L∞ exactly; L2 the standard
        ball-then-box approximation)."""
        return (origin + self.geometry.project(point - origin, self.eps)).clamp(0.0, 1.0)

    def _search(self, model: Classifier, x: torch.Tensor, y: torch.Tensor, start: torch.Tensor, steps: int,
                update: Callable, loss: LossName, targets: torch.Tensor | None = None,
                groups: torch.Tensor | None = None, batch_rows: int | None = None,
                mode: SearchMode = EVALUATION) -> Search:
        """:func:`.loop.run_search` at this attack's precision and reduction."""
        return run_search(model, x, y, start, steps, update, loss, precision=self.precision,
                          reduction=self.reduction, targets=targets, groups=groups, batch_rows=batch_rows, mode=mode)

    def _restarts(
        self,
        model: Classifier,
        x: torch.Tensor,
        y: torch.Tensor,
        generators: list[torch.Generator],
        *,
        steps: int,
        restarts: int,
        loss: LossName,
        make_update: Callable[[torch.Tensor, torch.Tensor], Callable],
        targets: torch.Tensor | None = None,
        random_start: bool = True,
        queries_spent: int = 0,
        mode: SearchMode = EVALUATION,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run :meth:`_search` from up to ``restarts`` starts; only unbroken examples restart.

        Args:
            make_update: ``make_update(origins, starts)`` builds the update rule of one restart.
            targets: N×K target classes (K rows per example), or ``None`` (one untargeted row).
            queries_spent: Queries already spent per example (a clean pass ranking targets).
            mode: Evaluation or training (:class:`SearchMode`).

        Returns:
            The kept iterate of every example and its queries.
        """
        found = self._restart_search(model, x, y, generators, steps=steps, restarts=restarts, loss=loss,
                                     make_update=make_update, targets=targets, random_start=random_start,
                                     queries_spent=queries_spent, mode=mode)
        return found.adversarial, found.queries

    def _restart_search(self, model, x, y, generators, *, steps, restarts, loss, make_update, targets=None,
                        random_start=True, queries_spent=0, mode: SearchMode = EVALUATION,
                        batch_rows: int | None = None) -> Found:
        """:meth:`_restarts`, returning also what each kept iterate scored (:class:`Found`).
        ``batch_rows`` is the N of ``reduction: mean`` when ``x`` is part of a larger attack batch."""
        per = 1 if targets is None else targets.shape[1]
        found = Found.unbroken(x, y, queries_spent)
        for restart in range(restarts):
            todo = (found.levels > 0).nonzero().squeeze(1)
            if len(todo) == 0 or (restart > 0 and not random_start):
                break
            rows = todo.repeat_interleave(per)
            origin = x[rows]
            start = self._starts(origin, rows, generators) if random_start else origin
            search = self._search(
                model, origin, y[rows], start, steps, make_update(origin, start), loss,
                targets=None if targets is None else targets[todo].reshape(-1),
                groups=None if per == 1 else torch.arange(len(todo), device=x.device).repeat_interleave(per),
                batch_rows=(batch_rows or len(x)) * per, mode=on_examples(mode, todo),
            )
            result = select_rows(search, len(todo), by_value=mode.keep == "last")
            found.keep(todo, result, improves(result.levels, result.values, found.levels[todo], found.values[todo]))
            found.queries[todo] += result.queries
        return found

    def _starts(self, origin: torch.Tensor, rows: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
        """Random starts, one per row, from its example's generator: uniform in the ε-ball, then
        clamped to [0, 1]^d. Not uniform on the intersection, as BETA's Alg. 1 line 3 draws them
        (Unif[max(x − ε, 0), min(x + ε, 1)]): a pixel at 0 starts at 0 half the time. Kept, as
        AutoAttack and PGD draw them, so records do not change."""
        noise = random_starts(self.geometry, origin.shape[1:], self.eps, [generators[i] for i in rows.tolist()])
        return (origin + noise.to(origin.device)).clamp(0.0, 1.0)

    def _ascent(self, x: torch.Tensor, alpha: float) -> Callable:
        """Steepest-ascent update (sign for L∞, normalised gradient for L2) of size ``alpha``."""

        # The origins of the rows still moving: rows only ever stop (see :func:`.loop.run_search`), so when some
        # have, the rest are gathered once rather than at every step.
        held = {"rows": torch.arange(len(x), device=x.device), "origin": x}

        def update(rows: torch.Tensor, points: torch.Tensor, grad: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
            if len(rows) != len(held["rows"]):
                held.update(origin=held["origin"][torch.searchsorted(held["rows"], rows)], rows=rows)
            return self._project(points + self.geometry.step(grad, alpha), held["origin"])

        return update


class NormChoiceAttack(GradientAttack):
    """A gradient attack whose threat model is a parameter: ``norm`` linf (default ε 8/255) or
    l2 (default ε 0.5, :data:`DEFAULT_EPS`). Recorded params name it ``norm``."""

    norm_name: Literal["linf", "l2"] = Field("linf", alias="norm")
    eps: float = Field(8 / 255, ge=0, le=MAX_RADIUS, allow_inf_nan=False)

    model_config = GradientAttack.model_config | {"populate_by_name": True}

    @model_validator(mode="before")
    @classmethod
    def _eps_for_norm(cls, data: Any) -> Any:
        return with_default_eps(data)

    @property
    def threat_norm(self) -> type:
        return COST_NORMS[self.norm_name]  # a subclass may widen norm_name (the Wasserstein attacks: l1)

    def params(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


def top_targets(model: Classifier, x: torch.Tensor, y: torch.Tensor, k: int | None) -> torch.Tensor:
    """The k most likely wrong classes of each example (clean logits), N×k, most likely first."""
    logits = model.logits(x)
    classes = logits.shape[1]
    k = classes - 1 if k is None else min(k, classes - 1)
    order = logits.scatter(1, y.view(-1, 1), float("-inf")).argsort(dim=1, descending=True)
    return order[:, :k]
