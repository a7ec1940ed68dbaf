"""DDi-AT's min-norm weighting of its adversarial examples' gradients (IOR paper, App. A, eq. 15)."""

from __future__ import annotations

import itertools

import pytest
import torch

from suite.train.simplex import min_norm_weights


def _norm(weights, gradients):
    return float(torch.linalg.vector_norm(sum(w * g.double() for w, g in zip(weights, gradients))))


@pytest.mark.parametrize("seed", range(5))
def test_two_gradients_match_the_closed_form(seed):
    generator = torch.Generator().manual_seed(seed)
    g1, g2 = torch.randn(7, generator=generator), torch.randn(7, generator=generator)
    expected = float(torch.clamp(((g2 - g1) @ g2) / (g1 - g2).pow(2).sum(), 0, 1))
    assert min_norm_weights([g1, g2]).tolist() == pytest.approx([expected, 1 - expected])


def test_the_two_gradient_edge_cases():
    g = torch.tensor([1.0, 2.0])
    assert min_norm_weights([g, 3 * g]).tolist() == pytest.approx([1.0, 0.0])  # the shorter one alone
    assert min_norm_weights([g, -g]).tolist() == pytest.approx([0.5, 0.5])  # they cancel: norm 0
    assert min_norm_weights([g, g]).tolist() == pytest.approx([0.5, 0.5])


@pytest.mark.parametrize("seed", range(6))
def test_three_gradients_beat_every_point_of_a_fine_simplex_grid(seed):
    generator = torch.Generator().manual_seed(seed)
    gradients = [torch.randn(5, generator=generator) + (2.0 if seed % 2 else 0.0) for _ in range(3)]
    weights = min_norm_weights(gradients)
    assert float(weights.sum()) == pytest.approx(1.0) and bool((weights >= 0).all())
    steps = 60
    grid = min(_norm((i / steps, j / steps, 1 - (i + j) / steps), gradients)
               for i, j in itertools.product(range(steps + 1), repeat=2) if i + j <= steps)
    assert _norm(weights, gradients) <= grid + 1e-9


def test_refuses_no_gradients():
    with pytest.raises(ValueError):
        min_norm_weights([])
