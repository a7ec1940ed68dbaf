"""What a training run is: typed, frozen, validated options shared by the CLI, the API and the
built-in robust models."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from suite.models.config import TIMM_FILE_ARGS, check_device, input_size_problem
from suite.models.registry import spec_modality
from suite.threat import MAX_RADIUS

#: Largest count (epochs, batch size, examples) a run accepts: beyond it, a typo.
MAX_COUNT = 10_000_000
#: Defaults of a text model's run that differ from an image model's: "Extreme Confidence and
#: the Illusion of Robustness", App. C (AdamW, lr 1e-5, weight decay 0.01, batch 8, 5 epochs),
#: and PGD-K as the default method.
TEXT_DEFAULTS = {"method": "pgd_k", "lr": 1e-5, "weight_decay": 0.01, "batch_size": 8, "epochs": 5}


class TrainConfig(BaseModel):
    """One training run.

    Attributes:
        model: ``timm:<architecture>`` (fresh weights), ``timm:<dir>`` or ``builtin:<image model>``
            (fine-tuned); or a text model, ``hf:<dir>`` or ``builtin:<text model>``, fine-tuned
            as :mod:`suite.train.text` says (AdamW; fields left unset take
            :data:`TEXT_DEFAULTS`; ``momentum`` and ``eval_steps`` are unused).
        model_args: Extra ``timm.create_model`` arguments of a fresh architecture.
        dataset: Training data, as for ``advsuite evaluate``; ``split`` is trained on.
        val_split: A split to validate on; if unset, ``val_fraction`` of ``split`` is held out
            (a seeded choice) and not trained on.
        val_n: Validate on at most this many held-out examples each epoch (the same ones).
        input_size / num_classes: A fresh architecture on a non-built-in dataset: the image size
            (C, H, W) and class count (built-in datasets give both).
        method / method_params: The training method of the model's modality
            (:data:`suite.train.methods.METHODS`) and its knobs (eps, norm, steps, alpha, lam, mu,
            targets, lr; text: eps, alpha, init, steps, adversaries, normalize, max_grad_norm...).
        epochs, batch_size, lr, momentum, weight_decay: SGD with momentum and a piecewise
            schedule: lr × 0.1 after half the epochs and × 0.01 after three quarters (Rice et al.'s
            100 and 150 of 200, which Robey et al. follow).
        eval_steps: Steps of the validation attacks (PGD and BETA, α = ε/4): 10 as Robey et al.
        seed: Decides initialisation, data order, held-out examples and every random start.
        device: Where to train (default: CUDA when present).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    model: str = Field(min_length=1)
    model_args: dict[str, Any] = Field(default_factory=dict)
    dataset: str = Field(min_length=1)
    split: str = "train"
    val_split: str | None = None
    val_fraction: float = Field(0.1, gt=0, lt=1, allow_inf_nan=False)
    val_n: int | None = Field(None, ge=1, le=MAX_COUNT)
    input_size: tuple[int, int, int] | None = None
    num_classes: int | None = Field(None, ge=2, le=MAX_COUNT)
    method: str = "pgd_at"
    method_params: dict[str, Any] = Field(default_factory=dict)
    epochs: int = Field(10, ge=1, le=MAX_COUNT)
    batch_size: int = Field(128, ge=1, le=MAX_COUNT)
    lr: float = Field(0.1, gt=0, le=MAX_RADIUS, allow_inf_nan=False)  # float32's largest number
    momentum: float = Field(0.9, ge=0, lt=1, allow_inf_nan=False)
    weight_decay: float = Field(5e-4, ge=0, le=MAX_RADIUS, allow_inf_nan=False)
    eval_steps: int = Field(10, ge=1, le=10_000)
    seed: int = Field(0, ge=0, le=2**63 - 1)
    device: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _text_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("model"), str) and spec_modality(data["model"]) == "text":
            # AdamW at a constant lr, validated by the text attacks: an SGD momentum or a number
            # of validation attack steps would be silently ignored, so they are refused.
            unused = [name for name in ("momentum", "eval_steps") if data.get(name) is not None]
            if unused:
                verb, pronoun = ("apply", "them") if len(unused) > 1 else ("applies", "it")
                raise ValueError(f"{' and '.join(unused)} {verb} to image training (SGD with momentum, PGD and "
                                 f"BETA validation); text training uses AdamW and validates with its text attacks: "
                                 f"drop {pronoun}")
            return {**TEXT_DEFAULTS, **data}
        return data

    @model_validator(mode="after")
    def _own_settings(self) -> TrainConfig:
        # The suite passes these to timm itself (from --num-classes, --input-size and the data):
        # given again in model_args they would collide, or contradict the data.
        owned = {"num_classes": "--num-classes", "in_chans": "--input-size", "pretrained": "--model"}
        clash = sorted(key for key in self.model_args if key in owned)
        if clash:
            raise ValueError(f"model_args sets {', '.join(clash)}, which the suite sets itself: use "
                             f"{', '.join(owned[key] for key in clash)} instead")
        # Files timm would read itself, past the suite's checks (a .pth it unpickles, a path the
        # saved model's config.json would keep, relative to wherever it was trained).
        files = sorted(key for key in self.model_args if key in TIMM_FILE_ARGS)
        if files:
            raise ValueError(f"model_args sets {', '.join(files)}: timm would read that file itself, past advsuite's "
                             "checks (safetensors only); fine-tune a timm model directory (timm:<dir>) instead")
        return self

    @property
    def modality(self) -> str:
        """``text`` for ``hf:`` and built-in text models, else ``image``."""
        return spec_modality(self.model)

    @field_validator("input_size")
    @classmethod
    def _positive_size(cls, size: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
        if size is not None and min(size) < 1:
            raise ValueError(f"input_size must be three positive integers (C, H, W), got {size}")
        if size is not None and (problem := input_size_problem(size)):
            raise ValueError(f"input_size {list(size)} {problem}")
        return size

    @field_validator("device")
    @classmethod
    def _is_a_device(cls, device: str | None) -> str | None:
        return check_device(device)

    def identity(self) -> dict[str, Any]:
        """What decides the weights: everything but the device."""
        return self.model_dump(mode="json", exclude={"device"})

    def fingerprint(self) -> str:
        text = json.dumps(self.identity(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def lr_at(self, epoch: int) -> float:
        """The learning rate of ``epoch`` (0-based): piecewise, decayed at 1/2 and 3/4 of the epochs."""
        factor = 1.0
        if epoch >= self.epochs // 2 and self.epochs >= 2:
            factor = 0.1
        if epoch >= (3 * self.epochs) // 4 and self.epochs >= 4:
            factor = 0.01
        return self.lr * factor
