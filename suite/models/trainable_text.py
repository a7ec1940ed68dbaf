"""A Hugging Face text classifier under training: what the text methods of :mod:`suite.train`
need of a model.

Embedding-space adversarial training ("Extreme Confidence and the Illusion of Robustness",
App. A and C; TextDefender's trainers, which the paper defers to) perturbs the output of the
word-embedding lookup (``get_input_embeddings()``, before position embeddings and LayerNorm)
and feeds the sum to the model as ``inputs_embeds``. :class:`TrainableText` exposes exactly
that: the tokenised batch, its word embeddings (with the graph to the embedding matrix) and
logits from (possibly perturbed) embeddings, plus the parameters, modes, checkpoint state and
``save_pretrained``, so nothing outside ``suite/models`` reaches into a module.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from suite.errors import ConfigError
from suite.models.base import Classifier
from suite.models.hf_text import HFTextClassifier
from suite.models.trainable import Trainable


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
