"""Adversarial training of text classifiers in embedding space: DDi-AT and the baselines of
"Extreme Confidence and the Illusion of Robustness in Adversarial Training" (App. A and C).

Every method perturbs the word embeddings of a batch (:class:`~suite.models.trainable.
TrainableText`) and leaves the parameter gradients of one optimiser step in ``.grad``
(:meth:`TextMethod.backward`); the loop clips them at ``max_grad_norm`` and steps AdamW.

The inner attack is TextDefender's embedding PGD (Li et al. 2021, the code App. C defers to):
δ starts uniform in [−1, 1] on the real tokens, scaled to ``init``/√(n·d) (n tokens, d the
embedding size); each step moves δ by ``alpha`` along its per-sequence normalised gradient of
the cross-entropy and projects it back onto the per-sequence L2 ball of radius ``eps``. The
defaults are App. C's: ``alpha`` 0.03, ``init`` 0.05, ``eps`` 1.0, L2, 5 steps for the baselines
and K = 3 for DDi-AT. They are absolute, in the embedding space of a ~100M-parameter model
(DeBERTa-base); the built-in word-level model's embeddings are several times smaller, and its
recipes scale all three radii (:mod:`suite.train.builtin_text` says by how much and why).

Randomness is per example: each example's start is drawn from its own generator, on its own
tokens, so a batch's composition and padding do not change it. Dropout stays on during the
inner attacks, as in TextDefender.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, PrivateAttr

from suite.data.base import Example
from suite.errors import ConfigError
from suite.losses import cross_entropy
from suite.models.trainable import TrainableText
from suite.train.methods import MAX_STEPS, TrainMethod, register_method
from suite.train.simplex import gram_matrix, weights_from_gram
from suite.threat import MAX_RADIUS

Batch = dict[str, torch.Tensor]


class TextMethod(TrainMethod):
    """Base of the text training methods: :meth:`backward` returns ``loss`` and ``grad_norm``
    (the gradient's norm before any clipping or normalisation).

    Fields:
        max_grad_norm: Clip the parameter gradient's global L2 norm to this before each step
            (TextDefender's trainers clip at 1.0); ``None``: no clipping.
    """

    modality: ClassVar[str] = "text"
    max_grad_norm: float | None = Field(1.0, gt=0, allow_inf_nan=False)

    def clip_norm(self) -> float | None:
        return self.max_grad_norm


def gradient_norm(model: TrainableText) -> float:
    """The global L2 norm of the parameter gradients now in ``.grad``."""
    grads = [p.grad.detach().float().flatten() for p in model.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.cat(grads))) if grads else 0.0


@register_method("standard")
class TextStandard(TextMethod):
    """Fine-tuning on clean inputs: the paper's ``base`` (Sec. 5.1, eq. 2)."""

    def backward(self, model, batch, labels, generators):
        loss = cross_entropy(model.logits(batch), labels).mean()
        loss.backward()
        return {"loss": float(loss.detach()), "grad_norm": gradient_norm(model)}


# --------------------------------------------------------------------------- embedding PGD


class EmbeddingAttack(TextMethod):
    """Methods with an inner embedding-space PGD (App. C: L2, ``eps`` 1.0, ``alpha`` 0.03,
    ``init`` 0.05)."""

    eps: float = Field(1.0, gt=0, le=MAX_RADIUS, allow_inf_nan=False)
    alpha: float = Field(0.03, gt=0, allow_inf_nan=False)
    init: float = Field(0.05, ge=0, allow_inf_nan=False)
    steps: int = Field(5, ge=1, le=MAX_STEPS)

    def start(self, embeddings: torch.Tensor, batch: Batch, generators: list[torch.Generator]) -> torch.Tensor:
        """δ⁽⁰⁾: U(−1, 1) on each example's real tokens, scaled to ``init``/√(n·d) (TextDefender's
        ``delta_initial``), drawn from the example's own generator."""
        delta = torch.zeros_like(embeddings)
        mask = token_mask(batch, embeddings)
        width = embeddings.shape[-1]
        for row, generator in enumerate(generators):
            positions = mask[row].nonzero().flatten()
            if len(positions) == 0 or self.init == 0:
                continue
            draw = torch.rand(len(positions), width, generator=generator, dtype=torch.float64) * 2 - 1
            draw = draw * (self.init / math.sqrt(len(positions) * width))
            delta[row, positions] = draw.to(embeddings.device, embeddings.dtype)
        return self.project(delta)

    def ascend(self, delta: torch.Tensor, grad: torch.Tensor, batch: Batch) -> torch.Tensor:
        """One step of ``alpha`` along each sequence's normalised gradient, then the projection."""
        grad = grad * token_mask(batch, grad).unsqueeze(-1)
        norms = torch.linalg.vector_norm(grad.flatten(1), dim=1).clamp_min(1e-8).view(-1, 1, 1)
        return self.project(delta + self.alpha * grad / norms)

    def project(self, delta: torch.Tensor) -> torch.Tensor:
        """Radial projection onto each sequence's L2 ball of radius ``eps``."""
        norms = torch.linalg.vector_norm(delta.flatten(1), dim=1).view(-1, 1, 1)
        return delta * (self.eps / norms.clamp_min(1e-12)).clamp(max=1.0)

    def pgd(self, model: TrainableText, batch: Batch, labels: torch.Tensor, generators: list[torch.Generator],
            steps: int | None = None) -> torch.Tensor:
        """``steps`` PGD steps on the summed cross-entropy (each sequence's own gradient; the step
        normalises it per sequence) from :meth:`start`; the last iterate."""
        embeddings = model.embed(batch).detach()
        delta = self.start(embeddings, batch, generators)
        for _ in range(self.steps if steps is None else steps):
            delta.requires_grad_(True)
            loss = cross_entropy(model.logits(batch, embeddings + delta), labels).sum()
            (grad,) = torch.autograd.grad(loss, delta)
            delta = self.ascend(delta.detach(), grad, batch)
        return delta.detach()


def token_mask(batch: Batch, like: torch.Tensor) -> torch.Tensor:
    """1 on each sequence's real tokens, 0 on padding (B×L, in the dtype of ``like``)."""
    mask = batch.get("attention_mask")
    if mask is None:
        return torch.ones(like.shape[:2], dtype=like.dtype, device=like.device)
    return mask.to(like.dtype)


@register_method("pgd_k")
class PGDK(EmbeddingAttack):
    """PGD-K adversarial training in embedding space (Madry et al. 2018 as TextDefender runs it;
    the paper's ``pgd`` baseline, App. C): ``steps`` = 5 PGD steps, then the cross-entropy at
    the last iterate only (TextDefender: "for PGD-K, clean batch is not used")."""

    def backward(self, model, batch, labels, generators):
        delta = self.pgd(model, batch, labels, generators)
        loss = cross_entropy(model.logits(batch, model.embed(batch) + delta), labels).mean()
        loss.backward()
        return {"loss": float(loss.detach()), "grad_norm": gradient_norm(model)}


@register_method("freelb")
class FreeLB(EmbeddingAttack):
    """FreeLB (Zhu et al., ICLR 2020, Alg. 1; the paper's ``freelb`` baseline, App. C): the
    parameter gradient is the average over the ``steps`` = 5 iterates δ₀ … δ_{K−1} of the
    ascent (δ₀ the random start), accumulated while δ ascends; one optimiser step per batch."""

    def backward(self, model, batch, labels, generators):
        embeddings = model.embed(batch).detach()
        delta = self.start(embeddings, batch, generators)
        total = 0.0
        for step in range(self.steps):
            delta.requires_grad_(True)
            loss = cross_entropy(model.logits(batch, model.embed(batch) + delta), labels).mean() / self.steps
            loss.backward()  # accumulates the parameters' gradients and δ's
            total += float(loss.detach())
            if step < self.steps - 1:
                delta = self.ascend(delta.detach(), delta.grad, batch)
        return {"loss": total, "grad_norm": gradient_norm(model)}


@register_method("ddi_at")
class DDiAT(EmbeddingAttack):
    """DDi-AT ("Extreme Confidence and the Illusion of Robustness", App. A, eqs. 14–17; DDi of
    Latorre et al. 2023 applied to PGD-AT).

    For each batch, ``adversaries`` = M independent PGD runs (eq. 17: M = 3 random starts, K =
    ``steps`` = 3 steps each, App. C.1) give M batch-averaged parameter gradients g_m (the columns
    of G, eq. 15); the update direction is their min-norm convex combination

        α* = argmin_{α ∈ Δ_M} ‖Gα‖²,   γ* = −Gα* / ‖Gα*‖₂      (eq. 15, :mod:`suite.train.simplex`)

    with ``normalize``:

    - ``global`` (the paper): the direction has unit L2 norm over all parameters, every step.
      App. B (Table 5) shows this global gradient normalisation causes the extreme confidence:
      once the loss is small the raw gradient is tiny, but the normalised one keeps AdamW
      taking full steps that grow the logit margins;
    - ``clip``: rescaled only when its norm exceeds ``max_grad_norm`` (Table 5's middle row; the
      paper gives no threshold, 1.0 here as the baselines);
    - ``none``: used as is (Table 5's last row).

    Eq. 12 and 16 pick the single maximiser with the largest gradient norm; eq. 15, which the
    paper says it implements and which is DDi, takes the min-norm combination: eq. 15 is what
    runs. The optimiser Φ is AdamW like every other method (eq. 12 writes SGD; App. C trains
    everything with AdamW). The logged loss is Σ α*_m L_m.
    """

    steps: int = Field(3, ge=1, le=MAX_STEPS)
    adversaries: int = Field(3, ge=1, le=12)
    normalize: Literal["global", "clip", "none"] = "global"
    max_grad_norm: float | None = Field(None, gt=0, allow_inf_nan=False)

    def backward(self, model, batch, labels, generators):
        parameters = model.parameters()
        columns, losses = [], []
        for _ in range(self.adversaries):
            delta = self.pgd(model, batch, labels, generators)
            loss = cross_entropy(model.logits(batch, model.embed(batch) + delta), labels).mean()
            grads = torch.autograd.grad(loss, parameters, allow_unused=True)
            columns.append(torch.cat([(g if g is not None else torch.zeros_like(p)).flatten()
                                      for g, p in zip(grads, parameters)]))
            losses.append(float(loss.detach()))
        weights = weights_from_gram(gram_matrix(columns))
        direction = sum(float(w) * column for w, column in zip(weights, columns))
        norm = float(torch.linalg.vector_norm(direction))
        if self.normalize == "global":
            direction = direction / max(norm, 1e-12)
        elif self.normalize == "clip":
            direction = direction * min(1.0, (self.max_grad_norm or 1.0) / max(norm, 1e-12))
        offset = 0
        for parameter in parameters:
            size = parameter.numel()
            parameter.grad = direction[offset : offset + size].view_as(parameter).clone()
            offset += size
        return {"loss": sum(float(w) * value for w, value in zip(weights, losses)), "grad_norm": norm}


# --------------------------------------------------------------------------- aug


@register_method("aug")
class Augmentation(TextMethod):
    """Adversarial data augmentation (the paper's ``aug`` baseline, Sec. 5.1): ``attack``
    (DeepWordBug by default) is run on every training example against ``source`` (the base
    model), the texts it ends with are added to the training set with their original labels,
    and the model is fine-tuned on the union from its initial weights with the base recipe.

    Sec. 5.1 finds "an adversarial example ... for each clean training sample", so every
    training example the source classifies correctly adds the text its attack ends with, fooling
    or not (a skipped or unperturbed one adds nothing). Adding only the successful ones
    (``only_successful: true``) skews the labels wherever the attack succeeds on one class
    more than the other: on the word-level built-in, DeepWordBug's misspellings become
    ``[UNK]``, which the base model reads as negative, so it fools 137 positive and 11 negative
    training sentences (measured), and success-only training learned "[UNK] means positive"
    (validation accuracy 51%, 92% predicted positive). The log counts both (``augmented``,
    ``augmented_fooling``).
    """

    source: str = Field(min_length=1)
    attack: str = "deepwordbug"
    only_successful: bool = False
    _loaded: dict[str, Any] = PrivateAttr(default_factory=dict)
    _fooling: int = PrivateAttr(0)

    def source_model(self):
        if "model" not in self._loaded:
            from suite.models import ModelConfig, load_model

            self._loaded["model"] = load_model(ModelConfig(spec=self.source))
        return self._loaded["model"]

    def augment(self, examples, seed):
        from suite.attacks.base import build_attack
        from suite.progress import progress_bar

        source = self.source_model()
        if source.modality != "text":
            raise ConfigError(f"aug: source {self.source!r} is not a text model (it takes {source.modality}s); aug "
                              "adds adversarial texts of a text model")
        attack = build_attack(self.attack)
        if attack.modality != "text":
            raise ConfigError(f"aug: attack {self.attack!r} works on {attack.modality}s; aug adds adversarial texts "
                              "(give a text attack, e.g. --attack deepwordbug)")
        added, self._fooling = [], 0
        with progress_bar(len(examples), f"aug: {self.attack} on the training set", unit="ex") as bar:
            for first in range(0, len(examples), 32):
                chunk = list(examples[first : first + 32])
                labels = torch.tensor([example.label for example in chunk])
                clean = source.correctness([example.input for example in chunk], labels.to(source.device))
                outputs = attack.run(source, chunk, seed)
                texts = [output.adversarial for output in outputs]
                fooled = ~source.correctness(texts, labels.to(source.device)).bool().cpu()
                for example, output, hit, broken in zip(chunk, outputs, clean.bool().cpu().tolist(), fooled.tolist()):
                    if hit and output.adversarial != example.input and (broken or not self.only_successful):
                        added.append(Example(f"{example.id}~{self.attack}", output.adversarial, example.label))
                        self._fooling += int(broken)
                bar.update(len(chunk))
        return added

    def augment_log(self) -> dict[str, Any]:
        return {"augmented_fooling": self._fooling}

    def backward(self, model, batch, labels, generators):
        loss = cross_entropy(model.logits(batch), labels).mean()
        loss.backward()
        return {"loss": float(loss.detach()), "grad_norm": gradient_norm(model)}

    def identity(self) -> dict[str, Any]:
        return {"source_weights": self.source_model().weights_hash()}
