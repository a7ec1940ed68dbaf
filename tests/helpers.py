"""Test helpers: attack outputs judged by the suite's one scoring path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from suite.attacks.image.search import HostCopy
from suite.evaluation.scoring import score_outputs


@dataclass(frozen=True)
class Judged:
    """An attack output with the served model's verdict (what a record holds)."""

    adversarial: Any
    perturbation: float
    queries: int
    prediction: int
    robust: float

    @property
    def success(self) -> bool:
        return self.robust == 0.0


def judge(model, examples, outputs) -> list[Judged]:
    """Score ``outputs`` (of correctly classified ``examples``) on ``model``, as the runner does."""
    scores = score_outputs(model, examples, outputs)
    return [Judged(out.adversarial, out.perturbation, out.queries, score["prediction"], score["robust"])
            for out, score in zip(outputs, scores)]


def run_judged(attack, model, examples, seed):
    """``attack.run`` followed by :func:`judge`."""
    return judge(model, examples, attack.run(model, examples, seed))


def without_keys(value, keys):
    """``value`` (JSON-like) with every mapping's ``keys`` dropped, at any depth: what two
    identical runs must agree on once timings (and the like) are left out."""
    if isinstance(value, dict):
        return {key: without_keys(item, keys) for key, item in value.items() if key not in keys}
    if isinstance(value, list):
        return [without_keys(item, keys) for item in value]
    return value


class HostValue(torch.Tensor):
    """A value the host holds from a :class:`HostCopy`; what is computed from it stays one."""


class CountedReads(torch.overrides.TorchFunctionMode):
    """Counts the host's reads of values (a count, a list, a truth value), apart on values it
    holds from a :class:`HostCopy` and on the others, which on CUDA drain the device's queue."""

    VALUE_READS = {"nonzero", "tolist", "item", "__bool__", "__int__", "__float__", "__index__", "numpy"}

    def __init__(self):
        super().__init__()
        self.host = self.device = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        mask_index = name in ("__getitem__", "__setitem__") and any(
            isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in args[1:2])
        if name in self.VALUE_READS or mask_index:
            if tensors and all(isinstance(t, HostValue) for t in tensors):
                self.host += 1
            else:
                self.device += 1
        result = func(*args, **(kwargs or {}))
        if name == "to" and isinstance(result, HostValue):  # back to the device: a device value
            result = result.as_subclass(torch.Tensor)
        return result


class MarkedHostCopy(HostCopy):
    """:class:`HostCopy` whose values are :class:`HostValue` (monkeypatch it into the module
    that reads them, under :class:`CountedReads`)."""

    def get(self):
        return super().get().as_subclass(HostValue)
