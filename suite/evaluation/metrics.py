"""Metrics over per-example records.

Clean accuracy goes through the ``evaluate`` library (a metric defined here, so nothing is
fetched from the Hub). Robust accuracy counts an example as robust when it is classified
correctly and the attack did not succeed; the worst case over attacks counts it robust only
when no attack succeeded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import datasets
import evaluate


class Accuracy(evaluate.Metric):
    """Fraction of predictions equal to the references."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description="Fraction of predictions equal to the references, in [0, 1].",
            citation="",
            inputs_description="predictions, references: class indices",
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions: Sequence[int], references: Sequence[int]) -> dict[str, float]:
        if not references:
            return {"accuracy": 0.0}
        return {"accuracy": sum(int(p == r) for p, r in zip(predictions, references)) / len(references)}


def accuracy(predictions: Sequence[int], references: Sequence[int]) -> float:
    """Accuracy through ``evaluate`` (in memory: no cache files)."""
    if not references:
        return 0.0
    return float(Accuracy(keep_in_memory=True).compute(predictions=list(predictions), references=list(references))["accuracy"])


def attack_metrics(clean: Sequence[dict[str, Any]], attacked: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Robust accuracy, success rate, mean queries/perturbation and time for one attack.

    Args:
        clean: Clean records of every example, in evaluation order.
        attacked: Attack records by example id (clean-correct examples only).
    """
    n = len(clean)
    targets = [record for record in clean if record["correct"]]
    results = [attacked[record["id"]] for record in targets]
    successes = sum(result["success"] for result in results)
    return {
        "robust_accuracy": (len(targets) - successes) / n if n else 0.0,
        "success_rate": successes / len(results) if results else 0.0,
        "n_attacked": len(results),
        "mean_queries": sum(result["queries"] for result in results) / len(results) if results else 0.0,
        "mean_perturbation": (
            sum(result["perturbation"] for result in results if result["success"]) / successes if successes else 0.0
        ),
        "seconds": sum(result["seconds"] for result in results),
    }


def worst_case_robust_accuracy(clean: Sequence[dict[str, Any]], attacked: Sequence[dict[str, dict[str, Any]]]) -> float:
    """Per example: robust only if correct and no attack succeeded; averaged over examples."""
    if not clean:
        return 0.0
    robust = sum(
        record["correct"] and not any(by_id[record["id"]]["success"] for by_id in attacked) for record in clean
    )
    return robust / len(clean)


def broken_only_by(clean: Sequence[dict[str, Any]], attacked: dict[str, dict[str, dict[str, Any]]]) -> dict[str, int]:
    """Per attack, the examples it broke that no other attack broke (what the worst case owes it)."""
    counts = dict.fromkeys(attacked, 0)
    for record in clean:
        if not record["correct"]:
            continue
        breakers = [name for name, by_id in attacked.items() if by_id[record["id"]]["success"]]
        if len(breakers) == 1:
            counts[breakers[0]] += 1
    return counts
