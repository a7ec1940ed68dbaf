"""What the training loop asks of a modality: the one interface images and text implement.

The loop (:mod:`suite.train.loop`) owns everything the modalities share: epochs, the keyed data
order and random starts, the per-method backward, gradient clipping, the optimiser step, the
log, ``best/``, checkpoints and resume. A :class:`Modality` owns what differs:

- the data: loading the model and its examples, refusing bad input before anything is written
  (:meth:`~Modality.prepare`), and a content hash of the examples (:meth:`~Modality.fingerprint`);
- batching: examples to the inputs its methods perturb (:meth:`~Modality.batch`): a tensor of
  [0, 1] pixels, or a tokenised batch whose word embeddings text methods perturb;
- the optimiser and its learning-rate schedule (:meth:`~Modality.optimiser`, :meth:`~Modality.lr_at`);
- validation, which metric picks ``best/``, the log line and the learning curves.

Images: :mod:`suite.train.image`; text: :mod:`suite.train.text`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from suite.data.base import Example
from suite.errors import DataError
from suite.models.trainable import Trainable
from suite.seeding import example_seed
from suite.train.config import TrainConfig
from suite.train.methods import TrainMethod


@dataclass
class Prepared:
    """A run's model (in train mode, initial weights) and its training and validation examples."""

    model: Trainable
    train: list[Example]
    val: list[Example]


class Modality(ABC):
    """One modality's side of a training run.

    Args:
        config: The run.
        method: Its method (of this modality).
    """

    #: ``image`` or ``text``: the models a modality trains (:attr:`TrainConfig.modality`).
    name: ClassVar[str]
    #: The validation metric whose best epoch ``best/`` keeps, and its key in the saved progress.
    best_metric: ClassVar[str]
    best_key: ClassVar[str]

    def __init__(self, config: TrainConfig, method: TrainMethod) -> None:
        self.config = config
        self.method = method

    @abstractmethod
    def prepare(self) -> Prepared:
        """Load or build the model and the examples; every bad input is refused here, in one line."""

    @abstractmethod
    def fingerprint(self, examples: list[Example]) -> str:
        """A content hash of ``examples`` (ids, labels, inputs): part of the run's identity."""

    @abstractmethod
    def batch(self, model: Trainable, examples: list[Example]) -> tuple[Any, torch.Tensor]:
        """(inputs, labels) of ``examples``, on the model's device, as the methods take them."""

    @abstractmethod
    def optimiser(self, model: Trainable) -> torch.optim.Optimizer:
        """The optimiser over the model's parameters."""

    def lr_at(self, epoch: int) -> float:
        """The learning rate of ``epoch`` (0-based); constant unless a modality schedules it."""
        return self.config.lr

    @abstractmethod
    def validate(self, model: Trainable, examples: list[Example]) -> dict[str, float]:
        """Validation metrics (``val_*``) of the model in eval mode; the same examples and seeds every epoch."""

    @abstractmethod
    def describe(self, metrics: dict[str, float]) -> str:
        """The log line's account of :meth:`validate`'s metrics."""

    @abstractmethod
    def curves(self) -> dict[str, Any]:
        """Keyword arguments of :func:`suite.report.training_plots.learning_curves` (what to plot)."""

    def card(self) -> str | None:
        """A model card written beside the weights (``README.md``), or ``None``."""
        return None


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
