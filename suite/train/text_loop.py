"""The training loop of text classifiers (``hf:`` models): AdamW, epochs, validation, checkpoints,
resume; the text twin of :mod:`suite.train.loop`, sharing its output directory
(:class:`~suite.train.store.TrainStore`) and its keyed randomness.

The optimiser follows the paper's App. C (all methods): AdamW with β = (0.9, 0.999), ε = 1e-8,
weight decay 0.01, a constant learning rate (no schedule and no warm-up is stated; footnote 6
reports that warm-up changed nothing). Every epoch validates clean accuracy, mean confidence,
the mean logit margin, the fraction of examples whose float32 softmax saturates to exactly 1
(what blinds a score-based attack: Sec. 3) and ECE/NLL. ``best/`` holds the epoch of the best
validation accuracy; the top level is the last epoch, which the paper evaluates.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from pathlib import Path
from typing import Any

import torch

from suite.calibration import calibration_metrics
from suite.data.base import Example
from suite.data.config import DatasetConfig
from suite.data.load import load_eval_set
from suite.errors import ConfigError, DataError
from suite.models import Classifier
from suite.models.trainable_text import TrainableText
from suite.progress import progress_bar
from suite.seeding import example_generator, example_seed
from suite.train.config import TrainConfig
from suite.train.store import CURVES_FILE, TrainStore
from suite.train.text_methods import TextMethod

logger = logging.getLogger(__name__)
#: Part of a text run's identity: bump when a change to the loop changes the weights it trains.
TEXT_LOOP_VERSION = 1
#: AdamW's moments and epsilon (App. C).
BETAS, ADAM_EPS = (0.9, 0.999), 1e-8


def train_text(config: TrainConfig, classifier: Classifier, output: Path, *, overwrite: bool = False,
               wait: bool = False):
    """Train the text model ``classifier`` (loaded from ``config.model``) into ``output``, an
    ``hf:<dir>`` model, resuming a killed run there."""
    from suite.train.loop import TrainSummary, split_examples

    from suite.train import method_for

    method = method_for(config)
    if config.model_args or config.input_size or config.num_classes:
        raise ConfigError("--model-args, --input-size and --num-classes describe a fresh image architecture; "
                          f"{config.model!r} is a text model and is fine-tuned as it is: drop them")
    model = TrainableText.from_classifier(classifier)
    examples = _examples(config, config.split, classifier)
    val_examples = _examples(config, config.val_split, classifier) if config.val_split is not None else None
    train_examples, val_examples = split_examples(config, examples, val_examples)
    identity = {"config": config.identity(), "method": {**method.params(), **method.identity()},
                "loop_version": TEXT_LOOP_VERSION, "initial_weights": model.weights_hash(),
                "train_examples": fingerprint(train_examples), "val_examples": fingerprint(val_examples)}
    store = TrainStore(output, identity)
    store.check(overwrite)
    store.open(overwrite, wait)
    try:
        log, best_epoch, resumed_from = _run(config, method, model, train_examples, val_examples, store)
    except BaseException:
        store.close(failed=True)
        raise
    store.close()
    return TrainSummary(store.directory, log, best_epoch, resumed_from, model.weights_hash(), store.files())


def _examples(config: TrainConfig, split: str, classifier: Classifier) -> list[Example]:
    eval_set = load_eval_set(DatasetConfig(spec=config.dataset, split=split), classifier.input_spec, config.seed)
    if eval_set.modality != "text":
        raise DataError(f"{config.dataset!r} holds {eval_set.modality}; {config.model!r} is a text model")
    return eval_set.examples


def fingerprint(examples: list[Example]) -> str:
    digest = hashlib.sha256()
    for example in examples:
        digest.update(f"{example.id}\x1f{example.label}\x1f{example.input}\x1e".encode())
    return "sha256-" + digest.hexdigest()[:16]


def _run(config: TrainConfig, method: TextMethod, model: TrainableText, train_examples: list[Example],
         val_examples: list[Example], store: TrainStore) -> tuple[list[dict[str, Any]], int, int]:
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=BETAS, eps=ADAM_EPS,
                                  weight_decay=config.weight_decay)
    start, best, log = store.resume(model, optimiser, {"epoch": 0, "accuracy": -1.0}, config.epochs)
    resumed_from = start
    added = method.augment(train_examples, config.seed) if start < config.epochs else []
    if added:
        logger.info("%s: %d adversarial examples added to %d training examples", method.name, len(added),
                    len(train_examples))
    examples = train_examples + added
    batches = math.ceil(len(examples) / config.batch_size)
    for epoch in range(start, config.epochs):
        began = time.perf_counter()
        model.train()
        order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(
            example_seed(config.seed, "order", epoch))).tolist()
        totals: dict[str, float] = {}
        with torch.random.fork_rng(devices=[]), progress_bar(batches, f"epoch {epoch + 1}/{config.epochs} "
                                                                     f"({method.name})", unit="batch") as bar:
            torch.manual_seed(example_seed(config.seed, "epoch", epoch))  # dropout: keyed too
            for first in range(0, len(order), config.batch_size):
                chunk = [examples[i] for i in order[first : first + config.batch_size]]
                batch = model.encode([example.input for example in chunk])
                labels = torch.tensor([example.label for example in chunk], device=model.device)
                generators = [example_generator(config.seed, "train", method.name, epoch, example.id)
                              for example in chunk]
                optimiser.zero_grad(set_to_none=True)
                stats = method.backward(model, batch, labels, generators)
                if not math.isfinite(stats["loss"]):
                    raise ConfigError(f"the training loss became {stats['loss']} in epoch {epoch + 1}: lower --lr")
                if method.max_grad_norm is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), method.max_grad_norm)
                optimiser.step()
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + value * len(chunk)
                bar.update(1)
        train_seconds = time.perf_counter() - began
        metrics = validate_text(model, val_examples)
        entry = {"epoch": epoch + 1, "lr": config.lr, **{key: value / len(examples) for key, value in totals.items()},
                 **metrics, "train_seconds": round(train_seconds, 3),
                 "seconds": round(time.perf_counter() - began, 3)}
        if epoch == 0 and added:
            entry.update(augmented=len(added), **method.augment_log())
        logger.info("epoch %d/%d: loss %.4f, validation clean %.1f%%, confidence %.4f (%.1f s)", epoch + 1,
                    config.epochs, entry["loss"], 100 * metrics["val_clean"], metrics["val_confidence"],
                    entry["seconds"])
        model.eval()
        improved = metrics["val_clean"] > best["accuracy"]
        if improved:
            best = {"epoch": epoch + 1, "accuracy": metrics["val_clean"]}
        store.end_epoch(model, optimiser, entry, log, best, improved)
        _plot(store.directory, log, config)
    model.eval()
    return log, best["epoch"], resumed_from


def validate_text(model: TrainableText, examples: list[Example], batch_size: int = 64) -> dict[str, float]:
    """Clean accuracy, mean confidence, mean logit margin (top-1 minus top-2), the fraction of
    examples whose float32 softmax puts exactly 1.0 on the predicted class, ECE and NLL."""
    with model.frozen() as classifier:
        logits = torch.cat([classifier.logits([example.input for example in examples[first : first + batch_size]])
                            for first in range(0, len(examples), batch_size)]).float().cpu()
    labels = [example.label for example in examples]
    metrics = calibration_metrics(logits, labels)
    top = logits.topk(2, dim=1).values
    saturated = logits.softmax(dim=1).amax(dim=1) == 1.0
    return {"val_clean": round(metrics["accuracy"], 6), "val_confidence": metrics["mean_confidence"],
            "val_margin": float((top[:, 0] - top[:, 1]).mean()), "val_saturated": float(saturated.float().mean()),
            "val_ece": metrics["ece"], "val_nll": metrics["nll"]}


def _plot(directory: Path, log: list[dict[str, Any]], config: TrainConfig) -> None:
    from suite.report.training_plots import learning_curves

    learning_curves(log, directory / CURVES_FILE, title=f"{config.method} on {config.dataset}",
                    lines=(("val_clean", "clean accuracy"), ("val_confidence", "mean confidence"),
                           ("val_saturated", "saturated (p = 1 in float32)")), ylabel="validation (%)")
