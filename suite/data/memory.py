"""Examples held in memory (the Python API): tensors of images or lists of texts, with labels.

Unlike image datasets read through ``datasets`` (decoded per access, :mod:`suite.data.images`),
these stay in memory as tensors: the caller already holds them, so reading them lazily would
save nothing.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from collections.abc import Sequence
from typing import Any

import torch

from suite.data.base import EvalSet, Example, InputSpec
from suite.data.load import check_labels, conform_image, subsample_indices
from suite.errors import DataError


def fingerprint(inputs: Sequence[Any] | torch.Tensor, labels: Sequence[int]) -> str:
    """A content hash of in-memory examples (what a rerun with the same data resumes on)."""
    digest = hashlib.sha256()
    if isinstance(inputs, torch.Tensor):
        digest.update(str(tuple(inputs.shape)).encode())
        digest.update(inputs.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    else:
        for text in inputs:
            digest.update(text.encode("utf-8") + b"\x00")
    digest.update(",".join(map(str, labels)).encode())
    return "memory-" + digest.hexdigest()[:16]


def in_memory_eval_set(inputs: Sequence[str] | torch.Tensor, labels: Sequence[int] | torch.Tensor, model: InputSpec,
                       *, n: int | None = None, seed: int = 0, split: str = "memory") -> EvalSet:
    """An :class:`EvalSet` from in-memory inputs and labels, checked against what the model takes.

    Args:
        inputs: ``list[str]`` for a text model; an N×C×H×W float tensor in [0, 1] (or N×H×W)
            for an image model (resized to its input size when it differs).
        labels: Class index per input.
        model: What the model takes.
        n: Evaluate a seeded subsample of n examples (ids stay the row positions).
        seed: Seed of that subsample.
    """
    if isinstance(labels, torch.Tensor) and labels.is_meta or isinstance(inputs, torch.Tensor) and inputs.is_meta:
        raise DataError("the inputs or labels are on the meta device (they hold no values): pass real tensors")
    if isinstance(inputs, torch.Tensor):
        inputs = inputs.detach()  # images that require grad: read as values, without torch's warning
    labels = [_label(label) for label in (labels.tolist() if hasattr(labels, "tolist") else labels)]  # numpy's too
    if model.modality == "text":
        if isinstance(inputs, (str, torch.Tensor)) or not all(isinstance(text, str) for text in inputs):
            raise DataError(f"{model.name!r} is a text model: pass its inputs as a list of strings")
        for row, text in enumerate(inputs):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as error:  # a lone surrogate: no tokenizer, record or file can hold it
                raise DataError(f"text {row} holds {text[error.start]!a} at character {error.start}, a lone "
                                "surrogate, which is not Unicode text (decode its bytes with errors='replace')"
                                ) from None
    elif not isinstance(inputs, torch.Tensor) or inputs.ndim not in (3, 4) or not inputs.is_floating_point():
        raise DataError(f"{model.name!r} is an image model: pass its inputs as an N×C×H×W float tensor in [0, 1]")
    elif inputs.numel() and not bool(torch.isfinite(inputs).all()):
        raise DataError("image inputs must be pixels in [0, 1]: they hold NaN or infinite values")
    elif inputs.numel() and (float(inputs.min()) < 0 or float(inputs.max()) > 1):
        raise DataError("image inputs must be pixels in [0, 1] (the model normalises them itself)")
    if len(inputs) != len(labels):
        raise DataError(f"{len(inputs)} inputs but {len(labels)} labels")
    rows = subsample_indices(len(labels), n, seed)
    def conformed(row: int) -> Any:
        if model.modality == "text":
            return inputs[row]
        return conform_image(inputs[row], model.input_size, preprocessing=model.preprocessing)

    examples = [Example(str(row), conformed(row), labels[row]) for row in rows]
    check_labels(examples, model, "in-memory data")
    return EvalSet(spec="memory", split=split, modality=model.modality, examples=examples, size=len(labels),
                   label_names=list(model.labels), fingerprint=fingerprint(inputs, labels))


def _label(value: object) -> int:
    """A class index: a whole number (``int(0.5)`` was 0: a fractional label silently became
    another class, where a file's is refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or value != int(value):
        raise DataError(f"label {value!r} is not a class index (a whole number)")
    return int(value)
