"""Typed, frozen model options shared by the CLI and recipes."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

#: Device types accepted by ``device`` (``torch.device`` names; checked here without importing torch,
#: so validating a recipe stays fast). Whether the device exists is checked when the model loads.
DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "hpu", "npu", "mtia")
_DEVICE = re.compile(rf"^(?:{'|'.join(DEVICE_TYPES)})(?::\d+)?$")


#: The largest input a timm model may take (a model directory's declared size, a fresh
#: architecture's --input-size): an image of this many pixels is 256 MiB per channel in float32,
#: and every example is resized to it.
MAX_PIXELS = 8192 * 8192
MAX_CHANNELS = 64
#: ``timm.create_model`` arguments that make timm read a file itself, past the suite's checks
#: (safetensors only): a timm directory's ``model_args`` and training refuse them.
TIMM_FILE_ARGS = ("checkpoint_path", "pretrained_cfg_overlay")


def input_size_problem(size: tuple[int, int, int]) -> str | None:
    """Why no model may take inputs of ``size`` (C, H, W), or ``None``: what follows the size in
    a one-line refusal."""
    if size[0] > MAX_CHANNELS or size[1] * size[2] > MAX_PIXELS:
        return (f"is beyond what advsuite takes (at most {MAX_CHANNELS} channels and {MAX_PIXELS:,} pixels, "
                "8192x8192): one image alone would not fit in memory")
    return None


def check_device(device: str | None) -> str | None:
    """``device`` if it names a device type the suite places models on (or is unset)."""
    if device is not None and not _DEVICE.match(device):
        raise ValueError(f"device {device!r} is not a device: use cpu, cuda or cuda:<index> "
                         f"(types: {', '.join(DEVICE_TYPES)})")
    return device


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
        members: ``ensemble:`` only: the members of a randomized ensemble, each a model config
            with a ``probability`` (:class:`MemberConfig`). The spec may give them inline
            instead: ``ensemble:0.7*builtin:a,0.3*builtin:b``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: str
    revision: str | None = None
    checkpoint: str | None = None
    num_classes: StrictInt | None = Field(None, gt=0)
    pretrained: bool = True
    # Off by default: a pickle is a program, and a model file is untrusted input.
    allow_pickle: bool = False
    temperature: float = Field(1.0, gt=0, allow_inf_nan=False, strict=True)
    trust_remote_code: bool = False
    max_length: int | None = Field(None, gt=0, strict=True)
    device: str | None = None
    members: tuple[MemberConfig, ...] | None = None

    @model_validator(mode="before")
    @classmethod
    def _inline_members(cls, data: Any) -> Any:
        # ensemble:0.7*builtin:a,0.3*builtin:b (the CLI's form) gives the members in the spec.
        if isinstance(data, dict) and isinstance(data.get("spec"), str) and data.get("members") is None:
            scheme, _, rest = data["spec"].partition(":")
            if scheme == "ensemble" and "*" in rest:
                data = {**data, "members": inline_members(rest)}
        return data

    @field_validator("spec")
    @classmethod
    def _has_scheme(cls, spec: str) -> str:
        scheme, sep, rest = spec.partition(":")
        if sep and scheme and not rest.strip():
            raise ValueError(f"model spec {spec!r} names no model after {scheme + ':'!r}: e.g. hf:<hub id or dir>, "
                             "timm:<name or dir>, builtin:<name>")
        if not sep or not scheme or not rest:
            raise ValueError(
                f"model spec {spec!r} needs a scheme: hf:<hub id or dir>, timm:<name or dir>, builtin:<name> "
                f"or ensemble:<p>*<spec>,<p>*<spec>..."
            )
        return spec

    @field_validator("device")
    @classmethod
    def _is_a_device(cls, device: str | None) -> str | None:
        return check_device(device)

    @model_validator(mode="after")
    def _ensemble_members(self) -> ModelConfig:
        is_ensemble = self.spec.partition(":")[0] == "ensemble"
        if is_ensemble and not self.members:
            raise ValueError(f"{self.spec!r} lists no members: give members (each a spec with a probability), "
                             f"or inline ones: ensemble:0.7*builtin:a,0.3*builtin:b")
        if not is_ensemble and self.members is not None:
            raise ValueError(f"members apply to ensemble: models only, not {self.spec!r}")
        if is_ensemble:
            for name in ("revision", "checkpoint", "num_classes", "max_length"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} applies to an ensemble's members, not to the ensemble {self.spec!r}")
            total = sum(member.probability for member in self.members)
            if abs(total - 1) > 1e-6:
                raise ValueError(f"ensemble probabilities must sum to 1, got {total:.9g}")
        return self

    @model_validator(mode="after")
    def _timm_only_options(self) -> ModelConfig:
        # A checkpoint the loader does not read would silently evaluate other weights.
        scheme = self.spec.partition(":")[0]
        if scheme != "timm":
            for name, value in (("checkpoint", self.checkpoint), ("num_classes", self.num_classes)):
                if value is not None:
                    raise ValueError(f"{name} ({value!r}) applies to timm: models only; {self.spec!r} would "
                                     f"ignore it: drop --{name.replace('_', '-')}")
            if not self.pretrained:  # random weights asked for, and the trained ones evaluated
                raise ValueError(f"pretrained (False) applies to timm: models only; {self.spec!r} would ignore it: "
                                 "drop --no-pretrained")
        return self


class MemberConfig(ModelConfig):
    """One member of an ``ensemble:``: a model config and the probability α_i of drawing it."""

    probability: float = Field(ge=0, le=1, allow_inf_nan=False, strict=True)

    @model_validator(mode="after")
    def _not_an_ensemble(self) -> MemberConfig:
        if self.spec.partition(":")[0] == "ensemble":
            raise ValueError(f"ensemble members cannot be ensembles ({self.spec!r}): list their members instead")
        return self


ModelConfig.model_rebuild()


def inline_members(text: str) -> list[dict[str, Any]]:
    """``0.7*builtin:a,0.3*builtin:b`` → member mappings (one-line errors as ``ValueError``)."""
    members = []
    for part in text.split(","):
        probability, star, spec = part.partition("*")
        try:  # float() also reads 1_0 as 10, which --eps refuses
            value = None if "_" in probability else float(probability)
        except ValueError:
            value = None
        if not star or value is None or not spec.strip():
            raise ValueError(f"ensemble member {part.strip()!r} is not <probability>*<spec> "
                             f"(as in ensemble:0.7*builtin:a,0.3*builtin:b)")
        members.append({"spec": spec.strip(), "probability": value})
    return members
