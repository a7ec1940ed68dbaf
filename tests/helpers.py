"""Test helpers: attack outputs judged by the suite's one scoring path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
