"""Training image classifiers (``timm:`` models): the image side of the one training loop.

A fresh ``timm:<architecture>`` is initialised from the seed, with the training images' channel
statistics as its normalisation; ``timm:<dir>`` and built-in image models are fine-tuned. The
optimiser is SGD with momentum and weight decay, its learning rate × 0.1 after half the epochs
and × 0.01 after three quarters (Rice et al.'s schedule, which Robey et al. follow). Methods take
[0, 1] pixels and perturb them (:mod:`suite.train.image_methods`). Every epoch validates clean
accuracy and accuracy under PGD and BETA (Robey et al.'s PGD-10 and BETA-10); ``best/`` keeps the
epoch of the best robust accuracy.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch

from suite.attacks.image.beta import BETA
from suite.attacks.image.search import EVALUATION
from suite.attacks.image.pgd import PGDL2, PGDLinf
from suite.data.base import Example, InputSpec
from suite.data.config import DatasetConfig
from suite.data.hf_split import check_other_split
from suite.data.load import load_eval_set
from suite.errors import ConfigError, DataError
from suite.models import ModelConfig, load_model
from suite.models.base import decide, resolve_device
from suite.models.card import card_threat_text
from suite.models.trainable import TrainableImage
from suite.seeding import example_generator
from suite.threat import Threat
from suite.train.config import TrainConfig
from suite.train.image_methods import ImageMethod
from suite.train.modality import Modality, Prepared, split_examples

#: Examples per forward pass of validation.
VALIDATION_BATCH = 256


class ImageTraining(Modality):
    """Image classifiers: SGD on pixels, validated under PGD and BETA."""

    name = "image"
    best_metric, best_key = "val_robust", "robust"

    def __init__(self, config, method) -> None:
        super().__init__(config, method)
        if config.method == "standard":
            # Standard training's best is its clean accuracy: its validation attacks run at a
            # radius it never trains for, and best/ was an epoch at 47 % clean for one at 94 %.
            self.best_metric, self.best_key = "val_clean", "accuracy"

    def prepare(self) -> Prepared:
        config = self.config
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
        check_other_split(config.dataset, config.split, config.val_split, "--val-split")
        val_examples = _examples(config, config.val_split, spec) if config.val_split is not None else None
        train_examples, val_examples = split_examples(config, examples, val_examples)
        if fresh:
            mean, std = _channel_stats(_stack(train_examples))
            model = TrainableImage.new(name, input_size=spec.input_size, mean=mean, std=std, labels=spec.labels,
                                       model_args=config.model_args, seed=config.seed, device=config.device)
        return Prepared(model, train_examples, val_examples)

    def fingerprint(self, examples: list[Example]) -> str:
        digest = hashlib.sha256()
        for example in examples:
            digest.update(f"{example.id}:{example.label}:".encode())
        digest.update(_stack(examples).numpy().tobytes())
        return "sha256-" + digest.hexdigest()[:16]

    def batch(self, model: TrainableImage, examples: list[Example]) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.tensor([example.label for example in examples])
        return _stack(examples).to(model.device), labels.to(model.device)

    def optimiser(self, model: TrainableImage) -> torch.optim.Optimizer:
        config = self.config
        return torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                               weight_decay=config.weight_decay)

    def lr_at(self, epoch: int) -> float:
        return self.config.lr_at(epoch)

    def validate(self, model: TrainableImage, examples: list[Example]) -> dict[str, float]:
        """Clean accuracy, accuracy under PGD and BETA, and robust accuracy (an example counts
        only if neither attack breaks it). Seeded per example, the same every epoch; the attacks
        run as in an evaluation (stop at success, best iterate)."""
        attacks = validation_attacks(self.method, self.config.eval_steps)
        correct = {"clean": [], **{name: [] for name in attacks}}
        with model.frozen() as classifier:
            for first in range(0, len(examples), VALIDATION_BATCH):
                chunk = examples[first : first + VALIDATION_BATCH]
                x, y = self.batch(model, chunk)
                correct["clean"].append(decide(classifier.logits(x), y) == y)
                for name, attack in attacks.items():
                    generators = [example_generator(self.config.seed, "validation", name, e.id) for e in chunk]
                    adversarial = attack.perturb(classifier, x, y, generators, EVALUATION)
                    correct[name].append(decide(classifier.logits(adversarial), y) == y)
        hits = {name: torch.cat(values).cpu() for name, values in correct.items()}
        robust = hits["clean"] & hits["pgd"] & hits["beta"]
        return {"val_clean": _mean(hits["clean"]), "val_pgd": _mean(hits["pgd"] & hits["clean"]),
                "val_beta": _mean(hits["beta"] & hits["clean"]), "val_robust": _mean(robust)}

    def describe(self, metrics: dict[str, float]) -> str:
        steps = self.config.eval_steps
        return f"PGD-{steps} {100 * metrics['val_pgd']:.1f}%, BETA-{steps} {100 * metrics['val_beta']:.1f}%"

    def curves(self) -> dict[str, Any]:
        return {"steps": self.config.eval_steps}

    def card(self) -> str:
        return training_card(self.config, self.method)


def training_card(config: TrainConfig, method: ImageMethod) -> str:
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


def validation_attacks(method: ImageMethod, steps: int) -> dict[str, Any]:
    """PGD and BETA with ``steps`` steps in the method's threat model: the validation adversaries
    of Robey et al. (PGD-10, BETA-10). PGD steps α = ε/4 (their Sec. 5: 2/255 at 8/255); BETA keeps
    its own default learning rate, ε/10 under L∞ (a deviation: RMSprop's first step is then about
    ε per pixel, where a learning rate of ε/4 would take 2.5ε)."""
    pgd = (PGDLinf if method.norm == "linf" else PGDL2)(eps=method.eps, steps=steps, alpha=method.eps / 4)
    return {"pgd": pgd, "beta": BETA(norm=method.norm, eps=method.eps, steps=steps)}


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


def _stack(examples: list[Example]) -> torch.Tensor:
    """The examples' images as one float32 N×C×H×W tensor."""
    return torch.stack([example.input for example in examples]).float()


def _channel_stats(images: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of the training images (rounded): a fresh model's normalisation."""
    mean = images.mean(dim=(0, 2, 3))
    std = images.std(dim=(0, 2, 3)).clamp_min(1e-3)
    return tuple(round(float(v), 4) for v in mean), tuple(round(float(v), 4) for v in std)


def _mean(values: torch.Tensor) -> float:
    return round(float(values.float().mean()), 6) if len(values) else 0.0
