"""Examples and the evaluation set they form."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Union

import torch

Input = Union[str, "torch.Tensor"]


#: Resampling filters an image may be resized with (timm's names; PIL has all six, tensors the
#: first three).
INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "box", "hamming", "lanczos")
CROP_MODES = ("center", "squash")


@dataclass(frozen=True)
class Preprocessing:
    """How an image of any size becomes the model's input size: timm's evaluation geometry
    (``timm.data.transforms_imagenet_eval``), whose ``crop_pct``, ``interpolation`` and
    ``crop_mode`` a timm model's ``pretrained_cfg`` gives.

    The image is resized to ``floor(size / crop_pct)``, its shorter side (``center``, the aspect
    ratio kept) or each side (``squash``), with ``interpolation``, and the centre cropped to the
    input size. timm's ``border`` mode (padding) is not implemented: refused where a model asks
    for it. The default is the suite's own (its built-in and trained models'): no margin cropped
    (``crop_pct`` 1), bilinear.
    """

    crop_pct: float = 1.0
    interpolation: str = "bilinear"
    crop_mode: str = "center"

    def problem(self) -> str | None:
        """What makes this preprocessing unusable, or ``None``."""
        if isinstance(self.crop_pct, bool) or not isinstance(self.crop_pct, (int, float)) \
                or not 0 < self.crop_pct <= 1:  # NaN too
            return f"crop_pct must be a number in (0, 1], got {self.crop_pct!r}"
        if self.interpolation not in INTERPOLATIONS:
            return f"interpolation must be one of {', '.join(INTERPOLATIONS)}, got {self.interpolation!r}"
        if self.crop_mode not in CROP_MODES:
            extra = " (timm's 'border' mode, which pads, is not implemented)" if self.crop_mode == "border" else ""
            return f"crop_mode must be one of {', '.join(CROP_MODES)}, got {self.crop_mode!r}{extra}"
        return None

    def as_dict(self) -> dict[str, float | str]:
        return {"crop_pct": self.crop_pct, "interpolation": self.interpolation, "crop_mode": self.crop_mode}


#: The suite's own models' preprocessing (and every model that declares none but timm's).
SUITE_PREPROCESSING = Preprocessing()


@dataclass(frozen=True)
class InputSpec:
    """What a model takes, all that data loading needs to know of it.

    Attributes:
        modality: ``text`` or ``image``.
        labels: The model's class names, in class-index order.
        input_size: Images: (channels, height, width) of [0, 1] pixels; ``None`` for text.
        name: The model's name, for messages.
        preprocessing: Images: how one of another size is resized and cropped to ``input_size``.
    """

    modality: str
    labels: tuple[str, ...]
    input_size: tuple[int, int, int] | None = None
    name: str = "the model"
    preprocessing: Preprocessing = SUITE_PREPROCESSING

    @property
    def num_classes(self) -> int:
        return len(self.labels)


class LazyInput(ABC):
    """An input read and transformed each time it is used, so that a split of any size is never
    held in memory (:class:`suite.data.images.DatasetImage`)."""

    @abstractmethod
    def load(self) -> torch.Tensor:
        """The input as the model takes it; the same tensor on every call."""


@dataclass(frozen=True, init=False)
class Example:
    """One labelled input with a stable id.

    ``Example(id, input, label)`` takes the input itself, or a :class:`LazyInput` that
    ``example.input`` loads on every read (images of ``datasets`` splits: the attacks, the
    scoring and the checks read a batch at a time, so memory is bounded by the batch, not by
    the split). A loaded input is not kept: that would hold the whole split again. Text,
    built-in datasets and in-memory tensors (small, or already in memory) are held as given.

    Attributes:
        id: Stable across runs, subsample sizes and processes (the row's position in its split,
            or the dataset's own id).
        source: What was given as ``input``: the input, or the :class:`LazyInput` that reads it.
        label: Class index into the model's labels.
    """

    id: str
    source: Input | LazyInput
    label: int

    def __init__(self, id: str, input: Input | LazyInput, label: int) -> None:  # noqa: A002 - the field's name
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "source", input)
        object.__setattr__(self, "label", label)

    @property
    def input(self) -> Input:
        """A string (text) or a C×H×W float tensor in [0, 1] (image), loaded now if lazy."""
        source = self.source
        return source.load() if isinstance(source, LazyInput) else source


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
