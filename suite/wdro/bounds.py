"""Certificate bounds for the W_1 ball (Le et al., Thm 3.1/3.3, Cor. 3.2, eq. 17).

For a loss ℓ of the logits θ(x) ∈ R^K and the ground cost ‖x′ − x‖_r (s its dual norm):

    E_PN[ℓ] + l·ε  ≤  sup_{W_1(P, P_N) ≤ ε} E_P[ℓ]  ≤  E_PN[ℓ] + L·ε,

with L = 2^(1/r)·sup_x ‖J(x)‖_{r→s} (2^(1/r) bounds ‖∇_θ ℓ‖_r for cross-entropy and for the
margin max_{k′≠y} θ_k′ − θ_y, the paper's eq. 12–13) and l the steepest rival rate
max_{k′≠k} ‖J(x)ᵀ(e_k′ − e_k)‖_s along rays on which θ stays affine.

What this module reports, and what it calls a bound (the paper's statements do not all hold as
written; see docs/wdro.md):

- ``upper_bound`` = E + L_global·ε with L_global from the model's certified global Lipschitz
  constant (:meth:`~suite.models.base.Classifier.lipschitz_bound`, a product of operator norms)
  times the Hölder factor (nK)^(1/2 − 1/r)_+ of Cor. 3.4 / eq. 10. It is a bound. A maximum of
  ‖J‖ over the data points (``upper_estimate``, L_N) is not: a network can be flat at every data
  point and steep between them.
- ``lower_bound`` = the loss of the explicit distribution of eq. 17: the data point and rival with
  the steepest rate send a fraction Nε/t of their mass a distance t along the rate's dual-norm
  direction (inside the activation cone where one is computed). It is in the W_1 ball, so its
  loss is a bound on the sup, for any model, whenever the far point is in the input domain: on
  [0, 1] pixels (``boxed``) it is not, and none is given. It is computed in float64 and rounded
  down by a stated margin (:data:`LOWER_MARGIN`; in float32 it exceeded the exact supremum).
- ``lower_cone_bound`` = E + l·ε with l the steepest rival rate inside a data point's activation
  cone (eq. 9; ReLU MLPs, nested ``Sequential`` s included), rounded down by :data:`CONE_MARGIN`:
  the limit of eq. 17 along that ray, a bound. ``lower_estimate`` = E + l_N·ε with the cone-free
  l_N is the limit only for a model affine along the ray (a linear model): an estimate.
- ‖J‖_{r→s} per example: r = 2 its largest singular value; r = 1 its largest |entry|; r = ∞
  max over sign vectors σ of ‖Jᵀσ‖₁ (exact for K ≤ :data:`MAX_EXACT_CLASSES`; beyond, the bound
  √(nK)·σ_max, flagged).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from suite.data.base import Example
from suite.errors import ConfigError
from suite.models.base import Classifier

CertLoss = Literal["ce", "margin"]
CostNorm = Literal["linf", "l2", "l1"]
#: r of each cost norm, and s, its dual.
ORDER = {"linf": math.inf, "l2": 2.0, "l1": 1.0}
DUAL = {"linf": 1.0, "l2": 2.0, "l1": math.inf}
#: Classes up to which ‖J‖_{∞→1} is computed exactly (2^(K−1) sign vectors).
MAX_EXACT_CLASSES = 16
#: How far eq. 17's point travels along its ray (× max(1, Nε)) on an unbounded domain.
RAY_LENGTH = 1e8
#: eq. 17's loss is lowered by this times the magnitudes involved (:func:`_construction`): far
#: above float64's rounding through any network of realistic width (a dot product of length n
#: errs by at most n·2^-53 of its terms' magnitudes; 2^-30 covers n up to 2^23).
LOWER_MARGIN = 2.0 ** -30
#: The cone rate is lowered by this times ‖v‖_s (v the rival's Jacobian row difference, float64
#: from the weights): above the cone program's solver tolerance (about 1e-7 relative).
CONE_MARGIN = 1e-6


def jacobians(model: Classifier, x: torch.Tensor, chunk: int = 32) -> torch.Tensor:
    """Per-example input Jacobians of the logits, N×K×n (float64, CPU), batched with
    ``torch.func.vmap(jacrev(...))``: no per-example Python loop."""
    def logits(point: torch.Tensor) -> torch.Tensor:
        return model.logits(point.unsqueeze(0), grad=True)[0]

    batched = torch.func.vmap(torch.func.jacrev(logits))
    parts = [batched(x[start : start + chunk].to(model.device, torch.float32)).flatten(2).double().cpu()
             for start in range(0, len(x), chunk)]
    return torch.cat(parts) if parts else torch.empty(0, model.num_classes, int(math.prod(x.shape[1:])))


def jacobians_loop(model: Classifier, x: torch.Tensor) -> torch.Tensor:
    """The same Jacobians with one backward pass per example and class (the reference the
    benchmark compares :func:`jacobians` with)."""
    rows = []
    for point in x:
        inputs = point.unsqueeze(0).to(model.device, torch.float32).requires_grad_(True)
        logits = model.logits(inputs, grad=True)[0]
        rows.append(torch.stack([torch.autograd.grad(logits[k], inputs, retain_graph=True)[0].flatten()
                                 for k in range(len(logits))]).double().cpu())
    return torch.stack(rows)


def operator_norms(jacobian: torch.Tensor, norm: CostNorm) -> tuple[torch.Tensor, bool]:
    """‖J_i‖_{r→s} per example, and whether the values are exact (else upper bounds)."""
    if norm == "l2":
        return torch.linalg.matrix_norm(jacobian, ord=2), True
    if norm == "l1":
        return jacobian.abs().amax(dim=(1, 2)), True
    classes, inputs = jacobian.shape[1], jacobian.shape[2]
    if classes > MAX_EXACT_CLASSES:
        return math.sqrt(inputs * classes) * torch.linalg.matrix_norm(jacobian, ord=2), False
    # max_{‖u‖∞ ≤ 1} ‖Ju‖₁ = max_σ ‖Jᵀσ‖₁ over σ ∈ {±1}^K (σ and −σ give the same value).
    codes = torch.arange(2 ** (classes - 1)).view(-1, 1)
    signs = 1.0 - 2.0 * ((codes >> torch.arange(classes - 1)) & 1).double()
    signs = torch.cat([torch.ones(len(signs), 1, dtype=torch.float64), signs], dim=1)
    return torch.stack([(signs @ matrix).abs().sum(dim=1).max() for matrix in jacobian]), True


def rival_rates(jacobian: torch.Tensor, labels: torch.Tensor, norm: CostNorm) -> tuple[torch.Tensor, torch.Tensor]:
    """Per example, max_{k≠y} ‖J ᵀ(e_k − e_y)‖_s and the rival k attaining it."""
    gaps = jacobian - jacobian[torch.arange(len(labels)), labels].unsqueeze(1)
    rates = torch.linalg.vector_norm(gaps, ord=DUAL[norm], dim=2)
    rates[torch.arange(len(labels)), labels] = -math.inf
    best = rates.max(dim=1)
    return best.values, best.indices


def cone_rate(vector: torch.Tensor, constraints: torch.Tensor, norm: CostNorm) -> tuple[float, torch.Tensor]:
    """sup {vᵀu : A·u ≥ 0, ‖u‖_r ≤ 1} and a maximiser u: the rival rate restricted to the
    recession cone of the activation cell (Le et al., eq. 7/9). For r = 2 it is ‖Π_K(v)‖₂, with
    Π_K(v) = v + Aᵀλ* and λ* = argmin_{λ ≥ 0} ‖v + Aᵀλ‖₂ (NNLS on the polar cone, by Moreau's
    decomposition); for r = ∞ and r = 1 a linear program."""
    import numpy as np
    from scipy.optimize import linprog, nnls

    v = vector.double().cpu().numpy()
    a = constraints.double().cpu().numpy()
    if len(a) == 0:
        return float(torch.linalg.vector_norm(vector, ord=DUAL[norm])), unit_direction(vector.double(), norm)
    if norm == "l2":
        weights, _ = nnls(a.T, -v, maxiter=50 * a.shape[0])
        projected = v + a.T @ weights
        size = float(np.linalg.norm(projected))
        direction = projected / size if size > 1e-12 else np.zeros_like(v)
        return (size if size > 1e-12 else 0.0), torch.from_numpy(direction)
    if norm == "linf":
        result = linprog(-v, A_ub=-a, b_ub=np.zeros(len(a)), bounds=[(-1, 1)] * len(v), method="highs")
        direction = result.x
    else:  # l1: u = p − q with p, q ≥ 0 and Σ(p + q) ≤ 1
        result = linprog(np.concatenate([-v, v]), A_ub=np.vstack([np.hstack([-a, a]), np.ones((1, 2 * len(v)))]),
                         b_ub=np.concatenate([np.zeros(len(a)), [1.0]]), bounds=[(0, None)] * (2 * len(v)),
                         method="highs")
        direction = result.x[: len(v)] - result.x[len(v):]
    if result.status != 0:
        raise ConfigError(f"the cone rate's linear program failed: {result.message}")
    return max(0.0, float(v @ direction)), torch.from_numpy(direction)


def loss_of(name: CertLoss, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example cross-entropy, or the margin max_{k≠y} θ_k − θ_y (the paper's eq. 13 "DLR"),
    in the logits' own precision (:mod:`suite.losses` computes in float32, as attacks need; a
    certificate needs float64).
    """
    labels = labels.to(logits.device).view(-1, 1)
    own = logits.gather(1, labels).squeeze(1)
    if name == "ce":
        return torch.logsumexp(logits, dim=1) - own
    others = logits.scatter(1, labels, -math.inf)
    return others.max(dim=1).values - own


def unit_direction(vector: torch.Tensor, norm: CostNorm) -> torch.Tensor:
    """M_r(v): the unit-‖·‖_r vector u maximising ⟨v, u⟩ (sign; normalised; signed one-hot)."""
    if norm == "linf":
        return vector.sign()
    if norm == "l2":
        return vector / vector.norm().clamp_min(1e-300)
    direction = torch.zeros_like(vector)
    index = int(vector.abs().argmax())
    direction[index] = vector[index].sign()
    return direction


@dataclass
class Certificate:
    """The bounds of one model, data set, cost norm and loss over a grid of ε.

    Every name says what a number is: ``*_bound`` is a bound (within the stated rounding margin),
    ``*_estimate`` is not.

    Attributes:
        rows: One dict per ε: ``eps``, ``empirical`` (E_PN[ℓ]), ``lower_bound`` (eq. 17's loss, or
            None), ``lower_estimate`` (E + l_N·ε), ``lower_cone_bound`` (E + l·ε with l the rate
            inside the activation cones: ReLU MLPs on R^n only, else None), ``upper_bound``
            (E + L·ε, certified, or None), ``upper_estimate`` (E + L_N·ε).
        rival_rate_estimate: l_N, the steepest rival rate at a data point (no cone): an estimate.
        cone_rate_bound: l, the steepest rival rate inside a data point's activation cone,
            rounded down by :data:`CONE_MARGIN` (None where not computed; the notes say why).
        upper_rate_bound: L, from the certified global Lipschitz bound (None where none).
        upper_rate_estimate: L_N, the largest 2^(1/r)·‖J‖ at a data point: an estimate.
        precision: How ``empirical`` and ``lower_bound`` were computed: ``float64`` (a float64
            copy of the model) or ``float32``.
        notes: Which numbers are bounds, and why any bound is missing, in words.
    """

    norm: CostNorm
    loss: CertLoss
    n: int
    empirical: float
    rival_rate_estimate: float
    rival_rate_estimate_at: dict[str, Any]
    upper_rate_bound: float | None
    upper_rate_bound_how: str
    upper_rate_estimate: float
    upper_rate_estimate_exact: bool
    boxed: bool
    precision: str = "float32"
    cone_rate_bound: float | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def certify(model: Classifier, examples: Sequence[Example], *, norm: CostNorm = "l2", loss: CertLoss = "ce",
            eps: Sequence[float] = (0.1,), boxed: bool = True) -> Certificate:
    """The W_1 certificate of ``model`` on ``examples`` (its empirical distribution P_N).

    Args:
        boxed: Inputs are confined to [0, 1] (images): eq. 17's far point is outside the domain,
            so no lower bound is given. ``False`` certifies the model on all of R^n.
    """
    if model.modality != "image":
        raise ConfigError("certify works on image models (input Jacobians of [0, 1] pixels)")
    if not examples:
        raise ConfigError("certify needs at least one example")
    x = torch.stack([example.input for example in examples]).float()
    y = torch.tensor([example.label for example in examples])
    logits = model.float64_logits(x)  # E and eq. 17 in float64 where the model allows it
    precise = logits is not None
    if logits is None:
        with torch.no_grad():
            logits = model.logits(x.to(model.device)).double().cpu()
    losses = loss_of(loss, logits, y)
    empirical = float(losses.mean())
    jacobian = jacobians(model, x)
    if not (math.isfinite(empirical) and bool(torch.isfinite(jacobian).all())):
        temperature = getattr(model, "temperature", 1.0)
        hint = (f": served at temperature {temperature:g}, they overflow; choose a larger temperature"
                if temperature != 1.0 else "")
        raise ConfigError(f"model {model.info.name!r} gives a loss or an input gradient that is not finite on these "
                          f"examples, so no certificate can be computed{hint}")
    rates, rivals = rival_rates(jacobian, y, norm)
    star = int(rates.argmax())
    factor = 2 ** (1 / ORDER[norm])  # 2^(1/r): 1 for r = ∞
    norms, norms_exact = operator_norms(jacobian, norm)
    lipschitz, how = model.lipschitz_bound()
    inputs, classes = jacobian.shape[2], jacobian.shape[1]
    holder = (inputs * classes) ** max(0.0, 0.5 - 1 / ORDER[norm])  # ‖·‖_{r→s} ≤ this · ‖·‖_{2→2}
    upper_rate = None if lipschitz is None else factor * holder * lipschitz
    estimate = factor * float(norms.max())
    if upper_rate is not None and norms_exact and upper_rate < estimate * (1 - 1e-9):
        # L_N is the rate at a data point, never above the true L: a bound below it is no bound
        # (a layer computing other than its class says, a hook, a block the analysis misread).
        how = (f"the layer-by-layer bound ({upper_rate:.6g}) is below the rate at a data point "
               f"({estimate:.6g}), so some part of the model computes other than the analysis assumed")
        upper_rate = None
    certificate = Certificate(
        norm=norm, loss=loss, n=len(examples), empirical=empirical, rival_rate_estimate=float(rates[star]),
        rival_rate_estimate_at={"id": examples[star].id, "label": int(y[star]), "rival": int(rivals[star])},
        upper_rate_bound=upper_rate, upper_rate_bound_how=how, upper_rate_estimate=estimate,
        upper_rate_estimate_exact=norms_exact, boxed=boxed, precision="float64" if precise else "float32")
    # eq. 17's rays: along the cone-free steepest direction, and inside the steepest cone. Each
    # gives a distribution in the ball, so the larger loss is the bound.
    rays = [(star, unit_direction(jacobian[star, rivals[star]] - jacobian[star, y[star]], norm))]
    cone = None if boxed else _cone_rates(model, x, y, jacobian, norm)
    if cone is not None:
        certificate.cone_rate_bound = cone[0]
        rays.append(cone[1:])
    for radius in eps:
        found = [] if boxed or not precise else [
            _construction(model, x[at], y[at], direction, losses, float(radius), loss, norm) for at, direction in rays]
        certificate.rows.append({
            "eps": float(radius), "empirical": empirical,
            # The data's own distribution is in every ball too: a construction below it (a margin
            # loss falls along some rays) bounds less than E itself does.
            # A construction whose far point overflows (NaN, ±inf) bounds nothing: left out (P_N
            # itself is still in the ball).
            "lower_bound": max([v for v in found if v is not None and math.isfinite(v)] + [empirical])
            if found else None,
            "lower_estimate": empirical + certificate.rival_rate_estimate * radius,
            "lower_cone_bound": None if cone is None else empirical + cone[0] * radius,
            "upper_bound": None if upper_rate is None else empirical + upper_rate * radius,
            "upper_estimate": empirical + certificate.upper_rate_estimate * radius,
        })
    certificate.notes = _notes(certificate, how, model)
    return certificate


def _cone_rates(model, x, y, jacobian, norm) -> tuple[float, int, torch.Tensor] | None:
    """The largest rival rate over the data within each point's activation cone (rounded down by
    :data:`CONE_MARGIN`), its example and direction; ``None`` when the model's cells are not
    available (not a ReLU MLP: :meth:`~suite.models.base.Classifier.cell_support`)."""
    best = None
    for index, point in enumerate(x):
        cell = model.relu_cell(point)
        if cell is None:
            return None
        constraints, exact = cell  # the cell's float64 Jacobian, not the float32 autograd one
        for rival in range(jacobian.shape[1]):
            if rival == int(y[index]):
                continue
            vector = exact[rival] - exact[y[index]]
            rate, direction = cone_rate(vector, constraints, norm)
            direction = direction.double()
            size = float(torch.linalg.vector_norm(direction, ord=ORDER[norm]))
            if bool((constraints @ direction < 0).any()):
                # Outside the cone, by however little: its ray leaves the cell (Lemma C.1 needs
                # A·u ≥ 0 exactly). Within a 1e-9 tolerance, a 2→3→2 ReLU MLP whose cone is {0}
                # had a rate of 1 and a bound of 11.3 at ε = 10 over a supremum ≤ 2.13.
                continue
            # The value of the direction found (‖u‖_r ≤ 1, u in the cone) is at most the supremum;
            # the solver's tolerance is taken off it.
            rate = float(vector @ direction) / max(1.0, size)
            rate = max(0.0, rate - CONE_MARGIN * float(torch.linalg.vector_norm(vector, ord=DUAL[norm])))
            if best is None or rate > best[0]:
                best = (rate, index, direction)
    return best


def _construction(model, point, label, direction, losses, eps, loss, norm) -> float | None:
    """E_P[ℓ] of eq. 17's distribution, rounded down: P_N with a fraction Nε/t of one point's mass
    moved to a point at distance t along ``direction``, so its W_1 cost is at most ε.

    Evaluated in float64 (a float64 copy of the model). In float32 the far point's logits, about
    1e8 times the rate, carry rounding errors that the 1/t factor does not remove: the value came
    out up to 4.6e-8 (relative) above the exact supremum on a linear model. Here the transport
    cost is measured on the far point actually evaluated, and the result is lowered by
    :data:`LOWER_MARGIN` times the magnitudes involved (the largest |logit| at both points).
    """
    n = len(losses)
    empirical = float(losses.mean())
    if eps == 0:
        return empirical
    unit = direction.double().view_as(point)
    size = float(torch.linalg.vector_norm(unit.flatten(), ord=ORDER[norm]))
    if size > 1.0:
        unit = unit / size
    origin = point.double()
    far = origin + RAY_LENGTH * max(1.0, n * eps) * unit
    # The cost actually paid, rounded up: the mass moved is Nε/t ≤ 1 of one point's 1/N.
    distance = float(torch.linalg.vector_norm((far - origin).flatten(), ord=ORDER[norm])) * (1 + 1e-12)
    if not distance >= n * eps:
        return empirical - LOWER_MARGIN * abs(empirical)  # the direction is 0 (a bounded cell): P_N itself
    logits = model.float64_logits(torch.stack([origin, far]))  # float64 in, never rounded to float32
    if logits is None:
        return None
    pair = loss_of(loss, logits, label.view(1).repeat(2))
    gain = float(pair[1] - pair[0])
    value = empirical + eps / distance * gain
    scale = abs(empirical) + eps / distance * float(logits.abs().max()) * 2
    return value - LOWER_MARGIN * scale


def _notes(certificate: Certificate, how: str, model: Classifier) -> list[str]:
    """Which numbers are bounds and which estimates, and why any bound is missing."""
    notes = [f"upper_bound (E + L·eps): {how}" if certificate.upper_rate_bound is not None
             else f"no upper_bound: {how}",
             "upper_estimate (E + L_N·eps, L_N the largest ‖J‖ at a data point) is an estimate, not a bound: a "
             "network can be flat at every data point and steep between them"]
    if certificate.boxed:
        notes.append("no lower_bound and no lower_cone_bound: inputs are confined to [0, 1], and eq. 17's ray "
                     "leaves the domain (certify the unboxed model for them); lower_estimate (E + l_N·eps) is an "
                     "estimate")
    else:
        if certificate.precision != "float64":
            notes.append(f"no lower_bound: {model.info.name} cannot be evaluated in float64, and eq. 17's far point "
                         "in float32 can exceed the supremum it bounds")
        else:
            notes.append(f"lower_bound: the loss of eq. 17's distribution (inside the W_1 ball), computed in float64 "
                         f"and lowered by {LOWER_MARGIN:.2g} of the magnitudes involved: a bound for any model")
        if certificate.cone_rate_bound is not None:
            notes.append("lower_cone_bound (E + l·eps, l the steepest rate inside a data point's activation cone, "
                         f"Thm 3.1's rec(C), lowered by {CONE_MARGIN:g}·‖v‖): the logits are affine on that ray, so "
                         "eq. 17 along it tends to this value: a bound; lower_bound follows that ray")
        else:
            notes.append(f"no lower_cone_bound: {model.cell_support() or 'no activation cell was computed'}")
        notes.append("lower_estimate (E + l_N·eps, the cone-free rival rate) is an estimate: the limit of eq. 17 "
                     "only for a model affine along the ray")
    if not certificate.upper_rate_estimate_exact:
        notes.append("‖J‖_{∞→1} with more than 16 classes: bounded by √(nK)·σ_max, not computed exactly")
    return notes
