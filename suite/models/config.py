"""Typed, frozen model options shared by the CLI and recipes."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class ModelConfig(BaseModel):
    """How to build one classifier.

    Attributes:
        spec: ``hf:<hub id or local dir>``, ``timm:<name or local dir>`` or ``builtin:<name>``.
        revision: Hub revision (branch, tag or commit) for ``hf:`` models.
        checkpoint: safetensors weights for ``timm:`` models (replaces pretrained weights).
        pretrained: ``timm:`` only: download the named pretrained weights (needs the Hub).
        temperature: Served (design) temperature T: the model serves logits / T. 1 = as trained.
        trust_remote_code: Run model code from the Hub; only when the user asks.
        max_length: Tokenizer truncation length for text models (default: the model's own).
        device: ``cpu``, ``cuda``, ``cuda:1``...; default CUDA when present.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: str
    revision: str | None = None
    checkpoint: str | None = None
    pretrained: bool = True
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
