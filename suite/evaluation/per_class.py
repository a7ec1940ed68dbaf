"""Per-class accuracies: the run's clean, robust and worst-case accuracies on each class's examples.

The same metrics, with the same semantics, as the top level of ``results.json``
(:mod:`suite.evaluation.metrics`): means of per-example correctness in [0, 1], the worst case
per example within one threat, each with its 95% interval (:mod:`suite.intervals`), over the
examples whose label is the class. Classes without examples are left out, so a 1000-class
ImageNet run on 500 examples lists at most 500 classes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from suite.evaluation.metrics import Records, worst_case_interval, worst_case_robust_accuracy
from suite.intervals import accuracy_interval
from suite.report.results import ClassAttackEntry, ClassThreatEntry, PerClassEntry


def class_names(model_labels: Sequence[str], dataset_names: Sequence[str] | None) -> list[str]:
    """The name of each class index: the model's label, or the dataset's class name when the data
    were matched to the model's classes by position.

    Loading maps a dataset's classes to the model's by name or by index, and by position only
    when none of the dataset's names is either (Hub models labelled ``LABEL_0``, ``LABEL_1``...:
    :func:`suite.data.load._class_label_map`); then the dataset's ``neg``/``pos`` say more.
    """
    labels = [str(label) for label in model_labels]
    if not dataset_names or len(dataset_names) != len(labels):
        return labels
    known = {label.lower() for label in labels}
    if any(name.lower() in known or (name.isascii() and name.isdigit()) for name in dataset_names):
        return labels
    return [str(name) for name in dataset_names]


def per_class(clean: Sequence[Mapping[str, Any]], labels: Sequence[int], attacked: Mapping[str, Records],
              threat_models: Mapping[str, Sequence[str]], names: Sequence[str]) -> dict[str, PerClassEntry]:
    """The accuracies of every class that has examples, keyed by class name, in class order.

    Args:
        clean: Clean records of every example, in evaluation order.
        labels: Each example's class index, in the same order.
        attacked: Per point-wise attack key, its records by example id.
        threat_models: Per threat label, the keys of its point-wise attacks.
        names: Class names by index (:func:`class_names`); a name two classes share is keyed
            with its index, ``crane (134)``.
    """
    members: dict[int, list[Mapping[str, Any]]] = {}
    for record, label in zip(clean, labels):
        members.setdefault(label, []).append(record)
    shared = {name for name, count in Counter(names).items() if count > 1}
    return {
        (f"{names[index]} ({index})" if names[index] in shared else names[index]):
            _entry(index, members[index], attacked, threat_models)
        for index in sorted(members)
    }


def _entry(index: int, clean: Sequence[Mapping[str, Any]], attacked: Mapping[str, Records],
           threat_models: Mapping[str, Sequence[str]]) -> PerClassEntry:
    """One class's entry from the clean records of its examples."""
    correct = [record["correct"] for record in clean]
    attacks = {}
    for key, records in attacked.items():
        # As attack_metrics: examples not attacked (clean correctness 0) count 0.
        robust = [records[record["id"]]["robust"] if record["correct"] > 0 else 0.0 for record in clean]
        attacks[key] = ClassAttackEntry(robust_accuracy=sum(robust) / len(robust),
                                        robust_accuracy_ci=list(accuracy_interval(robust)))
    threats = {
        label: ClassThreatEntry(
            worst_case_robust_accuracy=worst_case_robust_accuracy(clean, [attacked[key] for key in keys]),
            worst_case_robust_accuracy_ci=worst_case_interval(clean, [attacked[key] for key in keys]),
        )
        for label, keys in threat_models.items()
    }
    # The plain mean: what metrics.accuracy computes, without an `evaluate` metric per class.
    return PerClassEntry(index=index, n=len(clean), clean_accuracy=sum(correct) / len(correct),
                         clean_accuracy_ci=list(accuracy_interval(correct)), attacks=attacks, threat_models=threats)
