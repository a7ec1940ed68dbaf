"""Run (or resume) a prepared task: the generic loop.

1. clean pass: every example scored on the served model (:mod:`.scoring`); records appended;
2. adversary temperatures (:mod:`.adversary`), for text tasks that ask for them;
3. every (attack, adversary) pair on the examples with correctness > 0, batch by batch, each
   adversarial input scored on the served model as the batch finishes (a text recipe's
   searches: each as it finishes, the next example's taking its place); records appended;
4. on the main process, after the gather: sanity checks, then :mod:`.summary` builds the typed
   results (distributional attacks aggregate there) and they are written atomically.

Under a multi-process launch every process attacks its share of the examples (see
:mod:`suite.evaluation.distributed`); the main process writes the results and returns them,
the others return ``None``. A rerun skips every example already recorded.
"""

from __future__ import annotations

import logging
import shutil
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from suite.collector import long_lived_frozen
from suite.data.base import Example, LazyInput
from suite.errors import ConfigError
from suite.evaluation.adversary import (
    adversary_temperatures, adversary_warnings, same_search, search_model, temperature_of, view_for,
)
from suite.evaluation.batching import AUTO, attack_in_parts, probe_batch_size, probes
from suite.evaluation.checks import run_checks
from suite.evaluation.prepare import AttackRun, PreparedTask
from suite.evaluation.records import RESULTS_FILE, RUN_FILE
from suite.evaluation.scoring import (CleanScores, attack_record, check_outputs, clean_record, clean_scores,
                                     score_batch, stack)
from suite.evaluation.summary import summarise
from suite.models import Classifier
from suite.models.base import decide
from suite.models.ensemble import is_ensemble
from suite.progress import progress_bar
from suite.report.results import Results, write_results
from suite.seeding import deterministic_kernels

logger = logging.getLogger(__name__)


def execute(prepared: PreparedTask) -> Results | None:
    """Run (or resume) ``prepared``; write and return its results (``None`` off the main process).

    The output directory is locked while the task runs; a run that fails before recording
    anything leaves the directory as it found it. What is alive when it starts (modules, the
    model, the data) is out of the garbage collector's scans while it runs
    (:func:`~suite.collector.long_lived_frozen`)."""
    store = prepared.store
    store.open(prepared.options.overwrite, wait=prepared.options.wait)
    try:
        with long_lived_frozen(), deterministic_kernels() if prepared.options.deterministic else nullcontext():
            results = _execute(prepared)
    except BaseException:
        store.close(failed=True)
        raise
    store.close()
    return results


def _execute(prepared: PreparedTask) -> Results | None:
    store, processes = prepared.store, prepared.store.processes
    start = time.perf_counter()
    clean_start = time.perf_counter()
    # Every process scores every example in the same fixed chunks: the logits, and everything
    # fitted on them, are bit-identical in every process and to a one-process run.
    # A text model's memo of its rows: the clean pass seeds it, the searches and the scoring of
    # their records read it (a text is run through the model once per task).
    searched = search_model(prepared.model)
    clean = clean_scores(searched, prepared.eval_set.examples)
    _record_clean(prepared, clean)
    clean_seconds = time.perf_counter() - clean_start
    fit = clean if prepared.fit_set is prepared.eval_set else (
        clean_scores(searched, prepared.fit_set.examples) if prepared.fit_set is not None else None)
    adversary = adversary_temperatures(prepared, fit, searched)
    # A randomized ensemble's every query is a fresh draw: its searches are never reused.
    done: list[tuple[AttackRun, tuple[str, float | None]]] = []
    reusable = not is_ensemble(prepared.model)
    for run in prepared.runs:
        search = (run.base or run.key, temperature_of(adversary, run))
        twin = next((other for other, seen in done if reusable and same_search(seen, search)), None)
        if twin is not None:
            _copy_pass(prepared, run, twin, search[1])
        else:
            _attack_pass(prepared, run, view_for(searched, adversary, run), search[1], searched)
        done.append((run, search))
    compute_seconds = processes.sum(time.perf_counter() - start)
    if not processes.is_main:
        return None
    results = summarise(prepared, clean, adversary, clean_seconds, compute_seconds)
    out_of_the_box = {entry.base_attack or key: entry.robust_accuracy for key, entry in results.attacks.items()
                      if entry.adversary == "none"}
    fits = adversary_warnings(adversary)
    for warning in fits:
        logger.warning("%s: %s", prepared.name, warning)
    warnings = [*prepared.notes, *fits, *run_checks(prepared, clean.logits, out_of_the_box)]
    results = results.model_copy(update={"warnings": warnings})
    certificate = _certificate(prepared)
    if certificate is not None:
        results = results.model_copy(update={"certificates": {"w1": certificate}})
    if store.directory is None:
        return results
    from suite.report.calibration_plots import write_plots
    from suite.report.summary_plot import write_summary_plot

    dumped = results.model_dump(mode="json")
    plots = [write_summary_plot(dumped, store.directory), *write_plots(dumped, store.directory)]
    if certificate is not None:
        from suite.report.certificates import write_certificate

        plots.append(write_certificate(certificate, store.directory)[1].name)
    results = results.model_copy(update={"plots": plots})
    store.merge(_record_order(prepared, adversary))
    if prepared.options.log_samples:
        _write_samples(prepared, clean)
    return write_results(store.directory / RESULTS_FILE, results)


def _check_resumed(prepared: PreparedTask, clean: CleanScores, positions: dict[str, int]) -> None:
    """Refuse records that are not this run's: a resumed run's recorded clean records must say
    what the clean pass it has just made says (label, prediction, correctness). ``run.json``
    alone ties a directory to a run, so records written by another model, under a ``run.json``
    copied in from this one's, would otherwise be reported as this model's. On CUDA a
    prediction whose two largest logits are within :data:`~.scoring.TIE_MARGIN_CUDA` of the
    logits' scale may differ (another GPU, other kernels), and on the CPU one within
    :data:`~.scoring.TIE_MARGIN` (another thread count sums in another order); nothing else."""
    from suite.evaluation.scoring import near_ties

    near = near_ties(clean.logits, prepared.model.device)
    differ = []
    for example in prepared.eval_set.examples:
        recorded = prepared.store.get("clean", example.id)
        if recorded is None:
            continue
        logits = clean.logits[positions[example.id]]
        now = clean_record(example, logits, float(clean.correct[positions[example.id]]))
        if all(recorded.get(key) == now[key] for key in ("label", "prediction", "correct")):
            continue
        if recorded.get("label") == now["label"] and near[positions[example.id]]:
            continue
        differ.append((example.id, recorded, now))
    if differ:
        first, recorded, now = differ[0]
        said = ", ".join(f"{key} {recorded.get(key)!r} recorded, {now[key]!r} now"
                         for key in ("label", "prediction", "correct") if recorded.get(key) != now[key])
        raise ConfigError(f"{str(prepared.store.directory)!r} holds records that are not this run's: the clean pass "
                          f"differs from its recorded clean records at {len(differ)} example(s) (the first, {first!r}: "
                          f"{said}); was its {RUN_FILE} copied from another run? Use --overwrite to start over or "
                          "choose another --output")


def _certificate(prepared: PreparedTask) -> dict[str, Any] | None:
    """The task's WDRO certificate (``certify:`` in the recipe), on every example, or None."""
    config = prepared.config.certify
    if config is None:
        return None
    from suite.evaluation.certification import certification_report

    return certification_report(prepared.model, prepared.eval_set.examples, norm=config.norm, loss=config.loss,
                                eps=config.eps, boxed=config.boxed, attacks=config.attacks, seed=prepared.attack_seed)


def _record_clean(prepared: PreparedTask, clean: CleanScores) -> None:
    store = prepared.store
    positions = {ex.id: index for index, ex in enumerate(prepared.eval_set.examples)}
    _check_resumed(prepared, clean, positions)
    pending = [ex for ex in store.processes.shard(prepared.eval_set.examples) if not store.has("clean", ex.id)]
    store.append(clean_record(ex, clean.logits[positions[ex.id]], float(clean.correct[positions[ex.id]]))
                 for ex in pending)
    store.share()


def _attack_pass(prepared: PreparedTask, run: AttackRun, view: Classifier, temperature: float | None,
                 searched: Classifier) -> None:
    """Attack every pending example on ``view`` (the served model, or an adversary's view of it:
    ``logits / T_a``, or Platt's ``a ⊙ logits + b``); what it finds is scored on the served model
    (a text's row from ``searched``, the memo of the served model's rows, where it has it).
    ``temperature`` is recorded with each example (``None``: Platt's view, recorded in results)."""
    store, model = prepared.store, prepared.model
    batched = run.attack.batch_dependent
    if batched:  # the batches are part of the numbers: the same ones for any process count or resume
        pending = _mean_batches(prepared, run.key, prepared.fixed_batch_size)
    else:
        pending = [ex for ex in store.processes.shard(prepared.attacked()) if not store.has("attack", ex.id, run.key)]
    if pending:  # a line per pass, for logs where no progress bar is drawn (not a terminal)
        logger.info("%s: %s (%s) on %d example(s)", prepared.name, run.key, run.attack.threat.label, len(pending))
    size, probed = prepared.fixed_batch_size, prepared.batch_size == AUTO and probes(view, run.attack)
    if not pending:  # resumed: what a fixed size would be is known; a probe needs examples to run
        if not probed:
            prepared.batch_sizes[run.key] = size
        store.share()
        return
    if probed:
        size = probe_batch_size(view, run.attack, pending[0].input, len(pending))
        logger.info("%s: %s: batch size auto: %d example(s) per batch", prepared.name, run.key, size)

    def commit(batch: list, outputs: list) -> None:
        check_outputs(run.key, run.attack.threat, model, batch, outputs)
        if prepared.options.log_samples and store.directory is not None:
            _save_adversarial(prepared, run, batch, outputs)
        if batched:  # a batch run again whole for a record it lacked keeps the records it has
            kept = [(ex, out) for ex, out in zip(batch, outputs) if not store.has("attack", ex.id, run.key)]
            batch, outputs = [ex for ex, _ in kept], [out for _, out in kept]
        clean = [store.get("clean", ex.id)["correct"] for ex in batch]
        scores = score_batch(model, batch, outputs, clean, pooled=searched)
        store.append(attack_record(run.key, model, ex, out, correct, temperature, score)
                     for ex, out, correct, score in zip(batch, outputs, clean, scores))
        progress.update(len(batch))

    def decoded(batch: list) -> list:
        # Records are appended only once the whole batch is attacked: a batch that runs out of
        # memory commits nothing, and is retried smaller (:func:`~.batching.run_in_batches`); text searches
        # are recorded as each ends, the next example's taking its place (``size`` under way).
        # A streamed image is decoded once for the attack, the check of its output and its
        # scoring, not by each: the batch holds its pixels (and only its) until it is recorded.
        return [Example(ex.id, ex.input, ex.label) if isinstance(ex.source, LazyInput) else ex for ex in batch]

    with progress_bar(len(pending), run.key, unit="ex") as progress:
        size = attack_in_parts(run.attack, view, pending, size, prepared.attack_seed, commit,
                               what=f"{prepared.name}: {run.key}", load=decoded)
    prepared.batch_sizes[run.key] = size
    store.share()


def _mean_batches(prepared: PreparedTask, key: str, size: int) -> list[Example]:
    """What a process attacks with a batch-dependent attack (a loss averaged over the batch, or
    draws seeded per batch: which examples share a batch is part of its numbers): the attacked examples in batches of
    ``size`` in evaluation order, the same whatever the process count, dealt to the processes
    batch by batch (not example by example, which would make other batches), and each batch
    that lacks a record whole. Concatenated, they fall into the same batches again: every
    batch but the last one overall holds ``size`` examples. A batch whose records a kill cut
    short is attacked whole again; its commit keeps the records it has."""
    store, examples = prepared.store, prepared.attacked()
    batches = [examples[start:start + size] for start in range(0, len(examples), size)]
    return [ex for batch in store.processes.shard(batches)
            if any(not store.has("attack", ex.id, key) for ex in batch) for ex in batch]


def _save_adversarial(prepared: PreparedTask, run: AttackRun, batch: list, outputs: list) -> None:
    """``--log-samples``: save each adversarial image with the served prediction and confidence on
    it. Records keep no image's confidence (see :func:`attack_record`); this one forward pass over
    the batch gives one for the picture (``samples.md`` shows it only where its prediction is the
    recorded one)."""
    import torch

    from suite.report.samples import save_adversarial

    images = [(ex, out) for ex, out in zip(batch, outputs) if out.adversarial is not None
              and not isinstance(out.adversarial, str)]
    served = {}
    if images:
        labels = torch.tensor([ex.label for ex, _ in images])
        logits, _ = prepared.model.scores(stack(prepared.model, [out.adversarial for _, out in images]), labels)
        probabilities = torch.softmax(logits.detach().double().cpu(), dim=1)
        decided = decide(probabilities, labels).tolist()
        served = {ex.id: {"prediction": prediction, "confidence": float(row.max())}
                  for (ex, _), row, prediction in zip(images, probabilities, decided)}
    for ex, out in zip(batch, outputs):
        save_adversarial(prepared.store.directory, run.key, ex.id, out.adversarial, served.get(ex.id))


def _copy_pass(prepared: PreparedTask, run: AttackRun, twin: AttackRun, temperature: float | None) -> None:
    """``run`` searches exactly the view ``twin`` searched (same attack, same seed, the same
    adversary temperature in float32: ``opt`` keeping T_cal), so its search would repeat
    ``twin``'s step for step: its records are ``twin``'s, re-keyed, and say so."""
    store = prepared.store
    pending = [ex for ex in store.processes.shard(prepared.attacked()) if not store.has("attack", ex.id, run.key)]
    if pending:
        logger.info("%s: %s searches the same view as %s: its %d record(s) reused", prepared.name, run.key,
                    twin.key, len(pending))
    for ex in pending:
        if prepared.options.log_samples and store.directory is not None:
            _copy_image(store.directory, twin.key, run.key, ex.id)
        record = {**store.get("attack", ex.id, twin.key), "attack": run.key, "same_search_as": twin.key}
        record.pop("temperature", None)
        if temperature is not None and temperature != 1.0:
            record["temperature"] = temperature  # this run's own value, as attack_record writes it
        store.append([record])
    store.share()


def _copy_image(directory: Path, twin: str, key: str, example_id: str) -> None:
    """``--log-samples``: the adversarial image ``twin`` saved, under ``key`` too (images only)."""
    from suite.report.sample_files import image_path

    source, target = image_path(directory, twin, example_id), image_path(directory, key, example_id)
    if source.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def _record_order(prepared: PreparedTask, adversary: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Record keys in the order a one-process run appends them."""
    examples, attacked = prepared.eval_set.examples, prepared.attacked()
    return [
        *(("clean", "", ex.id) for ex in examples),
        *(("adversary", search["attack"], "opt") for search in adversary["opt"].values()),
        *(("attack", run.key, ex.id) for run in prepared.runs for ex in attacked),
    ]


def _write_samples(prepared: PreparedTask, scores: CleanScores) -> None:
    """``samples.md`` and its images, from the records (the clean confidence from this run's logits)."""
    import torch

    from suite.report.samples import write_samples

    store, info, examples = prepared.store, prepared.model.info, prepared.eval_set.examples
    title = f"{prepared.name}: {info.name} on {prepared.eval_set.spec}:{prepared.eval_set.split}"
    confidence = torch.softmax(scores.logits.double(), dim=1).max(dim=1).values.tolist()
    clean = {ex.id: {**store.get("clean", ex.id), "confidence": value} for ex, value in zip(examples, confidence)}
    attacked = prepared.attacked()
    by_attack = {run.key: {ex.id: store.get("attack", ex.id, run.key) for ex in attacked} for run in prepared.runs}
    write_samples(store.directory, title, prepared.model.labels, examples, clean, by_attack)

