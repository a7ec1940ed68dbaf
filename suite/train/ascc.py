"""ASCC adversarial training of text classifiers (a baseline of "Extreme Confidence and the
Illusion of Robustness", App. C): adversarial embeddings in the convex hull of each word's
synonyms."""

from __future__ import annotations

import math

import torch
from pydantic import Field, PrivateAttr

from suite.losses import cross_entropy
from suite.models.trainable import TrainableText
from suite.train.methods import MAX_STEPS, register_method
from suite.train.text_methods import Batch, TextMethod, gradient_norm, token_mask


@register_method("ascc")
class ASCC(TextMethod):
    """ASCC (Dong et al., ICLR 2021, "Towards robustness against natural language word
    substitutions"; the paper's ``ascc`` baseline with App. C's α = 10, β = 40).

    Each token's adversarial embedding is a point of the convex hull of its own and its
    synonyms' word embeddings, ê_i = Σ_j softmax(w_i)_j E[s_ij]. The inner problem finds w by
    ``steps`` = 5 Adam steps (lr 1, weight decay 2e-5, TextDefender's) minimising
    −Σ_b KL(p(x_b) ‖ p(ê_b)) + ``entropy_weight``·(1/(B·``padded_length``))·Σ_b Σ_i H(softmax(w_bi)):
    as TextDefender (Li et al. 2021, the code the IoR paper takes its hyperparameters from), the
    KL summed over the batch and the entropy (which makes the weights sparse) averaged over the
    batch's B × ``padded_length`` token positions, padding included (it pads every sentence to
    its ``max_seq_len``, 128). The outer loss is CE(p(x), y) + ``beta``·KL(p(x) ‖ p(ê)), both
    means over the batch. (``entropy_weight`` is the paper's α, named apart from the PGD
    methods' step size ``alpha``.) The log keeps both terms (``ce``, ``kl``): as the model
    sharpens, the inner maximisation finds hull points of larger KL, so the total can rise while
    the clean cross-entropy falls (measured on the built-in model after epoch 5 of 20).

    Until 2026-11-30 (built-ins before revision v2) the entropy was summed, not averaged: at the
    built-ins' batch of 8 that weighed it 1,024 times as much as TextDefender's α = 10 does.

    Synonyms (``neighbours`` per word, at most) come from WordNet: the vocabulary's whole words
    whose synsets share a lemma with the word, in WordNet's order. Deviations: TextDefender
    reads a file of counter-fitted-embedding neighbours (not available offline) and is
    hard-wired to BERT's WordPiece vocabulary; subword pieces here get no synonyms. w starts
    from N(0, 2/(``padded_length``·k)) on each real token (kaiming-normal over TextDefender's
    B × 128 × k tensor, k neighbour slots), drawn from each example's own generator.
    """

    steps: int = Field(5, ge=1, le=MAX_STEPS)
    entropy_weight: float = Field(10.0, ge=0, allow_inf_nan=False)
    beta: float = Field(40.0, ge=0, allow_inf_nan=False)
    neighbours: int = Field(8, ge=1, le=100)
    padded_length: int = Field(128, ge=1, le=100_000)
    _table: dict[str, torch.Tensor] = PrivateAttr(default_factory=dict)

    def neighbour_table(self, model: TrainableText) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, mask), vocabulary × (1 + ``neighbours``): each token first, then its synonyms."""
        if "ids" not in self._table:
            ids, mask = synonym_table(model.vocabulary(), model.special_ids(), self.neighbours)
            self._table.update(ids=ids.to(model.device), mask=mask.to(model.device))
        return self._table["ids"], self._table["mask"]

    def backward(self, model, batch, labels, generators):
        table, valid = self.neighbour_table(model)
        ids = batch["input_ids"]
        neighbour_ids, neighbour_mask = table[ids], valid[ids]  # B×L×k
        neighbour_embeddings = model.embedding_matrix()[neighbour_ids]  # B×L×k×d
        with torch.no_grad():
            reference = model.logits(batch).log_softmax(dim=1)
        weights = self._start(neighbour_mask, batch, generators).requires_grad_(True)
        optimiser = torch.optim.Adam([weights], lr=1.0, weight_decay=2e-5)
        for _ in range(self.steps):
            logits = model.logits(batch, _hull(weights, neighbour_embeddings.detach(), neighbour_mask))
            (weights.grad,) = torch.autograd.grad(self.inner_objective(reference, logits, weights, neighbour_mask),
                                                  weights)
            optimiser.step()
        clean = model.logits(batch)
        adversarial = model.logits(batch, _hull(weights.detach(), neighbour_embeddings, neighbour_mask))
        ce, kl = cross_entropy(clean, labels).mean(), _kl(clean.log_softmax(dim=1), adversarial).mean()
        loss = ce + self.beta * kl
        loss.backward()
        return {"loss": float(loss.detach()), "ce": float(ce.detach()), "kl": float(kl.detach()),
                "grad_norm": gradient_norm(model)}

    def inner_objective(self, reference: torch.Tensor, logits: torch.Tensor, weights: torch.Tensor,
                        mask: torch.Tensor) -> torch.Tensor:
        """What the inner Adam steps minimise: −Σ_b KL(p_ref,b ‖ p_b) + α·(the token entropies of
        softmax(w) summed, over B × ``padded_length`` positions)."""
        probabilities = _masked_softmax(weights, mask)
        entropy = -(probabilities * torch.log(probabilities.clamp_min(1e-12))).sum()
        positions = len(weights) * self.padded_length  # TextDefender's mean over its padded batch
        return -_kl(reference, logits).sum() + self.entropy_weight * entropy / positions

    def _start(self, mask: torch.Tensor, batch: Batch, generators: list[torch.Generator]) -> torch.Tensor:
        weights = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
        tokens = token_mask(batch, weights)
        for row, generator in enumerate(generators):
            positions = tokens[row].nonzero().flatten()
            std = math.sqrt(2.0 / (self.padded_length * mask.shape[-1]))
            draw = torch.randn(len(positions), mask.shape[-1], generator=generator, dtype=torch.float64) * std
            weights[row, positions] = draw.to(weights.device, weights.dtype)
        return weights


def _masked_softmax(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return weights.masked_fill(~mask, float("-inf")).softmax(dim=-1)


def _hull(weights: torch.Tensor, embeddings: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ_j softmax(w)_j E[s_j] per token: B×L×d."""
    return (_masked_softmax(weights, mask).unsqueeze(-1) * embeddings).sum(dim=2)


def _kl(reference_log: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(p_ref ‖ p) per example."""
    return (reference_log.exp() * (reference_log - logits.float().log_softmax(dim=1))).sum(dim=1)


def synonym_table(vocabulary: dict[str, int], special: set[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each token id followed by up to ``width`` WordNet synonyms in the vocabulary (padded with
    the token itself and masked)."""
    from suite.attacks.text.offline import configure_nltk
    from suite.attacks.text.resources import NLTK, require

    require("ascc", (NLTK["wordnet"],))
    configure_nltk()
    from nltk.corpus import wordnet

    size = max(vocabulary.values()) + 1
    ids = torch.arange(size).view(-1, 1).repeat(1, 1 + width)
    mask = torch.zeros(size, 1 + width, dtype=torch.bool)
    mask[:, 0] = True
    words = {token.lower(): index for token, index in vocabulary.items()
             if index not in special and token.isalpha()}
    for word, index in words.items():
        found: list[int] = []
        for synset in wordnet.synsets(word):
            for lemma in synset.lemma_names():
                other = words.get(lemma.lower())
                if other is not None and other != index and other not in found:
                    found.append(other)
        for slot, other in enumerate(found[:width], start=1):
            ids[index, slot] = other
            mask[index, slot] = True
    return ids, mask
