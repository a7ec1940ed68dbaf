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
    """The result of optimising R rows: the kept iterate of each row and what it scored."""

    best: torch.Tensor
    predictions: torch.Tensor
    values: torch.Tensor
    success: torch.Tensor
    queries: torch.Tensor


@dataclass
class Found:
    """Per example: the kept iterate, the prediction and objective value it scored in the search,
    and the queries spent."""

    adversarial: torch.Tensor
    predictions: torch.Tensor
    values: torch.Tensor
    queries: torch.Tensor


def on_examples(mode: SearchMode, todo: torch.Tensor) -> SearchMode:
    """``mode`` for a search over the examples ``todo`` of the batch: its objective still
    receives indices into the whole batch."""
    if mode.objective is None:
        return mode
    inner = mode.objective
    return SearchMode(mode.stop_on_success, mode.keep, lambda logits, rows: inner(logits, todo[rows]))


def select_rows(search: Search, examples: int, by_value: bool = False,
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per example, keep its first successful row, else the row with the highest objective
    (``by_value``: the row with the highest objective, as BETA's j* = argmax_j M_j).

    Rows are laid out example-major (example i owns rows i·K … i·K+K−1).
    """
    per = len(search.values) // examples
    score = search.values if by_value else torch.where(search.success, torch.inf, search.values)
    score = score.view(examples, per)
    chosen = score.argmax(dim=1) + torch.arange(examples, device=score.device) * per
    queries = search.queries.view(examples, per).sum(dim=1)
    return search.best[chosen], search.predictions[chosen], search.values[chosen], search.success[chosen], queries


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
