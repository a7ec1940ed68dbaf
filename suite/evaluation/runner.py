"""Run tasks: validate everything, then clean pass, attacks, records, results.

Everything that can be wrong with the user's input (names, hyperparameters, model, dataset,
columns, labels, an output dir holding another run) is checked by :func:`prepare` before any
file is written. :func:`execute` then appends records as batches finish, skips what a previous
run already recorded, and writes ``results.json`` atomically at the end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from suite import __version__
from suite.attacks import Attack, build_attack
from suite.data.base import EvalSet, Example
from suite.data.load import load_eval_set
from suite.errors import ConfigError
from suite.evaluation.checks import CHECK_EXAMPLES, check_black_box, check_probabilities, check_reduction, check_zero_gradients
from suite.evaluation.metrics import accuracy, attack_metrics, broken_only_by, worst_case_robust_accuracy
from suite.evaluation.recipe import DEFAULT_ATTACKS, AttackConfig, TaskConfig
from suite.evaluation.records import RESULTS_FILE, RecordStore
from suite.models import Classifier, load_model
from suite.report.results import SCHEMA_VERSION, Results, now, provenance, write_results

logger = logging.getLogger(__name__)


@dataclass
class PreparedTask:
    """A task whose inputs are all validated and loaded; nothing written yet."""

    config: TaskConfig
    seed: int
    batch_size: int
    model: Classifier
    eval_set: EvalSet
    attacks: dict[str, Attack]
    store: RecordStore
    overwrite: bool


def prepare(task: TaskConfig, seed: int, batch_size: int, directory: Path, overwrite: bool = False) -> PreparedTask:
    """Build attacks, model and examples, and check the output dir, without writing anything."""
    # Attacks first: a bad name or hyperparameter fails before any model is loaded.
    attacks = {config.key: build_attack(config.name, config.params) for config in task.attacks}
    model = load_model(task.model)
    if not attacks:
        task = task.model_copy(update={"attacks": tuple(AttackConfig(name=n) for n in DEFAULT_ATTACKS[model.modality])})
        attacks = {config.key: build_attack(config.name, config.params) for config in task.attacks}
    for name, attack in attacks.items():
        if attack.modality != model.modality:
            raise ConfigError(f"attack {name!r} works on {attack.modality} but model {task.model.spec!r} takes {model.modality}")
    eval_set = load_eval_set(task.dataset, model, seed)
    if not eval_set.examples:
        raise ConfigError(f"dataset {task.dataset.spec!r} split {task.dataset.split!r} has no examples")
    store = RecordStore(directory, task.identity(seed))
    store.check(overwrite)
    return PreparedTask(task, seed, batch_size, model, eval_set, attacks, store, overwrite)


def execute(prepared: PreparedTask, command: str | None = None) -> Results:
    """Run (or resume) a prepared task and write its ``results.json``."""
    store = prepared.store
    store.open(prepared.overwrite)
    clean_seconds = _clean_pass(prepared)
    by_attack: dict[str, dict[str, dict[str, Any]]] = {}
    for name, attack in prepared.attacks.items():
        _attack_pass(prepared, name, attack)
        by_attack[name] = {ex.id: store.get("attack", ex.id, name) for ex in _correct(prepared)}
    results = _summarise(prepared, by_attack, clean_seconds, command)
    results["warnings"] = _checks(prepared, results["attacks"])
    return write_results(store.directory / RESULTS_FILE, results)


def _checks(prepared: PreparedTask, metrics: dict[str, dict[str, Any]]) -> list[str]:
    """Run the sanity checks of :mod:`suite.evaluation.checks`; log and return the warnings."""
    model, examples = prepared.model, prepared.eval_set.examples[:CHECK_EXAMPLES]
    inputs = [ex.input for ex in examples] if model.modality == "text" else torch.stack([ex.input for ex in examples])
    correct = _correct(prepared)
    warnings = [
        *check_probabilities(model.logits(inputs)),
        *check_zero_gradients(model, correct),
        *check_black_box(prepared.attacks, metrics),
        *check_reduction(model, prepared.attacks, correct, prepared.seed),
    ]
    for warning in warnings:
        logger.warning("%s: %s", prepared.config.name, warning)
    return warnings


def _batches(items: Sequence[Example], size: int) -> list[Sequence[Example]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def _clean_pass(prepared: PreparedTask) -> float:
    store, model = prepared.store, prepared.model
    pending = [ex for ex in prepared.eval_set.examples if not store.has("clean", ex.id)]
    start = time.perf_counter()
    for batch in tqdm(_batches(pending, prepared.batch_size), desc="clean", unit="batch", disable=None, leave=False):
        inputs = [ex.input for ex in batch] if model.modality == "text" else torch.stack([ex.input for ex in batch])
        predictions = model.logits(inputs).argmax(dim=1).tolist()
        store.append(
            {"kind": "clean", "id": ex.id, "label": ex.label, "prediction": int(p), "correct": int(p) == ex.label}
            for ex, p in zip(batch, predictions)
        )
    return time.perf_counter() - start


def _correct(prepared: PreparedTask) -> list[Example]:
    return [ex for ex in prepared.eval_set.examples if prepared.store.get("clean", ex.id)["correct"]]


def _attack_pass(prepared: PreparedTask, name: str, attack: Attack) -> None:
    store = prepared.store
    pending = [ex for ex in _correct(prepared) if not store.has("attack", ex.id, name)]
    with tqdm(total=len(pending), desc=name, unit="ex", disable=None, leave=False) as progress:
        for batch in _batches(pending, prepared.batch_size):
            outputs = attack.run(prepared.model, batch, prepared.seed)
            store.append(_attack_record(name, ex, out) for ex, out in zip(batch, outputs))
            progress.update(len(batch))


def _attack_record(name: str, example: Example, output) -> dict[str, Any]:
    record = {
        "kind": "attack",
        "attack": name,
        "id": example.id,
        "success": bool(output.success),
        "prediction": int(output.prediction),
        "perturbation": float(output.perturbation),
        "queries": int(output.queries),
        "seconds": float(output.seconds),
    }
    if isinstance(output.adversarial, str):
        record["adversarial"] = output.adversarial
    return record


def _summarise(prepared: PreparedTask, by_attack: dict[str, dict[str, dict[str, Any]]], clean_seconds: float, command: str | None) -> dict[str, Any]:
    clean = [prepared.store.get("clean", ex.id) for ex in prepared.eval_set.examples]
    info, eval_set, task = prepared.model.info, prepared.eval_set, prepared.config
    attacks = {
        name: {
            "threat_model": attack.threat_model,
            "params": attack.params(),
            "budget": attack.budget(len(prepared.model.labels)),
            **attack_metrics(clean, by_attack[name]),
        }
        for name, attack in prepared.attacks.items()
    }
    return {
        "schema_version": SCHEMA_VERSION,
        "suite_version": __version__,
        "created": now(),
        "task": task.name,
        "model": {"spec": info.spec, "name": info.name, "revision": info.revision, "temperature": info.temperature},
        "dataset": {
            "spec": eval_set.spec,
            "split": eval_set.split,
            "n": len(eval_set),
            "size": eval_set.size,
            "fingerprint": eval_set.fingerprint,
            "columns": eval_set.columns,
        },
        "seed": prepared.seed,
        "clean_accuracy": accuracy([r["prediction"] for r in clean], [r["label"] for r in clean]),
        "attacks": attacks,
        "worst_case_robust_accuracy": worst_case_robust_accuracy(clean, list(by_attack.values())),
        "broken_only_by": broken_only_by(clean, by_attack),
        "batch_size": prepared.batch_size,
        "clean_seconds": clean_seconds,
        "warnings": [],
        "config": task.model_dump(mode="json"),
        "config_hash": task.fingerprint(prepared.seed),
        "provenance": provenance(device=str(prepared.model.device), command=command),
    }
