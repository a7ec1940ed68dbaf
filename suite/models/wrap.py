"""Models already in memory behind the :class:`Classifier` interface (the Python API).

- :func:`from_module`: a plain ``torch.nn.Module`` image classifier. It takes [0, 1] pixels
  unless ``mean``/``std`` say how it was trained to be normalised (normalisation then happens
  inside the wrapper, so attacks still see [0, 1] pixels).
- :func:`from_transformers`: a transformers sequence-classification model with its tokenizer.

Their revision is a hash of the weights, so a rerun into the same output directory resumes only
when the weights are the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from suite.errors import ConfigError, first_line
from suite.models.base import Classifier, ModelInfo, weights_hash


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
    _check_tensors(module)
    classes = _num_classes(module, size, mean, std)
    if labels is None:
        labels = [str(i) for i in range(classes)]
    elif len(labels) != classes:  # decided over all K logits while the results named len(labels) classes
        raise ConfigError(f"labels names {len(labels)} classes, but the module gives {classes} logits")
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


@contextmanager
def lent(model: Any) -> Iterator[None]:
    """Run with the caller's ``model`` in eval mode, and give it back as it was.

    Wrapping a module (:func:`from_module`, :func:`from_transformers`) puts it in eval mode,
    freezes its parameters (attacks need input gradients only) and moves it to the device; a
    plain module or a ``(model, tokenizer)`` pair handed to :func:`suite.evaluate` came back so
    (a model then trained further raised "element 0 of tensors does not require grad"). Inside,
    a classifier's module is in eval mode whatever the caller set since (a wrapped module put
    back in train mode was scored by its dropout and batch statistics, which it also updated);
    after, every submodule's mode, every parameter's ``requires_grad`` and a module's device
    (where it had one) are what they were."""
    modules = _caller_modules(model)
    modes = [(module, module.training) for root in modules for module in root.modules()]
    grads = [(parameter, parameter.requires_grad) for root in modules for parameter in root.parameters()]
    devices = [{tensor.device for tensor in (*root.parameters(), *root.buffers())} for root in modules]
    try:
        for root in modules:
            root.eval().requires_grad_(False)
        yield
    finally:
        for module, training in modes:
            module.training = training
        for parameter, requires_grad in grads:
            parameter.requires_grad_(requires_grad)
        for root, where in zip(modules, devices):
            if len(where) == 1:
                root.to(next(iter(where)))


def _caller_modules(model: Any) -> list[nn.Module]:
    """The modules of a model as the Python API takes it: a plain module, a ``(model, tokenizer)``
    pair's model, a classifier's module, an ensemble's members' modules."""
    if isinstance(model, nn.Module):
        return [model]
    if isinstance(model, tuple) and model and isinstance(model[0], nn.Module):
        return [model[0]]
    if isinstance(getattr(model, "module", None), nn.Module):
        return [model.module]
    if not isinstance(model, Classifier):  # a spec, a ModelConfig (whose members are specs): nothing of the caller's
        return []
    return [module for member in getattr(model, "members", None) or () for module in _caller_modules(member)]


def _check_tensors(module: nn.Module) -> None:
    """Refuse, in one line, weights the suite cannot run: on the meta device (never loaded), or
    floating point other than float32 (inputs and attacks are float32: a float64 module failed
    on its first batch with "Input type (float) and bias type (double) should be the same")."""
    tensors = [*module.parameters(), *module.buffers()]
    if any(tensor.is_meta for tensor in tensors):
        raise ConfigError("the module's weights are on the meta device (never loaded): load them first")
    other = sorted({str(tensor.dtype).removeprefix("torch.") for tensor in tensors
                    if tensor.is_floating_point() and tensor.dtype != torch.float32})
    if other:
        raise ConfigError(f"the module's weights are {', '.join(other)}: the suite runs image modules in float32 "
                          "(pass module.float(); --precision bf16 or fp16 runs a float32 module in lower precision)")


def _num_classes(module: nn.Module, size: tuple[int, int, int], mean, std) -> int:
    parameter = next(module.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    probe = ((torch.full((1, *size), 0.5) - torch.tensor(mean).view(1, -1, 1, 1)) / torch.tensor(std).view(1, -1, 1, 1))
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            logits = module(probe.to(device))
    except (RuntimeError, ValueError, TypeError, IndexError) as error:  # a 1-channel model given (3, H, W)
        raise ConfigError(f"the module fails on a 1×{'×'.join(map(str, size))} input (input_size {size}): "
                          f"{first_line(error)[:200]}") from error
    finally:
        module.train(was_training)
    if not isinstance(logits, torch.Tensor) or logits.ndim != 2 or logits.shape[1] < 2:
        raise ConfigError("the module must map an N×C×H×W batch to logits of shape N×K with K ≥ 2")
    return int(logits.shape[1])
