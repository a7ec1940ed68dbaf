"""Typed, frozen model options shared by the CLI and recipes."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

#: Device types accepted by ``device`` (``torch.device`` names; checked here without importing torch,
#: so validating a recipe stays fast). Whether the device exists is checked when the model loads.
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "hpu", "npu", "mtia")
_DEVICE = re.compile(rf"^(?:{'|'.join(DEVICE_TYPES)})(?::\d+)?$")


class ModelConfig(BaseModel):
    """How to build one classifier.

    Attributes:
        spec: ``hf:<hub id or local dir>``, ``timm:<name or local dir>`` or ``builtin:<name>``.
        revision: Hub revision (branch, tag or commit) for ``hf:`` models.
        checkpoint: ``timm:`` only: a safetensors weights file (replaces pretrained weights).
        num_classes: ``timm:`` only: classes of the model built for ``checkpoint`` (default: read
            from the checkpoint's classifier weights, else the architecture's 1000).
        pretrained: ``timm:`` only: download the named pretrained weights (needs the Hub).
        allow_pickle: Also load pickled weights (``pytorch_model.bin``, ``.pt``, ``.pth``, ``.ckpt``).
            Unsafe: unpickling a file can run arbitrary code. Off: safetensors only.
        temperature: Served (design) temperature T: the model serves logits / T. 1 = as trained.
        trust_remote_code: Run model code from the Hub; only when the user asks.
        max_length: Tokenizer truncation length for text models (default: the model's own).
        device: ``cpu``, ``cuda``, ``cuda:1``...; default CUDA when present.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: str
    revision: str | None = None
    checkpoint: str | None = None
    num_classes: StrictInt | None = Field(None, gt=0)
    pretrained: bool = True
    # Off by default: a pickle is a program, and a model file is untrusted input.
    allow_pickle: bool = False
    temperature: float = Field(1.0, gt=0, allow_inf_nan=False)
    trust_remote_code: bool = False
    max_length: int | None = Field(None, gt=0)
    device: str | None = None

    @field_validator("spec")
    @classmethod
    def _has_scheme(cls, spec: str) -> str:
        scheme, sep, rest = spec.partition(":")
        if not sep or not scheme or not rest:
            raise ValueError(
                f"model spec {spec!r} needs a scheme: hf:<hub id or dir>, timm:<name or dir> or builtin:<name>"
            )
        return spec

    @field_validator("device")
    @classmethod
    def _is_a_device(cls, device: str | None) -> str | None:
        if device is not None and not _DEVICE.match(device):
            raise ValueError(f"device {device!r} is not a device: use cpu, cuda or cuda:<index> "
                             f"(types: {', '.join(DEVICE_TYPES)})")
        return device

    @model_validator(mode="after")
    def _timm_only_options(self) -> ModelConfig:
        # A checkpoint the loader does not read would silently evaluate other weights.
        scheme = self.spec.partition(":")[0]
        if scheme != "timm":
            for name, value in (("checkpoint", self.checkpoint), ("num_classes", self.num_classes)):
                if value is not None:
                    raise ValueError(f"{name} ({value!r}) applies to timm: models only; {self.spec!r} would "
                                     f"ignore it: drop --{name.replace('_', '-')}")
        return self
