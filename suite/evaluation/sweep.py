"""Grids a recipe runs its tasks over: :class:`Sweep` (α of an ensemble, batch size, seeds,
attack parameters) and a task's own ``temperatures`` (:func:`temperature_copies`)."""

from __future__ import annotations

import itertools
import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from suite.errors import ConfigError
from suite.evaluation.seeds import with_seed
from suite.models.config import ModelConfig


#: A number written as one: ``true`` (1.0) and ``'2'`` (2.0) are refused, as ``n`` and ``seed``
#: refuse them (task ``eps: true`` had run at ε = 1, ``threshold: true`` flagged no illusion).
Number = Annotated[float, Field(strict=True)]


def refuse_repeats(names: list[str], problem: str) -> None:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{problem}: {', '.join(repeated)}")


def _as_compared(value: Any) -> str:
    """A sweep value as repeats are found: a number by its float value (1 and 1.0 are one)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return str(float(value))
        except OverflowError:  # an integer past float's range is itself
            pass
    return str(value)


def temperature_name(temperature: float) -> str:
    """``T0.005``, ``T2e06``: a task-name suffix (no ``+``)."""
    return "T" + f"{temperature:g}".replace("+", "")


def temperature_copies(task: Any) -> list[Any]:
    """``task``, or one copy per temperature of its ``temperatures``: the model served at its own
    temperature times t, named ``<task>-T<t>``."""
    if not task.temperatures:
        return [task]
    for t in task.temperatures:  # model_copy does not validate: a product of 0 or ∞ ran, or raised a traceback
        served = task.model.temperature * t
        if not 0 < served < float("inf"):
            raise ConfigError(f"task {task.name!r}: temperature {t:g} times the model's {task.model.temperature:g} is "
                              f"{served:g}, which no model can be served at (it must be finite and > 0)")
    return [task.model_copy(update={
        "name": f"{task.name}-{temperature_name(t)}", "temperatures": (),
        "model": task.model.model_copy(update={"temperature": task.model.temperature * t})})
        for t in task.temperatures]


#: Most runs a sweep may make of one task (alphas × batch sizes × seeds × every parameter's
#: values): a grid past it is a typo, and expanding it alone took minutes.
MAX_SWEEP_RUNS = 10_000


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

    alphas: tuple[Number, ...] = ()
    batch_size: tuple[Annotated[int, Field(strict=True)], ...] = ()
    seeds: tuple[Annotated[int, Field(strict=True)], ...] = ()
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
        refuse_repeats([f"{alpha:g}" for alpha in alphas], "alpha listed twice")
        return alphas

    @field_validator("batch_size")
    @classmethod
    def _positive(cls, sizes: tuple[int, ...]) -> tuple[int, ...]:
        if any(size <= 0 for size in sizes):
            raise ValueError("batch sizes must be positive")
        refuse_repeats([str(size) for size in sizes], "batch size listed twice")
        return sizes

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: tuple[int, ...]) -> tuple[int, ...]:
        if any(seed < 0 for seed in seeds):
            raise ValueError("seeds must be non-negative")
        refuse_repeats([str(seed) for seed in seeds], "seed listed twice")
        return seeds

    @field_validator("params")
    @classmethod
    def _values(cls, params: dict[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
        for key, values in params.items():
            if not values:
                raise ValueError(f"sweep parameter {key!r} has no values")
            # A scalar is checked before it is written out: str() of a list of aliased lists
            # (a YAML alias bomb of 1 KB) grew tenfold per level.
            if any(not isinstance(value, (str, int, float)) or not re.fullmatch(r"[A-Za-z0-9_.-]+", str(value))
                   for value in values):
                raise ValueError(f"sweep values of {key!r} must be plain words or numbers")
            # Each value names its attack (``fgm_linf-0.1``): 0.1 and 0.10 were one attack, counted as two,
            # and so were 1 and 1.0 (named apart): numbers are compared as numbers.
            refuse_repeats([_as_compared(value) for value in values], f"sweep parameter {key!r} lists a value twice")
        return params

    @model_validator(mode="after")
    def _bounded(self) -> Sweep:
        runs = len(self.alphas or (0,)) * len(self.batch_size or (0,)) * len(self.seeds or (0,))
        for values in self.params.values():
            runs *= len(values)
        if runs > MAX_SWEEP_RUNS:
            raise ValueError(f"the sweep makes {runs:,} runs of each task (its lists multiplied): at most "
                             f"{MAX_SWEEP_RUNS:,}; split it into several recipes")
        return self

    def expand(self, task: Any) -> list[Any]:
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
        if self.batch_size:  # of every α copy: the axes multiply
            copies = [copy.model_copy(update={"name": f"{copy.name}-bs{size}", "batch_size": size})
                      for copy in copies for size in self.batch_size]
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
    spec = model.spec
    if "*" in spec:  # an inline spec names the probabilities: the copy's name must say its own
        spec = "ensemble:" + ",".join(f"{member.probability:.12g}*{member.spec}" for member in members)
    return model.model_copy(update={"members": members, "spec": spec})
