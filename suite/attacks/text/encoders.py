"""A torch sentence encoder for TextAttack's sentence-similarity constraints.

TextAttack's Universal Sentence Encoder constraint needs tensorflow and tensorflow_hub. The
``*_minilm`` recipe variants use :class:`TorchSentenceEncoder` instead: a transformers encoder
(``sentence-transformers/all-MiniLM-L6-v2`` by default) with attention-masked mean pooling, the
pooling that model was trained with. It plugs into TextAttack's ``SentenceEncoder`` base class,
which does the windowing and the cosine / angular comparison.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def _sentence_encoder_base() -> type:
    from textattack.constraints.semantics.sentence_encoders import SentenceEncoder

    return SentenceEncoder


class TorchSentenceEncoder(_sentence_encoder_base()):  # type: ignore[misc]
    """Mean-pooled transformer embeddings as a TextAttack sentence-encoder constraint.

    Args:
        model_name: Hub id or local dir of a transformers encoder.
        batch_size: Sentences per forward pass.
        **kwargs: ``SentenceEncoder`` options (threshold, metric, window_size...).
    """

    def __init__(self, model_name: str, batch_size: int = 64, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_name = model_name
        self.batch_size = batch_size
        self._model: Any = None
        self._tokenizer: Any = None

    def _load(self) -> None:
        from transformers import AutoModel, AutoTokenizer

        from suite.models.base import resolve_device

        self._tokenizer = AutoTokenizer.from_pretrained(self.model_name)
        # Safetensors only, as for every model the suite loads (the Hub repo ships them).
        self._model = AutoModel.from_pretrained(self.model_name, use_safetensors=True).eval().to(resolve_device())

    @torch.no_grad()
    def encode(self, sentences: Sequence[str]) -> torch.Tensor:
        if self._model is None:
            self._load()
        chunks = []
        for start in range(0, len(sentences), self.batch_size):
            encoded = self._tokenizer(list(sentences[start : start + self.batch_size]), padding=True,
                                      truncation=True, return_tensors="pt").to(self._model.device)
            hidden = self._model(**encoded).last_hidden_state
            mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            chunks.append(((hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)).cpu())
        return torch.cat(chunks)

    def extra_repr_keys(self) -> list[str]:
        return ["model_name", *super().extra_repr_keys()]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_model"] = state["_tokenizer"] = None
        return state
