"""Transfer attack: adversarial texts crafted on a source model, scored on the evaluated model.

The IoR paper (§5) uses transfer to show that a model's apparent robustness is an artefact of
its confidence: texts crafted on a normally calibrated model fool the extreme-temperature model
more often than an attack run on that model itself. Transfer is black-box with respect to the
evaluated model: the only query it makes of that model is the scoring of its final text, which the
evaluation layer does, and each example is charged that one query.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field, PrivateAttr, field_validator

from suite.attacks.base import ATTACKS, Access, Attack, AttackOutput, Threat, build_attack, register_attack
from suite.data.base import Example
from suite.errors import ConfigError
from suite.models.base import Classifier
from suite.models.registry import BUILTIN_MODELS, spec_modality

#: Labels that name no class (transformers' default ``LABEL_0``...): ``suite.data.load``'s rule,
#: not imported from there since that module loads torch, which ``advsuite validate`` must not.
GENERIC_LABEL = re.compile(r"LABEL_\d+")


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

    @field_validator("source")
    @classmethod
    def _text_source(cls, spec: str) -> str:
        """What the spec alone shows (``advsuite validate`` sees it): an image model, or a
        built-in that does not exist, cannot be a source. The rest is :meth:`check_model`'s."""
        scheme, _, name = spec.partition(":")
        if scheme == "timm" or (scheme == "builtin" and name in BUILTIN_MODELS and spec_modality(spec) == "image"):
            raise ValueError(f"{spec!r} is an image model: the texts are crafted on a text model")
        if scheme == "builtin" and name not in BUILTIN_MODELS:
            raise ValueError(f"{spec!r} names no built-in model (see `advsuite ls models`)")
        return spec

    def check_model(self, model: Classifier) -> None:
        """Load the source now, while the tasks are prepared: a missing one (or one that is not
        a text model over the evaluated model's classes) fails before any task of a recipe runs,
        not after the tasks before it, or with a traceback. It is kept for :meth:`run`.

        The crafted texts aim at each example's label on the source, by index, so the source's
        classes must be the evaluated model's, in the same order: the same number, and the same
        names (case aside) where both name their classes."""
        source = self._source()
        if source.modality != "text":
            raise ConfigError(f"transfer source {self.source!r} takes {source.modality}: the texts are crafted on a "
                              "text model")
        ours, theirs = list(model.labels), list(source.labels)
        named = not any(all(GENERIC_LABEL.fullmatch(label) for label in labels) for labels in (ours, theirs))
        if len(ours) != len(theirs) or (named and [x.lower() for x in ours] != [x.lower() for x in theirs]):
            raise ConfigError(f"transfer source {self.source!r} has the classes ({', '.join(theirs[:10])}) and "
                              f"{model.info.name!r} the classes ({', '.join(ours[:10])}): texts crafted against one "
                              "class of the source would be scored against another; use a source with the same "
                              "classes in the same order")

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
