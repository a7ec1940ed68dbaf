"""The adversary temperature T_a: an attack searches on ``served logits / T_a``.

"Extreme Confidence and the Illusion of Robustness in Adversarial Training" (the IoR paper)
picks T_a in two ways; both are implemented here on a log scale:

- ``cal`` (paper eq. 9): T_a minimises the validation NLL of ``softmax(z / T)``. The paper runs
  gradient descent (lr 0.01, ≤ 5000 iterations). Deviation: NLL is convex in the inverse
  temperature β = 1/T (a log-sum-exp of linear functions of β minus a linear term), so it has
  one minimum, and u = log T is a monotone reparametrisation that keeps it unimodal. We solve
  it exactly with SciPy's bounded Brent search on u (:func:`fit_nll_temperature`), in float64.
- ``opt`` (eq. 10–11): T_a minimises Q(T), the adversarial accuracy of an attack run at
  temperature T on validation examples. The paper (§4.2) calls Q convex in T; it cannot be: a
  convex function on (0, ∞) with values in [0, 1] is non-increasing, and Q rises again at large T
  (its Table 2: ↓conf at T = 2e6 above the base model). Brent's search needs Q unimodal, which we
  assume in u = log T; Q is also a step function of finitely many examples. We search u with
  SciPy's bounded Brent method (:func:`optimise_temperature`), record every (T, Q), and return
  the best evaluated T; a best T at a bound of the search is warned of.
  Deviation: T_cal (when known) and T = 1 (the out-of-the-box attack) are evaluated first, so
  ``opt`` is never worse than ``cal`` or ``none`` on the validation set; ties go to the
  earliest evaluated, so a flat Q keeps T_cal.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.optimize import minimize_scalar

from suite.calibration.metrics import _as_logits, log_softmax

#: Default search range of T_a (the paper's design temperatures are 0.005 and 2e6).
BOUNDS = (1e-9, 1e9)


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    """Mean negative log-likelihood of ``softmax(logits / temperature)`` (float64)."""
    log_p = log_softmax(logits / temperature)
    return float(-log_p[np.arange(len(labels)), labels].mean())


@dataclass(frozen=True)
class NLLFit:
    """Result of the ``cal`` fit."""

    temperature: float
    nll: float
    nll_at_1: float
    evaluations: int
    at_bound: bool


def fit_nll_temperature(logits: torch.Tensor | np.ndarray, labels: Sequence[int],
                        bounds: tuple[float, float] = BOUNDS, xatol: float = 1e-4) -> NLLFit:
    """The temperature minimising NLL on labelled examples (the ``cal`` adversary, eq. 9).

    Args:
        logits: N×C served logits of validation examples.
        labels: Their true classes.
        bounds: Search range of T (searched on log T).
        xatol: Absolute tolerance on log T.

    ``at_bound`` is True when there is no interior optimum: it sits at a bound, or every
    example is classified correctly, so NLL keeps falling as T → 0 (until float64 rounds it to
    0, where Brent stops anywhere on the flat part).
    """
    z = _as_logits(logits)
    y = np.asarray(labels, dtype=np.int64)
    if len(y) == 0:
        raise ValueError("the cal adversary needs labelled validation examples")
    low, high = math.log(bounds[0]), math.log(bounds[1])
    found = minimize_scalar(lambda u: nll(z, y, math.exp(u)), bounds=(low, high), method="bounded",
                            options={"xatol": xatol, "maxiter": 500})
    u = float(found.x)
    return NLLFit(
        temperature=math.exp(u), nll=float(found.fun), nll_at_1=nll(z, y, 1.0), evaluations=int(found.nfev),
        at_bound=min(u - low, high - u) < 10 * xatol or bool((z.argmax(axis=1) == y).all()),
    )


@dataclass
class OptSearch:
    """Result of the ``opt`` search: every (T, Q) evaluated, in order, and the best."""

    temperature: float = 1.0
    q: float = 1.0
    evaluations: list[tuple[float, float]] = field(default_factory=list)

    @property
    def attack_runs(self) -> int:
        """Attack runs spent (one per distinct T evaluated)."""
        return len(self.evaluations)


def max_attack_runs(maxiter: int, initial: Sequence[float] = (1.0,)) -> int:
    """The most attack runs :func:`optimise_temperature` spends: the initial temperatures, then
    SciPy's bounded Brent search, which evaluates at most ``maxiter`` points (two when
    ``maxiter`` is 1: it always takes one step)."""
    return len({float(f"{t:.12g}") for t in initial}) + max(maxiter, 2)


def optimise_temperature(q: Callable[[float], float], bounds: tuple[float, float] = BOUNDS, maxiter: int = 12,
                         xatol: float = 0.25, initial: Sequence[float] = (1.0,), desc: str = "opt T") -> OptSearch:
    """Minimise Q(T) over log T with SciPy's bounded Brent method (the ``opt`` adversary).

    Each evaluation runs an attack, so the search draws a progress bar over attack runs, with an
    ETA (:func:`suite.progress.progress_bar`; its total is :func:`max_attack_runs`, and the
    search may converge sooner).

    Args:
        q: Adversarial accuracy of the attack at adversary temperature T (each call runs it).
        bounds: Search range of T.
        maxiter: Brent iterations (each costs one attack run).
        xatol: Tolerance on log T (0.25 ≈ a factor 1.28 in T).
        initial: Temperatures evaluated before the search (T = 1, and T_cal when known).
        desc: Label of the progress bar.
    """
    from suite.progress import progress_bar

    search = OptSearch()
    cache: dict[float, float] = {}

    with progress_bar(max_attack_runs(maxiter, initial), desc, unit="run") as bar:

        def evaluate(temperature: float) -> float:
            key = float(f"{temperature:.12g}")
            if key not in cache:
                cache[key] = float(q(key))
                search.evaluations.append((key, cache[key]))
                bar.set_postfix_str(f"T={key:.3g} Q={cache[key]:.3f}", refresh=False)
                bar.update()
            return cache[key]

        for temperature in initial:
            evaluate(temperature)
        minimize_scalar(lambda u: evaluate(math.exp(u)), bounds=(math.log(bounds[0]), math.log(bounds[1])),
                        method="bounded", options={"xatol": xatol, "maxiter": maxiter})
    # Best evaluated point; ties go to the earliest (the initial temperatures, in order).
    best = min(search.evaluations, key=lambda pair: pair[1])
    search.temperature, search.q = best
    return search
