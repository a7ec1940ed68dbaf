"""The shared search loop of the suite's first-order image attacks (:mod:`.driver` calls it):
R rows maximise an objective from their starts, each example stopping at its first
misclassified iterate (evaluation) or running every step (training, a randomized model)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Literal

import torch

from suite.attacks.image.search import EVALUATION, HostCopy, Search, SearchMode, improves
from suite.losses import LossName, Reduction, objective, reduce_loss
from suite.models.base import Classifier, attack_decide, attack_level

Precision = Literal["fp32", "fp16", "bf16"]
# dtype names, not torch dtypes: a module-level torch attribute would load torch at import
_AUTOCAST_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


def autocast(device: torch.device, precision: Precision):
    """Autocast context for ``precision`` (``fp32`` runs without autocast)."""
    if precision == "fp32":
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, _AUTOCAST_DTYPES[precision]))


def run_search(
    model: Classifier,
    x: torch.Tensor,
    y: torch.Tensor,
    start: torch.Tensor,
    steps: int,
    update: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    loss: LossName,
    *,
    precision: Precision = "fp32",
    reduction: Reduction = "sum",
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
    # Under autocast a hit is confirmed on float32 logits before it stops a row or is kept
    # (below); not where nothing stops and the last iterate is kept (training), nor on a
    # randomized model (another call is another draw).
    confirms = (mode.stop_on_success or mode.keep == "best") and not getattr(model, "runs_every_step", False)
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
                  torch.zeros(rows_total, dtype=torch.long, device=x.device),
                  torch.ones(rows_total, device=x.device))  # the kept level: a miss, as at the origin
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
        with autocast(model.device, precision):
            logits = model.logits(inputs, grad=grad_needed)
        if mode.objective is not None:
            value = mode.objective(logits.float(), live_groups)
        else:
            value = objective(loss, logits, labels, live_targets)
        # A tie for the top breaks an example, as scored; a randomized model's is broken when
        # no draw of its averaged logits decides for the label, a randomized ensemble's when no
        # member does (attack_decide). A randomized ensemble's search also follows what is left,
        # its exact L (attack_level, ``graded``); any other model's level is 1 or 0, the kept
        # prediction's, written once at the end (no work in its steps).
        predicted = attack_decide(logits, labels)
        graded = getattr(logits, "draw_weights", None) is not None
        level = attack_level(logits, labels) if graded else None
        hit = level == 0 if graded else predicted != labels
        if precision != "fp32" and confirms:
            predicted, level, hit = _confirmed(model, inputs, labels, predicted, level, hit)
        scored = value.detach()
        # Masked writes (torch.where) rather than boolean indexing: the same values, and the
        # host never waits for the device to count the rows kept (on CUDA every such count
        # drains the device's queue).
        if mode.keep == "last":
            live.success, live.best, live.predictions = hit, inputs.detach(), predicted
            live.values = scored.to(live.values.dtype)
            if graded:
                live.levels = level
        else:
            # A lower level wins, and at the same level a higher objective (improves): for levels
            # 1 and 0, a hit beats a miss and then only a higher objective beats it, the same as
            # hit | higher where rows stop at their first hit (a kept hit never steps again), and
            # a search that runs on (a randomized model's) keeps a hit over later misses. A
            # randomized ensemble's search runs until no member is right, keeping its lowest L
            # rather than the first iterate whose averaged answer flips (where α = 0.85 of it
            # may still be right).
            if graded:
                keep = improves(level, scored, live.levels, live.values)
            else:  # the same for levels 1 and 0
                higher = scored > live.values
                keep = torch.where(live.predictions != labels, hit & higher, hit | higher)
            live.success = live.success | hit
            live.best = torch.where(keep.view((-1,) + (1,) * (current.dim() - 1)), inputs.detach(), live.best)
            live.values = torch.where(keep, scored, live.values).to(live.values.dtype)
            live.predictions = torch.where(keep, predicted, live.predictions)
            if graded:
                live.levels = torch.where(keep, level, live.levels)
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
        (grad,) = torch.autograd.grad(reduce_loss(value, reduction, batch_rows or rows_total), inputs)
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
                    return _levelled(kept, y, graded)
        current = update(ids, points, grad, scored)
    live.queries = torch.full_like(live.queries, steps + 1)  # the rows still live ran every pass
    if kept is None:  # no row stopped before the end
        return _levelled(live, y, graded)
    _write_rows(kept, ids, live, None)
    return _levelled(kept, y, graded)


def _confirmed(model: Classifier, inputs: torch.Tensor, labels: torch.Tensor, predicted: torch.Tensor,
               level: torch.Tensor | None, hit: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The rows a low-precision pass calls broken, decided again on float32 logits (no
    gradient): a row stops, is kept as broken and is handed on by ``auto`` as broken only where
    float32 agrees, as scoring decides. Rows that autocast calls unbroken are not looked at
    again (the search is weaker in low precision, and the results warn)."""
    rows = hit.nonzero().squeeze(1)
    if len(rows) == 0:
        return predicted, level, hit
    with torch.no_grad():
        logits = model.logits(inputs.detach()[rows], grad=False)
    predicted, hit = predicted.clone(), hit.clone()
    predicted[rows] = attack_decide(logits, labels[rows])
    if level is None:
        hit[rows] = predicted[rows] != labels[rows]
        return predicted, level, hit
    level = level.clone()
    level[rows] = attack_level(logits, labels[rows]).to(level.dtype)
    hit[rows] = level[rows] == 0
    return predicted, level, hit


def _levelled(search: Search, y: torch.Tensor, graded: bool) -> Search:
    """``search`` (every row, in order) with its levels: a graded search kept them; any other's
    is 1 where its kept prediction is the label, else 0 (attack_decide's verdict)."""
    if not graded:
        search.levels = (search.predictions == y).float()
    return search


def _rows_of(search: Search, index: torch.Tensor) -> Search:
    """The rows ``index`` of ``search`` (new tensors)."""
    return Search(search.best[index], search.predictions[index], search.values[index], search.success[index],
                  search.queries[index], search.levels[index])


def _write_rows(into: Search, rows: torch.Tensor, source: Search, index: torch.Tensor | None) -> None:
    """Write the rows ``index`` of ``source`` (all of them: ``None``) into the rows ``rows`` of ``into``."""
    for name in ("best", "predictions", "values", "success", "queries", "levels"):
        values = getattr(source, name)
        getattr(into, name)[rows] = values if index is None else values[index]
