"""Models already in memory behind the :class:`Classifier` interface (the Python API).

- :func:`from_module`: a plain ``torch.nn.Module`` image classifier. It takes [0, 1] pixels
  unless ``mean``/``std`` say how it was trained to be normalised (normalisation then happens
  inside the wrapper, so attacks still see [0, 1] pixels).
- :func:`from_transformers`: a transformers sequence-classification model with its tokenizer.

Their revision is a hash of the weights, so a rerun into the same output directory resumes only
when the weights are the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from suite.errors import ConfigError
from suite.models.base import ModelInfo, weights_hash


def from_module(module: nn.Module, *, input_size: Sequence[int], mean: Sequence[float] | None = None,
                std: Sequence[float] | None = None, labels: Sequence[str] | None = None, name: str | None = None,
                device: torch.device | str | None = None):
    """An image :class:`Classifier` around ``module``.

    Args:
        module: Maps normalised N×C×H×W float tensors to logits N×K (not probabilities).
        input_size: (channels, height, width) it takes.
        mean, std: Per-channel normalisation it expects; default none ([0, 1] pixels as they are).
        labels: Class names; default ``0`` … ``K−1`` (K read from one forward pass).
        name: Name recorded in results; default ``module:<class name>``.
        device: Where to run; default CUDA when present.
    """
    from suite.models.timm_image import TimmImageClassifier

    if not isinstance(module, nn.Module):
        raise ConfigError(f"expected a torch.nn.Module, got {type(module).__name__}")
    size = tuple(int(value) for value in input_size)
    if len(size) != 3 or min(size) <= 0:
        raise ConfigError(f"input_size must be (channels, height, width), got {tuple(input_size)}")
    channels = size[0]
    mean = tuple(mean) if mean is not None else (0.0,) * channels
    std = tuple(std) if std is not None else (1.0,) * channels
    if len(mean) != channels or len(std) != channels or min(std) <= 0:
        raise ConfigError(f"mean and std need {channels} values each (std > 0)")
    if labels is None:
        labels = [str(i) for i in range(_num_classes(module, size, mean, std))]
    info = ModelInfo(spec=name or f"module:{type(module).__name__}", revision=weights_hash(module),
                     extra={"class": f"{type(module).__module__}.{type(module).__qualname__}"})
    return TimmImageClassifier(module, mean=mean, std=std, input_size=size, labels=list(labels), info=info,
                               device=device)


def from_transformers(model, tokenizer, *, name: str | None = None, max_length: int | None = None,
                      device: torch.device | str | None = None):
    """A text :class:`Classifier` around a transformers sequence classifier and its tokenizer."""
    from suite.models.hf_text import HFTextClassifier, prepare_tokenizer

    if not hasattr(model, "config") or not hasattr(model, "get_input_embeddings"):
        raise ConfigError(f"expected a transformers sequence-classification model, got {type(model).__name__}")
    if not callable(tokenizer):
        raise ConfigError(f"expected a transformers tokenizer, got {type(tokenizer).__name__}")
    prepare_tokenizer(model, tokenizer)
    source = getattr(model, "name_or_path", "") or type(model).__name__
    info = ModelInfo(spec=name or f"transformers:{source}", revision=weights_hash(model),
                     extra={"architecture": getattr(model.config, "architectures", None)})
    return HFTextClassifier(model, tokenizer, info, max_length=max_length, device=device)


def _num_classes(module: nn.Module, size: tuple[int, int, int], mean, std) -> int:
    parameter = next(module.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    probe = ((torch.full((1, *size), 0.5) - torch.tensor(mean).view(1, -1, 1, 1)) / torch.tensor(std).view(1, -1, 1, 1))
    was_training = module.training
    module.eval()
    with torch.no_grad():
        logits = module(probe.to(device))
    module.train(was_training)
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or logits.shape[1] < 2:
        raise ConfigError("the module must map an N×C×H×W batch to logits of shape N×K with K ≥ 2")
    return int(logits.shape[1])
