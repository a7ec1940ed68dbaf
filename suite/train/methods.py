"""Training methods: the base every method extends, and one registry keyed by (method, modality).

A method is a small frozen object (typed, validated knobs, like an attack). The loop asks one
thing of it per mini-batch, :meth:`TrainMethod.backward`: put the parameter gradients of one
optimiser step in ``.grad`` and say what the log averages (``loss``, and whatever else the method
reports). What a method perturbs is its modality's: pixels for image methods
(:mod:`suite.train.image_methods`, :mod:`suite.train.bat`), word embeddings for text methods
(:mod:`suite.train.text_methods`, :mod:`suite.train.ascc`). A name may name one method per
modality: ``standard`` is clean cross-entropy on images and on text.

Every method registers where it is defined, with :func:`register_method`; importing
:mod:`suite.train` imports every method's module, so the registry is complete.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from suite.data.base import Example
from suite.errors import ConfigError, UnknownNameError, format_validation_error
from suite.registry import unknown_name_message

if TYPE_CHECKING:
    from suite.models.trainable import Trainable
    from suite.train.config import TrainConfig

#: The most steps an inner attack may take: beyond it, a typo.
MAX_STEPS = 10_000
T = TypeVar("T", bound="TrainMethod")


class TrainMethod(BaseModel):
    """Base of every training method: one step's gradients (:meth:`backward`), plus the hooks
    the loop calls once per run. ``name`` and ``modality`` are set by :func:`register_method`
    and the modality's base class."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: ClassVar[str]
    modality: ClassVar[str]

    def backward(self, model: Trainable, inputs: Any, labels: torch.Tensor,
                 generators: list[torch.Generator]) -> dict[str, float]:
        """Put one mini-batch's parameter gradients in ``.grad`` (they start at zero).

        Args:
            model: The model under training, in train mode.
            inputs: The batch as the modality gives it (:meth:`suite.train.modality.Modality.batch`).
            labels: Class indices, shape N, on the model's device.
            generators: One per example, keyed by (seed, method, epoch, example id): every
                random start an example's attack draws comes from its own.

        Returns:
            What the log averages over the epoch: ``loss`` (the mean over the batch) at least.
        """
        raise NotImplementedError

    def clip_norm(self) -> float | None:
        """Clip the parameter gradient's global L2 norm to this before each step (``None``: never)."""
        return None

    def augment(self, examples: Sequence[Example], seed: int) -> list[Example]:
        """Examples added to the training set before the first epoch (``aug``); none by default."""
        return []

    def augment_log(self) -> dict[str, Any]:
        """What the first epoch's log line says about :meth:`augment`'s examples, beyond their count."""
        return {}

    def params(self) -> dict[str, Any]:
        return self.model_dump()

    def identity(self) -> dict[str, Any]:
        """What else decides the trained weights (a source model's weights, for ``bat`` and
        ``aug``); part of the run's identity."""
        return {}


class MethodRegistry:
    """Training methods keyed by (name, modality), registered at their definition.

    Args:
        list_command: The command that lists the methods, quoted in errors.
    """

    def __init__(self, list_command: str) -> None:
        self.list_command = list_command
        self._entries: dict[tuple[str, str], type[TrainMethod]] = {}

    def add(self, name: str, cls: type[TrainMethod]) -> None:
        """Register ``cls`` under (``name``, its modality); a second registration is an error."""
        key = (name, cls.modality)
        if key in self._entries and self._entries[key] is not cls:
            raise ValueError(f"{cls.modality} training method {name!r} is already registered")
        cls.name = name
        self._entries[key] = cls

    def get(self, name: str, modality: str) -> type[TrainMethod]:
        """The class of ``name`` for ``modality``; an unknown name is answered with the closest."""
        if (name, modality) in self._entries:
            return self._entries[(name, modality)]
        others = self.modalities(name)
        if others:
            raise UnknownNameError(f"training method {name!r} trains {' and '.join(others)} models, not {modality} "
                                   f"models; {modality} methods: {', '.join(self.names(modality))}. "
                                   f"See `{self.list_command}`.")
        raise UnknownNameError(unknown_name_message(f"{modality} training method", name, self.names(modality),
                                                    self.list_command))

    def names(self, modality: str | None = None) -> list[str]:
        """Method names, of one ``modality`` or of all."""
        return sorted({name for name, kind in self._entries if modality in (None, kind)})

    def modalities(self, name: str) -> list[str]:
        """The modalities that have a method ``name``."""
        return sorted(kind for entry, kind in self._entries if entry == name)

    def __contains__(self, key: object) -> bool:
        return key in self._entries


METHODS = MethodRegistry(list_command="advsuite train --help")


def register_method(name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator: register a method under (``name``, the modality of its base class)."""

    def decorator(cls: type[T]) -> type[T]:
        METHODS.add(name, cls)
        return cls

    return decorator


def build_method(name: str, modality: str, params: dict[str, Any] | None = None) -> TrainMethod:
    """A registered method of ``modality`` from its name and knobs, with one-line errors."""
    cls = METHODS.get(name, modality)
    try:
        return cls(**(params or {}))
    except ValidationError as error:
        raise ConfigError(f"training method {name!r}: {format_validation_error(error)}") from error


def method_for(config: TrainConfig) -> TrainMethod:
    """The run's method, for its model's modality; a method of the other modality is refused in
    one line that names the model and the methods it can take."""
    modality = config.modality
    others = METHODS.modalities(config.method)
    if others and modality not in others:
        article = "an" if modality[0] in "aeiou" else "a"
        raise ConfigError(f"training method {config.method!r} trains {others[0]} models and {config.model!r} is "
                          f"{article} {modality} model: use one of {', '.join(METHODS.names(modality))}")
    return build_method(config.method, modality, config.method_params)
