"""Temperature scaling as a wrapper, so attacks never know whether it is there.

A served *design temperature* T makes the model serve ``logits / T`` (the ↑conf / ↓conf
models of "Extreme Confidence and the Illusion of Robustness"). Predictions never change:
dividing by T > 0 keeps the argmax. The other views of a model's logits live here too: an
adversary's vector scaling (:class:`AffineScaled`) and the per-text memo every view of one
task's text attacks shares (:class:`Memoised`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from suite.models.base import Classifier


class LogitView(Classifier):
    """A classifier that serves ``base``'s logits, rescaled or remembered: the shared plumbing of
    :class:`TemperatureScaled`, :class:`AffineScaled` and :class:`Memoised` (model-specific
    helpers, a text model's ``tokenize``, pass through to the base)."""

    def __init__(self, base: Classifier) -> None:
        self.base = base
        self.modality = base.modality
        self.labels = base.labels
        self.input_size = base.input_size
        self.preprocessing = base.preprocessing
        self.info = base.info

    @property
    def device(self) -> torch.device:
        return self.base.device

    def weights_hash(self) -> str:
        return self.base.weights_hash()

    def _rescale(self, logits: torch.Tensor) -> torch.Tensor:
        """This view's logits from the base model's (identity here)."""
        return logits

    def _forward(self, batch: Any) -> torch.Tensor:
        """The base's logits rescaled, with the draws they carry (a randomized view's, a randomized
        ensemble's members: :func:`~suite.models.base.attack_level`) rescaled alike, so a search
        on this view still stops and keeps by them."""
        logits = self.base._forward(batch)
        served = self._rescale(logits)
        draws = getattr(logits, "draws", None)
        if draws is not None:
            served.draws = self._rescale(draws)
            if getattr(logits, "draw_weights", None) is not None:
                served.draw_weights = logits.draw_weights
        return served

    def text_rows(self, texts: Sequence[str]) -> torch.Tensor | None:
        rows = self.base.text_rows(texts)
        return None if rows is None else self._rescale(rows)

    @property
    def thread_safe(self) -> bool:
        return self.base.thread_safe  # a view keeps no state of its own (the memo guards its own)

    def __getattr__(self, name: str) -> Any:
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)


class TemperatureScaled(LogitView):
    """Serve ``base.logits(x) / temperature``.

    Args:
        base: The classifier to wrap.
        temperature: T > 0. Temperatures compose: wrapping a T1 model with T2 serves T1·T2.
        adversary: This is an attacker's view (adversary temperature T_a), not a served model:
            attacks search on it, and the suite scores what they find on ``base``.
    """

    def __init__(self, base: Classifier, temperature: float, adversary: bool = False) -> None:
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        super().__init__(base)
        self.temperature = float(temperature)
        self.adversary = adversary
        self.info = replace(base.info, temperature=base.info.temperature * self.temperature)

    def _rescale(self, logits: torch.Tensor) -> torch.Tensor:
        return logits / self.temperature

    def correctness(self, batch: Any, labels: torch.Tensor, *, logits: torch.Tensor | None = None) -> torch.Tensor:
        # Dividing by T > 0 changes no decision: the base model's correctness is this model's.
        return self.base.correctness(batch, labels, logits=logits)

    @property
    def argmax_verdicts(self) -> bool:
        return self.base.argmax_verdicts

    def embedding_logits(self, texts: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids, embeddings, logits = self.base.embedding_logits(texts)
        return ids, embeddings, logits / self.temperature

    def member_logits(self, batch: Any, **kwargs: Any) -> torch.Tensor:
        # A randomized ensemble's members serve at the same temperature (AttributeError otherwise).
        return self.base.member_logits(batch, **kwargs) / self.temperature

    def scores(self, batch: Any, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, correct = self.base.scores(batch, labels)
        return self._served(logits), correct

    def text_rows(self, texts: Sequence[str]) -> torch.Tensor | None:
        rows = self.base.text_rows(texts)
        return None if rows is None else self._served(rows)

    def _served(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits / T`` for scoring, refused where the division changed a decision.

        Dividing by T > 0 keeps the argmax in exact arithmetic, and the suite scores the served
        model by its base's decisions. In floating point a large enough T underflows: at
        T = 1e308 every float32 logit becomes 0, the served model answers class 0 whatever its
        input, and attacks on it see no gradient, so the base's decisions would report an
        unbroken model (100 % robust accuracy where T = 1 gives 0 %). The top two logits of a row
        that tie once divided but did not before mean the served model no longer decides as its
        base: refused, in one line. (A T small enough to overflow gives infinite logits, which the
        clean pass refuses as it does any model's.) An adversary's view is never scored, so it
        is not checked."""
        served = logits / self.temperature
        if not self.adversary and logits.shape[-1] > 1 and len(logits):
            top, top_served = logits.topk(2, dim=-1).values, served.topk(2, dim=-1).values
            tied = (top[:, 0] > top[:, 1]) & (top_served[:, 0] == top_served[:, 1])
            merged = int(tied.sum())
            if merged:
                from suite.errors import ConfigError

                # A tiny T makes both top logits infinite (overflow), a huge one both zero (underflow).
                overflow = bool(top_served[tied, 0].isinf().any())
                way, remedy = ("overflow to infinity", "larger") if overflow else ("underflow", "smaller")
                raise ConfigError(
                    f"temperature {self.temperature:g} ties the top two logits of {merged} of {len(logits)} inputs that "
                    f"{self.base.info.name!r} decides (they {way} in {str(logits.dtype).replace('torch.', '')}): "
                    f"served at it, the model no longer decides as it does; choose a {remedy} temperature")
        return served

    def relu_cell(self, x: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
        cell = self.base.relu_cell(x)  # dividing by T moves no activation; it divides the Jacobian
        return None if cell is None else (cell[0], cell[1] / self.temperature)

    def cell_support(self) -> str | None:
        return self.base.cell_support()

    def float64_logits(self, batch: Any) -> torch.Tensor | None:
        logits = self.base.float64_logits(batch)
        return None if logits is None else logits / self.temperature

    def lipschitz_bound(self) -> tuple[float | None, str]:
        bound, how = self.base.lipschitz_bound()
        return (None if bound is None else bound / self.temperature), how


class AffineScaled(LogitView):
    """An adversary's view ``base.logits(x) ⊙ scale + bias`` (vector scaling: the Platt-scaling
    adversary of the IoR paper, App. D.5). Unlike a temperature it can change predictions, so its
    correctness is its own; the suite scores what attacks find here on ``base``.
    """

    adversary = True

    def __init__(self, base: Classifier, scale: Sequence[float], bias: Sequence[float]) -> None:
        if len(scale) != base.num_classes or len(bias) != base.num_classes:
            raise ValueError(f"vector scaling needs {base.num_classes} scales and biases")
        super().__init__(base)
        self.scale = torch.tensor([float(v) for v in scale])
        self.bias = torch.tensor([float(v) for v in bias])

    def _rescale(self, logits: torch.Tensor) -> torch.Tensor:
        return logits * self.scale.to(logits.device, logits.dtype) + self.bias.to(logits.device, logits.dtype)

    def embedding_logits(self, texts: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids, embeddings, logits = self.base.embedding_logits(texts)
        return ids, embeddings, self._rescale(logits)



class Memoised(LogitView):
    """A deterministic text model that remembers its logits per input text.

    The attacks of one task query the same texts again and again: every adversary (none, cal,
    opt, Platt) of an attack starts from the same leave-one-out and swap candidates, and an
    ``opt`` search reruns its attack at a dozen temperatures. Their views
    (:class:`TemperatureScaled`, :class:`AffineScaled`) rescale these logits, so wrapping the
    served model once lets every view share one forward pass per distinct text.

    Missing rows are computed by the base model's :meth:`~Classifier.text_rows` where it has
    them (on the CPU a row's value is then its text's alone); otherwise a remembered row was
    computed in whatever batch first held its text, which changes it only at float32 rounding
    (≈ 5e-7 measured on the built-in sentiment model). The memo keeps the
    ``capacity`` most recently used texts. Image batches, and calls that keep the autograd graph,
    go straight to the base model; randomized models must not be wrapped (each query is a draw).
    """

    def __init__(self, base: Classifier, capacity: int = 100_000) -> None:
        super().__init__(base)
        self.capacity = capacity
        self.hits = 0
        self._memo: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()

    def _forward(self, batch: Any) -> torch.Tensor:
        if torch.is_grad_enabled() or not isinstance(batch, list) or not all(isinstance(t, str) for t in batch):
            return self.base._forward(batch)
        return self._remembered(batch).to(self.base.device)

    def text_rows(self, texts: Sequence[str]) -> torch.Tensor | None:
        return self._remembered(list(texts))

    def _remembered(self, batch: list[str]) -> torch.Tensor:
        # Missing rows come from the base model's pooled rows where it has them: each row's value
        # then depends on its text alone, not on what it was first computed with. The memo may
        # be read by two threads at once (a text stream's pass beside its caller's scoring): its
        # state changes under a lock, and the pass runs outside it, on the rows found missing.
        memo = self._memo
        with self._lock:
            found = {text: memo[text] for text in batch if text in memo}
        missing = [text for text in dict.fromkeys(batch) if text not in found]
        if missing:
            rows = self.base.text_rows(missing)
            if rows is None:
                rows = self.base._forward(missing)
            found.update(zip(missing, rows.float().cpu()))
        with self._lock:
            self.hits += len(batch) - len(missing)
            for text in batch:
                if text not in memo:  # computed here, or let go by another thread meanwhile
                    memo[text] = found[text]
                memo.move_to_end(text)
            while len(memo) > self.capacity:
                memo.popitem(last=False)
        return torch.stack([found[text] for text in batch]) if batch else torch.empty(0, self.num_classes)

    def embedding_logits(self, texts: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.base.embedding_logits(texts)  # gradients are never remembered
