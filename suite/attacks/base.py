"""What an attack is and what it returns.

Attacks are small frozen objects: hyperparameters are typed, validated fields (unknown
parameters and negative budgets are refused), and :meth:`Attack.run` neither mutates the attack
nor touches global RNG state. Scoring (accuracy, worst case over attacks) happens in the
evaluation layer, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from suite.data.base import Example
from suite.models.base import Classifier
from suite.registry import Registry

ATTACKS: Registry = Registry("attack", list_command="advsuite ls attacks")


@dataclass(frozen=True)
class AttackOutput:
    """The outcome of attacking one example.

    Attributes:
        success: The served model misclassifies ``adversarial``.
        prediction: The served model's class for ``adversarial``.
        perturbation: Size of the change: the threat model's norm for images, the fraction of
            words changed for text.
        queries: Model queries spent (forward or forward+backward passes).
        seconds: Wall time spent on this example (its share of a batched run).
        adversarial: The adversarial input (tensor or string).
    """

    success: bool
    prediction: int
    perturbation: float
    queries: int
    seconds: float
    adversarial: Any = None


class Attack(BaseModel):
    """Base class of every registered attack: typed, frozen hyperparameters and :meth:`run`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: ClassVar[str]
    modality: ClassVar[str]
    #: Whether the attack can search on an adversary-temperature view of the model (the cal /
    #: opt adversaries of :mod:`suite.calibration`); a transfer attack cannot.
    adversary_temperature: ClassVar[bool] = True

    @property
    def threat_model(self) -> str:
        """The threat model recorded in results (``linf``, ``l2``, ``word-level``...)."""
        raise NotImplementedError

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        """Attack one batch of ``examples`` (all correctly classified); one output per example.

        All randomness for an example comes from ``(seed, attack name, example id)``, so the
        outputs do not depend on how examples are batched.
        """
        raise NotImplementedError

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        """The attack's budget as recorded in results (steps, restarts, query limits).

        ``num_classes`` lets attacks that iterate over target classes state their real budget.
        """
        return {}

    def params(self) -> dict[str, Any]:
        return self.model_dump()


def register_attack(name: str):
    """Register an :class:`Attack` subclass under ``name`` and set its ``name``."""

    def decorator(cls: type[Attack]) -> type[Attack]:
        cls.name = name
        ATTACKS.add(name, cls)
        return cls

    return decorator
