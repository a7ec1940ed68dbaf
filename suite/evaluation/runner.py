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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from suite import __version__
from suite.attacks import Attack, build_attack
from suite.data.base import EvalSet, Example
from suite.calibration import calibration_metrics, fit_nll_temperature, optimise_temperature
from suite.data.load import load_eval_set
from suite.errors import ConfigError, ResourceMissingError
from suite.evaluation import distributed
from suite.evaluation.checks import CHECK_EXAMPLES, check_black_box, check_probabilities, check_reduction, check_zero_gradients
from suite.evaluation.metrics import accuracy, attack_metrics, broken_only_by, worst_case_robust_accuracy
from suite.evaluation.illusion import illusion_findings
from suite.evaluation.recipe import (
    DEFAULT_ATTACKS,
    DEFAULT_TEXT_ADVERSARY,
    NO_ADVERSARY,
    AdversaryConfig,
    AttackConfig,
    TaskConfig,
)
from suite.evaluation.records import RESULTS_FILE, RecordStore
from suite.models import Classifier, load_model
from suite.models.temperature import TemperatureScaled
from suite.report.results import SCHEMA_VERSION, Results, now, provenance, write_results

logger = logging.getLogger(__name__)
#: Rows per forward pass of the calibration passes (fixed, so results never depend on the
#: task's batch size).
SCORE_CHUNK = 64


@dataclass(frozen=True)
class AttackRun:
    """One attack under one adversary: what a results entry and its records are keyed by."""

    key: str
    base: str
    kind: str
    attack: Attack


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
    adversary: AdversaryConfig = NO_ADVERSARY
    #: Labelled examples the adversary temperatures are fitted on (``None``: no cal/opt).
    fit_set: EvalSet | None = None
    opt_attack: tuple[str, Attack] | None = None
    notes: list[str] = field(default_factory=list)
    #: Write samples.md (and the adversarial images it points to).
    log_samples: bool = False

    @property
    def runs(self) -> list[AttackRun]:
        return [
            AttackRun(AdversaryConfig.key(key, kind), key, kind, attack)
            for key, attack in self.attacks.items()
            for kind in self.adversary.kinds
            if kind == "none" or attack.adversary_temperature
        ]


def prepare(task: TaskConfig, seed: int, batch_size: int, directory: Path, overwrite: bool = False,
            log_samples: bool = False) -> PreparedTask:
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
    adversary = task.adversary or (DEFAULT_TEXT_ADVERSARY if model.modality == "text" else NO_ADVERSARY)
    if model.modality != "text" and adversary.kinds != ("none",):
        raise ConfigError("adversary temperatures (cal, opt) apply to text attacks; image attacks here have "
                          "temperature-free losses (margin, DLR): use beta or apgd_t")
    notes = _check_resources(task, attacks)
    opt_attack = None
    if "opt" in adversary.kinds and adversary.opt_attack is not None:
        opt_attack = (adversary.opt_attack.key, build_attack(adversary.opt_attack.name, adversary.opt_attack.params))
        _check_resources(task.model_copy(update={"attacks": (adversary.opt_attack,)}), dict([opt_attack]))
    eval_set = load_eval_set(task.dataset, model, seed)
    if not eval_set.examples:
        raise ConfigError(f"dataset {task.dataset.spec!r} split {task.dataset.split!r} has no examples")
    fit_set = None
    if {"cal", "opt"} & set(adversary.kinds):
        fit_set = eval_set if adversary.split is None else load_eval_set(
            task.dataset.model_copy(update={"split": adversary.split, "n": adversary.n}), model, seed
        )
    store = RecordStore(directory, task.identity(seed), distributed.current())
    store.check(overwrite)
    return PreparedTask(task, seed, batch_size, model, eval_set, attacks, store, overwrite, adversary, fit_set,
                        opt_attack, notes, log_samples)


def _check_resources(task: TaskConfig, attacks: dict[str, Attack]) -> list[str]:
    """Fail on a missing resource, or drop an ``optional`` attack with a note (returned)."""
    notes = []
    for config in task.attacks:
        check = getattr(attacks.get(config.key), "check_resources", None)
        if check is None:
            continue
        try:
            check()
        except ResourceMissingError as error:
            if not config.optional:
                raise
            notes.append(f"skipped attack {config.key!r}: {error}")
            logger.warning("%s: %s", task.name, notes[-1])
            del attacks[config.key]
    return notes


def execute(prepared: PreparedTask, command: str | None = None) -> Results | None:
    """Run (or resume) a prepared task and write its ``results.json``.

    Under a multi-process launch every process attacks its share of the examples (see
    :mod:`suite.evaluation.distributed`); the main process then writes the results and
    returns them, the others return ``None``.
    """
    store, processes = prepared.store, prepared.store.processes
    start = time.perf_counter()
    store.open(prepared.overwrite)
    clean_seconds = processes.sum(_clean_pass(prepared))
    # Every process computes the same logits in the same chunks: the fitted temperatures and
    # everything derived from them are bit-identical in every process and to a one-process run.
    clean_logits = _served_logits(prepared.model, prepared.eval_set.examples)
    adversary = _adversary_temperatures(prepared, clean_logits)
    for run in prepared.runs:
        _attack_pass(prepared, run.key, run.attack, _temperature_of(adversary, run))
    compute_seconds = processes.sum(time.perf_counter() - start)
    if not processes.is_main:
        return None
    by_attack = {run.key: {ex.id: store.get("attack", ex.id, run.key) for ex in _correct(prepared)}
                 for run in prepared.runs}
    results = _summarise(prepared, by_attack, clean_seconds, command)
    results["compute_seconds"] = compute_seconds
    for run in prepared.runs:
        results["attacks"][run.key].update(
            adversary=run.kind, base_attack=run.base, adversary_temperature=_temperature_of(adversary, run)
        )
    results["adversary"] = adversary
    results["calibration"] = calibration_metrics(clean_logits, [ex.label for ex in prepared.eval_set.examples])
    results["illusion"] = illusion_findings(results["attacks"], prepared.adversary.threshold)
    base_metrics = {run.base: results["attacks"][run.key] for run in prepared.runs if run.kind == "none"}
    results["warnings"] = [*prepared.notes, *_checks(prepared, base_metrics)]
    for finding in results["illusion"]["findings"]:
        logger.warning("%s: illusion of robustness: %s", prepared.config.name, finding["message"])
    from suite.report.calibration_plots import write_plots

    results["plots"] = write_plots(results, store.directory)
    store.merge(_record_order(prepared, adversary))
    if prepared.log_samples:
        from suite.report.samples import write_samples

        info = prepared.model.info
        title = f"{prepared.config.name}: {info.name} on {prepared.eval_set.spec}:{prepared.eval_set.split}"
        clean = {ex.id: store.get("clean", ex.id) for ex in prepared.eval_set.examples}
        write_samples(store.directory, title, prepared.model.labels, prepared.eval_set.examples, clean, by_attack)
    return write_results(store.directory / RESULTS_FILE, results)


def _record_order(prepared: PreparedTask, adversary: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Record keys in the order a one-process run appends them."""
    examples, correct = prepared.eval_set.examples, _correct(prepared)
    return [
        *(("clean", "", ex.id) for ex in examples),
        *(("adversary", search["attack"], "opt") for search in adversary["opt"].values()),
        *(("attack", run.key, ex.id) for run in prepared.runs for ex in correct),
    ]


def _served_logits(model: Classifier, examples: Sequence[Example]) -> torch.Tensor:
    """Served logits in fixed-size chunks (so they never depend on the task's batch size)."""
    chunks = []
    for batch in _batches(examples, SCORE_CHUNK):
        inputs = [ex.input for ex in batch] if model.modality == "text" else torch.stack([ex.input for ex in batch])
        chunks.append(model.logits(inputs).cpu())
    return torch.cat(chunks)


def _temperature_of(adversary: dict[str, Any], run: AttackRun) -> float:
    if run.kind == "cal":
        return adversary["cal"]["temperature"]
    if run.kind == "opt":
        return adversary["opt"][run.base]["temperature"]
    return 1.0


def _adversary_temperatures(prepared: PreparedTask, clean_logits: torch.Tensor) -> dict[str, Any]:
    """Fit T_cal and search T_opt (per attack, or once for ``opt_attack``); reuse recorded searches."""
    config, fit_set = prepared.adversary, prepared.fit_set
    info: dict[str, Any] = {"kinds": list(config.kinds), "split": config.split, "n": None, "cal": None, "opt": {}}
    if fit_set is None:
        return info
    info["n"] = len(fit_set)
    labels = [ex.label for ex in fit_set.examples]
    # Fitting on the evaluated examples reuses their logits.
    logits = clean_logits if fit_set is prepared.eval_set else _served_logits(prepared.model, fit_set.examples)
    if "cal" in config.kinds:
        fit = fit_nll_temperature(logits, labels, bounds=config.bounds)
        info["cal"] = {"temperature": fit.temperature, "nll": fit.nll, "nll_at_1": fit.nll_at_1,
                       "evaluations": fit.evaluations, "at_bound": fit.at_bound}
        if fit.at_bound:
            logger.warning("%s: the NLL-optimal temperature sits at a search bound (%g); every fitting example may be "
                           "classified correctly", prepared.config.name, fit.temperature)
    if "opt" in config.kinds:
        correct = (logits.argmax(dim=1) == torch.tensor(labels)).tolist()
        pool = list(zip(fit_set.examples, correct))[: config.opt_n]
        # T_cal first: on a tie (Q is a step function) opt keeps the calibrated temperature.
        initial = ([info["cal"]["temperature"]] if info["cal"] else []) + [1.0]
        searches: dict[str, dict[str, Any]] = {}
        for run in prepared.runs:
            if run.kind != "opt":
                continue
            key, attack = prepared.opt_attack or (run.base, run.attack)
            if key not in searches:
                searches[key] = _opt_search(prepared, key, attack, pool, initial)
            info["opt"][run.base] = {**searches[key], "attack": key}
    return info


def _opt_search(prepared: PreparedTask, key: str, attack: Attack, pool: list[tuple[Example, bool]],
                initial: list[float]) -> dict[str, Any]:
    """Brent search of T minimising Q(T) (adversarial accuracy on ``pool``); recorded for resume."""
    store, config = prepared.store, prepared.adversary
    recorded = store.get("adversary", "opt", key)
    if recorded is not None:
        return {name: recorded[name] for name in ("temperature", "q", "evaluations", "attack_runs", "n")}
    targets = [ex for ex, ok in pool if ok]
    processes = store.processes

    def adversarial_accuracy(temperature: float) -> float:
        view = prepared.model if temperature == 1.0 else TemperatureScaled(prepared.model, temperature, adversary=True)
        broken = 0
        for batch in _batches(processes.shard(targets), prepared.batch_size):
            outputs = attack.run(view, batch, prepared.seed)
            broken += sum(_served_prediction(prepared.model, ex, out)[0] != ex.label for ex, out in zip(batch, outputs))
        # Every process gets the same count, so all follow the same Brent path.
        broken = int(processes.sum(broken))
        q = (len(targets) - broken) / len(pool)
        logger.info("%s: opt %s: T=%.4g Q=%.3f", prepared.config.name, key, temperature, q)
        return q

    search = optimise_temperature(adversarial_accuracy, bounds=config.bounds, maxiter=config.maxiter, initial=initial)
    record = {"kind": "adversary", "id": "opt", "attack": key, "temperature": search.temperature, "q": search.q,
              "evaluations": [list(pair) for pair in search.evaluations], "attack_runs": search.attack_runs,
              "n": len(pool)}
    if processes.is_main:
        store.append([record])
    return {name: record[name] for name in ("temperature", "q", "evaluations", "attack_runs", "n")}


def _served_prediction(model: Classifier, example: Example, output) -> tuple[int, float | None]:
    """Class and confidence of the served model on a text attack's adversarial text.

    One text per forward pass, so the score never depends on which examples share a batch.
    Image attacks already score their adversarial inputs on the served model.
    """
    if model.modality != "text":
        return int(output.prediction), None
    text = output.adversarial if isinstance(output.adversarial, str) else example.input
    logits = model.logits([text])[0].double()
    return int(logits.argmax()), float(torch.softmax(logits, dim=0).max())


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
    pending = [ex for ex in store.processes.shard(prepared.eval_set.examples) if not store.has("clean", ex.id)]
    start = time.perf_counter()
    for batch in tqdm(_batches(pending, prepared.batch_size), desc="clean", unit="batch", disable=None, leave=False):
        inputs = [ex.input for ex in batch] if model.modality == "text" else torch.stack([ex.input for ex in batch])
        predictions = model.logits(inputs).argmax(dim=1).tolist()
        store.append(
            {"kind": "clean", "id": ex.id, "label": ex.label, "prediction": int(p), "correct": int(p) == ex.label}
            for ex, p in zip(batch, predictions)
        )
    seconds = time.perf_counter() - start
    store.share()
    return seconds


def _correct(prepared: PreparedTask) -> list[Example]:
    return [ex for ex in prepared.eval_set.examples if prepared.store.get("clean", ex.id)["correct"]]


def _attack_pass(prepared: PreparedTask, name: str, attack: Attack, temperature: float = 1.0) -> None:
    """Attack every pending example; with ``temperature`` ≠ 1 the attack searches on the adversary's
    view ``logits / T_a``, and what it finds is scored on the served model."""
    store, model = prepared.store, prepared.model
    view = model if temperature == 1.0 else TemperatureScaled(model, temperature, adversary=True)
    pending = [ex for ex in store.processes.shard(_correct(prepared)) if not store.has("attack", ex.id, name)]
    with tqdm(total=len(pending), desc=name, unit="ex", disable=None, leave=False) as progress:
        for batch in _batches(pending, prepared.batch_size):
            outputs = attack.run(view, batch, prepared.seed)
            if prepared.log_samples and model.modality == "image":
                from suite.report.samples import image_path, save_image

                for ex, out in zip(batch, outputs):
                    save_image(out.adversarial, image_path(store.directory, name, ex.id))
            store.append(_attack_record(name, ex, out, model, temperature) for ex, out in zip(batch, outputs))
            progress.update(len(batch))
    store.share()


def _attack_record(name: str, example: Example, output, model: Classifier, temperature: float) -> dict[str, Any]:
    prediction, confidence = _served_prediction(model, example, output)
    record = {
        "kind": "attack",
        "attack": name,
        "id": example.id,
        "success": prediction != example.label if model.modality == "text" else bool(output.success),
        "prediction": prediction,
        "perturbation": float(output.perturbation),
        "queries": int(output.queries),
        "seconds": float(output.seconds),
    }
    if confidence is not None:
        record["confidence"] = confidence
    if temperature != 1.0:
        record["temperature"] = temperature
    if isinstance(output.adversarial, str):
        record["adversarial"] = output.adversarial
    return record


def _mean_confidence(records) -> float | None:
    """Mean served confidence on the adversarial inputs (text attacks record it)."""
    values = [record["confidence"] for record in records if "confidence" in record]
    return sum(values) / len(values) if values else None


def _threat_models(prepared: PreparedTask, clean: list[dict[str, Any]],
                   by_attack: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Attacks grouped by threat model (norm and budget), with the worst case within each group:
    what a leaderboard entry reports. A transfer attack belongs to its inner attack's threat model."""
    groups: dict[str, dict[str, Any]] = {}
    for run in prepared.runs:
        threat_model = run.attack.threat_model.removesuffix(" (transfer)")
        eps = run.attack.params().get("eps")
        label = threat_model if eps is None else f"{threat_model} eps={eps:g}"
        group = groups.setdefault(label, {"threat_model": threat_model, "eps": eps, "attacks": []})
        group["attacks"].append(run.key)
    for group in groups.values():
        group["worst_case_robust_accuracy"] = worst_case_robust_accuracy(
            clean, [by_attack[key] for key in group["attacks"]])
    return groups


def _summarise(prepared: PreparedTask, by_attack: dict[str, dict[str, dict[str, Any]]], clean_seconds: float, command: str | None) -> dict[str, Any]:
    clean = [prepared.store.get("clean", ex.id) for ex in prepared.eval_set.examples]
    info, eval_set, task = prepared.model.info, prepared.eval_set, prepared.config
    attacks = {
        run.key: {
            "threat_model": run.attack.threat_model,
            "params": run.attack.params(),
            "budget": run.attack.budget(len(prepared.model.labels)),
            **attack_metrics(clean, by_attack[run.key]),
            "mean_confidence": _mean_confidence(by_attack[run.key].values()),
        }
        for run in prepared.runs
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
        "threat_models": _threat_models(prepared, clean, by_attack),
        "broken_only_by": broken_only_by(clean, by_attack),
        "batch_size": prepared.batch_size,
        "clean_seconds": clean_seconds,
        "warnings": [],
        "config": task.model_dump(mode="json"),
        "config_hash": task.fingerprint(prepared.seed),
        "provenance": provenance(device=str(prepared.model.device), num_processes=prepared.store.processes.world,
                                 command=command),
    }
