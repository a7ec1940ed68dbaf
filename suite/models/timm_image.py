"""timm image classifiers: ``timm:<model name>`` or ``timm:<local dir>``.

- ``timm:resnet18.a1_in1k`` builds the architecture with ``timm.create_model``; ``pretrained``
  fetches its weights from the Hub, ``checkpoint`` loads a safetensors file instead.
- ``timm:<dir>`` loads a directory in timm's Hub layout (``config.json`` with ``architecture``,
  ``num_classes``, ``pretrained_cfg``; weights in ``model.safetensors``), as written by
  :func:`save_timm_dir` and by timm's own ``save_for_hf``.

The pretrained config supplies mean, std and input size. Normalisation happens inside the
wrapper, so attacks see (and perturb) [0, 1] pixels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from suite.errors import SuiteError
from suite.models.base import ModelInfo, TorchClassifier, local_revision
from suite.models.config import ModelConfig

WEIGHTS_FILE = "model.safetensors"


class TimmImageClassifier(TorchClassifier):
    """A timm model fed [0, 1] pixels; mean/std normalisation is applied inside.

    Args:
        model: The timm model (any ``nn.Module`` mapping normalised N×C×H×W to logits).
        mean: Per-channel mean of the model's normalisation.
        std: Per-channel standard deviation.
        input_size: (channels, height, width) the model expects.
        labels: Class names.
        info: Identity recorded in results.
    """

    modality = "image"

    def __init__(
        self,
        model: nn.Module,
        mean: tuple[float, ...],
        std: tuple[float, ...],
        input_size: tuple[int, int, int],
        labels: list[str],
        info: ModelInfo,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(model, device)
        channels = input_size[0]
        self.mean = torch.tensor(mean, dtype=torch.float32, device=self.device).view(1, channels, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32, device=self.device).view(1, channels, 1, 1)
        self.input_size = tuple(int(v) for v in input_size)
        self.labels = labels
        self.info = info

    def _forward(self, batch: torch.Tensor) -> torch.Tensor:
        if batch.ndim != 4 or tuple(batch.shape[1:]) != self.input_size:
            raise ValueError(f"expected images of shape N×{'×'.join(map(str, self.input_size))}, got {tuple(batch.shape)}")
        batch = batch.to(self.device, torch.float32)
        return self.module((batch - self.mean) / self.std)


def _labels_for(num_classes: int, names: list[str] | None) -> list[str]:
    if names and len(names) == num_classes:
        return [str(name) for name in names]
    if num_classes == 1000:
        try:
            from timm.data import ImageNetInfo

            return list(ImageNetInfo().label_names())
        except Exception:  # older timm without ImageNetInfo: fall back to indices
            pass
    return [f"class_{i}" for i in range(num_classes)]


def _load_weights(model: nn.Module, path: Path) -> None:
    from safetensors.torch import load_file

    if path.suffix != ".safetensors":
        raise SuiteError(f"checkpoint {str(path)!r} is not a .safetensors file (pickled checkpoints are not loaded)")
    if not path.is_file():
        raise SuiteError(f"checkpoint {str(path)!r} does not exist")
    try:
        state = load_file(str(path))
        model.load_state_dict(state, strict=True)
    except (RuntimeError, OSError) as error:
        raise SuiteError(f"cannot load checkpoint {str(path)!r}: {str(error).splitlines()[0]}") from error


def _build(name: str, pretrained: bool, **kwargs: Any) -> nn.Module:
    import timm

    try:
        return timm.create_model(name, pretrained=pretrained, **kwargs)
    except RuntimeError as error:  # timm: "Unknown model (xyz)"
        message = str(error).splitlines()[0]
        if "Unknown model" in message:
            close = timm.list_models(f"*{name.split('.')[0][:6]}*")[:5]
            hint = f" Similar: {', '.join(close)}." if close else ""
            raise SuiteError(f"unknown timm model {name!r}.{hint} See timm.list_models().") from error
        raise SuiteError(f"cannot build timm model {name!r}: {message}") from error
    except OSError as error:  # weights not reachable (offline, no cache)
        raise SuiteError(f"cannot fetch pretrained weights for timm model {name!r}: {str(error).splitlines()[0]}") from error


def load_timm(name: str, config: ModelConfig) -> TimmImageClassifier:
    """Build a timm classifier from a model name (optionally with a checkpoint) or a local dir."""
    local = Path(name).expanduser()
    if local.is_dir():
        return _load_timm_dir(local, config)
    from timm.data import resolve_model_data_config

    pretrained = config.pretrained and config.checkpoint is None
    model = _build(name, pretrained=pretrained)
    revision = None
    if config.checkpoint:
        checkpoint = Path(config.checkpoint).expanduser()
        _load_weights(model, checkpoint)
        revision = local_revision(checkpoint.parent)
    data_config = resolve_model_data_config(model)
    info = ModelInfo(spec=f"timm:{name}", revision=revision, extra={"checkpoint": config.checkpoint})
    return TimmImageClassifier(
        model,
        mean=tuple(data_config["mean"]),
        std=tuple(data_config["std"]),
        input_size=tuple(data_config["input_size"]),
        labels=_labels_for(model.num_classes, None),
        info=info,
        device=config.device,
    )


def _load_timm_dir(directory: Path, config: ModelConfig) -> TimmImageClassifier:
    config_path = directory / "config.json"
    try:
        meta = json.loads(config_path.read_text())
        architecture = meta["architecture"]
    except (OSError, json.JSONDecodeError, KeyError) as error:
        raise SuiteError(f"{str(directory)!r} is not a timm model dir (needs config.json with 'architecture')") from error
    pretrained_cfg = meta.get("pretrained_cfg", {})
    kwargs = {key: meta[key] for key in ("num_classes", "in_chans", "global_pool") if key in meta}
    kwargs.update(meta.get("model_args", {}))
    model = _build(architecture, pretrained=False, **kwargs)
    _load_weights(model, Path(config.checkpoint).expanduser() if config.checkpoint else directory / WEIGHTS_FILE)
    input_size = tuple(pretrained_cfg.get("input_size", (kwargs.get("in_chans", 3), 224, 224)))
    channels = input_size[0]
    info = ModelInfo(
        spec=f"timm:{directory}", revision=local_revision(directory), extra={"architecture": architecture}
    )
    return TimmImageClassifier(
        model,
        mean=tuple(pretrained_cfg.get("mean", (0.5,) * channels)),
        std=tuple(pretrained_cfg.get("std", (0.5,) * channels)),
        input_size=input_size,
        labels=_labels_for(model.num_classes, meta.get("label_names")),
        info=info,
        device=config.device,
    )


def save_timm_dir(
    directory: Path,
    model: nn.Module,
    architecture: str,
    *,
    input_size: tuple[int, int, int],
    mean: tuple[float, ...],
    std: tuple[float, ...],
    label_names: list[str],
    model_args: dict[str, Any] | None = None,
) -> None:
    """Save a timm model as safetensors + ``config.json`` in timm's Hub layout."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    state = {key: value.detach().cpu().contiguous() for key, value in model.state_dict().items()}
    save_file(state, str(directory / WEIGHTS_FILE))
    meta = {
        "architecture": architecture,
        "num_classes": len(label_names),
        "in_chans": input_size[0],
        "label_names": label_names,
        "model_args": model_args or {},
        "pretrained_cfg": {"input_size": list(input_size), "mean": list(mean), "std": list(std)},
    }
    (directory / "config.json").write_text(json.dumps(meta, indent=2))
