"""Hugging Face sequence classifiers: ``hf:<hub id or local dir>``.

Loads ``AutoModelForSequenceClassification`` and ``AutoTokenizer`` exactly as for any Hub model
(a local directory written by ``save_pretrained`` loads through the same calls). Queries are
tokenised with dynamic padding: a batch is padded to its longest member, never to
``model_max_length``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from suite.errors import SuiteError
from suite.models.base import ModelInfo, TorchClassifier, local_revision
from suite.models.config import ModelConfig


class HFTextClassifier(TorchClassifier):
    """A transformers sequence classifier behind the :class:`Classifier` interface.

    Args:
        model: A ``PreTrainedModel`` for sequence classification.
        tokenizer: Its tokenizer.
        info: Identity recorded in results.
        max_length: Truncation length; defaults to the smaller of the tokenizer's
            ``model_max_length`` and the model's position-embedding size.
        device: Where to run; default CUDA when present.
    """

    modality = "text"

    def __init__(self, model, tokenizer, info: ModelInfo, max_length: int | None = None, device=None) -> None:
        super().__init__(model, device)
        self.tokenizer = tokenizer
        self.info = info
        self.max_length = max_length or _default_max_length(model, tokenizer)
        num_labels = model.config.num_labels
        id2label = getattr(model.config, "id2label", None) or {}
        self.labels = [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(num_labels)]

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Tokenise with dynamic padding and truncation, on the model's device."""
        encoded = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        return {key: value.to(self.device) for key, value in encoded.items()}

    def embedding_logits(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        encoded = self.tokenize(texts)
        embeddings = self.module.get_input_embeddings()(encoded["input_ids"]).detach().requires_grad_(True)
        rest = {key: value for key, value in encoded.items() if key != "input_ids"}
        with torch.enable_grad():
            logits = self.module(inputs_embeds=embeddings, **rest).logits.float()
        return encoded["input_ids"], embeddings, logits

    def _forward(self, batch: Sequence[str]) -> torch.Tensor:
        if isinstance(batch, str):
            raise TypeError("text models take a list of strings, not a single string")
        return self.module(**self.tokenize(batch)).logits


def _default_max_length(model, tokenizer) -> int:
    limits = [getattr(tokenizer, "model_max_length", None), getattr(model.config, "max_position_embeddings", None)]
    # Tokenizers without a limit report a huge sentinel (int(1e30)); ignore it.
    usable = [int(limit) for limit in limits if isinstance(limit, int) and 0 < limit < 1_000_000]
    return min(usable) if usable else 512


def load_hf(name: str, config: ModelConfig) -> HFTextClassifier:
    """Load ``AutoModelForSequenceClassification`` + ``AutoTokenizer`` from the Hub or a local dir."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    local = Path(name).expanduser()
    source = str(local) if local.is_dir() else name
    kwargs = {"revision": config.revision, "trust_remote_code": config.trust_remote_code}
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForSequenceClassification.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as error:
        raise SuiteError(f"cannot load hf model {name!r}: {_first_line(error)}") from error
    prepare_tokenizer(model, tokenizer)
    if local.is_dir():
        revision = config.revision or local_revision(local)
    else:
        revision = getattr(model.config, "_commit_hash", None) or config.revision
    info = ModelInfo(spec=f"hf:{name}", revision=revision, extra={"architecture": model.config.architectures})
    return HFTextClassifier(model, tokenizer, info, max_length=config.max_length, device=config.device)


def prepare_tokenizer(model, tokenizer) -> None:
    """Give a tokenizer without a pad token one (batching needs it), and tell the model its id."""
    if tokenizer.pad_token is None:
        # Decoder-style classifiers (GPT-2...) ship without a pad token; batching needs one.
        # The model pools the last non-pad token, so it must know which id that is.
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
        model.config.pad_token_id = tokenizer.pad_token_id


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
