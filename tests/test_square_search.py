"""Square's search as the official AutoAttack code runs it (``suite.attacks.image.square_search``):
torchattacks' search bit for bit where the official fixes change nothing, and the two fixes
(L2 windows per channel, the side capped at the image's smaller side) where they do."""

from __future__ import annotations

import pytest
import torch

from suite.attacks.image.square_search import _l2_candidate, official_square, side, window_norms

torchattacks = pytest.importorskip("torchattacks", reason="the baselines extra (torchattacks) is not installed")


class _Net(torch.nn.Module):
    """A fixed random classifier of c×h×w images into 10 classes (weights from a seed)."""

    def __init__(self, shape: tuple[int, int, int]):
        super().__init__()
        generator = torch.Generator().manual_seed(3)
        self.weight = torch.nn.Parameter(torch.randn(10, shape[0] * shape[1] * shape[2], generator=generator) * 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) @ self.weight.T


def _pair(shape, norm, eps, queries=150, n=6, classes=None):
    """The adversarial images of torchattacks' Square and of the official search, from the same seed."""
    net = _Net(shape).eval()
    x = torch.rand(n, *shape, generator=torch.Generator().manual_seed(1))
    y = net(x).argmax(1)
    found = []
    for cls in classes or (torchattacks.Square, official_square(torchattacks)):
        torch.manual_seed(0)
        attack = cls(net, norm=norm, eps=eps, n_queries=queries, n_restarts=1, p_init=0.8, seed=0, resc_schedule=False)
        found.append(attack(x, y))
    return net, x, y, found


def test_on_square_images_under_linf_it_is_torchattacks_bit_for_bit():
    _, x, y, (theirs, ours) = _pair((3, 16, 16), "Linf", 0.05)
    assert torch.equal(theirs, ours)
    assert not torch.equal(ours, x)  # the search moved


def test_on_one_channel_under_l2_it_decides_as_torchattacks():
    """With one channel the window's norm over all channels is the channel's own: the same
    search up to the rounding of two ways of summing."""
    net, x, y, (theirs, ours) = _pair((1, 16, 16), "L2", 0.8)
    assert torch.allclose(theirs, ours, atol=1e-5)
    assert torch.equal(net(theirs).argmax(1) != y, net(ours).argmax(1) != y)


def test_on_colour_images_under_l2_the_windows_are_per_channel():
    """Fix 1 is in effect: torchattacks' search and the official one part on colour images."""
    _, x, _, (theirs, ours) = _pair((3, 16, 16), "L2", 0.8)
    assert not torch.allclose(theirs, ours, atol=1e-3)
    assert ((ours - x).flatten(1).norm(dim=1) <= 0.8 + 1e-5).all()


def test_window_norms_are_each_channel_s_own():
    delta = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(0))
    mask = torch.zeros(2, 3, 6, 6)
    mask[:, :, 1:4, 2:5] = 1.0
    norms = window_norms(delta, mask)
    assert norms.shape == (2, 3, 1, 1)
    for i in range(2):
        for channel in range(3):
            assert norms[i, channel, 0, 0] == pytest.approx(float(delta[i, channel, 1:4, 2:5].norm()), rel=1e-6)


def test_a_spent_budget_moves_no_mass_into_an_empty_channel():
    """The L2 step gives each channel's new square what that channel's two windows held plus
    the budget left over. With the whole budget in channel 0, channels 1 and 2 stay untouched;
    torchattacks' norm over all channels would put channel 0's window energy into them."""
    net = _Net((3, 12, 12))
    attack = official_square(torchattacks)(net, norm="L2", eps=1.0, n_queries=1, seed=0)
    x = torch.full((4, 3, 12, 12), 0.5)
    attack.init_hyperparam(x)
    delta = torch.zeros_like(x)
    delta[:, 0] = torch.randn(4, 12, 12, generator=torch.Generator().manual_seed(5))
    delta = delta / delta.flatten(1).norm(dim=1).view(-1, 1, 1, 1) * 0.3  # inside [0, 1] once scaled to ε
    best = x + delta / 0.3  # ‖δ‖ = ε = 1: nothing left over
    torch.manual_seed(0)
    candidate = _l2_candidate(attack, x, best.clamp(0, 1), 5)
    moved = (candidate - x).abs()
    assert moved[:, 0].amax() > 0.01
    assert moved[:, 1:].amax() < 1e-3


@pytest.mark.parametrize("shape", [(3, 10, 40), (3, 12, 12), (1, 12, 40)])
@pytest.mark.parametrize("norm", ["Linf", "L2"])
def test_on_a_wide_or_small_image_every_square_fits(norm, shape):
    """Fix 2: the first squares of a 10×40 image (side ⌊√(0.8·400)⌉ = 18) are capped at 10,
    and the L2 start lays only whole squares; torchattacks fails on these shapes under L2."""
    eps = 0.05 if norm == "Linf" else 0.8
    net, x, y, (ours,) = _pair(shape, norm, eps, queries=60, classes=[official_square(torchattacks)])
    delta = (ours - x).flatten(1)
    bound = delta.abs().amax(dim=1) if norm == "Linf" else delta.norm(dim=1)
    assert (bound <= eps + 1e-5).all() and ((0 <= ours) & (ours <= 1)).all()
    moved = delta.abs().amax(dim=1) > 0  # torchattacks returns the clean image where it found nothing
    assert torch.equal(moved, net(ours).argmax(1) != y)
    if norm == "L2":
        with pytest.raises(RuntimeError, match="size|shape"):
            _pair(shape, norm, eps, queries=60, classes=[torchattacks.Square])


def test_the_side_is_capped_at_the_smaller_side():
    assert side(0.8, 10, 40, 3, l2=False) == 10 and side(0.8, 10, 40, 3, l2=True) == 10
    assert side(0.8, 12, 12, 3, l2=False) == 11 and side(0.8, 12, 12, 3, l2=True) == 11
    assert side(0.8 / 512, 12, 12, 1, l2=True) == 3  # the L2 floor
    assert side(0.8 / 512, 12, 12, 1, l2=False) == 1
