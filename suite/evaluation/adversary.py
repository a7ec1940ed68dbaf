"""Adversary temperatures: the illusion-of-robustness machinery of a task.

"Extreme Confidence and the Illusion of Robustness in Adversarial Training": an aware adversary
searches on ``served logits / T_a`` (a :class:`TemperatureScaled` view; attacks cannot tell), and
what it finds is scored on the served model. ``cal`` fits T_a by NLL (eq. 9), ``opt`` searches
the T_a minimising Q(T), the attack's adversarial accuracy on labelled examples (eq. 10–11);
see :mod:`suite.calibration.temperature`. The search shows a progress bar over its attack runs
(up to ``maxiter`` + 2, each an attack on ``opt_n`` examples).

Every process computes the same fit from the same logits, and an ``opt`` search sums Q(T)'s
robust mass over the processes, so all follow the same Brent path.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch

from suite.attacks import Attack
from suite.calibration import fit_nll_temperature, optimise_temperature
from suite.calibration.temperature import logit_scale, relative_bounds
from suite.calibration.platt import fit_platt
from suite.data.base import Example
from suite.evaluation.batching import attack_in_parts
from suite.evaluation.prepare import AttackRun, PreparedTask
from suite.evaluation.scoring import CleanScores, check_outputs, score_batch
from suite.models import Classifier
from suite.models.ensemble import is_ensemble
from suite.models.temperature import AffineScaled, Memoised, TemperatureScaled

logger = logging.getLogger(__name__)


def search_model(model: Classifier) -> Classifier:
    """What a task's attacks and ``opt`` search run their views on: a deterministic text model
    remembers its logits per text (:class:`Memoised`), so the adversaries of one task share
    their forward passes; any other model is itself. A randomized text model's view is not
    memoised: its correctness is not the argmax of the rows a memo keeps (it is the share of
    fresh draws that decide for the label, :class:`~suite.models.randomized.Randomized`)."""
    if model.modality != "text" or is_ensemble(model) or not model.argmax_verdicts:
        return model
    return Memoised(model)


def same_search(first: tuple[str, float | None], second: tuple[str, float | None]) -> bool:
    """Whether two (attack, adversary temperature) pairs search the same view: one attack at
    temperatures equal in float32, which is what logits are divided by (``opt`` often keeps
    T_cal, recorded to 12 digits). Platt's view (temperature ``None``) is never shared."""
    (attack, t1), (other, t2) = first, second
    if attack != other or t1 is None or t2 is None:
        return False
    return bool(torch.tensor(t1, dtype=torch.float32) == torch.tensor(t2, dtype=torch.float32))


def adversary_view(model: Classifier, temperature: float) -> Classifier:
    """What an attack searches on for adversary temperature ``temperature`` (the model at 1)."""
    return model if temperature == 1.0 else TemperatureScaled(model, temperature, adversary=True)


def view_for(model: Classifier, adversary: dict[str, Any], run: AttackRun) -> Classifier:
    """What ``run``'s attack searches on: the model, a temperature view, or the Platt view."""
    if run.kind == "platt":
        return AffineScaled(model, adversary["platt"]["scale"], adversary["platt"]["bias"])
    return adversary_view(model, temperature_of(adversary, run))


def temperature_of(adversary: dict[str, Any], run: AttackRun) -> float | None:
    """The adversary temperature ``run`` searches at (``None`` for the Platt adversary)."""
    if run.kind == "platt":
        return None
    if run.kind == "cal":
        return adversary["cal"]["temperature"]
    if run.kind == "opt":
        return adversary["opt"][run.base]["temperature"]
    return 1.0


def adversary_temperatures(prepared: PreparedTask, fit: CleanScores | None,
                           searched: Classifier | None = None) -> dict[str, Any]:
    """Fit T_cal and search T_opt (per attack, or once for ``opt_attack``); reuse recorded searches.

    Args:
        prepared: The task.
        fit: Served logits and correctness of ``prepared.fit_set`` (``None`` without cal/opt).
        searched: What the ``opt`` search's views wrap (:func:`search_model`; default the
            served model). What it finds is scored on the served model.
    """
    config, fit_set = prepared.adversary, prepared.fit_set
    info: dict[str, Any] = {"kinds": list(config.kinds), "split": config.split, "n": None, "cal": None, "opt": {},
                            "platt": None}
    if fit_set is None or fit is None:
        return info
    info["n"] = len(fit_set)
    labels = [ex.label for ex in fit_set.examples]
    if "cal" in config.kinds:
        result = fit_nll_temperature(fit.logits, labels, bounds=config.bounds)
        info["cal"] = {"temperature": result.temperature, "nll": result.nll, "nll_at_1": result.nll_at_1,
                       "evaluations": result.evaluations, "at_bound": result.at_bound, "rule": result.rule,
                       "bounds": list(result.bounds)}
    if "platt" in config.kinds:
        platt = fit_platt(fit.logits, labels)
        info["platt"] = {"scale": list(platt.scale), "bias": list(platt.bias), "nll": platt.nll,
                         "nll_at_identity": platt.nll_at_identity, "iterations": platt.iterations,
                         "changed_predictions": platt.changed_predictions, "at_bound": platt.at_bound,
                         "at_upper_bound": platt.at_upper_bound}
    if "opt" in config.kinds:
        pool = list(zip(fit_set.examples, fit.correct.tolist()))[: config.opt_n]
        # T_cal first: on a tie (Q is a step function) opt keeps the calibrated temperature.
        initial = ([info["cal"]["temperature"]] if info["cal"] else []) + [1.0]
        # The range is centred on T_cal, else on the logits' scale (a fixed one misses the valleys
        # of an extreme design temperature); explicit bounds are absolute.
        centre = info["cal"]["temperature"] if info["cal"] else logit_scale(fit.logits)
        bounds = config.bounds or relative_bounds(centre)
        searches: dict[str, dict[str, Any]] = {}
        for run in prepared.runs:
            if run.kind != "opt":
                continue
            key, attack = prepared.opt_attack or (run.base, run.attack)
            if key not in searches:
                searches[key] = _opt_search(prepared, searched or prepared.model, key, attack, pool, initial, bounds)
            info["opt"][run.base] = {**searches[key], "attack": key}
    return info


def adversary_warnings(adversary: dict[str, Any]) -> list[str]:
    """What a task's results must say about its adversary fits: a ``cal`` temperature by the
    confidence rule or at a bound of its search, an ``opt`` one at a bound, a Platt fit that
    changes predictions or whose scales reached their upper bound."""
    warnings = []
    cal = adversary.get("cal")
    if cal and cal.get("rule") == "confidence":
        warnings.append(f"cal: every one of the {adversary.get('n')} fitting example(s) is classified correctly, so "
                        f"the NLL has no minimum (it falls as T → 0): T_cal = {cal['temperature']:.4g} gives the "
                        "view a mean confidence of (n + 1)/(n + 2) instead; fit it on a labelled split the model "
                        "errs on (adversary: {split: validation}) for eq. 9's temperature")
    elif cal and cal.get("at_bound"):
        low, high = cal["bounds"]
        upper = abs(math.log(cal["temperature"] / high)) < abs(math.log(cal["temperature"] / low))
        side = "upper" if upper else "lower"
        warnings.append(f"cal: the NLL-optimal temperature sits at the {side} bound of its search "
                        f"(T_cal = {cal['temperature']:.4g})"
                        + (": the model may be no better than chance on its fitting examples, and the calibrated "
                           "view is then nearly uniform" if side == "upper" else ": widen the adversary's bounds"))
    for base, search in (adversary.get("opt") or {}).items():
        if search.get("bounds") and _at_bound(search["temperature"], tuple(search["bounds"])):
            warnings.append(f"opt ({search.get('attack', base)}): the temperature that minimises the attack's accuracy "
                            f"sits at a bound of its search (T = {search['temperature']:.4g}): one beyond it may find "
                            "more; widen the adversary's bounds")
    platt = adversary.get("platt")
    if platt and platt.get("changed_predictions"):
        warnings.append(f"platt: the Platt adversary's scaling changes {platt['changed_predictions']} prediction(s) of "
                        "its fitting set: its adversarial texts may not fool the served model (each is scored there)")
    if platt and platt.get("at_upper_bound"):
        warnings.append("platt: a class's scale reached the fit's upper bound (the fitting examples may be separable, "
                        "so the NLL falls as the scales grow): the Platt view is as sharp as the bound allows")
    return list(dict.fromkeys(warnings))  # one opt search may serve several attacks


def _at_bound(temperature: float, bounds: tuple[float, float]) -> bool:
    """T within Brent's default tolerance on log T (0.25) of a bound of the search."""
    return min(abs(math.log(temperature / bounds[0])), abs(math.log(bounds[1] / temperature))) < 0.25


def _opt_search(prepared: PreparedTask, searched: Classifier, key: str, attack: Attack,
                pool: Sequence[tuple[Example, float]], initial: list[float],
                bounds: tuple[float, float]) -> dict[str, Any]:
    """Brent search of T minimising Q(T) (adversarial accuracy on ``pool``); recorded for resume."""
    store, config = prepared.store, prepared.adversary
    fields = ("temperature", "q", "evaluations", "attack_runs", "n", "bounds")
    recorded = store.get("adversary", "opt", key)
    if recorded is not None:
        return {name: recorded.get(name) for name in fields}
    targets = [(ex, correct) for ex, correct in pool if correct > 0]
    processes = store.processes

    def adversarial_accuracy(temperature: float) -> float:
        view = adversary_view(searched, temperature)
        shard = processes.shard(targets)
        examples, correct = [ex for ex, _ in shard], {ex.id: c for ex, c in shard}
        robust: dict[str, float] = {}

        def commit(batch: list[Example], outputs: list) -> None:
            check_outputs(key, attack.threat, searched, batch, outputs)
            scores = score_batch(prepared.model, batch, outputs, [correct[ex.id] for ex in batch], pooled=searched)
            robust.update((ex.id, score["robust"]) for ex, score in zip(batch, scores))

        attack_in_parts(attack, view, examples, prepared.fixed_batch_size, prepared.attack_seed, commit,
                        what=f"{prepared.name}: {key}@opt")
        # Summed in the examples' order, whatever order they finished in; every process gets the
        # same total, so all follow the same Brent path.
        q = processes.sum(sum(robust[ex.id] for ex in examples)) / len(pool)
        logger.info("%s: opt %s: T=%.4g Q=%.3f", prepared.name, key, temperature, q)
        return q

    search = optimise_temperature(adversarial_accuracy, bounds=bounds, maxiter=config.maxiter, initial=initial,
                                  desc=f"{key}@opt: search T ({len(targets)} ex)")
    record = {"kind": "adversary", "id": "opt", "attack": key, "temperature": search.temperature, "q": search.q,
              "evaluations": [list(pair) for pair in search.evaluations], "attack_runs": search.attack_runs,
              "n": len(pool), "bounds": list(bounds)}
    if processes.is_main:
        store.append([record])
    return {name: record[name] for name in fields}
