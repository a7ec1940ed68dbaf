"""The bridge from a suite :class:`Classifier` to TextAttack's ``ModelWrapper`` protocol.

Unlike TextAttack's ``HuggingFaceModelWrapper``, queries go through the classifier's own
batched, dynamically padded ``logits`` (never padded to ``model_max_length``) in eval mode
without gradients, and every query is counted.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from suite.models.base import Classifier


def make_wrapper(model: Classifier, batch_size: int = 32):
    """A TextAttack ``ModelWrapper`` around ``model`` (TextAttack must be importable)."""
    from textattack.models.wrappers import ModelWrapper

    class SuiteModelWrapper(ModelWrapper):
        """TextAttack view of a suite classifier: list of strings → logits (N×C, CPU)."""

        def __init__(self) -> None:
            self.model = model
            self.batch_size = batch_size
            self.queries = 0

        def __call__(self, text_input_list: Sequence[str]) -> torch.Tensor:
            texts = list(text_input_list)
            self.queries += len(texts)
            chunks = [
                model.logits(texts[start : start + self.batch_size]).cpu()
                for start in range(0, len(texts), self.batch_size)
            ]
            return torch.cat(chunks) if chunks else torch.empty(0, model.num_classes)

    return SuiteModelWrapper()
