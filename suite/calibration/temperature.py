"""The adversary temperature T_a: an attack searches on ``served logits / T_a``.

"Extreme Confidence and the Illusion of Robustness in Adversarial Training" (the IoR paper)
picks T_a in two ways; both are implemented here on a log scale:

- ``cal`` (paper eq. 9): T_a minimises the validation NLL of ``softmax(z / T)``. The paper runs
  gradient descent (lr 0.01, ≤ 5000 iterations). Deviation: NLL is convex in the inverse
  temperature β = 1/T (a log-sum-exp of linear functions of β minus a linear term), so it has
  one minimum, and u = log T is a monotone reparametrisation that keeps it unimodal. We solve
  it with SciPy's bounded Brent search on u (:func:`fit_nll_temperature`), in float64, to 1e-8
  in u. The search range is relative to the logits' own scale s (:func:`logit_scale`):
  T ∈ s·[1e-9, 1e9]. A fixed range fails at extreme design temperatures: served at T_d = 1e20,
  the NLL is log K to the last bit at a fixed range's first Brent points, and the search drifts
  to a bound; served at 1e-12, the optimum lies beyond 1e9.
  Deviation: where every fitting example is classified correctly the NLL has no minimum (it
  falls as T → 0, and a fit stops anywhere on the flat float64 floor: a view far *more*
  overconfident than the served model). T_a is then the temperature at which the view's mean
  confidence equals (n + 1)/(n + 2), the rule of succession's estimate of an accuracy of n out
  of n (``rule: confidence``); the mean confidence falls monotonically in T, so it is one root.
  Both depend on z only through z / T, so T_a · T_d stays the same for every design temperature.
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

#: Part of a text run's identity where it fits an aware adversary: bump when a fit changes.
#: 2: ranges relative to the logits' scale, the confidence rule, Platt's relative scales.
CALIBRATION_VERSION = 2
#: Search range of T_a relative to a reference temperature (the fitting logits' scale for
#: ``cal``, T_cal for ``opt``): 18 decades (the paper's design temperatures are 0.005 and 2e6).
BOUNDS = (1e-9, 1e9)
#: How close to a bound of the search, in log T, a fitted ``cal`` temperature counts as at it.
AT_BOUND = 1e-3


def logit_scale(logits: torch.Tensor | np.ndarray) -> float:
    """The logits' scale: the root mean square of each row's logits about the row's mean
    (float64); 1 where that is 0 or not finite (constant logits carry no scale)."""
    z = _as_logits(logits)
    if z.size == 0:
        return 1.0
    scale = float(np.sqrt(np.mean((z - z.mean(axis=1, keepdims=True)) ** 2)))
    return scale if math.isfinite(scale) and scale > 0 else 1.0


def relative_bounds(reference: float, bounds: tuple[float, float] = BOUNDS) -> tuple[float, float]:
    """``bounds`` times ``reference``."""
    return reference * bounds[0], reference * bounds[1]


def nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    """Mean negative log-likelihood of ``softmax(logits / temperature)`` (float64)."""
    log_p = log_softmax(logits / temperature)
    return float(-log_p[np.arange(len(labels)), labels].mean())


@dataclass(frozen=True)
class NLLFit:
    """Result of the ``cal`` fit. ``rule`` is ``nll`` (eq. 9's minimiser) or ``confidence``
    (every fitting example classified correctly: the mean confidence (n + 1)/(n + 2)); ``bounds``
    is the range searched."""

    temperature: float
    nll: float
    nll_at_1: float
    evaluations: int
    at_bound: bool
    rule: str = "nll"
    bounds: tuple[float, float] = BOUNDS


def fit_nll_temperature(logits: torch.Tensor | np.ndarray, labels: Sequence[int],
                        bounds: tuple[float, float] | None = None, xatol: float = 1e-8) -> NLLFit:
    """The temperature minimising NLL on labelled examples (the ``cal`` adversary, eq. 9).

    Args:
        logits: N×C served logits of validation examples.
        labels: Their true classes.
        bounds: Search range of T (searched on log T); default :data:`BOUNDS` times the logits'
            scale (:func:`logit_scale`).
        xatol: Absolute tolerance on log T.

    Where every example is classified correctly, the NLL has no minimum, and T is the one at
    which the mean confidence is (n + 1)/(n + 2) (the module's docstring). ``at_bound`` is True
    when the temperature found sits at a bound of the search.
    """
    z = _as_logits(logits)
    y = np.asarray(labels, dtype=np.int64)
    if len(y) == 0:
        raise ValueError("the cal adversary needs labelled validation examples")
    bounds = bounds or relative_bounds(logit_scale(z))
    low, high = math.log(bounds[0]), math.log(bounds[1])
    nll_at_1 = nll(z, y, 1.0)
    # No interior minimum wherever every label's logit is the largest (a tie included: its
    # probability still rises towards 1/2 as T → 0, and the NLL keeps falling).
    if bool((z[np.arange(len(y)), y] >= z.max(axis=1)).all()):
        u, evaluations = _confidence_root(z, (len(y) + 1) / (len(y) + 2), low, high, xatol)
        temperature = math.exp(u)
        return NLLFit(temperature=temperature, nll=nll(z, y, temperature), nll_at_1=nll_at_1, evaluations=evaluations,
                      at_bound=min(u - low, high - u) < AT_BOUND, rule="confidence", bounds=bounds)
    found = minimize_scalar(lambda u: nll(z, y, math.exp(u)), bounds=(low, high), method="bounded",
                            options={"xatol": xatol, "maxiter": 500})
    u = float(found.x)
    return NLLFit(temperature=math.exp(u), nll=float(found.fun), nll_at_1=nll_at_1, evaluations=int(found.nfev),
                  at_bound=min(u - low, high - u) < AT_BOUND, bounds=bounds)


def mean_confidence(z: np.ndarray, temperature: float) -> float:
    """Mean predicted-class probability of ``softmax(z / temperature)`` (float64)."""
    return float(np.exp(log_softmax(z / temperature).max(axis=1)).mean())


def _confidence_root(z: np.ndarray, target: float, low: float, high: float, xatol: float) -> tuple[float, int]:
    """log T in [low, high] at which the mean confidence is ``target`` (it falls in T), and the
    evaluations spent; a bound where the target lies beyond it (ties at the top of the logits
    keep the confidence below 1 even as T → 0)."""
    from scipy.optimize import brentq

    def excess(u: float) -> float:
        return mean_confidence(z, math.exp(u)) - target

    if excess(low) <= 0:
        return low, 1
    if excess(high) >= 0:
        return high, 2
    u, found = brentq(excess, low, high, xtol=xatol, full_output=True)
    return float(u), int(found.function_calls) + 2


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
