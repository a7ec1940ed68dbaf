"""A timm model directory in timm's Hub layout: its ``config.json`` validated, and writing one.

``config.json`` holds ``architecture``, ``num_classes``, ``pretrained_cfg`` (input size, mean,
std) and optionally ``label_names`` and ``model_args``; the weights are ``model.safetensors``.
:func:`save_timm_dir` writes the layout, as timm's own ``save_for_hf`` does;
:mod:`suite.models.timm_image` loads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, model_validator
from torch import nn

from suite.data.base import SUITE_PREPROCESSING, Preprocessing
from suite.errors import ConfigError, first_line, format_validation_error
from suite.models.config import TIMM_FILE_ARGS, input_size_problem

WEIGHTS_FILE = "model.safetensors"

# Strict: a config file holding "10" or true where a number belongs is a mistake, not a number.
_Count = Annotated[StrictInt, Field(gt=0)]
_Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]
_Scale = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]


class PretrainedCfg(BaseModel):
    """The part of timm's ``pretrained_cfg`` that decides preprocessing."""

    model_config = ConfigDict(extra="ignore")  # timm writes many more keys (url, license...)

    input_size: tuple[_Count, _Count, _Count] | None = None
    mean: tuple[_Finite, ...] | None = None
    std: tuple[_Scale, ...] | None = None
    # timm's evaluation geometry; absent, timm's defaults (0.875, bicubic, center).
    crop_pct: _Scale | None = None
    interpolation: StrictStr | None = None
    crop_mode: StrictStr | None = None




class TimmDirConfig(BaseModel):
    """``config.json`` of a timm model directory (timm's Hub layout), validated."""

    model_config = ConfigDict(extra="ignore")  # timm's save_for_hf adds num_features and others

    architecture: Annotated[StrictStr, Field(min_length=1)]
    num_classes: _Count | None = None
    in_chans: _Count | None = None
    global_pool: StrictStr | None = None
    label_names: list[StrictStr] | None = None
    model_args: dict[str, Any] = Field(default_factory=dict)
    pretrained_cfg: PretrainedCfg = Field(default_factory=PretrainedCfg)

    @model_validator(mode="after")
    def _consistent(self) -> TimmDirConfig:
        channels = self.channels
        if self.in_chans is not None and channels != self.in_chans:
            raise ValueError(f"pretrained_cfg.input_size has {channels} channels but in_chans is {self.in_chans}")
        for key in ("mean", "std"):
            values = getattr(self.pretrained_cfg, key)
            if values is not None and len(values) != channels:
                raise ValueError(f"pretrained_cfg.{key} has {len(values)} values for {channels} channel(s)")
        if self.label_names is not None and self.num_classes is not None and len(self.label_names) != self.num_classes:
            raise ValueError(f"label_names has {len(self.label_names)} names for {self.num_classes} classes")
        if self.label_names is not None and len(set(self.label_names)) != len(self.label_names):
            raise ValueError("label_names names a class twice: labels given by name would be ambiguous")
        # The directory's weights are the model: timm must neither fetch others nor read a file.
        fetched = sorted(key for key in self.model_args
                         if key in ("pretrained", "pretrained_cfg", *TIMM_FILE_ARGS))
        if fetched:
            raise ValueError(f"model_args sets {', '.join(fetched)}: the directory's own weights are the model's "
                             "(timm would load or fetch others); remove it")
        size = self.pretrained_cfg.input_size
        if size is not None and (problem := input_size_problem(size)):
            raise ValueError(f"pretrained_cfg.input_size {list(size)} {problem}")
        return self

    @property
    def channels(self) -> int:
        size = self.pretrained_cfg.input_size
        return size[0] if size is not None else (self.in_chans or 3)

    @property
    def input_size(self) -> tuple[int, int, int]:
        return self.pretrained_cfg.input_size or (self.channels, 224, 224)

    def build_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``timm.create_model`` (``model_args`` last: it overrides)."""
        kwargs = {key: getattr(self, key) for key in ("num_classes", "in_chans", "global_pool")}
        return {key: value for key, value in kwargs.items() if value is not None} | self.model_args


#: The largest ``config.json`` read (label names for 100,000 classes fit many times over).
CONFIG_BYTES = 16 * 2**20


def read_dir_config(directory: Path) -> TimmDirConfig:
    """The validated ``config.json`` of a timm model directory (one-line errors)."""
    path = directory / "config.json"
    try:
        if path.is_file() and path.stat().st_size > CONFIG_BYTES:  # read whole: 200 MB took 1 GB of memory
            raise ConfigError(f"{str(path)!r} holds {path.stat().st_size:,} bytes: a timm config is a few KB")
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:  # [[[…]]] 100,000 deep
        raise ConfigError(f"{str(directory)!r} is not a timm model directory: it needs a config.json (JSON with "
                          f"'architecture'); reading it gave: {first_line(error)}") from error
    if not isinstance(meta, dict):
        raise ConfigError(f"{str(path)!r} holds a JSON {type(meta).__name__}, not a mapping with 'architecture'")
    try:
        return TimmDirConfig.model_validate(meta)
    except ValidationError as error:
        raise ConfigError(f"{str(path)!r} is not a valid timm config: {format_validation_error(error)}") from error


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
    preprocessing: Preprocessing = SUITE_PREPROCESSING,
) -> None:
    """Save a timm model as safetensors + ``config.json`` in timm's Hub layout, with the
    preprocessing it was trained with (written out: timm's defaults are not the suite's)."""
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
        "pretrained_cfg": {"input_size": list(input_size), "mean": list(mean), "std": list(std),
                           **preprocessing.as_dict()},
    }
    (directory / "config.json").write_text(json.dumps(meta, indent=2))
