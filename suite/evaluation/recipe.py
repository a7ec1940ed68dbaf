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
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from suite.data.config import DatasetConfig
from suite.evaluation.recipe_yaml import read_recipe_yaml
from suite.evaluation.seeds import names_seed
from suite.evaluation.sweep import Number, Sweep, refuse_repeats as _refuse_repeats, temperature_copies
from suite.errors import ConfigError
from suite.models.config import ModelConfig
from suite.threat import MAX_RADIUS

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
#: What a recipe writes beside its tasks' directories (suite.evaluation.recipe_run): no task is named so.
RECIPE_FILES = ("recipe.json", "adversary_table.csv", "ior_tables.md", "ior_tables.csv", "confidence_sweep.png",
                "study.csv", "study.png", "alpha_sweep.csv", "alpha_sweep.png")
#: Task names and attack labels become directory and file names: keep them well under 255 bytes.
NAME_LENGTH = 100
#: Attacks run when a task names none.
DEFAULT_ATTACKS = {"text": ("deepwordbug",), "image": ("auto",)}
#: Attacks run on a randomized image ensemble when a task names none: ARC and adaptive PGD (their
#: worst case: neither alone finds the minimum of the expected accuracy everywhere), and ``auto``.
DEFAULT_ENSEMBLE_ATTACKS = ("arc", "apgd_rec", "auto")


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
        bounds: Search range of T (searched on log T). Default: 1e-9 to 1e9 times a reference
            temperature, the fitting logits' scale for ``cal`` and ``platt`` (the root mean
            square of each row's logits about its mean) and T_cal (else that scale) for ``opt``,
            so that no design temperature puts the optimum out of reach; given, it is absolute.
        maxiter: Brent iterations of the ``opt`` search (one attack run each).
        threshold: Robust-accuracy drop (fraction) that flags an illusion of robustness.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kinds: tuple[AdversaryKind, ...] = ("none", "cal")
    split: str | None = None
    n: int | None = Field(None, gt=0, strict=True)
    opt_n: int = Field(20, gt=0, strict=True)
    opt_attack: AttackConfig | None = None
    bounds: tuple[Number, Number] | None = None
    maxiter: int = Field(12, gt=0, strict=True)
    threshold: float = Field(0.05, ge=0, le=1, strict=True)

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, kinds: tuple[str, ...]) -> tuple[str, ...]:
        if not kinds:
            raise ValueError("list at least one adversary (none, cal, opt, platt)")
        _refuse_repeats(list(kinds), "adversary listed twice")
        return kinds

    @field_validator("bounds")
    @classmethod
    def _bounds(cls, bounds: tuple[float, float] | None) -> tuple[float, float] | None:
        if bounds is not None and not 0 < bounds[0] < bounds[1] < float("inf"):
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
    """A task's WDRO certificate (:mod:`suite.wdro`): the bounds over ``eps`` for the W_1 ball
    with cost ``norm``, and the W_1 losses WDA / WDA++ reach (``certificate.{json,png}``).

    Attributes:
        boxed: Inputs are [0, 1] pixels (no eq. 17 lower bound); ``false`` certifies on R^n.
        attacks: Also run WDA (κ = 1, 2) and WDA++ for their losses.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    norm: Literal["l2", "linf", "l1"] = "l2"
    loss: Literal["ce", "margin"] = "ce"
    eps: tuple[Number, ...] = Field((0.05, 0.1, 0.2, 0.5), min_length=1)
    boxed: bool = True
    attacks: bool = True

    @field_validator("eps")
    @classmethod
    def _radii(cls, eps: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 <= value <= MAX_RADIUS for value in eps):
            raise ValueError(f"certify eps must be finite numbers >= 0 and at most {MAX_RADIUS:.4g} (float32's "
                             "largest number: the attacks that check the certificate search in float32)")
        _refuse_repeats([repr(value) for value in eps], "certify radius listed twice")
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
    #: Examples per attack batch, or ``auto`` (:mod:`suite.evaluation.batching`); unset: the run's.
    batch_size: Annotated[int, Field(gt=0, strict=True)] | Literal["auto"] | None = None
    #: Adversary temperatures for text attacks; unset: :data:`DEFAULT_TEXT_ADVERSARY` for text.
    adversary: AdversaryConfig | None = None
    #: Seed of the attacks' per-example randomness (random starts, sampled words); unset: the
    #: run seed. The dataset subsample always follows the run seed, so the replicates of a seed
    #: sweep attack the same examples.
    attack_seed: int | None = Field(None, ge=0, strict=True)
    #: Also compute the model's WDRO certificate on the task's examples.
    certify: CertifyConfig | None = None
    #: Serve the model at each of these temperatures (times its own): one copy of the task per
    #: temperature, ``<task>-T<t>`` (the IoR paper's Fig. 1: robustness against confidence).
    temperatures: tuple[Number, ...] = ()
    #: The radius (or radii) of every point-wise attack that sets none, the default attacks
    #: included; unset: the model's declared threat model, else the attacks' own defaults
    #: (:mod:`suite.evaluation.radius`).
    eps: tuple[Number, ...] = ()
    #: The norm of every attack that takes one and sets none (the default attacks included).
    norm: Literal["linf", "l2"] | None = None
    #: Image attacks search under this autocast precision (every attack that sets none):
    #: ``--precision`` (:mod:`suite.evaluation.precision`); unset: each attack's own (fp32).
    precision: Literal["fp32", "fp16", "bf16"] | None = None

    @field_validator("eps", mode="before")
    @classmethod
    def _radii(cls, value: Any) -> Any:
        return value if isinstance(value, (list, tuple)) else [value]  # one radius, a number or not

    @field_validator("eps")
    @classmethod
    def _finite_radii(cls, radii: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 <= r < float("inf") for r in radii):
            raise ValueError("eps must be finite and >= 0")
        _refuse_repeats([f"{r!r}" for r in radii], "eps lists a radius twice")
        return radii

    @field_validator("temperatures")
    @classmethod
    def _positive_temperatures(cls, temperatures: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 < t < float("inf") for t in temperatures):
            raise ValueError("temperatures must be finite and > 0")
        _refuse_repeats([repr(t) for t in temperatures], "temperature listed twice")
        return temperatures

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
        # Keys name the attack's samples/<key>/ folder: keys only case tells apart are one folder
        # on macOS and Windows, and 'clean' is the clean inputs' folder (its images were replaced).
        _refuse_repeats([attack.key for attack in attacks], "attack listed twice (give one a 'label')")
        _refuse_repeats([attack.key.casefold() for attack in attacks], "attack labels differ only in case (one folder "
                        "of samples on macOS and Windows)")
        if any(attack.key.casefold() == "clean" for attack in attacks):
            raise ValueError("an attack may not be labelled 'clean': it is the clean inputs' name in samples/")
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
        if not self.temperatures:
            exclude["temperatures"] = True
        if not self.eps:
            exclude["eps"] = True
        if self.norm is None:
            exclude["norm"] = True
        if self.precision is None:
            exclude["precision"] = True
        dumped = self.model_dump(mode="json", exclude=exclude)
        # The device a model is placed on is the run's, not the configuration's: cuda:0 and cuda:1
        # give the same numbers, and so do the default and the device it resolves to. It stays in
        # the dump as null, so a task on the default device keeps the identity (and config hash) it
        # always had; the device *type*, whose arithmetic does differ (the CPU's against CUDA's),
        # is in the run's identity instead (suite.evaluation.prepare.run_identity).
        for model in [dumped["model"], *(dumped["model"].get("members") or [])]:
            model["device"] = None
        return {"seed": seed, **dumped}

    def fingerprint(self, seed: int) -> str:
        return hashlib.sha256(json.dumps(self.identity(seed), sort_keys=True).encode()).hexdigest()[:16]


class Recipe(BaseModel):
    """A named list of tasks run with one seed (optionally over a :class:`Sweep`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, max_length=NAME_LENGTH)
    description: str = ""
    seed: int = Field(0, ge=0, strict=True)
    batch_size: Annotated[int, Field(gt=0, strict=True)] | Literal["auto"] = "auto"
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
        """The tasks to run: ``tasks`` (a task with ``temperatures``: one per temperature), each
        over the sweep grid when there is one."""
        tasks = [copy for task in self.tasks for copy in temperature_copies(task)]
        if self.sweep is None:
            return tuple(tasks)
        return tuple(expanded for task in tasks for expanded in self.sweep.expand(task))

    def batch_size_for(self, task: TaskConfig) -> int | Literal["auto"]:
        return task.batch_size or self.batch_size


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate a recipe file; every problem is a one-line :class:`ConfigError`."""
    data = read_recipe_yaml(path)
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
    seen: dict[str, str] = {}
    for task in recipe.expanded_tasks():
        # Each task writes output/<name>: two of one name (a task 'v' at temperature 2 becomes
        # 'v-T2', a sweep adds '-s<seed>'), or of names only case tells apart (one directory on
        # macOS and Windows), would overwrite each other, and the tables would average them.
        if task.name.casefold() in RECIPE_FILES:
            raise ConfigError(f"{source}: task {task.name!r} is named like the recipe's file {task.name.casefold()!r} "
                              "(both in the output directory): rename it")
        other = seen.get(task.name.casefold())
        seen[task.name.casefold()] = task.name
        if other is not None:
            raise ConfigError(f"{source}: two tasks are named {other!r} and {task.name!r} once temperatures and "
                              "sweeps are expanded (each writes a directory of its name): rename one")
        for attack in task.attacks:
            build_attack(attack.name, attack.params)
    return recipe


def slug(text: str) -> str:
    """A file-system-safe name for a spec."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:80] or "run"
