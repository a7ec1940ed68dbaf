"""Transfer attack: adversarial texts crafted on a source model, scored on the evaluated model.

The IoR paper (§5) uses transfer to show that a model's apparent robustness is an artefact of
its confidence: texts crafted on a normally calibrated model fool the extreme-temperature model
more often than an attack run on that model itself. Transfer is black-box with respect to the
evaluated model: the only query it makes of that model is the scoring of its final text, which the
evaluation layer does, and each example is charged that one query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field, PrivateAttr, field_validator

from suite.attacks.base import ATTACKS, Access, Attack, AttackOutput, Threat, build_attack, register_attack
from suite.data.base import Example
from suite.models.base import Classifier


@register_attack("transfer")
class Transfer(Attack):
    """Run ``attack`` on the ``source`` model; the texts it finds are scored on the evaluated model.

    Attributes:
        source: Model spec the adversarial texts are crafted on (``hf:...``, ``builtin:...``).
        source_temperature: Served temperature of the source model.
        attack: The text attack run on the source (any registered text attack).
        attack_params: Its hyperparameters.
    """

    modality: ClassVar[str] = "text"
    access: ClassVar[Access] = "transfer"  # it searches on the source model
    source: str
    source_temperature: float = Field(1.0, gt=0, allow_inf_nan=False)
    attack: str = "deepwordbug"
    attack_params: dict[str, Any] = Field(default_factory=dict)
    _state: dict[str, Any] = PrivateAttr(default_factory=dict)

    @field_validator("attack")
    @classmethod
    def _text_attack(cls, name: str) -> str:
        if ATTACKS.get(name).modality != "text" or name == "transfer":
            raise ValueError(f"{name!r} is not a text attack that can run on a source model")
        return name

    @property
    def threat(self) -> Threat:
        """The inner attack's threat: the texts come from the same set, found elsewhere."""
        return self._inner().threat

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        return {"source": self.source, "source_temperature": self.source_temperature,
                **self._inner().budget(num_classes)}

    def _inner(self) -> Attack:
        if "inner" not in self._state:
            self._state["inner"] = build_attack(self.attack, self.attack_params)
        return self._state["inner"]

    def check_resources(self) -> None:
        self._inner().check_resources()

    def _source(self) -> Classifier:
        if "source" not in self._state:
            from suite.models import load_model
            from suite.models.config import ModelConfig

            self._state["source"] = load_model(ModelConfig(spec=self.source, temperature=self.source_temperature))
        return self._state["source"]

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        crafted = self._inner().run(self._source(), examples, seed)
        return [
            AttackOutput(adversarial=output.adversarial, perturbation=output.perturbation, queries=1,
                         seconds=output.seconds)
            for output in crafted
        ]
