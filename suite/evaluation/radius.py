"""The radius of a task's attacks, and where it came from.

A robust accuracy means nothing without its radius, and the radius users say is the one they
care about. Every point-wise attack that sets no ``eps`` of its own (the default attacks always)
gets its radius from the first of these that applies:

1. ``requested``: the task's ``eps`` (``--eps``, ``suite.evaluate(eps=...)``, a recipe task's
   ``eps:``). Several radii run every such attack at each, labelled ``<attack>-eps<ε>``.
2. ``model``: the threat model the model declares (its card, :mod:`suite.models.card`), when
   its norm is the attack's: a robust built-in is evaluated where it was trained.
3. ``attack defaults``: the attack's own default (L∞ 8/255, L2 0.5), with a warning naming it:
   a radius the model may never have been trained for.

The task's ``norm`` (``--norm``) sets the norm of every attack that takes one and sets none; an
attack of a fixed other norm is refused in one line. Distributional attacks (WDA) take a
Wasserstein budget, not a ball: only a requested ``eps`` applies to them, never the model's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from suite.attacks import ATTACKS, build_attack
from suite.errors import ConfigError
from suite.evaluation.recipe import AttackConfig, TaskConfig
from suite.models import Classifier
from suite.threat import Threat

Source = Literal["requested", "model", "attack defaults"]


@dataclass(frozen=True)
class Radius:
    """Where the radius of a task's open attacks came from, as results record it.

    Attributes:
        source: ``requested``, ``model`` (its declared threat model) or ``attack defaults``.
        threats: The threat (norm and ε) of every attack that took its radius from ``source``.
        detail: One line for people: what was used and why.
    """

    source: Source
    threats: tuple[str, ...]
    detail: str


def takes_radius(config: AttackConfig) -> bool:
    return "eps" in ATTACKS.get(config.name).model_fields


def takes_norm(config: AttackConfig) -> bool:
    fields = ATTACKS.get(config.name).model_fields
    return any(name == "norm" or field.alias == "norm" for name, field in fields.items())


def _threat(config: AttackConfig) -> Threat:
    return build_attack(config.name, config.params).threat


def _distributional(config: AttackConfig) -> bool:
    return ATTACKS.get(config.name).metric == "distributional"


def resolve_radius(task: TaskConfig, model: Classifier, defaults: tuple[str, ...],
                   ) -> tuple[TaskConfig, Radius | None]:
    """``task`` with every attack's norm and radius set (its ``eps`` and ``norm`` moved into the
    attacks' params), and where the radius came from (``None``: every attack set its own).

    Args:
        task: The task as given; empty ``attacks`` means ``defaults``.
        model: The loaded model (its modality, and ``info.threat_model``: the threat model its
            card declares, :func:`~suite.models.card.declared_threat_model`).
        defaults: The default attacks of the model (modality, ensemble).

    Raises:
        ConfigError: ``eps`` or ``norm`` given for attacks that take none, or a ``norm`` that
            contradicts an attack's fixed norm.
    """
    configs = list(task.attacks) or [AttackConfig(name=name) for name in defaults]
    if task.norm is not None:
        configs = _with_norm(configs, task.norm)
    requested = bool(task.eps)
    if requested:
        no_radius = [config.key for config in configs if not takes_radius(config)]
        if no_radius:
            raise ConfigError(f"eps does not apply to {', '.join(no_radius)}: "
                              f"{'it takes' if len(no_radius) == 1 else 'they take'} no radius")
    open_ = [i for i, config in enumerate(configs) if takes_radius(config) and "eps" not in config.params]
    if not requested:
        open_ = [i for i in open_ if not _distributional(configs[i])]
    if not open_:
        _check_labels(configs)
        return task.model_copy(update={"attacks": tuple(configs), "eps": (), "norm": None}), None
    declared = model.info.threat_model
    if requested:
        radii, source = list(task.eps), "requested"
    elif declared is not None:
        configs = [_with_declared_norm(config, declared) if i in open_ else config for i, config in enumerate(configs)]
        matching = [i for i in open_ if _threat(configs[i]).norm == declared.norm]
        others = [configs[i].key for i in open_ if i not in matching]
        if others:  # an attack of another norm: the declared radius means nothing there
            raise ConfigError(f"{model.info.spec} declares the threat model {declared.label}, which "
                              f"{', '.join(others)} cannot run at (another norm): pass --eps, or name attacks of "
                              f"norm {declared.norm}")
        radii, source = [declared.eps], "model"
    else:
        radii, source = [], "attack defaults"
    configs, threats = _expand(configs, open_, radii)
    _check_labels(configs)
    resolved = task.model_copy(update={"attacks": tuple(configs), "eps": (), "norm": None})
    return resolved, Radius(source, threats, _detail(source, threats, model, declared))


def _check_labels(configs: list[AttackConfig]) -> None:
    """Refuse radii that the names of results cannot tell apart (``eps`` to 6 significant digits,
    as ``-eps<ε>`` and threat labels print it): two attacks of one key would keep one's records
    under the other's name, and two threats of one label would share one worst case."""
    keys: dict[str, AttackConfig] = {}
    threats: dict[str, Threat] = {}
    for config in configs:
        if keys.setdefault(config.key, config) != config:
            raise ConfigError(f"two attacks are named {config.key!r} ({keys[config.key].params.get('eps')!r} and "
                              f"{config.params.get('eps')!r}): radii that agree to 6 significant digits share a name; "
                              "give radii that differ within their first 6 digits")
        if not takes_radius(config):
            continue
        threat = _threat(config)
        if threats.setdefault(threat.label, threat) != threat:
            raise ConfigError(f"two threats are labelled {threat.label!r} ({threats[threat.label].eps!r} and "
                              f"{threat.eps!r}): radii that agree to 6 significant digits would share one worst "
                              "case; give radii that differ within their first 6 digits")


def _with_norm(configs: list[AttackConfig], norm: str) -> list[AttackConfig]:
    """Set ``norm`` on every attack that takes one and sets none; refuse a fixed other norm."""
    refused, out = [], []
    for config in configs:
        if takes_norm(config):
            params = config.params if "norm" in config.params else {**config.params, "norm": norm}
            out.append(config.model_copy(update={"params": params}))
        elif takes_radius(config) and _threat(config).norm == norm:
            out.append(config)
        else:
            refused.append(config.key)
            out.append(config)
    if refused:
        raise ConfigError(f"norm {norm} does not apply to {', '.join(refused)}: "
                          f"{'it has' if len(refused) == 1 else 'they have'} a fixed norm or none "
                          "(name attacks of that norm, e.g. pgd_l2, or leave out --norm)")
    return out


def _with_declared_norm(config: AttackConfig, declared: Threat) -> AttackConfig:
    if takes_norm(config) and "norm" not in config.params:
        return config.model_copy(update={"params": {**config.params, "norm": declared.norm}})
    return config


def _expand(configs: list[AttackConfig], rows: list[int], radii: list[float],
            ) -> tuple[list[AttackConfig], tuple[str, ...]]:
    """Each attack of ``rows`` at each radius (labelled ``-eps<ε>`` when there are several);
    with no radii, at its own default. Returns the attacks and the threats they run at."""
    out, threats = [], []
    for i, config in enumerate(configs):
        if i not in rows:
            out.append(config)
            continue
        for radius in radii or [None]:
            copy = config
            if radius is not None:
                update = {"params": {**config.params, "eps": radius}}
                if len(radii) > 1:
                    update["label"] = f"{config.key}-eps{radius:g}"
                copy = config.model_copy(update=update)
            out.append(copy)
            threats.append(f"{copy.key}: {_threat(copy).label}")
    return out, tuple(threats)


def vacuous_radius(key: str, threat: Threat, input_size: tuple[int, ...] | None) -> str | None:
    """A warning when a point-wise ball holds every image in [0, 1]^d, or ``None``.

    Radii are in [0, 1] pixel units, so L∞ ε ≥ 1 (or L2 ε ≥ √d, the box's diagonal) lets the
    attack pick any image at all: its robust accuracy only says whether the model can be made
    to misclassify anything, a sanity check, not a robustness number. The usual cause is a
    radius in 0–255 levels (``--eps 8`` for 8/255). Not refused, since such a sanity check is
    a legitimate run.
    """
    if threat.level is not None or threat.distributional or threat.eps is None:
        return None
    if threat.norm == "linf":
        whole = 1.0
    elif threat.norm == "l2" and input_size is not None:
        whole = math.prod(input_size) ** 0.5
    else:
        return None
    if threat.eps < whole:
        return None
    levels = f" ({threat.eps:g}/255 = {threat.eps / 255:.4g} if 0-255 levels were meant)" if threat.eps <= 255 else ""
    return (f"{key}: {threat.label} admits every image in [0, 1], so its robust accuracy says only whether the "
            f"model can be made to misclassify at all: radii are in [0, 1] pixel units{levels}")


def _detail(source: str, threats: tuple[str, ...], model: Classifier, declared: Threat | None) -> str:
    where = "; ".join(threats)
    if source == "requested":
        return f"{where} (as requested)"
    if source == "model":
        return f"{where} (the threat model {model.info.spec} declares it was trained for; --eps overrides)"
    return (f"{where}: the attacks' default radius; {model.info.spec} declares no threat model"
            + (f" of this norm (it declares {declared.label})" if declared is not None else "")
            + ", so it may never have been trained for it (pass --eps, and --norm)")
