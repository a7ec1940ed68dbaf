"""The summary of a finished task: typed :class:`~suite.report.results.Results` from its records.

Point-wise attacks give one entry each (per adversary temperature) and enter the per-example
worst case, overall and within their threat (:attr:`Threat.label`). Distributional attacks
compute their own metric over all examples (:meth:`Attack.aggregate`, after the gather) and are
reported in ``distributional`` only: a run of them alone has no worst case (``None``) and no
threat models. The clean, point-wise and worst-case accuracies are also
broken down by class (:mod:`suite.evaluation.per_class`).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from suite.version import __version__
from suite.calibration import calibration_metrics
from suite.evaluation.adversary import temperature_of
from suite.report.illusion import illusion_findings
from suite.evaluation.metrics import (
    accuracy,
    attack_metrics,
    broken_only_by,
    robust_by_example,
    worst_case_interval,
    worst_case_robust_accuracy,
)
from suite.intervals import accuracy_interval
from suite.evaluation.per_class import class_names, per_class
from suite.evaluation.prepare import PreparedTask
from suite.evaluation.scoring import CleanScores
from suite.report.results import (
    SCHEMA_VERSION,
    AttackEntry,
    DatasetEntry,
    DistributionalEntry,
    ModelEntry,
    Provenance,
    RadiusEntry,
    Results,
    ThreatModelEntry,
    now,
    provenance,
)

logger = logging.getLogger(__name__)


def summarise(prepared: PreparedTask, clean: CleanScores, adversary: dict[str, Any], clean_seconds: float,
              compute_seconds: float) -> Results:
    """The results of ``prepared`` from its records (all processes' records gathered); the
    sanity-check ``warnings`` are the runner's to add."""
    store, eval_set, task = prepared.store, prepared.eval_set, prepared.config
    clean_records = [store.get("clean", ex.id) for ex in eval_set.examples]
    attacked = prepared.attacked()
    by_run = {run.key: {ex.id: store.get("attack", ex.id, run.key) for ex in attacked} for run in prepared.runs}
    pointwise = [run for run in prepared.runs if run.attack.metric == "pointwise"]
    num_classes = prepared.model.num_classes
    info = prepared.model.info
    attacks = {}
    for run in pointwise:
        records = by_run[run.key]
        confidences = [record["confidence"] for record in records.values() if "confidence" in record]
        attacks[run.key] = AttackEntry(
            threat=run.attack.threat, access=run.attack.access, params=run.attack.params(),
            budget=run.attack.budget(num_classes),
            **attack_metrics(clean_records, records, getattr(run.attack, "perturbation_over", "broken")),
            mean_confidence=sum(confidences) / len(confidences) if confidences else None,
            adversary=run.kind, base_attack=run.base, adversary_temperature=temperature_of(adversary, run),
            attack=run.attack.name,
            same_search_as=next((record.get("same_search_as") for record in records.values() if record), None),
        )
    distributional = {
        run.key: _distributional_entry(run, clean_records, [by_run[run.key][ex.id] for ex in attacked], num_classes)
        for run in prepared.runs if run.attack.metric == "distributional"
    }
    threat_models = _threat_models(prepared, clean_records, by_run)
    # Exactly one: over none (distributional attacks only) the minimum is undefined (None, never
    # the clean accuracy); over several it would mix radii.
    one_threat = len(threat_models) == 1
    pointwise_records = [by_run[run.key] for run in pointwise]
    labels = [ex.label for ex in eval_set.examples]
    calibration = calibration_metrics(clean.logits, labels)
    after = calibration_after(clean.logits, labels, adversary)
    per_example = {run.key: robust_by_example(clean_records, by_run[run.key]) for run in pointwise}
    illusion = illusion_findings(attacks, prepared.adversary.threshold, served_temperature=info.temperature,
                                 calibration=calibration, adversary=adversary, per_example=per_example)
    for finding in illusion.findings:
        logger.warning("%s: illusion of robustness: %s", prepared.name, finding["message"])
    return Results(
        schema_version=SCHEMA_VERSION,
        suite_version=__version__,
        created=now(),
        task=task.name,
        model=ModelEntry(spec=info.spec, name=info.name, revision=info.revision, temperature=info.temperature,
                         weights=prepared.model.weights_hash(), members=info.extra.get("members"),
                         randomized=info.extra.get("randomized"),
                         threat_model=info.threat_model),
        dataset=DatasetEntry(spec=eval_set.spec, split=eval_set.split, n=len(eval_set), size=eval_set.size,
                             fingerprint=eval_set.fingerprint, columns=dict(eval_set.columns)),
        seed=prepared.seed,
        clean_accuracy=accuracy([record["correct"] for record in clean_records]),
        clean_accuracy_ci=list(accuracy_interval([record["correct"] for record in clean_records])),
        attacks=attacks,
        worst_case_robust_accuracy=worst_case_robust_accuracy(clean_records, pointwise_records) if one_threat else None,
        worst_case_robust_accuracy_ci=worst_case_interval(clean_records, pointwise_records) if one_threat else None,
        threat_models=threat_models,
        per_class=per_class(clean_records, labels, {run.key: by_run[run.key] for run in pointwise},
                            {label: group.attacks for label, group in threat_models.items()},
                            class_names(prepared.model.labels, eval_set.label_names)),
        radius=None if prepared.radius is None else RadiusEntry(source=prepared.radius.source,
                                                                threats=list(prepared.radius.threats),
                                                                detail=prepared.radius.detail),
        distributional=distributional,
        certificates={},
        broken_only_by=broken_only_by(clean_records, {run.key: by_run[run.key] for run in pointwise}),
        batch_size=prepared.batch_size,
        batch_sizes=dict(prepared.batch_sizes),
        clean_seconds=clean_seconds,
        compute_seconds=compute_seconds,
        warnings=[],
        calibration=calibration,
        calibration_after=after,
        adversary=adversary,
        illusion=illusion,
        config=task.model_dump(mode="json"),
        config_hash=task.fingerprint(prepared.seed),
        provenance=Provenance(**provenance(device=str(prepared.model.device), num_processes=store.processes.world,
                                           command=prepared.options.command_line)),
    )


def calibration_after(logits, labels: list[int], adversary: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Calibration metrics of the served logits as each fitted adversary rescales them (an
    ``opt`` search per attack gives ``opt:<attack>`` unless one search serves every attack)."""
    if not adversary:
        return {}
    after = {}
    if adversary.get("cal"):
        after["cal"] = calibration_metrics(logits.double() / adversary["cal"]["temperature"], labels)
    searches = {entry["temperature"]: key for key, entry in (adversary.get("opt") or {}).items()}
    for temperature, key in searches.items():
        name = "opt" if len(searches) == 1 else f"opt:{key}"
        after[name] = calibration_metrics(logits.double() / temperature, labels)
    if adversary.get("platt"):
        scale = torch.tensor(adversary["platt"]["scale"], dtype=torch.float64)
        bias = torch.tensor(adversary["platt"]["bias"], dtype=torch.float64)
        after["platt"] = calibration_metrics(logits.double() * scale + bias, labels)
    return after


def _threat_models(prepared: PreparedTask, clean: list[dict[str, Any]],
                   by_run: dict[str, dict[str, dict[str, Any]]]) -> dict[str, ThreatModelEntry]:
    """Point-wise attacks grouped by threat, with the worst case within each group (what a
    leaderboard entry reports). A transfer attack belongs to its inner attack's threat. Only
    point-wise attacks make a group, so a run of distributional attacks only has none."""
    groups: dict[str, list[str]] = {}
    threats = {}
    for run in prepared.runs:
        if run.attack.metric != "pointwise":
            continue
        threat = run.attack.threat
        groups.setdefault(threat.label, []).append(run.key)
        threats[threat.label] = threat
    return {
        label: ThreatModelEntry(threat=threats[label], attacks=keys,
                                worst_case_robust_accuracy=worst_case_robust_accuracy(clean, [by_run[k] for k in keys]),
                                worst_case_robust_accuracy_ci=worst_case_interval(clean, [by_run[k] for k in keys]))
        for label, keys in groups.items()
    }


def _distributional_entry(run, clean: list[dict[str, Any]], records: list[dict[str, Any]],
                          num_classes: int) -> DistributionalEntry:
    """A distributional attack's entry: its aggregate over every example (it may raise)."""
    details = dict(run.attack.aggregate(clean, records))
    return DistributionalEntry(
        threat=run.attack.threat, access=run.attack.access, attack=run.attack.name, params=run.attack.params(),
        budget=run.attack.budget(num_classes), accuracy=float(details.pop("accuracy")), n_attacked=len(records),
        mean_queries=sum(record["queries"] for record in records) / len(records) if records else 0.0,
        seconds=sum(record["seconds"] for record in records), details=details,
    )

