"""What the shared search of the image attacks (:mod:`.driver`) runs in and gives back: its mode
(evaluation or training), the rows it optimised, and per example what it kept."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

RowObjective = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]


@dataclass(frozen=True)
class SearchMode:
    """How the shared search runs.

    Attributes:
        stop_on_success: Stop an example at its first misclassified iterate (evaluation).
            Training's inner maximisation runs every step instead, as Madry et al. and BETA
            (Alg. 1, 2) do.
        keep: ``best``: the first misclassified iterate, else the one with the highest
            objective (evaluation); ``last``: the final iterate (training), and among the
            rows of an example (targets) the one with the highest final objective (BETA's
            j* = argmax_j M_j, Alg. 1 line 8).
        objective: Replaces the attack's named loss: ``objective(logits, examples)`` gives
            per-row values to maximise, with ``examples`` the index of each row's example in
            the batch handed to the attack (TRADES' KL to that example's clean prediction).
    """

    stop_on_success: bool = True
    keep: Literal["best", "last"] = "best"
    objective: RowObjective | None = None


#: The default: what an evaluation runs.
EVALUATION = SearchMode()
#: Adversarial training's inner maximisation: every step, the last iterate.
TRAINING = SearchMode(stop_on_success=False, keep="last")


@dataclass
class Search:
    """The result of optimising R rows: the kept iterate of each row and what it scored.

    ``levels`` is how much of the model still decided for the label there
    (:func:`~suite.models.base.attack_level`: 1 or 0, a randomized ensemble's L between), and
    ``success`` whether some iterate reached 0."""

    best: torch.Tensor
    predictions: torch.Tensor
    values: torch.Tensor
    success: torch.Tensor
    queries: torch.Tensor
    levels: torch.Tensor


@dataclass
class Found:
    """Per example: the kept iterate, the prediction, objective value and level
    (:func:`~suite.models.base.attack_level`) it scored in the search, and the queries spent.
    An example is broken where its level is 0."""

    adversarial: torch.Tensor
    predictions: torch.Tensor
    values: torch.Tensor
    queries: torch.Tensor
    levels: torch.Tensor

    @staticmethod
    def unbroken(x: torch.Tensor, y: torch.Tensor, queries: int = 0) -> "Found":
        """Every example at its origin, unscored (level 1), with ``queries`` spent."""
        return Found(x.clone(), y.clone(), torch.full((len(x),), float("-inf"), device=x.device),
                     torch.full((len(x),), queries, dtype=torch.long, device=x.device),
                     torch.ones(len(x), device=x.device))

    def keep(self, todo: torch.Tensor, result: "Found", better: torch.Tensor) -> None:
        """Replace the examples ``todo[better]`` with the rows ``better`` of ``result``."""
        kept = todo[better]
        self.adversarial[kept] = result.adversarial[better]
        self.predictions[kept] = result.predictions[better]
        self.values[kept] = result.values[better]
        self.levels[kept] = result.levels[better]


def improves(levels: torch.Tensor, values: torch.Tensor, kept_levels: torch.Tensor,
             kept_values: torch.Tensor) -> torch.Tensor:
    """Whether an iterate beats the one kept: a lower level, or the same level and a higher
    objective. With levels 1 and 0 (every deterministic model) this is "a hit beats a miss,
    then only a higher objective"; a randomized ensemble's L is compared first, since the
    objective (of its averaged probabilities) need not fall with it."""
    return (levels < kept_levels) | ((levels == kept_levels) & (values > kept_values))


def on_examples(mode: SearchMode, todo: torch.Tensor) -> SearchMode:
    """``mode`` for a search over the examples ``todo`` of the batch: its objective still
    receives indices into the whole batch."""
    if mode.objective is None:
        return mode
    inner = mode.objective
    return SearchMode(mode.stop_on_success, mode.keep, lambda logits, rows: inner(logits, todo[rows]))


def select_rows(search: Search, examples: int, by_value: bool = False) -> Found:
    """Per example, keep its first successful row, else, among its rows of the lowest level, the
    one with the highest objective (``by_value``: the row with the highest objective, as BETA's
    j* = argmax_j M_j).

    Rows are laid out example-major (example i owns rows i·K … i·K+K−1).
    """
    per = len(search.values) // examples
    if by_value:
        score = search.values
    else:
        lowest = search.levels.view(examples, per).amin(dim=1).repeat_interleave(per)
        score = torch.where(search.success, torch.inf, search.values)
        score = torch.where(search.levels == lowest, score, float("-inf"))
    score = score.view(examples, per)
    chosen = score.argmax(dim=1) + torch.arange(examples, device=score.device) * per
    if not by_value and per > 1:  # every row of the lowest level scored -inf: the first of them
        chosen = torch.where(torch.isneginf(score.amax(dim=1)),
                             search.levels.view(examples, per).argmin(dim=1)
                             + torch.arange(examples, device=score.device) * per, chosen)
    queries = search.queries.view(examples, per).sum(dim=1)
    return Found(search.best[chosen], search.predictions[chosen], search.values[chosen], queries,
                 search.levels[chosen])


class HostCopy:
    """A small device tensor's value on the host, read without draining the device's queue.

    On CUDA the copy (into pinned memory) and an event go into the stream at the point of the
    call; :meth:`get` waits for that event only, so the work queued after it (a backward pass)
    keeps the device busy while the host reads the value and queues the next work. Elsewhere
    it is a plain copy.
    """

    def __init__(self, tensor: torch.Tensor):
        self._event = None
        if tensor.device.type == "cuda":
            self._value = tensor.to("cpu", non_blocking=True)  # pinned: the copy is asynchronous
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(tensor.device))  # the stream the copy is on
        else:
            self._value = tensor.to("cpu", copy=True)

    def get(self) -> torch.Tensor:
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        return self._value
