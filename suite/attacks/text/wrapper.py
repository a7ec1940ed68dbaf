"""The bridge from a suite :class:`Classifier` to TextAttack's ``ModelWrapper`` protocol.

Unlike TextAttack's ``HuggingFaceModelWrapper``:

- queries go through the classifier's own batched, dynamically padded ``logits`` (never padded
  to ``model_max_length``), in eval mode and without gradients;
- :meth:`get_grad` takes input-embedding gradients in eval mode (TextAttack switches the model
  to train mode, which turns dropout on and makes gradient-ranked searches random);
- every query is counted (:attr:`queries`).

The wrapper works through one model view and knows nothing else about it. An adversary
temperature is such a view (:class:`suite.models.temperature.TemperatureScaled`): TextAttack's
goal functions softmax what the wrapper returns, so searching on ``served logits / T_a`` is how
an aware adversary keeps an extreme served temperature from saturating its scores ("Extreme
Confidence and the Illusion of Robustness"). The evaluation layer picks the view; the wrapper
and the attack only see logits.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence

import torch

from suite.models.base import Classifier


def chunked_logits(model: Classifier, texts: list[str], size: int) -> torch.Tensor:
    """``model``'s logits of ``texts`` in passes of at most ``size`` texts, on the CPU (N×C)."""
    chunks = [model.logits(texts[start : start + size]).cpu() for start in range(0, len(texts), size)]
    return torch.cat(chunks) if chunks else torch.empty(0, model.num_classes)


def make_wrapper(model: Classifier, batch_size: int = 32,
                 channel: Callable[[list[str]], torch.Tensor] | None = None):
    """A TextAttack ``ModelWrapper`` around ``model`` (TextAttack must be importable).

    Args:
        model: The view of the classifier the search runs on; :attr:`model` may be replaced
            between runs (the TextAttack objects built around the wrapper are reused).
        batch_size: Most texts per forward pass.
        channel: Where score queries go instead of ``model`` (a cooperative search hands them
            to the driver that pools the queries of a block's searches); gradients still come
            from ``model``.
    """
    return _wrapper_class()(model, batch_size, channel)


@functools.lru_cache(maxsize=None)
def _wrapper_class() -> type:
    """The wrapper's class, made once (it subclasses TextAttack's ``ModelWrapper``, imported
    only when a text attack runs). A class is a reference cycle: one made per search, as
    before, left each search's class and its functions to the cyclic collector."""
    from textattack.models.wrappers import ModelWrapper

    class SuiteModelWrapper(ModelWrapper):
        """TextAttack view of a suite classifier: list of strings → logits (N×C, CPU, float32).

        :attr:`queries` counts the rows sent to the model (texts scored, and one per gradient):
        recorded as ``forward_rows``. TextAttack's own ``num_queries``, which also counts the
        texts its cache answered, is what its query budget limits.
        """

        def __init__(self, model: Classifier, batch_size: int,
                     channel: Callable[[list[str]], torch.Tensor] | None) -> None:
            self.model = model
            self.batch_size = batch_size
            self.channel = channel
            self.queries = 0

        def __call__(self, text_input_list: Sequence[str]) -> torch.Tensor:
            texts = list(text_input_list)
            self.queries += len(texts)
            if self.channel is not None:
                return self.channel(texts)
            return chunked_logits(self.model, texts, self.batch_size)

        def get_grad(self, text_input: str) -> dict:
            """Gradient of the loss at the predicted class w.r.t. the input-token embeddings.

            Same output as TextAttack's ``HuggingFaceModelWrapper.get_grad`` (``ids``, and
            ``gradient`` of shape tokens × hidden), but the model stays in eval mode and its
            weights never require gradients.
            """
            self.queries += 1
            with torch.enable_grad():
                ids, embeddings, logits = self.model.embedding_logits([text_input])
                loss = torch.nn.functional.cross_entropy(logits, logits.argmax(dim=1))
                (gradient,) = torch.autograd.grad(loss, embeddings)
            # The text's embeddings come as one row, or as one row per draw of a randomized model
            # (Randomized.embedding_logits): their sum is the gradient at the text's embedding.
            return {"ids": ids[:1].cpu(), "gradient": gradient.sum(dim=0).cpu().numpy()}

        def _tokenize(self, inputs: Sequence[str]) -> list[list[str]]:
            tokenizer = getattr(self.model, "tokenizer", None)
            if tokenizer is None:
                return [text.split() for text in inputs]
            # The model's own lock, where it has one: its pass may be running in another thread.
            with getattr(self.model, "serial", contextlib.nullcontext()):
                return [tokenizer.convert_ids_to_tokens(tokenizer(text, truncation=True)["input_ids"]) for text in inputs]

    return SuiteModelWrapper
