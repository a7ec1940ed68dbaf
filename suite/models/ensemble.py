"""Randomized ensembles (``ensemble:``): each query is answered by one member, drawn with
probability α_i independently of the input.

Dbouk & Shanbhag, "Adversarial Vulnerability of Randomized Ensembles", ICML 2022, Sec. 3:
a randomized ensemble classifier (REC) over members f_1 … f_M with probabilities α is scored
by its expected accuracy, which needs no sampling:

    L(x, y, α) = Σ_i α_i · 1{argmax f_i(x) = y}          (the paper's eq. 1)

That is :meth:`RandomizedEnsemble.correctness`: the clean pass, every attack's adversarial
input and every record score an ensemble this way. Nothing scores it with a sampled answer,
or with expected logits.

What the ensemble offers attacks:

- :meth:`~RandomizedEnsemble.member_logits`: every member's logits (the REC attacks of
  :mod:`suite.attacks.image.rec` and :mod:`suite.attacks.image.arc` use them);
- :meth:`~RandomizedEnsemble.logits`: ``log Σ_i α_i softmax(f_i(x))``, the log-probabilities
  of the answer a query gets, averaged over the draw. It is differentiable, so an attack that
  knows nothing of ensembles (``auto``, ``beta``) still has a sound objective; what it finds
  is scored with L like everything else;
- :meth:`~RandomizedEnsemble.served_logits`: the REC as deployed, one member drawn per query
  from a generator the caller seeds per example (black-box attacks, the randomness check).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch

from suite.errors import ConfigError
from suite.models.base import Classifier, ModelInfo, draws_right
from suite.threat import Threat

#: How far the probabilities may sum from 1.
SUM_TOLERANCE = 1e-6


class RandomizedEnsemble(Classifier):
    """A randomized ensemble classifier over ``members`` with probabilities ``probabilities``.

    Args:
        members: Classifiers of one modality with the same labels (and input size).
        probabilities: α_i ≥ 0, summing to 1. A member with α_i = 0 is kept (an α sweep
            reaches it) but never queried.
        info: Identity recorded in results; default ``ensemble:`` over the member names.
    """

    def __init__(self, members: Sequence[Classifier], probabilities: Sequence[float],
                 info: ModelInfo | None = None) -> None:
        members, alphas = list(members), [float(value) for value in probabilities]
        check_probabilities(alphas, len(members))
        nested = [member.info.name for member in members if is_ensemble(member)]
        if nested:  # scored by its averaged answer, not its expected accuracy: 93.8 % where it has 85.6 %
            raise ConfigError(f"ensemble member {nested[0]!r} is itself a randomized ensemble: list its members "
                              "instead (with their probabilities multiplied out)")
        first = members[0]
        for member in members[1:]:
            if member.modality != first.modality:
                raise ConfigError(f"ensemble members mix {first.modality} and {member.modality} models")
            if list(member.labels) != list(first.labels):
                raise ConfigError(f"ensemble members disagree on labels: {first.info.name} has {first.labels}, "
                                  f"{member.info.name} has {member.labels}")
            if member.input_size != first.input_size:
                raise ConfigError(f"ensemble members take different inputs: {first.info.name} "
                                  f"{first.input_size}, {member.info.name} {member.input_size}")
            if member.preprocessing != first.preprocessing:  # one image goes to every member
                raise ConfigError(f"ensemble members resize images differently: {first.info.name} "
                                  f"{first.preprocessing.as_dict()}, {member.info.name} "
                                  f"{member.preprocessing.as_dict()}")
        self.members = members
        self.alphas = alphas
        self.modality = first.modality
        self.labels = list(first.labels)
        self.input_size = first.input_size
        self.preprocessing = first.preprocessing
        self.info = info or ModelInfo(
            spec="ensemble:" + ",".join(f"{alpha:g}*{member.info.name}" for alpha, member in zip(alphas, members)),
            revision=_revision(members, alphas),
            extra={"members": member_records(members, alphas)},
            threat_model=common_threat_model(members),
        )

    @property
    def device(self) -> torch.device:
        return self.members[0].device

    @property
    def probabilities(self) -> torch.Tensor:
        """α as a float64 vector (on the CPU)."""
        return torch.tensor(self.alphas, dtype=torch.float64)

    @property
    def active(self) -> list[int]:
        """Indices of the members with α_i > 0, in member order."""
        return [index for index, alpha in enumerate(self.alphas) if alpha > 0]

    def member_logits(self, batch: Any, *, grad: bool = False, members: Sequence[int] | None = None) -> torch.Tensor:
        """Raw logits of ``members`` (default: every member with α_i > 0), shape M×N×C on
        :attr:`device`."""
        chosen = self.active if members is None else list(members)
        return torch.stack([self.members[index].logits(batch, grad=grad).to(self.device) for index in chosen])

    def _forward(self, batch: Any) -> torch.Tensor:
        """The mixture's log-probabilities; the members' logits ride along as ``.draws`` (N×M×C,
        detached) with their α as ``.draw_weights``, so a search reads the exact L of every
        iterate (:func:`~suite.models.base.attack_level`) from the pass it already made."""
        # Members with α_i = 0 are never queried.
        stacked = torch.stack([self.members[i]._forward(batch).float().to(self.device) for i in self.active])
        weights = self._active_alphas()
        mixture = self._mixture(stacked, weights)
        mixture.draws = stacked.detach().transpose(0, 1)
        mixture.draw_weights = weights
        return mixture

    def _active_alphas(self) -> torch.Tensor:
        """The active members' α (float32, on :attr:`device`)."""
        return torch.tensor([self.alphas[i] for i in self.active], device=self.device)

    def _mixture(self, stacked: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """log Σ_i α_i softmax(f_i(x)) from the active members' logits (M×N×C) and their α
        (``weights``, default :meth:`_active_alphas`), in float32."""
        weights = self._active_alphas() if weights is None else weights
        return torch.logsumexp(torch.log(weights).view(-1, 1, 1) + torch.log_softmax(stacked, dim=-1), dim=0)

    def correctness(self, batch: Any, labels: torch.Tensor, *, logits: torch.Tensor | None = None) -> torch.Tensor:
        """L(x, y, α) = Σ_i α_i · 1{argmax f_i(x) = y}, exactly (eq. 1); ``logits`` are ignored."""
        return expected_accuracy(self.member_logits(batch), labels, self.alphas, self.active)

    def scores(self, batch: Any, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # One pass of the members gives both the mixture's logits and the exact L.
        with torch.no_grad():
            stacked = self.member_logits(batch)
            return self._mixture(stacked), expected_accuracy(stacked, labels, self.alphas, self.active)

    def served_logits(self, batch: Any, generators: Sequence[torch.Generator]) -> torch.Tensor:
        """The REC as deployed: each row is answered by one member drawn with probability α from
        that row's generator (one per row, seeded per example by the caller), N×C."""
        choice = self.draw(generators)
        logits = None
        for index in sorted(set(choice.tolist())):
            rows = (choice == index).nonzero().squeeze(1)
            part = self.members[index].logits(_rows(batch, rows)).to(self.device)
            if logits is None:
                logits = torch.empty(len(choice), part.shape[1], device=self.device)
            logits[rows.to(self.device)] = part
        return logits if logits is not None else torch.empty(0, self.num_classes, device=self.device)

    def draw(self, generators: Sequence[torch.Generator]) -> torch.Tensor:
        """One member index per generator, drawn with probability α."""
        alphas = self.probabilities
        return torch.stack([torch.multinomial(alphas, 1, generator=generator)[0] for generator in generators]) \
            if generators else torch.empty(0, dtype=torch.long)

    def weights_hash(self) -> str:
        parts = [f"{alpha!r}:{member.weights_hash()}" for alpha, member in zip(self.alphas, self.members)]
        return "sha256-" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


class Served(Classifier):
    """A randomized ensemble as deployed, for black-box attacks: every row of every query is
    answered by one member, drawn with probability α from ``generator`` (the caller seeds it per
    example and queries one example at a time). Its correctness is still the exact L."""

    def __init__(self, ensemble: Classifier, generator: torch.Generator) -> None:
        self.ensemble = ensemble
        self.generator = generator
        self.modality = ensemble.modality
        self.labels = ensemble.labels
        self.input_size = ensemble.input_size
        self.preprocessing = ensemble.preprocessing
        self.info = ensemble.info

    @property
    def device(self) -> torch.device:
        return self.ensemble.device

    def _forward(self, batch: Any) -> torch.Tensor:
        return self.ensemble.served_logits(batch, [self.generator] * len(batch))

    def correctness(self, batch: Any, labels: torch.Tensor, *, logits: torch.Tensor | None = None) -> torch.Tensor:
        return self.ensemble.correctness(batch, labels)

    def weights_hash(self) -> str:
        return self.ensemble.weights_hash()


def is_ensemble(model: Classifier) -> bool:
    """Whether ``model`` is a randomized ensemble, or a view of one (a temperature)."""
    return getattr(model, "alphas", None) is not None


def expected_accuracy(member_logits: torch.Tensor, labels: torch.Tensor, alphas: Sequence[float],
                      members: Sequence[int]) -> torch.Tensor:
    """Σ_i α_i · 1{argmax f_i = y} per example (a member tied at the top with y is not right:
    :func:`~suite.models.base.decide`), float32 on the CPU (summed in float64). A member
    whose row gives no answer (:func:`~suite.models.base.answered`: a NaN, a +inf) is not right
    on it, as in :meth:`Classifier.correctness`.

    Args:
        member_logits: M×N×C logits of ``members`` (indices into ``alphas``), in that order.
    """
    right = draws_right(member_logits.transpose(0, 1), labels).cpu().double()
    weights = torch.tensor([alphas[index] for index in members], dtype=torch.float64).view(1, -1)
    return (right * weights).sum(dim=1).float()


def check_probabilities(alphas: Sequence[float], members: int) -> None:
    """Refuse probabilities that do not make a distribution over ``members`` members."""
    if members == 0:
        raise ConfigError("an ensemble needs at least one member")
    if len(alphas) != members:
        raise ConfigError(f"an ensemble of {members} members needs {members} probabilities, got {len(alphas)}")
    if any(not (alpha >= 0 and alpha <= 1) for alpha in alphas):  # noqa: SIM300  (also refuses NaN)
        raise ConfigError(f"ensemble probabilities must lie in [0, 1], got {list(alphas)}")
    if abs(sum(alphas) - 1) > SUM_TOLERANCE:
        raise ConfigError(f"ensemble probabilities must sum to 1, got {sum(alphas):.9g} ({list(alphas)})")


def member_records(members: Sequence[Classifier], alphas: Sequence[float]) -> list[dict[str, Any]]:
    """What results record of each member: its name, revision and probability."""
    return [{"spec": member.info.name, "revision": member.info.revision, "probability": alpha}
            for member, alpha in zip(members, alphas)]


def common_threat_model(members: Sequence[Classifier]) -> Threat | None:
    """The threat model every member declares, or ``None`` (one declares none, or they differ)."""
    declared = {member.info.threat_model for member in members}
    return declared.pop() if len(declared) == 1 else None


def _revision(members: Sequence[Classifier], alphas: Sequence[float]) -> str | None:
    revisions = [member.info.revision for member in members]
    if any(revision is None for revision in revisions):
        return None
    text = "\n".join(f"{alpha!r}:{revision}" for alpha, revision in zip(alphas, revisions))
    return "ensemble-" + hashlib.sha256(text.encode()).hexdigest()[:12]


def _rows(batch: Any, rows: torch.Tensor) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch[rows.to(batch.device)]
    return [batch[row] for row in rows.tolist()]


def load_ensemble(name: str, config) -> RandomizedEnsemble:
    """``ensemble:<name>`` with its ``members`` (each a model config with a ``probability``)."""
    from suite.models import load_model

    members = config.members or ()
    # What the user allowed for the ensemble (on the CLI: --allow-pickle, --trust-remote-code,
    # --device) holds for its members unless a member says otherwise.
    loaded = [load_model(member.model_copy(update={
        "device": member.device or config.device,
        "allow_pickle": member.allow_pickle or config.allow_pickle,
        "trust_remote_code": member.trust_remote_code or config.trust_remote_code,
        "pretrained": member.pretrained and config.pretrained,
    })) for member in members]
    alphas = [member.probability for member in members]
    info = ModelInfo(spec=config.spec, revision=_revision(loaded, alphas),
                     extra={"members": member_records(loaded, alphas)}, threat_model=common_threat_model(loaded))
    return RandomizedEnsemble(loaded, alphas, info)
