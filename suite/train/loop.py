"""The training loop: data, epochs, validation, checkpoints, resume.

Every random choice is keyed, never drawn from a shared stream: initialisation by the seed,
each epoch's data order by (seed, epoch), each example's attack start by (seed, method, epoch,
example id), held-out examples by the seed. So the same seed and thread count give the same
weights, and a run resumed after a kill ends with the weights of an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suite.attacks.image.beta import BETA
from suite.attacks.image.driver import EVALUATION
from suite.attacks.image.pgd import PGDL2, PGDLinf
from suite.data.base import Example, InputSpec
from suite.data.config import DatasetConfig
from suite.data.load import load_eval_set
from suite.errors import ConfigError, DataError
from suite.models import ModelConfig, load_model
from suite.models.base import resolve_device
from suite.models.card import card_threat_text
from suite.models.trainable import TrainableImage
from suite.progress import progress_bar
from suite.seeding import example_generator, example_seed
from suite.train.config import TrainConfig
from suite.train.methods import TrainMethod
from suite.train.store import CURVES_FILE, TrainStore
from suite.threat import Threat

logger = logging.getLogger(__name__)
#: Part of a run's identity: bump when a change to the loop changes the weights it trains.
LOOP_VERSION = 1


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
    """Train ``config`` into ``output`` (a ``timm:<dir>`` model, or ``hf:<dir>`` for a text
    model: :mod:`suite.train.text_loop`), resuming a killed run there."""
    if config.modality == "text":
        from suite.train import method_for
        from suite.train.text_loop import train_text

        method_for(config)  # a bad method or knob: one line, before any loading
        classifier = load_model(ModelConfig(spec=config.model, device=config.device))
        if classifier.modality != "text":
            raise ConfigError(f"{config.model!r} is an {classifier.modality} model: text training methods train "
                              "hf:<dir> and built-in text models")
        return train_text(config, classifier, output, overwrite=overwrite, wait=wait)
    from suite.train import method_for

    method = method_for(config)
    model, train_set, val_set = _prepare(config)
    identity = {"config": config.identity(), "method": {**method.params(), **method.identity()},
                "loop_version": LOOP_VERSION,
                "initial_weights": model.weights_hash(), "train_examples": train_set.fingerprint,
                "val_examples": val_set.fingerprint}
    store = TrainStore(output, identity)
    store.card = training_card(config, method)
    store.check(overwrite)
    store.open(overwrite, wait)
    try:
        summary = _run(config, method, model, train_set, val_set, store)
    except BaseException:
        store.close(failed=True)
        raise
    store.close()
    return summary


def training_card(config: TrainConfig, method: TrainMethod) -> str:
    """The model card of a trained image model: the threat model it was trained for (read back
    by :func:`suite.models.card.card_threat_model`, so ``evaluate`` runs at that radius), none
    for standard training."""
    lines = ["---", "tags: [advsuite]"]
    trained = f"{method.name} on {config.dataset}"
    if method.name != "standard":
        threat = Threat(norm=method.norm, eps=method.eps)
        lines.append(card_threat_text(threat))
        trained = f"{method.name} ({threat.label}) on {config.dataset}"
    return "\n".join([*lines, "---", "", f"Trained by `advsuite train`: {trained}, {config.epochs} epochs.", ""])


@dataclass
class _Split:
    x: torch.Tensor
    y: torch.Tensor
    ids: list[str]
    fingerprint: str


def _prepare(config: TrainConfig) -> tuple[TrainableImage, _Split, _Split]:
    resolve_device(config.device)  # a bad device fails before any loading
    scheme, _, name = config.model.partition(":")
    fresh = scheme == "timm" and not Path(name).expanduser().is_dir()
    if fresh:
        spec = _fresh_spec(config)
    else:
        if config.model_args or config.input_size or config.num_classes:
            raise ConfigError(f"--model-args, --input-size and --num-classes describe a fresh architecture; "
                              f"{config.model!r} is fine-tuned as it is: drop them")
        classifier = load_model(ModelConfig(spec=config.model, device=config.device))
        model = TrainableImage.from_classifier(classifier)
        spec = classifier.input_spec
    examples = _examples(config, config.split, spec)
    val_examples = _examples(config, config.val_split, spec) if config.val_split is not None else None
    train_examples, val_examples = split_examples(config, examples, val_examples)
    train_set, val_set = _stack(train_examples), _stack(val_examples)
    if fresh:
        mean, std = _channel_stats(train_set.x)
        model = TrainableImage.new(name, input_size=spec.input_size, mean=mean, std=std, labels=spec.labels,
                                   model_args=config.model_args, seed=config.seed, device=config.device)
    return model, train_set, val_set


def split_examples(config: TrainConfig, examples: list[Example],
                   val_examples: list[Example] | None) -> tuple[list[Example], list[Example]]:
    """(training, validation) examples: ``val_examples`` when a validation split is given, else a
    seeded ``val_fraction`` of ``examples`` held out; validation cut to ``val_n``."""
    if val_examples is None:
        held = max(1, round(config.val_fraction * len(examples)))
        if len(examples) - held < 1:
            raise DataError(f"{config.dataset!r} split {config.split!r} has {len(examples)} example(s): too few to "
                            "hold out a validation set (pass --val-split)")
        order = np.random.default_rng(example_seed(config.seed, "validation")).permutation(len(examples))
        chosen = set(order[:held].tolist())
        val_examples = [e for i, e in enumerate(examples) if i in chosen]
        examples = [e for i, e in enumerate(examples) if i not in chosen]
    if config.val_n is not None and config.val_n < len(val_examples):
        val_examples = val_examples[: config.val_n]
    return examples, val_examples


def _fresh_spec(config: TrainConfig) -> InputSpec:
    """Labels and input size of a fresh architecture: from a built-in dataset, or the flags."""
    scheme, _, name = config.dataset.partition(":")
    if scheme == "builtin" and config.input_size is None:
        from suite.data.registry import BUILTIN_DATASETS

        raw = BUILTIN_DATASETS.get(name)(config.split)
        if raw.modality != "image":
            raise DataError(f"{config.dataset!r} holds {raw.modality}: `advsuite train` trains image models")
        size = tuple(int(v) for v in raw.inputs[0].shape)
        labels = tuple(raw.label_names) if config.num_classes is None else tuple(f"class_{i}" for i in range(config.num_classes))
        return InputSpec("image", labels, size, config.model)
    if config.input_size is None or config.num_classes is None:
        raise ConfigError(f"a fresh {config.model!r} on {config.dataset!r} needs --input-size C,H,W and --num-classes "
                          "(built-in datasets give both)")
    return InputSpec("image", tuple(f"class_{i}" for i in range(config.num_classes)), config.input_size, config.model)


def _examples(config: TrainConfig, split: str, spec: InputSpec) -> list[Example]:
    eval_set = load_eval_set(DatasetConfig(spec=config.dataset, split=split), spec, config.seed)
    if eval_set.modality != "image":
        raise DataError(f"{config.dataset!r} holds {eval_set.modality}: `advsuite train` trains image models")
    return eval_set.examples


def _stack(examples: list[Example]) -> _Split:
    """The examples as tensors, with a content hash of their ids, labels and pixels."""
    x = torch.stack([example.input for example in examples]).float()
    y = torch.tensor([example.label for example in examples])
    digest = hashlib.sha256()
    for example in examples:
        digest.update(f"{example.id}:{example.label}:".encode())
    digest.update(x.numpy().tobytes())
    return _Split(x, y, [example.id for example in examples], "sha256-" + digest.hexdigest()[:16])


def _channel_stats(images: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of the training images (rounded): a fresh model's normalisation."""
    mean = images.mean(dim=(0, 2, 3))
    std = images.std(dim=(0, 2, 3)).clamp_min(1e-3)
    return tuple(round(float(v), 4) for v in mean), tuple(round(float(v), 4) for v in std)


def _run(config: TrainConfig, method: TrainMethod, model: TrainableImage, train_set: _Split, val_set: _Split,
         store: TrainStore) -> TrainSummary:
    device = model.device
    optimiser = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                                weight_decay=config.weight_decay)
    start, best, log = store.resume(model, optimiser, {"epoch": 0, "robust": -1.0}, config.epochs)
    resumed_from = start
    batches = math.ceil(len(train_set.y) / config.batch_size)
    for epoch in range(start, config.epochs):
        began = time.perf_counter()
        for group in optimiser.param_groups:
            group["lr"] = config.lr_at(epoch)
        model.train()
        order = torch.randperm(len(train_set.y), generator=torch.Generator().manual_seed(
            example_seed(config.seed, "order", epoch)))
        total = 0.0
        with torch.random.fork_rng(devices=[]), progress_bar(batches, f"epoch {epoch + 1}/{config.epochs} "
                                                                     f"({method.name})", unit="batch") as bar:
            torch.manual_seed(example_seed(config.seed, "epoch", epoch))  # dropout, drop-path: keyed too
            for first in range(0, len(order), config.batch_size):
                rows = order[first : first + config.batch_size]
                x, y = train_set.x[rows].to(device), train_set.y[rows].to(device)
                generators = [example_generator(config.seed, "train", method.name, epoch, train_set.ids[i])
                              for i in rows.tolist()]
                loss = method.loss(model, x, y, generators)
                if not torch.isfinite(loss):
                    raise ConfigError(f"the training loss became {float(loss)} in epoch {epoch + 1}: lower --lr")
                optimiser.zero_grad(set_to_none=True)
                loss.backward()
                optimiser.step()
                total += float(loss.detach()) * len(rows)
                bar.update(1)
        train_seconds = time.perf_counter() - began
        accuracy = validate(model, method, val_set, config)
        entry = {"epoch": epoch + 1, "lr": config.lr_at(epoch), "loss": total / len(train_set.y), **accuracy,
                 "train_seconds": round(train_seconds, 3), "seconds": round(time.perf_counter() - began, 3)}
        logger.info("epoch %d/%d: loss %.4f, validation clean %.1f%%, PGD-%d %.1f%%, BETA-%d %.1f%% (%.1f s)",
                    epoch + 1, config.epochs, entry["loss"], 100 * accuracy["val_clean"], config.eval_steps,
                    100 * accuracy["val_pgd"], config.eval_steps, 100 * accuracy["val_beta"], entry["seconds"])
        model.eval()
        improved = accuracy["val_robust"] > best["robust"]
        if improved:
            best = {"epoch": epoch + 1, "robust": accuracy["val_robust"]}
        store.end_epoch(model, optimiser, entry, log, best, improved)
        _plot(store.directory, log, config)
    model.eval()
    return TrainSummary(store.directory, log, best["epoch"], resumed_from, model.weights_hash(), store.files())


def validation_attacks(method: TrainMethod, steps: int) -> dict[str, Any]:
    """PGD and BETA with ``steps`` steps in the method's threat model (α = ε/4, BETA's default
    learning rate): the validation adversaries of Robey et al. (PGD-10, BETA-10)."""
    pgd = (PGDLinf if method.norm == "linf" else PGDL2)(eps=method.eps, steps=steps, alpha=method.eps / 4)
    return {"pgd": pgd, "beta": BETA(norm=method.norm, eps=method.eps, steps=steps)}


def validate(model: TrainableImage, method: TrainMethod, val_set: _Split, config: TrainConfig,
             batch_size: int = 256) -> dict[str, float]:
    """Clean accuracy, accuracy under PGD and BETA, and robust accuracy (an example counts only
    if neither attack breaks it) on the validation examples. Seeded per example, the same every
    epoch; the attacks run as in an evaluation (stop at success, best iterate)."""
    attacks = validation_attacks(method, config.eval_steps)
    correct = {"clean": [], **{name: [] for name in attacks}}
    with model.frozen() as classifier:
        for first in range(0, len(val_set.y), batch_size):
            x = val_set.x[first : first + batch_size].to(model.device)
            y = val_set.y[first : first + batch_size].to(model.device)
            ids = val_set.ids[first : first + batch_size]
            correct["clean"].append(classifier.logits(x).argmax(dim=1) == y)
            for name, attack in attacks.items():
                generators = [example_generator(config.seed, "validation", name, i) for i in ids]
                adversarial = attack.perturb(classifier, x, y, generators, EVALUATION)
                correct[name].append(classifier.logits(adversarial).argmax(dim=1) == y)
    hits = {name: torch.cat(values).cpu() for name, values in correct.items()}
    robust = hits["clean"] & hits["pgd"] & hits["beta"]
    return {"val_clean": _mean(hits["clean"]), "val_pgd": _mean(hits["pgd"] & hits["clean"]),
            "val_beta": _mean(hits["beta"] & hits["clean"]), "val_robust": _mean(robust)}


def _mean(values: torch.Tensor) -> float:
    return round(float(values.float().mean()), 6) if len(values) else 0.0


def _plot(directory: Path, log: list[dict[str, Any]], config: TrainConfig) -> None:
    from suite.report.training_plots import learning_curves

    learning_curves(log, directory / CURVES_FILE, title=f"{config.method} on {config.dataset}",
                    steps=config.eval_steps)
