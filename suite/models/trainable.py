"""A classifier under training: what :mod:`suite.train` needs of a model, for either modality.

Training needs the parameters, the train/eval modes, the weights as tensors (to checkpoint and
resume) and a way to save a model directory (``timm:<dir>`` or ``hf:<dir>``); attacks need the
usual :class:`~suite.models.base.Classifier` view of the same weights. :class:`Trainable` gives
both, so nothing outside ``suite/models`` reaches into a module. Each modality adds the view its
training methods perturb:

- :class:`TrainableImage`: logits of [0, 1] pixels (image methods perturb the pixels);
- :class:`TrainableText`: the tokenised batch, its word embeddings and logits from (perturbed)
  embeddings. Embedding-space adversarial training ("Extreme Confidence and the Illusion of
  Robustness", App. A and C; TextDefender's trainers, which the paper defers to) perturbs the
  output of the word-embedding lookup (``get_input_embeddings()``, before position embeddings
  and LayerNorm) and feeds the sum to the model as ``inputs_embeds``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from suite.errors import ConfigError
from suite.models.base import Classifier, ModelInfo, weights_hash
from suite.models.hf_text import HFTextClassifier
from suite.models.timm_dir import save_timm_dir
from suite.models.timm_image import TimmImageClassifier, _build


class Trainable:
    """What every model under training shares: its classifier, modes, checkpoint state and hash."""

    classifier: Classifier

    @property
    def device(self) -> torch.device:
        return self.classifier.device

    @property
    def module(self) -> torch.nn.Module:
        return self.classifier.module

    def parameters(self) -> list[torch.nn.Parameter]:
        return list(self.module.parameters())

    def train(self) -> None:
        """Train mode: batch-norm statistics and dropout are live, and parameters take gradients."""
        self.module.train()
        self.module.requires_grad_(True)

    def eval(self) -> None:
        """Eval mode with frozen parameters: how attacks and validation see the model."""
        self.module.eval()
        self.module.requires_grad_(False)

    @contextmanager
    def frozen(self) -> Iterator[Classifier]:
        """The classifier in eval mode with frozen parameters, for the duration of an attack;
        the previous mode is restored afterwards."""
        training = self.module.training
        self.eval()
        try:
            yield self.classifier
        finally:
            if training:
                self.train()

    def state(self) -> dict[str, torch.Tensor]:
        """Every parameter and buffer as separate CPU copies, for checkpoints (tied weights are
        copied apart, as safetensors requires)."""
        return {key: value.detach().cpu().clone() for key, value in self.module.state_dict().items()}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        self.module.load_state_dict(state, strict=True)

    def weights_hash(self) -> str:
        return weights_hash(self.module)


class TrainableImage(Trainable):
    """The weights of a timm image classifier being trained, and a classifier view of them.

    Args:
        classifier: The classifier whose module is trained in place.
        architecture: timm architecture name (saved in ``config.json``).
        model_args: Extra ``timm.create_model`` arguments (saved in ``config.json``).
    """

    def __init__(self, classifier: TimmImageClassifier, architecture: str, model_args: dict[str, Any] | None = None):
        self.classifier = classifier
        self.architecture = architecture
        self.model_args = dict(model_args or {})
        self.train()

    @classmethod
    def new(cls, architecture: str, *, input_size: Sequence[int], mean: Sequence[float], std: Sequence[float],
            labels: Sequence[str], model_args: dict[str, Any] | None = None, seed: int = 0,
            device: torch.device | str | None = None) -> TrainableImage:
        """A freshly initialised ``architecture`` (initialisation seeded by ``seed``)."""
        size = tuple(int(v) for v in input_size)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = _build(architecture, pretrained=False, num_classes=len(labels), in_chans=size[0],
                            **(model_args or {}))
        info = ModelInfo(spec=f"timm:{architecture}", extra={"architecture": architecture})
        classifier = TimmImageClassifier(module, tuple(mean), tuple(std), size, list(labels), info, device=device)
        return cls(classifier, architecture, model_args)

    @classmethod
    def from_classifier(cls, classifier: Classifier) -> TrainableImage:
        """Fine-tune a loaded ``timm:`` (or built-in image) model in place."""
        if not isinstance(classifier, TimmImageClassifier):
            raise ConfigError(f"{classifier.info.name} is not a timm image classifier: `advsuite train` trains "
                              "timm:<architecture>, timm:<dir> and built-in image models")
        architecture = classifier.info.extra.get("architecture") or classifier.info.spec.partition(":")[2]
        return cls(classifier, architecture, classifier.info.extra.get("model_args"))

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        """Logits of [0, 1] images in the current mode, with the graph kept for the parameters."""
        return self.classifier.logits(images, grad=True)

    def save(self, directory: Path) -> None:
        """Write a ``timm:<dir>`` model directory (safetensors + ``config.json``)."""
        classifier = self.classifier
        save_timm_dir(Path(directory), classifier.module, self.architecture, input_size=classifier.input_size,
                      mean=tuple(classifier.mean.flatten().tolist()), std=tuple(classifier.std.flatten().tolist()),
                      label_names=list(classifier.labels), model_args=self.model_args,
                      preprocessing=classifier.preprocessing)


class TrainableText(Trainable):
    """The weights of an ``hf:`` sequence classifier being trained, and a classifier view of them."""

    def __init__(self, classifier: HFTextClassifier) -> None:
        self.classifier = classifier
        self.train()

    @classmethod
    def from_classifier(cls, classifier: Classifier) -> TrainableText:
        """Fine-tune a loaded ``hf:`` (or built-in text) model in place."""
        if not isinstance(classifier, HFTextClassifier):
            raise ConfigError(f"{classifier.info.name} is not a Hugging Face text classifier: text adversarial "
                              "training takes hf:<dir> and built-in text models")
        return cls(classifier)

    def encode(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """The tokenised batch (dynamic padding), on the model's device."""
        return self.classifier.tokenize(list(texts))

    def embed(self, encoded: dict[str, torch.Tensor]) -> torch.Tensor:
        """Word embeddings of the batch, B×L×d, with the graph to the embedding matrix."""
        return self.module.get_input_embeddings()(encoded["input_ids"])

    def embedding_matrix(self) -> torch.Tensor:
        """The word-embedding matrix (vocabulary × d), as a parameter (gradients flow into it)."""
        return self.module.get_input_embeddings().weight

    def logits(self, encoded: dict[str, torch.Tensor], embeddings: torch.Tensor | None = None) -> torch.Tensor:
        """Float logits of the batch, from ``embeddings`` (perturbed word embeddings) when given."""
        rest = {key: value for key, value in encoded.items() if key != "input_ids"}
        if embeddings is None:
            return self.module(input_ids=encoded["input_ids"], **rest).logits.float()
        return self.module(inputs_embeds=embeddings, **rest).logits.float()

    def vocabulary(self) -> dict[str, int]:
        """Token → id of the tokenizer."""
        return dict(self.classifier.tokenizer.get_vocab())

    def special_ids(self) -> set[int]:
        return set(int(i) for i in self.classifier.tokenizer.all_special_ids)

    def save(self, directory: Path) -> None:
        """Write an ``hf:<dir>`` model directory (``save_pretrained``: safetensors, config and tokenizer)."""
        directory = Path(directory)
        self.module.save_pretrained(directory, safe_serialization=True)
        self.classifier.tokenizer.save_pretrained(directory)
