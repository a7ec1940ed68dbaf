"""The multi-class Platt-scaling adversary ("Extreme Confidence and the Illusion of Robustness",
App. D.5, Table 13): the attack searches on ``a ⊙ z + b`` (vector scaling, one scale and one
bias per class; Guo et al. 2017's multi-class extension of Platt scaling), fitted by NLL on
labelled validation examples, and what it finds is scored on the served model.

The paper does not say which multi-class form it fits, nor from where; vector scaling from
a = 1, b = 0 is the usual one. It fits by gradient descent (lr 0.01, 5000 iterations); here the
NLL, which is convex in (a, b) (a log-sum-exp of functions linear in them, minus a linear
term), is minimised to convergence by L-BFGS-B in float64 with its exact gradient. The scales
are kept in [1e-6, 1e6] relative to the logits' scale s (the fit runs on z / s, and the scales
reported are a / s): positive, so each class's own score stays increasing in its logit, and
bounded, so a fitting set the model classifies perfectly (whose NLL keeps falling as the scales
grow) still gives a finite fit (``at_bound``; ``at_upper_bound`` for a scale at the top, the
separable case). Relative, because a temperature is a vector scaling too, so Platt must fit at
least as well as ``cal`` at any design temperature: with fixed bounds the needed scale passed
1e6 from T_d = 2e6 and the fit came out worse than ``cal``'s. Unlike a temperature, vector scaling can
change a prediction (``changed_predictions`` on the fitting set): an adversarial example of
the Platt view need not fool the served model, which is why the paper's Platt rows are high
and unstable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import minimize

from suite.calibration.metrics import _as_logits, log_softmax
from suite.calibration.temperature import logit_scale

SCALE_BOUNDS = (1e-6, 1e6)
BIAS_BOUND = 1e6


@dataclass(frozen=True)
class PlattFit:
    """The fitted vector scaling ``a ⊙ z + b`` and how it fits."""

    scale: tuple[float, ...]
    bias: tuple[float, ...]
    nll: float
    nll_at_identity: float
    iterations: int
    changed_predictions: int
    at_bound: bool
    at_upper_bound: bool = False

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        scale = torch.tensor(self.scale, dtype=logits.dtype, device=logits.device)
        bias = torch.tensor(self.bias, dtype=logits.dtype, device=logits.device)
        return logits * scale + bias


def _objective(params: np.ndarray, z: np.ndarray, onehot: np.ndarray) -> tuple[float, np.ndarray]:
    classes = z.shape[1]
    scale, bias = params[:classes], params[classes:]
    log_p = log_softmax(z * scale + bias)
    residual = (np.exp(log_p) - onehot) / len(z)
    return float(-(log_p * onehot).sum() / len(z)), np.concatenate([(residual * z).sum(axis=0), residual.sum(axis=0)])


def fit_platt(logits: torch.Tensor | np.ndarray, labels: Sequence[int]) -> PlattFit:
    """Vector scaling minimising the NLL of ``softmax(a ⊙ z + b)`` on labelled examples."""
    z = _as_logits(logits)
    y = np.asarray(labels, dtype=np.int64)
    if len(y) == 0:
        raise ValueError("the platt adversary needs labelled validation examples")
    classes = z.shape[1]
    onehot = np.eye(classes)[y]
    unit = logit_scale(z)
    scaled = z / unit  # the fit's own scales are relative to the logits' scale
    # a = 1, b = 0: on z / s the start (convex: any start does), on z the identity.
    start = np.concatenate([np.ones(classes), np.zeros(classes)])
    bounds = [SCALE_BOUNDS] * classes + [(-BIAS_BOUND, BIAS_BOUND)] * classes
    found = minimize(_objective, start, args=(scaled, onehot), jac=True, method="L-BFGS-B", bounds=bounds,
                     options={"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-10})
    relative, bias = found.x[:classes], found.x[classes:]
    scale = relative / unit
    fitted = z * scale + bias
    low, high = (np.isclose(relative, bound, rtol=1e-3) for bound in SCALE_BOUNDS)
    return PlattFit(
        scale=tuple(float(v) for v in scale), bias=tuple(float(v) for v in bias), nll=float(found.fun),
        nll_at_identity=_objective(start, z, onehot)[0], iterations=int(found.nit),
        changed_predictions=int((fitted.argmax(axis=1) != z.argmax(axis=1)).sum()),
        at_bound=bool(np.any(low | high)), at_upper_bound=bool(np.any(high)),
    )
