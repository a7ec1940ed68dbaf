"""What an attack is, what it declares about itself, and what it returns.

Attacks are small frozen objects: hyperparameters are typed, validated fields (unknown
parameters and negative budgets are refused), and :meth:`Attack.run` neither mutates the attack
nor touches global RNG state.

An attack returns, per example, the adversarial input, its perturbation size, queries and
seconds (:class:`AttackOutput`). It gives **no verdict**: the evaluation layer scores every
adversarial input on the served model, the same way for every modality
(:mod:`suite.evaluation.scoring`).

What an attack is allowed to do and what its number means is typed metadata, never parsed from
strings:

- :attr:`Attack.threat` (:class:`Threat`): the norm and ε of the ball, the edit level of a text
  attack, and for a distributional attack the Wasserstein order p and its budget or κ;
- :attr:`Attack.access`: ``white-box`` (gradients), ``black-box`` (scores only) or ``transfer``
  (crafted on another model, the evaluated model only scores the result);
- :attr:`Attack.metric`: ``pointwise`` (each example in its own ball: its records enter the
  worst case over attacks) or ``distributional`` (a budget shared by all examples: the attack
  computes its metric in :meth:`Attack.aggregate` once every process's records are gathered,
  and that metric is reported on its own, never in the point-wise worst case).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from suite.data.base import Example
from suite.errors import ConfigError, SuiteError, format_validation_error
from suite.models.base import Classifier
from suite.registry import Registry
from suite.threat import Access, Metric, TextLevel, Threat

__all__ = ["ATTACKS", "Access", "Attack", "AttackOutput", "InfeasibleError", "Metric", "TextLevel", "Threat",
           "build_attack", "register_attack"]

ATTACKS: Registry = Registry("attack", list_command="advsuite ls attacks")

@dataclass(frozen=True)
class AttackOutput:
    """What an attack found for one example. No verdict: the evaluation layer scores it.

    Attributes:
        adversarial: The adversarial input (a C×H×W tensor in [0, 1], or a string).
        perturbation: Size of the change: the threat model's norm for images, the fraction of
            words changed for text.
        queries: Model queries spent (forward or forward+backward passes); for a TextAttack
            recipe, what its query budget counts (texts its cache answered included).
        seconds: Wall time spent on this example (its share of a batched run).
        extras: Anything else the attack wants recorded (JSON-serialisable), such as the
            distance a distributional attack needed.
        forward_rows: Text attacks: the rows the search sent to the model (texts scored, one
            per gradient), when it differs in kind from ``queries``; ``None`` otherwise.
    """

    adversarial: Any
    perturbation: float
    queries: int
    seconds: float
    extras: dict[str, Any] = field(default_factory=dict)
    forward_rows: int | None = None


#: Largest integer hyperparameter an attack accepts.
MAX_COUNT = 10_000_000


class InfeasibleError(SuiteError):
    """A distributional attack's aggregate does not fit its budget (raised by :meth:`Attack.aggregate`)."""


class Attack(BaseModel):
    """Base class of every registered attack: typed, frozen hyperparameters and :meth:`run`.

    Subclasses set the class variables :attr:`name` (by :func:`register_attack`),
    :attr:`modality`, :attr:`access` and :attr:`metric`, and implement :attr:`threat` and
    :meth:`run`. The hooks :meth:`check_resources`, :meth:`budget` and :meth:`aggregate` have
    defaults that do nothing.
    """

    # Strict: ``steps: true`` or ``steps: 1e26`` is refused, not coerced (an int field takes
    # integers only; a float field takes numbers).
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: ClassVar[str]
    modality: ClassVar[str]
    access: ClassVar[Access] = "white-box"
    metric: ClassVar[Metric] = "pointwise"
    #: ``ensemble``: the attack runs on randomized ensembles only (:meth:`check_model` refuses
    #: other models); ``None``: on any model of its modality.
    requires: ClassVar[str | None] = None
    #: Bumped whenever a change to the attack changes what it finds for the same
    #: hyperparameters: part of a run's identity, so records of the old version are not resumed.
    version: ClassVar[int] = 1
    #: Whether the runner streams the examples through :meth:`stream` instead of running batches.
    streams: ClassVar[bool] = False

    @model_validator(mode="after")
    def _sane_counts(self) -> Attack:
        # Step, restart, query and target counts beyond this would run for years: a typo.
        for name, value in self:
            if isinstance(value, int) and not isinstance(value, bool) and value > MAX_COUNT:
                raise ValueError(f"{name} = {value} is more than {MAX_COUNT:,}")
        return self

    @property
    def threat(self) -> Threat:
        """The threat model (norm and ε, text level, Wasserstein order and budget)."""
        raise NotImplementedError

    @property
    def searches_on_model(self) -> bool:
        """Whether the search queries the model it is given, so that an adversary-temperature
        view of that model changes it (a transfer attack searches on its source model)."""
        return self.access != "transfer"

    @property
    def loss_reduction(self) -> str | None:
        """How the attack reduces per-example losses over a batch (``sum``/``mean``), if it
        computes them itself; ``None`` otherwise. The sanity checks read it."""
        return None

    @property
    def batch_dependent(self) -> bool:
        """Whether which examples share a batch is part of the attack's numbers: a loss averaged
        over the batch (``reduction: mean``), or draws seeded per batch (the torchattacks
        baselines). Such an attack runs in fixed batches of the run's batch size, in evaluation
        order, whatever the process count or resume; a batch that runs out of memory is not
        halved, and the batch size is part of the run's identity."""
        return self.loss_reduction == "mean"

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        """Attack one batch of ``examples`` (all with correctness > 0); one output per example.

        All randomness for an example comes from ``(seed, attack name, example id)``, so the
        outputs do not depend on how examples are batched (unless :attr:`batch_dependent`).
        """
        raise NotImplementedError

    def stream(self, model: Classifier, examples: Sequence[Example], seed: int, window: int
               ) -> Iterator[list[tuple[int, AttackOutput]]]:
        """Attacks that set :attr:`streams` (text recipes, whose examples finish one by one):
        attack ``examples`` with at most ``window`` of them under way at once, yielding
        ``(index in examples, output)`` pairs as they finish, so that the caller records each at
        once and the next example starts in its place. The outputs are :meth:`run`'s."""
        raise NotImplementedError

    def check_model(self, model: Classifier) -> None:
        """Raise a one-line :class:`~suite.errors.ConfigError` if the attack cannot run on
        ``model`` (the REC attacks need a randomized ensemble). Checked before anything runs;
        nothing by default."""

    def check_resources(self) -> None:
        """Raise a one-line :class:`~suite.errors.ResourceMissingError` if something the attack
        needs on disk is missing (before anything runs). Nothing by default."""

    def rows_per_example(self, num_classes: int) -> int | None:
        """Model rows one example takes in the attack's widest forward+backward pass (a
        targeted search over K targets at once: K), what ``--batch-size auto`` probes for
        (:mod:`suite.evaluation.batching`): one for an image attack unless it says otherwise;
        ``None`` (text: candidates are batched inside the model wrapper): nothing is probed."""
        return 1 if self.modality == "image" else None

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        """The attack's budget as recorded in results (steps, restarts, query limits).

        ``num_classes`` lets attacks that iterate over target classes state their real budget.
        """
        return {}

    def aggregate(self, clean: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The metric of a distributional attack over every example, after the gather.

        Args:
            clean: Clean records of every example, in evaluation order (``correct`` in [0, 1]).
            records: This attack's records of the examples it attacked, in evaluation order
                (``robust`` in [0, 1], ``perturbation`` and any extras).

        Returns:
            At least ``{"accuracy": float in [0, 1]}``; more keys are recorded as they are.
            Raises :class:`InfeasibleError` when the result does not fit the budget.
        """
        raise NotImplementedError(f"{self.name} is a {self.metric} attack and has no aggregate")

    def params(self) -> dict[str, Any]:
        return self.model_dump()


def register_attack(name: str):
    """Register an :class:`Attack` subclass under ``name`` and set its ``name``."""

    def decorator(cls: type[Attack]) -> type[Attack]:
        cls.name = name
        ATTACKS.add(name, cls)
        return cls

    return decorator


def build_attack(name: str, params: dict | None = None) -> Attack:
    """Build a registered attack from its name and hyperparameters, with one-line errors."""
    cls = ATTACKS.get(name)
    try:
        return cls(**(params or {}))
    except ValidationError as error:
        raise ConfigError(f"attack {name!r}: {format_validation_error(error)}") from error
