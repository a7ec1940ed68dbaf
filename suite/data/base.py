"""Examples and the evaluation set they form."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import torch

Input = Union[str, "torch.Tensor"]


@dataclass(frozen=True)
class InputSpec:
    """What a model takes, all that data loading needs to know of it.

    Attributes:
        modality: ``text`` or ``image``.
        labels: The model's class names, in class-index order.
        input_size: Images: (channels, height, width) of [0, 1] pixels; ``None`` for text.
        name: The model's name, for messages.
    """

    modality: str
    labels: tuple[str, ...]
    input_size: tuple[int, int, int] | None = None
    name: str = "the model"

    @property
    def num_classes(self) -> int:
        return len(self.labels)


@dataclass(frozen=True)
class Example:
    """One labelled input with a stable id.

    Attributes:
        id: Stable across runs, subsample sizes and processes (the row's position in its split,
            or the dataset's own id).
        input: A string (text) or a C×H×W float tensor in [0, 1] (image).
        label: Class index into the model's labels.
    """

    id: str
    input: Input
    label: int


@dataclass
class EvalSet:
    """The examples of one run and where they came from."""

    spec: str
    split: str
    modality: str
    examples: list[Example]
    size: int  # rows in the split before subsampling
    label_names: list[str] | None = None
    fingerprint: str | None = None
    columns: dict[str, str] = field(default_factory=dict)

    @property
    def ids(self) -> list[str]:
        return [example.id for example in self.examples]

    def __len__(self) -> int:
        return len(self.examples)
