"""Recipes: YAML validated into typed, frozen models that reject unknown keys.

A recipe is pure data::

    name: quickstart
    seed: 0
    tasks:
      - name: text
        model: builtin:sentiment-tiny          # a spec, or a mapping of ModelConfig fields
        dataset: {spec: builtin:sentiment, split: test, n: 40}
        attacks: [deepwordbug]                 # a name, or {name: ..., <hyperparameters>}
      - name: vision
        model: builtin:digits-cnn
        dataset: {spec: builtin:digits, n: 100}
        attacks:
          - {name: pgd_linf, eps: 0.05, steps: 20}
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from suite.data.config import DatasetConfig
from suite.errors import ConfigError
from suite.models.config import ModelConfig

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
#: Attacks run when a task names none.
DEFAULT_ATTACKS = {"text": ("deepwordbug",), "image": ("pgd_linf",)}


def _refuse_repeats(names: list[str], problem: str) -> None:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{problem}: {', '.join(repeated)}")


class AttackConfig(BaseModel):
    """One attack: a registered name plus its hyperparameters (checked by the attack itself)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, value: Any) -> Any:
        # Accept "pgd_linf" and {name: pgd_linf, eps: 0.1} as well as the explicit form.
        if isinstance(value, str):
            return {"name": value}
        if isinstance(value, dict) and "params" not in value:
            params = {key: item for key, item in value.items() if key != "name"}
            return {"name": value.get("name"), "params": params}
        return value

    @property
    def label(self) -> str:
        """Key of this attack in results: its name (tasks may not repeat a name)."""
        return self.name


class TaskConfig(BaseModel):
    """One model on one dataset under a list of attacks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field("default", pattern=NAME_PATTERN)
    model: ModelConfig
    dataset: DatasetConfig
    #: Empty means the default attacks of the model's modality (:data:`DEFAULT_ATTACKS`).
    attacks: tuple[AttackConfig, ...] = ()
    batch_size: int | None = Field(None, gt=0)

    @field_validator("model", mode="before")
    @classmethod
    def _model_spec(cls, value: Any) -> Any:
        return {"spec": value} if isinstance(value, str) else value

    @field_validator("dataset", mode="before")
    @classmethod
    def _dataset_spec(cls, value: Any) -> Any:
        return {"spec": value} if isinstance(value, str) else value

    @field_validator("attacks")
    @classmethod
    def _unique(cls, attacks: tuple[AttackConfig, ...]) -> tuple[AttackConfig, ...]:
        _refuse_repeats([attack.label for attack in attacks], "attack listed twice")
        return attacks

    def identity(self, seed: int) -> dict[str, Any]:
        """Everything that determines this task's results (batch size does not)."""
        return {"seed": seed, **self.model_dump(mode="json", exclude={"batch_size", "name"})}

    def fingerprint(self, seed: int) -> str:
        return hashlib.sha256(json.dumps(self.identity(seed), sort_keys=True).encode()).hexdigest()[:16]


class Recipe(BaseModel):
    """A named list of tasks run with one seed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    description: str = ""
    seed: int = Field(0, ge=0)
    batch_size: int = Field(32, gt=0)
    tasks: tuple[TaskConfig, ...] = Field(min_length=1)

    @field_validator("tasks")
    @classmethod
    def _unique_tasks(cls, tasks: tuple[TaskConfig, ...]) -> tuple[TaskConfig, ...]:
        _refuse_repeats([task.name for task in tasks], "task name used twice")
        return tasks

    def batch_size_for(self, task: TaskConfig) -> int:
        return task.batch_size or self.batch_size


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a recipe file; every problem is a one-line :class:`ConfigError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read recipe {str(path)!r}: {error.strerror if isinstance(error, OSError) else error}") from error
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"recipe {str(path)!r} is not valid YAML{where}: {getattr(error, 'problem', error)}") from error
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {str(path)!r} must be a mapping with 'name' and 'tasks'")
    return parse_recipe(data, source=str(path))


def parse_recipe(data: dict[str, Any], source: str = "recipe") -> Recipe:
    """Validate a recipe mapping (and every attack's hyperparameters)."""
    from suite.attacks import build_attack, format_validation_error

    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{source}: {format_validation_error(error)}") from error
    for task in recipe.tasks:
        for attack in task.attacks:
            build_attack(attack.name, attack.params)
    return recipe


def slug(text: str) -> str:
    """A file-system-safe name for a spec."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:80] or "run"
