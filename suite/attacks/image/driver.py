"""The shared driver of the suite's own first-order image attacks (one file per family beside it:
:mod:`.fgm`, :mod:`.pgd`, :mod:`.beta`, :mod:`.apgd`; the ensembles of :mod:`.auto`).

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
Under ``precision: fp16|bf16`` the search runs under autocast. The attack returns its kept
iterate and no verdict: the evaluation layer scores it on the served model in float32, so
success is never decided in low precision.

Adversarial training (:mod:`suite.train`) runs the same attacks in :data:`TRAINING` mode
(:class:`SearchMode`): every step is taken, the LAST iterate is returned as in the papers'
inner maximisations, and a method may swap the objective (TRADES' KL divergence).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, model_validator

from suite.attacks.base import Attack, AttackOutput, Threat
from suite.attacks.image.norms import COST_NORMS, L2, L2Floored, Linf, random_starts
from suite.attacks.image.search import (EVALUATION, TRAINING, Found, HostCopy, Search, SearchMode, on_examples,
                                        select_rows)
from suite.data.base import Example
from suite.losses import LossName, Reduction, objective, reduce_loss
from suite.models.base import Classifier, attack_decide
from suite.seeding import example_generator
from suite.threat import MAX_RADIUS

Precision = Literal["fp32", "fp16", "bf16"]
# dtype names, not torch dtypes: a module-level torch attribute would load torch at import
_AUTOCAST_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
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


def autocast(device: torch.device, precision: Precision):
    """Autocast context for ``precision`` (``fp32`` runs without autocast)."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, _AUTOCAST_DTYPES[precision]))


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
    """

    modality: ClassVar[str] = "image"
    norm: ClassVar[type] = Linf

    eps: float = Field(8 / 255, ge=0, le=MAX_RADIUS, allow_inf_nan=False)
    precision: Precision = "fp32"
    reduction: Reduction = "sum"
    l2_step: Literal["rescaled", "floored"] = "rescaled"

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
        return L2Floored if self.l2_step == "floored" else self.threat_norm

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

    def _search(
        self,
        model: Classifier,
        x: torch.Tensor,
        y: torch.Tensor,
        start: torch.Tensor,
        steps: int,
        update: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
        loss: LossName,
        targets: torch.Tensor | None = None,
        groups: torch.Tensor | None = None,
        batch_rows: int | None = None,
        mode: SearchMode = EVALUATION,
    ) -> Search:
        """Maximise ``loss`` for R rows from ``start`` with ``steps`` calls of ``update``.

        Args:
            x, y, start: Origins, labels and starting points of the R rows.
            update: ``update(rows, points, gradients, values)`` returns the next (projected)
                points of ``rows`` from their current points, gradients and objective values.
                ``rows`` index the R rows; they are sorted and distinct, and rows only ever
                stop, so each call's rows are some of the last call's (all R of them, ``0 …
                R−1`` in order, until one stops). An update may keep ``points`` (they are
                never written afterwards) and may follow its rows' state by one gather when
                they change (APGD's schedule, :func:`.apgd.apgd_updater`).
            targets: Target class per row for targeted objectives.
            groups: Example index per row; all rows of an example stop as soon as one of them
                is misclassified. Defaults to one example per row.
            batch_rows: N for ``reduction: mean`` (the rows of the whole attack batch).
            mode: Evaluation (stop at success, keep the best iterate) or training.
        """
        rows_total = len(x)
        # A randomized model's search runs every step, as EOT PGD does (Randomized.runs_every_step):
        # an example is still kept at its iterates that fool every draw the attack saw.
        stops = mode.stop_on_success and not getattr(model, "runs_every_step", False)
        row_per_example = groups is None
        groups = torch.arange(rows_total, device=x.device) if groups is None else groups
        done = torch.zeros(int(groups.max()) + 1 if rows_total else 0, dtype=torch.bool, device=x.device)
        # What the search keeps, for the live rows only, compacted: while no row has stopped that
        # is every row; when rows stop, what they kept is written out (into ``kept``) and the
        # rest are gathered once, so a step indexes nothing (each gather and scatter of
        # the images is a pass over them on the device: at ResNet-50 224², batch 256 on an H200,
        # 1.4 ms of an 80 ms step).
        ids = torch.arange(rows_total, device=x.device)
        live = Search(start.clone(), y.clone(), torch.full((rows_total,), float("-inf"), device=x.device),
                      torch.zeros(rows_total, dtype=torch.bool, device=x.device),
                      torch.zeros(rows_total, dtype=torch.long, device=x.device))
        kept: Search | None = None  # every row: the rows that stopped, and at the end the rest
        if rows_total == 0:
            return live
        current, labels, live_targets, live_groups = live.best, y, targets, groups
        # Which rows stop is decided on the host from a copy of ``done`` taken right after the
        # forward pass that updates it (HostCopy): waiting for it does not wait for the backward
        # pass queued behind it, so on CUDA the device keeps working while the host sizes the
        # next pass. The rows are exactly those of a synchronous read.
        if stops:
            groups_host = HostCopy(groups).get()
        for step in range(steps + 1):
            grad_needed = step < steps
            # ``current`` is never written in place (each step's points are a new tensor), so the
            # pass reads it as it is; the last pass, with no gradient, reads a copy (a model that
            # writes its input in place cannot change the kept iterate).
            inputs = current.detach().requires_grad_(True) if grad_needed else current.clone()
            with autocast(model.device, self.precision):
                logits = model.logits(inputs, grad=grad_needed)
            if mode.objective is not None:
                value = mode.objective(logits.float(), live_groups)
            else:
                value = objective(loss, logits, labels, live_targets)
            # A tie for the top breaks an example, as scored; a randomized model's is broken when
            # no draw of its averaged logits decides for the label (attack_decide).
            predicted = attack_decide(logits, labels)
            hit = predicted != labels
            scored = value.detach()
            # Masked writes (torch.where) rather than boolean indexing: the same values, and the
            # host never waits for the device to count the rows kept (on CUDA every such count
            # drains the device's queue).
            if mode.keep == "last":
                live.success, live.best, live.predictions = hit, inputs.detach(), predicted
                live.values = scored.to(live.values.dtype)
            else:
                # A hit beats a miss, and then only a higher objective beats it: the same as
                # hit | higher where rows stop at their first hit (a kept hit never steps again),
                # and a search that runs on (a randomized model's) keeps a hit over later misses.
                higher = scored > live.values
                keep = torch.where(live.predictions != labels, hit & higher, hit | higher)
                live.success = live.success | hit
                live.best = torch.where(keep.view((-1,) + (1,) * (current.dim() - 1)), inputs.detach(), live.best)
                live.values = torch.where(keep, scored, live.values).to(live.values.dtype)
                live.predictions = torch.where(keep, predicted, live.predictions)
            if stops:
                if row_per_example and len(ids) == rows_total:
                    done = done | hit
                elif row_per_example:  # a live row's example is not done yet: or-ing is writing
                    done[ids] = hit
                else:
                    done = done | torch.zeros(len(done), dtype=torch.long, device=done.device).index_add_(
                        0, live_groups, hit.long()).bool()
                done_host = HostCopy(done)
            if not grad_needed:
                break
            (grad,) = torch.autograd.grad(reduce_loss(value, self.reduction, batch_rows or rows_total), inputs)
            # A NaN or infinite gradient (the model's own, an fp16 overflow) would step to a NaN
            # point, which is in no threat model: a NaN component takes no step, an infinite one
            # the largest float's (its direction). A finite gradient is unchanged, bit for bit.
            grad = grad.nan_to_num()
            points = inputs.detach()
            if stops:
                still = ~done_host.get()[groups_host]
                if not bool(still.all()):  # some rows stopped at this step: keep what they found
                    live.queries = torch.full_like(live.queries, step + 1)  # every live row's passes so far
                    if kept is None:  # the first rows to stop: every row is live, in order, so what
                        # each kept is in place (``live`` is replaced below). Its best iterates are
                        # masked writes' outputs, which nothing else holds; the last iterates
                        # (``keep: last``) are the pass's points, which an update may hold: copied.
                        kept = live if mode.keep == "best" else _rows_of(live, ids)
                    else:
                        stopped = (~still).nonzero().squeeze(1).to(x.device, non_blocking=True)
                        _write_rows(kept, ids[stopped], live, stopped)
                    moving = still.nonzero().squeeze(1).to(x.device, non_blocking=True)
                    groups_host = groups_host[still]
                    ids, live = ids[moving], _rows_of(live, moving)
                    labels, live_groups = labels[moving], live_groups[moving]
                    live_targets = None if live_targets is None else live_targets[moving]
                    points, grad, scored = points[moving], grad[moving], scored[moving]
                    if len(ids) == 0:
                        return kept
            current = update(ids, points, grad, scored)
        live.queries = torch.full_like(live.queries, steps + 1)  # the rows still live ran every pass
        if kept is None:  # no row stopped before the end
            return live
        _write_rows(kept, ids, live, None)
        return kept

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
        n = len(x)
        per = 1 if targets is None else targets.shape[1]
        adversarial, predictions = x.clone(), y.clone()
        values = torch.full((n,), float("-inf"), device=x.device)
        queries = torch.full((n,), queries_spent, dtype=torch.long, device=x.device)
        for restart in range(restarts):
            todo = (predictions == y).nonzero().squeeze(1)
            if len(todo) == 0 or (restart > 0 and not random_start):
                break
            rows = todo.repeat_interleave(per)
            origin = x[rows]
            start = self._starts(origin, rows, generators) if random_start else origin
            search = self._search(
                model, origin, y[rows], start, steps, make_update(origin, start), loss,
                targets=None if targets is None else targets[todo].reshape(-1),
                groups=None if per == 1 else torch.arange(len(todo), device=x.device).repeat_interleave(per),
                batch_rows=(batch_rows or n) * per, mode=on_examples(mode, todo),
            )
            found, predicted, value, hit, spent = select_rows(search, len(todo), by_value=mode.keep == "last")
            better = hit | (value > values[todo])
            kept = todo[better]
            adversarial[kept], predictions[kept], values[kept] = found[better], predicted[better], value[better]
            queries[todo] += spent
        return Found(adversarial, predictions, values, queries)

    def _starts(self, origin: torch.Tensor, rows: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
        """Uniform random starts in the ε-ball ∩ [0, 1]^d, one per row, from its example's generator."""
        noise = random_starts(self.geometry, origin.shape[1:], self.eps, [generators[i] for i in rows.tolist()])
        return (origin + noise.to(origin.device)).clamp(0.0, 1.0)

    def _ascent(self, x: torch.Tensor, alpha: float) -> Callable:
        """Steepest-ascent update (sign for L∞, normalised gradient for L2) of size ``alpha``."""

        # The origins of the rows still moving: rows only ever stop (see _search), so when some
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


def _rows_of(search: Search, index: torch.Tensor) -> Search:
    """The rows ``index`` of ``search`` (new tensors)."""
    return Search(search.best[index], search.predictions[index], search.values[index], search.success[index],
                  search.queries[index])


def _write_rows(into: Search, rows: torch.Tensor, source: Search, index: torch.Tensor | None) -> None:
    """Write the rows ``index`` of ``source`` (all of them: ``None``) into the rows ``rows`` of ``into``."""
    for name in ("best", "predictions", "values", "success", "queries"):
        values = getattr(source, name)
        getattr(into, name)[rows] = values if index is None else values[index]


def top_targets(model: Classifier, x: torch.Tensor, y: torch.Tensor, k: int | None) -> torch.Tensor:
    """The k most likely wrong classes of each example (clean logits), N×k, most likely first."""
    logits = model.logits(x)
    classes = logits.shape[1]
    k = classes - 1 if k is None else min(k, classes - 1)
    order = logits.scatter(1, y.view(-1, 1), float("-inf")).argsort(dim=1, descending=True)
    return order[:, :k]
