"""The min-norm point of the convex hull of a few gradients: the weighting DDi-AT combines its M
adversarial examples' parameter gradients with ("Extreme Confidence and the Illusion of
Robustness", App. A, eq. 15; the multiple-gradient descent of Désidéri 2012 / Sener & Koltun
2018):

    α* = argmin_{α ∈ Δ_M} ‖Σ_i α_i g_i‖²,

Δ_M the probability simplex. With two gradients the solution is closed-form: the weight of g_1
is clip(((g_2 − g_1)·g_2) / ‖g_1 − g_2‖², 0, 1). For a few gradients (DDi-AT uses M = 3) it is
solved exactly by trying every face of the simplex: on the face spanned by a subset S, the
minimiser of the quadratic on the affine hull solves a small linear (KKT) system; the best
feasible one over all faces is the optimum (the problem is convex, and its minimiser lies in the
relative interior of exactly one face).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

#: Faces are enumerated exactly up to this many gradients (2^M − 1 linear systems).
MAX_GRADIENTS = 12


def min_norm_weights(gradients: Sequence[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    """α* ∈ Δ_M minimising ‖Σ α_i g_i‖₂ (float64, on the CPU), for M ≤ :data:`MAX_GRADIENTS`
    gradients of any shape (flattened)."""
    count = len(gradients)
    if count == 0 or count > MAX_GRADIENTS:
        raise ValueError(f"min_norm_weights takes 1 to {MAX_GRADIENTS} gradients, got {count}")
    flat = torch.stack([g.detach().double().flatten().cpu() for g in gradients])
    return weights_from_gram(flat @ flat.T)


def gram_matrix(gradients: Sequence[torch.Tensor]) -> torch.Tensor:
    """Pairwise dot products of flattened gradients, accumulated in float64 on the CPU (each pair
    in turn, on the gradients' device: no float64 copy of all of them at once)."""
    count = len(gradients)
    gram = torch.zeros(count, count, dtype=torch.float64)
    for i in range(count):
        for j in range(i, count):
            value = float(torch.dot(gradients[i].double(), gradients[j].double()))
            gram[i, j] = gram[j, i] = value
    return gram


def weights_from_gram(gram: torch.Tensor) -> torch.Tensor:
    """α* of :func:`min_norm_weights` from the gradients' Gram matrix (M×M, float64)."""
    count = len(gram)
    if count == 0 or count > MAX_GRADIENTS:
        raise ValueError(f"the min-norm weights take 1 to {MAX_GRADIENTS} gradients, got {count}")
    gram = gram.double().cpu()
    if count == 1:
        return torch.ones(1, dtype=torch.float64)
    if count == 2:
        return two_gradient_weights(gram)
    best, best_value = None, float("inf")
    for size in range(1, count + 1):
        for face in itertools.combinations(range(count), size):
            weights = _face_minimiser(gram, list(face))
            if weights is None:
                continue
            value = float(weights @ gram @ weights)
            if value < best_value - 1e-15:
                best, best_value = weights, value
    return best


def two_gradient_weights(gram: torch.Tensor) -> torch.Tensor:
    """The closed form for two gradients from their Gram matrix: γ = clip(((g₂ − g₁)·g₂) /
    ‖g₁ − g₂‖², 0, 1) on g₁ and 1 − γ on g₂ (γ = ½ when the gradients are equal)."""
    gap = gram[0, 0] + gram[1, 1] - 2 * gram[0, 1]
    gamma = 0.5 if float(gap) <= 0 else float(((gram[1, 1] - gram[0, 1]) / gap).clamp(0.0, 1.0))
    return torch.tensor([gamma, 1.0 - gamma], dtype=torch.float64)


def _face_minimiser(gram: torch.Tensor, face: list[int]) -> torch.Tensor | None:
    """The minimiser of αᵀGα over {Σ_{i∈S} α_i = 1, α_i = 0 outside S}, if it has α ≥ 0 (KKT:
    [G_SS 1; 1ᵀ 0][α; λ] = [0; 1]); ``None`` when it leaves the face or the system is singular."""
    size = len(face)
    system = torch.zeros(size + 1, size + 1, dtype=torch.float64)
    system[:size, :size] = gram[face][:, face]
    system[:size, size] = 1.0
    system[size, :size] = 1.0
    rhs = torch.zeros(size + 1, dtype=torch.float64)
    rhs[size] = 1.0
    solution = torch.linalg.lstsq(system, rhs.view(-1, 1)).solution.view(-1)
    inner = solution[:size]
    if bool((inner < -1e-12).any()) or abs(float(inner.sum()) - 1.0) > 1e-9:
        return None
    weights = torch.zeros(len(gram), dtype=torch.float64)
    weights[face] = inner.clamp_min(0.0) / inner.clamp_min(0.0).sum()
    return weights
