"""Transfer attack: adversarial texts crafted on a source model, scored on the evaluated model.

The IoR paper (§5) uses transfer to show that a model's apparent robustness is an artefact of
its confidence: texts crafted on a normally calibrated model fool the extreme-temperature model
more often than an attack run on that model itself. Transfer is black-box with respect to the
evaluated model: it sees one query per example, the scoring of the final text.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field, PrivateAttr, field_validator

from suite.attacks.base import Attack, AttackOutput, register_attack
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
    adversary_temperature: ClassVar[bool] = False  # it searches on the source model
    source: str
    source_temperature: float = Field(1.0, gt=0, allow_inf_nan=False)
    attack: str = "deepwordbug"
    attack_params: dict[str, Any] = Field(default_factory=dict)
    _state: dict[str, Any] = PrivateAttr(default_factory=dict)

    @field_validator("attack")
    @classmethod
    def _text_attack(cls, name: str) -> str:
        from suite.attacks.base import ATTACKS

        if ATTACKS.get(name).modality != "text" or name == "transfer":
            raise ValueError(f"{name!r} is not a text attack that can run on a source model")
        return name

    @property
    def threat_model(self) -> str:
        return "word-level (transfer)"

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        return {"source": self.source, "source_temperature": self.source_temperature,
                **self._inner().budget(num_classes)}

    def _inner(self) -> Attack:
        if "inner" not in self._state:
            from suite.attacks import build_attack

            self._state["inner"] = build_attack(self.attack, self.attack_params)
        return self._state["inner"]

    def check_resources(self) -> None:
        check = getattr(self._inner(), "check_resources", None)
        if check is not None:
            check()

    def _source(self) -> Classifier:
        if "source" not in self._state:
            from suite.models import load_model
            from suite.models.config import ModelConfig

            self._state["source"] = load_model(ModelConfig(spec=self.source, temperature=self.source_temperature))
        return self._state["source"]

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        crafted = self._inner().run(self._source(), examples, seed)
        start = time.perf_counter()
        texts = [output.adversarial if isinstance(output.adversarial, str) else ex.input
                 for ex, output in zip(examples, crafted)]
        predictions = model.logits(texts).argmax(dim=1).tolist() if texts else []
        share = (time.perf_counter() - start) / max(1, len(texts))
        return [
            AttackOutput(success=int(pred) != ex.label, prediction=int(pred), perturbation=output.perturbation,
                         queries=1, seconds=output.seconds + share, adversarial=text)
            for ex, output, pred, text in zip(examples, crafted, predictions, texts)
        ]
