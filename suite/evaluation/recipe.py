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
import itertools
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from suite.evaluation.seeds import names_seed, with_seed
from suite.data.config import DatasetConfig
from suite.errors import ConfigError
from suite.models.config import ModelConfig

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
#: Task names and attack labels become directory and file names: keep them well under 255 bytes.
NAME_LENGTH = 100
#: Attacks run when a task names none.
DEFAULT_ATTACKS = {"text": ("deepwordbug",), "image": ("auto",)}
#: Attacks run on a randomized image ensemble when a task names none: ARC and adaptive PGD (their
#: worst case: neither alone finds the minimum of the expected accuracy everywhere), and ``auto``.
DEFAULT_ENSEMBLE_ATTACKS = ("arc", "apgd_rec", "auto")


def _refuse_repeats(names: list[str], problem: str) -> None:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{problem}: {', '.join(repeated)}")


class AttackConfig(BaseModel):
    """One attack: a registered name plus its hyperparameters (checked by the attack itself)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    #: Key of this attack in results and records; defaults to ``name``. Needed to run one
    #: attack twice in a task (say at two ε).
    label: str | None = Field(None, pattern=NAME_PATTERN, max_length=NAME_LENGTH)
    #: Skip the attack, with a warning in results, when a resource it needs (WordNet, Hub
    #: weights) is missing, instead of failing the run.
    optional: bool = False

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, value: Any) -> Any:
        # Accept "pgd_linf" and {name: pgd_linf, eps: 0.1} as well as the explicit form.
        if isinstance(value, str):
            return {"name": value}
        if isinstance(value, dict) and "params" not in value:
            params = {key: item for key, item in value.items() if key not in ("name", "label", "optional")}
            return {"name": value.get("name"), "label": value.get("label"), "optional": value.get("optional", False),
                    "params": params}
        return value

    @property
    def key(self) -> str:
        """Key of this attack in results (tasks may not repeat a key)."""
        return self.label or self.name


AdversaryKind = Literal["none", "cal", "opt", "platt"]


class AdversaryConfig(BaseModel):
    """Which adversary temperatures every text attack of a task runs with.

    ``none`` is the out-of-the-box attack; ``cal`` searches on ``logits / T_cal`` (NLL-optimal
    T on labelled examples); ``opt`` on ``logits / T_opt`` (the T minimising the attack's
    adversarial accuracy on ``opt_n`` labelled examples); ``platt`` on ``a ⊙ logits + b``
    (vector scaling fitted by NLL: the IoR paper's App. D.5 comparison). Adversarial texts are
    always scored on the served model. See :mod:`suite.calibration`.

    Attributes:
        kinds: Adversaries to run; results key ``<attack>@cal``, ``<attack>@opt``, ``<attack>@platt``.
        split: Labelled split to fit T on (``validation``); ``None`` fits on the evaluated
            examples themselves (the attack already knows their labels; T is one scalar).
        n: Subsample of that split (all when unset).
        opt_n: Examples per Q(T) evaluation of the ``opt`` search.
        opt_attack: Attack whose Q(T) ``opt`` minimises; default: each attack for itself.
        bounds: Search range of T (searched on log T).
        maxiter: Brent iterations of the ``opt`` search (one attack run each).
        threshold: Robust-accuracy drop (fraction) that flags an illusion of robustness.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kinds: tuple[AdversaryKind, ...] = ("none", "cal")
    split: str | None = None
    n: int | None = Field(None, gt=0)
    opt_n: int = Field(20, gt=0)
    opt_attack: AttackConfig | None = None
    bounds: tuple[float, float] = (1e-9, 1e9)
    maxiter: int = Field(12, gt=0)
    threshold: float = Field(0.05, ge=0, le=1)

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, kinds: tuple[str, ...]) -> tuple[str, ...]:
        if not kinds:
            raise ValueError("list at least one adversary (none, cal, opt, platt)")
        _refuse_repeats(list(kinds), "adversary listed twice")
        return kinds

    @field_validator("bounds")
    @classmethod
    def _bounds(cls, bounds: tuple[float, float]) -> tuple[float, float]:
        if not 0 < bounds[0] < bounds[1] < float("inf"):
            raise ValueError("bounds must be two temperatures 0 < low < high")
        return bounds

    @staticmethod
    def key(attack_key: str, kind: str) -> str:
        """Results key of ``attack_key`` run by adversary ``kind``."""
        return attack_key if kind == "none" else f"{attack_key}@{kind}"


#: Text tasks that name no adversary: the out-of-the-box attack and the calibrated adversary
#: (fitted on the evaluated examples), so an extreme served temperature cannot hide anything.
DEFAULT_TEXT_ADVERSARY = AdversaryConfig()
NO_ADVERSARY = AdversaryConfig(kinds=("none",))


class CertifyConfig(BaseModel):
    """A task's WDRO certificate (:mod:`suite.certify`): the bounds over ``eps`` for the W_1 ball
    with cost ``norm``, and the W_1 losses WDA / WDA++ reach (``certificate.{json,png}``).

    Attributes:
        boxed: Inputs are [0, 1] pixels (no eq. 17 lower bound); ``false`` certifies on R^n.
        attacks: Also run WDA (κ = 1, 2) and WDA++ for their losses.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    norm: Literal["l2", "linf", "l1"] = "l2"
    loss: Literal["ce", "margin"] = "ce"
    eps: tuple[float, ...] = Field((0.05, 0.1, 0.2, 0.5), min_length=1)
    boxed: bool = True
    attacks: bool = True

    @field_validator("eps")
    @classmethod
    def _radii(cls, eps: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 <= value < float("inf") for value in eps):
            raise ValueError("certify eps must be finite numbers >= 0")
        return eps


class TaskConfig(BaseModel):
    """One model on one dataset under a list of attacks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field("default", pattern=NAME_PATTERN, max_length=NAME_LENGTH)
    model: ModelConfig
    dataset: DatasetConfig
    #: Empty means the default attacks of the model's modality (:data:`DEFAULT_ATTACKS`;
    #: :data:`DEFAULT_ENSEMBLE_ATTACKS` for a randomized image ensemble).
    attacks: tuple[AttackConfig, ...] = ()
    batch_size: int | None = Field(None, gt=0)
    #: Adversary temperatures for text attacks; unset: :data:`DEFAULT_TEXT_ADVERSARY` for text.
    adversary: AdversaryConfig | None = None
    #: Seed of the attacks' per-example randomness (random starts, sampled words); unset: the
    #: run seed. The dataset subsample always follows the run seed, so the replicates of a seed
    #: sweep attack the same examples.
    attack_seed: int | None = Field(None, ge=0)
    #: Also compute the model's WDRO certificate on the task's examples.
    certify: CertifyConfig | None = None

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
        _refuse_repeats([attack.key for attack in attacks], "attack listed twice (give one a 'label')")
        return attacks

    def identity(self, seed: int) -> dict[str, Any]:
        """Everything that determines this task's results (batch size does not)."""
        # allow_pickle decides only whether a file may be read, not what the numbers are. An
        # unset attack_seed is left out, so tasks written before it existed keep their identity.
        # Likewise an unset ensemble member list (every model that is not an ensemble).
        model: dict[str, Any] = {"allow_pickle": True}
        if self.model.members is None:
            model["members"] = True
        else:
            model["members"] = {"__all__": {"allow_pickle": True, "members": True}}
        exclude: dict[str, Any] = {"batch_size": True, "name": True, "model": model}
        if self.attack_seed is None:
            exclude["attack_seed"] = True
        if self.certify is None:
            exclude["certify"] = True
        return {"seed": seed, **self.model_dump(mode="json", exclude=exclude)}

    def fingerprint(self, seed: int) -> str:
        return hashlib.sha256(json.dumps(self.identity(seed), sort_keys=True).encode()).hexdigest()[:16]


class Sweep(BaseModel):
    """A grid a recipe runs every task over (the mini-batch study uses it).

    Each of ``alphas`` gives a copy of every randomized-ensemble task whose first member is drawn
    with that probability α and whose other members share 1 − α in their given proportions,
    named ``<task>-a<α>`` (robust accuracy against α, as Dbouk & Shanbhag's Fig. 3); a task whose
    model is not an ensemble runs once, as the baseline. Each batch size gives a copy of every
    task, named ``<task>-bs<size>``; each of ``seeds``
    gives a replicate of it with that ``attack_seed`` and ``{seed}`` in its model spec filled in
    (:mod:`suite.evaluation.seeds`), named ``<task>-bs<size>-s<seed>`` (the
    study reports their mean and spread). Each combination of ``params`` values gives a copy of
    every attack, labelled ``<attack>-<value>-<value>...`` (for example ``pgd_l2-mean-fp16``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    alphas: tuple[float, ...] = ()
    batch_size: tuple[int, ...] = ()
    seeds: tuple[int, ...] = ()
    params: dict[str, tuple[Any, ...]] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _not_empty(cls, data: Any) -> Any:
        for axis in ("alphas", "batch_size", "seeds"):
            if isinstance(data, dict) and axis in data and not data[axis]:
                raise ValueError(f"sweep {axis} lists nothing (remove it, or list at least one value)")
        if isinstance(data, dict) and not any(data.get(axis) for axis in ("alphas", "batch_size", "seeds", "params")):
            raise ValueError("a sweep needs alphas, batch_size, seeds or params to sweep over")
        return data

    @field_validator("alphas")
    @classmethod
    def _probabilities(cls, alphas: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 <= alpha <= 1 for alpha in alphas):
            raise ValueError("sweep alphas are probabilities: each must lie in [0, 1]")
        _refuse_repeats([f"{alpha:g}" for alpha in alphas], "alpha listed twice")
        return alphas

    @field_validator("batch_size")
    @classmethod
    def _positive(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        if any(size <= 0 for size in sizes):
            raise ValueError("batch sizes must be positive")
        _refuse_repeats([str(size) for size in sizes], "batch size listed twice")
        return sizes

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: tuple[int, ...]) -> tuple[int, ...]:
        if any(seed < 0 for seed in seeds):
            raise ValueError("seeds must be non-negative")
        _refuse_repeats([str(seed) for seed in seeds], "seed listed twice")
        return seeds

    @field_validator("params")
    @classmethod
    def _values(cls, params: dict[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
        for key, values in params.items():
            if not values:
                raise ValueError(f"sweep parameter {key!r} has no values")
            if any(not re.fullmatch(r"[A-Za-z0-9_.-]+", str(value)) for value in values):
                raise ValueError(f"sweep values of {key!r} must be plain words or numbers")
        return params

    def expand(self, task: TaskConfig) -> list[TaskConfig]:
        combos = list(itertools.product(*self.params.values())) or [()]
        attacks = []
        for attack in task.attacks:
            for combo in combos:
                label = "-".join([attack.key, *(str(value) for value in combo)])
                params = {**attack.params, **dict(zip(self.params, combo))}
                attacks.append(attack.model_copy(update={"params": params, "label": label}))
        expanded = task.model_copy(update={"attacks": tuple(attacks)}) if self.params else task
        copies = [expanded]
        if self.alphas and expanded.model.members:
            copies = [expanded.model_copy(update={"name": f"{task.name}-a{alpha:g}",
                                                  "model": with_first_probability(expanded.model, alpha)})
                      for alpha in self.alphas]
        if self.batch_size:
            copies = [expanded.model_copy(update={"name": f"{task.name}-bs{size}", "batch_size": size})
                      for size in self.batch_size]
        if self.seeds:  # and the model trained with that seed, where the spec says {seed}
            copies = [with_seed(copy.model_copy(update={"name": f"{copy.name}-s{seed}", "attack_seed": seed}), seed)
                      for copy in copies for seed in self.seeds]
        return copies


def with_first_probability(model: ModelConfig, alpha: float) -> ModelConfig:
    """An ensemble config whose first member has probability ``alpha``; the others share
    1 − ``alpha`` in their given proportions (equally, if they had none)."""
    first, *rest = model.members
    weight = sum(member.probability for member in rest)
    shares = [member.probability / weight if weight > 0 else 1 / len(rest) for member in rest]
    members = (first.model_copy(update={"probability": alpha}),
               *(member.model_copy(update={"probability": round((1 - alpha) * share, 12)}) for member, share in zip(rest, shares)))
    return model.model_copy(update={"members": members})


class Recipe(BaseModel):
    """A named list of tasks run with one seed (optionally over a :class:`Sweep`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, max_length=NAME_LENGTH)
    description: str = ""
    seed: int = Field(0, ge=0)
    batch_size: int = Field(32, gt=0)
    tasks: tuple[TaskConfig, ...] = Field(min_length=1)
    sweep: Sweep | None = None

    @field_validator("tasks")
    @classmethod
    def _unique_tasks(cls, tasks: tuple[TaskConfig, ...]) -> tuple[TaskConfig, ...]:
        _refuse_repeats([task.name for task in tasks], "task name used twice")
        return tasks

    @model_validator(mode="after")
    def _sweep_needs_attacks(self) -> Recipe:
        unseeded = [task.name for task in self.tasks if names_seed(task)]
        if unseeded and (self.sweep is None or not self.sweep.seeds):
            raise ValueError(f"task {unseeded[0]!r} names {{seed}}: add sweep: {{seeds: [0, 1, 2]}} to say which seeds")
        if self.sweep is not None and self.sweep.params and any(not task.attacks for task in self.tasks):
            raise ValueError("a sweep over attack params needs every task to list its attacks")
        if self.sweep is not None and self.sweep.alphas:
            single = [task.name for task in self.tasks if task.model.members is not None and len(task.model.members) < 2]
            if single:
                raise ValueError(f"sweep alphas needs ensembles of two or more members (task {single[0]!r} has one)")
        return self

    def expanded_tasks(self) -> tuple[TaskConfig, ...]:
        """The tasks to run: ``tasks``, or every task over the sweep grid."""
        if self.sweep is None:
            return self.tasks
        return tuple(expanded for task in self.tasks for expanded in self.sweep.expand(task))

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
    from suite.attacks import build_attack
    from suite.errors import format_validation_error

    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{source}: {format_validation_error(error)}") from error
    for task in recipe.expanded_tasks():
        for attack in task.attacks:
            build_attack(attack.name, attack.params)
    return recipe


def slug(text: str) -> str:
    """A file-system-safe name for a spec."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:80] or "run"
