"""The training loop, one for both modalities: data, epochs, validation, checkpoints, resume.

What differs between images and text (the data and its batches, the optimiser, validation)
is behind :class:`~suite.train.modality.Modality` (:mod:`suite.train.image`,
:mod:`suite.train.text`); what differs between methods is behind
:meth:`~suite.train.methods.TrainMethod.backward`.

Every random choice is keyed, never drawn from a shared stream: initialisation by the seed,
each epoch's data order by (seed, epoch), each example's attack start by (seed, method, epoch,
example id), held-out examples by the seed. So the same seed and thread count give the same
weights, and a run resumed after a kill ends with the weights of an uninterrupted one.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from suite.collector import long_lived_frozen
from suite.data.base import Example
from suite.errors import ConfigError
from suite.models.trainable import Trainable
from suite.models.weights import PickleRefused
from suite.progress import progress_bar
from suite.seeding import example_generator, example_seed
from suite.train.config import TrainConfig
from suite.train.image import ImageTraining
from suite.train.methods import TrainMethod, method_for
from suite.train.modality import Modality, Prepared
from suite.train.store import CURVES_FILE, TrainStore
from suite.train.text import TextTraining

logger = logging.getLogger(__name__)
#: Part of a run's identity: bump when a change to the loop changes the weights it trains.
LOOP_VERSION = 1
#: The modality of each kind of model (:attr:`TrainConfig.modality`).
MODALITIES: dict[str, type[Modality]] = {"image": ImageTraining, "text": TextTraining}


@dataclass
class TrainSummary:
    """What a finished run produced."""

    directory: Path
    log: list[dict[str, Any]]
    best_epoch: int
    resumed_from: int
    weights: str
    files: dict[str, str] = field(default_factory=dict)


def train(config: TrainConfig, output: Path, *, overwrite: bool = False, wait: bool = False) -> TrainSummary:
    """Train ``config`` into ``output`` (a ``timm:<dir>`` model for an image model, ``hf:<dir>``
    for a text model), resuming a killed run there."""
    try:
        return _train(config, output, overwrite=overwrite, wait=wait)
    except PickleRefused as error:  # the loaders' remedy names an --allow-pickle that training does not take
        raise PickleRefused(error.subject, "advsuite train starts only from safetensors weights (it has no "
                            "--allow-pickle): convert them to safetensors and train from those") from None


def _train(config: TrainConfig, output: Path, *, overwrite: bool, wait: bool) -> TrainSummary:
    method = method_for(config)  # a bad method or knob: one line, before any loading
    modality = MODALITIES[config.modality](config, method)
    data = modality.prepare()
    identity = {"config": config.identity(), "method": {**method.params(), **method.identity()},
                "loop_version": LOOP_VERSION, "initial_weights": data.model.weights_hash(),
                "train_examples": modality.fingerprint(data.train), "val_examples": modality.fingerprint(data.val)}
    store = TrainStore(output, identity)
    store.card = modality.card()
    store.check(overwrite)
    store.open(overwrite, wait)
    try:
        with long_lived_frozen():  # the modules, model and data out of the collector's scans
            summary = _run(config, method, modality, data, store)
    except BaseException:
        store.close(failed=True)
        raise
    store.close()
    return summary


def _run(config: TrainConfig, method: TrainMethod, modality: Modality, data: Prepared,
         store: TrainStore) -> TrainSummary:
    model = data.model
    optimiser = modality.optimiser(model)
    start, best, log = store.resume(model, optimiser, {"epoch": 0, modality.best_key: -1.0}, config.epochs)
    added = method.augment(data.train, config.seed) if start < config.epochs else []
    if added:
        logger.info("%s: %d adversarial examples added to %d training examples", method.name, len(added),
                    len(data.train))
    examples = data.train + added
    for epoch in range(start, config.epochs):
        began = time.perf_counter()
        lr = modality.lr_at(epoch)
        for group in optimiser.param_groups:
            group["lr"] = lr
        totals = _epoch(config, method, modality, model, optimiser, examples, epoch)
        train_seconds = time.perf_counter() - began
        metrics = modality.validate(model, data.val)
        entry = {"epoch": epoch + 1, "lr": lr, **{key: value / len(examples) for key, value in totals.items()},
                 **metrics, "train_seconds": round(train_seconds, 3), "seconds": round(time.perf_counter() - began, 3)}
        if epoch == 0 and added:
            entry.update(augmented=len(added), **method.augment_log())
        logger.info("epoch %d/%d: loss %.4f, validation clean %.1f%%, %s (%.1f s)", epoch + 1, config.epochs,
                    entry["loss"], 100 * metrics["val_clean"], modality.describe(metrics), entry["seconds"])
        model.eval()
        improved = metrics[modality.best_metric] > best.get(modality.best_key, -1.0)
        if improved:
            best = {"epoch": epoch + 1, modality.best_key: metrics[modality.best_metric]}
        store.end_epoch(model, optimiser, entry, log, best, improved)
        _plot(store.directory, log, config, modality)
    model.eval()
    return TrainSummary(store.directory, log, best["epoch"], start, model.weights_hash(), store.files())


def _epoch(config: TrainConfig, method: TrainMethod, modality: Modality, model: Trainable,
           optimiser: torch.optim.Optimizer, examples: list[Example], epoch: int) -> dict[str, float]:
    """One pass over ``examples`` in the epoch's keyed order: the sums over examples of what the
    method's backward reports."""
    model.train()
    order = torch.randperm(len(examples), generator=torch.Generator().manual_seed(
        example_seed(config.seed, "order", epoch))).tolist()
    batches = math.ceil(len(examples) / config.batch_size)
    totals: dict[str, float] = {}
    with torch.random.fork_rng(devices=[]), progress_bar(batches, f"epoch {epoch + 1}/{config.epochs} "
                                                                 f"({method.name})", unit="batch") as bar:
        torch.manual_seed(example_seed(config.seed, "epoch", epoch))  # dropout, drop-path: keyed too
        for first in range(0, len(order), config.batch_size):
            chunk = [examples[i] for i in order[first : first + config.batch_size]]
            inputs, labels = modality.batch(model, chunk)
            generators = [example_generator(config.seed, "train", method.name, epoch, example.id)
                          for example in chunk]
            optimiser.zero_grad(set_to_none=True)
            stats = method.backward(model, inputs, labels, generators)
            if not math.isfinite(stats["loss"]):
                raise ConfigError(f"the training loss became {stats['loss']} in epoch {epoch + 1}: lower --lr")
            if method.clip_norm() is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), method.clip_norm())
            optimiser.step()
            for key, value in stats.items():
                totals[key] = totals.get(key, 0.0) + value * len(chunk)
            bar.update(1)
    return totals


def _plot(directory: Path, log: list[dict[str, Any]], config: TrainConfig, modality: Modality) -> None:
    from suite.report.training_plots import learning_curves

    learning_curves(log, directory / CURVES_FILE, title=f"{config.method} on {config.dataset}", **modality.curves())
