"""Metrics over per-example records, all of them means of per-example correctness in [0, 1].

Clean records hold ``correct``: 1 or 0 for a deterministic model, the exact expected accuracy
for a randomized one. Attack records hold ``robust``: the served model's correctness on the
adversarial input, capped by the clean correctness (the unperturbed input is always in the
threat model). Examples with clean correctness 0 are not attacked and count 0.

- robust accuracy: Σ robust / n;
- success rate: the share of clean correctness the attack removed, Σ (correct − robust) / Σ correct
  over the attacked examples (the fraction of attacked examples broken, for a deterministic model);
- worst case: per example, the minimum over point-wise attacks; averaged over all examples.
  ``None`` over no attacks: a minimum over an empty set is undefined, and the clean accuracy
  it would otherwise fall back to is no robust accuracy.

Each comes with its 95% confidence interval (:mod:`suite.intervals`).

Clean accuracy is a plain mean too. It went through an ``evaluate`` library metric (the same
sum over the same count) until that import, which pulls in ``datasets`` and transformers'
pipelines, was measured at about 0.6 s of every run: more than a text attack's scoring of its
records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from suite.intervals import accuracy_interval

Records = Mapping[str, Mapping[str, Any]]


def accuracy(correctness: Sequence[float]) -> float:
    """Mean correctness (0 over no examples)."""
    if not correctness:
        return 0.0
    return sum(float(value) for value in correctness) / len(correctness)


def attack_metrics(clean: Sequence[Mapping[str, Any]], attacked: Records,
                   perturbation_over: str = "broken") -> dict[str, Any]:
    """Robust accuracy, success rate, mean queries/perturbation and time for one attack.

    Args:
        clean: Clean records of every example, in evaluation order.
        attacked: Attack records by example id (the examples with correctness > 0).
        perturbation_over: ``broken``: the mean perturbation over what the attack broke (weighted
            by the correctness each example lost); ``attacked``: over every attacked example
            (input reduction, which never breaks one by design).
    """
    n = len(clean)
    targets = [record for record in clean if record["correct"] > 0]
    results = [attacked[record["id"]] for record in targets]
    removed = [record["correct"] - result["robust"] for record, result in zip(targets, results)]
    mass, total_removed = sum(record["correct"] for record in targets), sum(removed)
    per_example = list(robust_by_example(clean, attacked).values())
    return {
        "robust_accuracy": sum(result["robust"] for result in results) / n if n else 0.0,
        "robust_accuracy_ci": list(accuracy_interval(per_example)),
        "success_rate": total_removed / mass if mass else 0.0,
        "n_attacked": len(results),
        "mean_queries": sum(result["queries"] for result in results) / len(results) if results else 0.0,
        # Weighted by the correctness each example lost: over the broken examples when deterministic.
        "mean_perturbation": (
            sum(result["perturbation"] for result in results) / len(results) if results else 0.0
        ) if perturbation_over == "attacked" else (
            sum(weight * result["perturbation"] for weight, result in zip(removed, results)) / total_removed
            if total_removed else 0.0
        ),
        "seconds": sum(result["seconds"] for result in results),
    }


def robust_by_example(clean: Sequence[Mapping[str, Any]], attacked: Records) -> dict[str, float]:
    """Each example's robust correctness under one attack, by id in evaluation order (0 for an
    example not attacked: its clean correctness was 0)."""
    return {record["id"]: attacked[record["id"]]["robust"] if record["correct"] > 0 else 0.0 for record in clean}


def _worst(record: Mapping[str, Any], attacked: Sequence[Records]) -> float:
    """One example's correctness under the worst of ``attacked`` (its clean correctness if none)."""
    if record["correct"] <= 0:
        return 0.0
    return min([record["correct"], *(by_id[record["id"]]["robust"] for by_id in attacked)])


def worst_case_robust_accuracy(clean: Sequence[Mapping[str, Any]], attacked: Sequence[Records]) -> float | None:
    """Per example, the minimum correctness over attacks; averaged over every example.

    ``None`` when ``attacked`` is empty (a run of distributional attacks only): there is no
    point-wise attack to take a minimum over.
    """
    if not attacked:
        return None
    if not clean:
        return 0.0
    return sum(_worst(record, attacked) for record in clean) / len(clean)


def worst_case_interval(clean: Sequence[Mapping[str, Any]], attacked: Sequence[Records]) -> list[float] | None:
    """95% interval of :func:`worst_case_robust_accuracy` (:func:`suite.intervals.accuracy_interval`);
    ``None`` when ``attacked`` is empty, as the accuracy."""
    if not attacked:
        return None
    return list(accuracy_interval([_worst(record, attacked) for record in clean]))


def broken_only_by(clean: Sequence[Mapping[str, Any]], attacked: Mapping[str, Records]) -> dict[str, float]:
    """Per attack, the correctness only it removed: how much the worst case (summed over examples)
    would rise without it. For a deterministic model, the number of examples it alone broke."""
    owed = dict.fromkeys(attacked, 0.0)
    for record in clean:
        if record["correct"] <= 0:
            continue
        worst = _worst(record, list(attacked.values()))
        for name in attacked:
            others = [by_id for other, by_id in attacked.items() if other != name]
            owed[name] += _worst(record, others) - worst
    return owed
