"""Square Attack's search (Andriushchenko et al., "Square Attack: a query-efficient black-box
adversarial attack via random search", ECCV 2020) as the official AutoAttack code runs it today.

torchattacks' ``Square`` (3.3.0 to 3.5.1) is the official code of 2020. The official code
(github.com/fra31/auto-attack, read at a392200) has since fixed two things its copy lacks, and
:func:`official_square` gives torchattacks' class with both fixed:

1. **L2 windows per channel** (official e79935c). The L2 step (the paper's Algorithm 3 and its
   L2 sampling distribution) rescales the new square so that the perturbation keeps what its two
   windows held plus what the budget has left: per colour channel,
   ‖new‖ = √(max(ε² − ‖δ‖², 0) / c + ‖δ restricted to the two windows, that channel‖²). torchattacks
   takes the windows' norm over all channels at once, so on colour images every channel's square
   got the whole image's window energy. On one-channel images the two agree (up to rounding of
   the sums).
2. **The square's side capped at the image's smaller side** (official 8c86d6f), under both norms.
   Without it a non-square image's first squares (side √(p·h·w)) can be taller than the image:
   the window is cut at the edge and the search loses part of its step. Square images reach the
   cap only from p = 1 under L2 (an even side made odd); at AutoAttack's p_init of 0.8 never.

Everything else is torchattacks' own: the random draws, in the same order (the global generator,
which the caller seeds), the schedule of p, the margin loss and the acceptance rule. On square
images under L∞ the search is torchattacks' bit for bit (a test checks it). Images under 5×5
are padded by the caller (the L2 start tiles the image with ⌊h/5⌋-pixel squares).

One deviation from both: the L2 start lays only squares that fit (:func:`_l2_start`), where both
codes fail on a shape mismatch (a 12×12 or 12×40 image, for instance).
"""

from __future__ import annotations

import math
from typing import Any


def official_square(torchattacks) -> type:
    """torchattacks' ``Square`` with the official search (:func:`search`) in ``attack_single_run``."""

    class OfficialSquare(torchattacks.Square):
        def attack_single_run(self, x, y):
            return search(self, x, y)

    return OfficialSquare


def side(p: float, height: int, width: int, channels: int, l2: bool) -> int:
    """The side of the next square: ⌊√(p·h·w)⌉, at least 1 (L∞) or an odd number ≥ 3 (L2), and
    at most min(h, w) (fix 2; torchattacks has no cap)."""
    # p·(c·h·w)/c, not p·h·w: torchattacks' rounding, so that uncapped sides are its sides
    size = max(int(round(math.sqrt(p * (channels * height * width) / channels))), 3 if l2 else 1)
    if l2 and size % 2 == 0:
        size += 1
    return min(size, height, width)


def window_norms(delta: Any, mask: Any) -> Any:
    """‖δ restricted to ``mask``‖ per example and channel (fix 1): shape (n, c, 1, 1)."""
    return ((delta * mask) ** 2).sum(dim=(-2, -1), keepdim=True).sqrt()


def search(attack: Any, x: Any, y: Any) -> tuple[Any, Any]:
    """One run of the search on images ``x`` (n×c×h×w in [0, 1]) with labels ``y``: the queries
    each example took and the best points found (torchattacks' ``attack_single_run`` contract)."""
    import torch

    with torch.no_grad():
        channels, height, width = x.shape[1:]
        l2 = attack.norm == "L2"
        if l2:
            best = torch.clamp(x + attack.normalize(_l2_start(attack, x)) * attack.eps, 0.0, 1.0)
        else:
            best = torch.clamp(x + attack.eps * attack.random_choice([x.shape[0], channels, 1, width]), 0.0, 1.0)
        margin_min, loss_min = attack.margin_and_loss(best, y)
        queries = torch.ones(x.shape[0], device=x.device)
        propose = _l2_candidate if l2 else _linf_candidate
        for step in range(attack.n_queries):
            live = (margin_min > 0.0).nonzero().flatten()
            if len(live) == 0:
                break
            x_live, best_live, y_live = x[live], best[live], y[live]
            size = side(attack.p_selection(step), height, width, channels, l2)
            candidate = propose(attack, x_live, best_live, size)
            margin, loss = attack.margin_and_loss(candidate, y_live)
            # torchattacks blends with 0/1 weights (w·new + (1 − w)·old); where() gives the same values.
            improved = loss < loss_min[live]
            loss_min[live] = torch.where(improved, loss, loss_min[live])
            improved = improved | (margin <= 0.0)
            margin_min[live] = torch.where(improved, margin, margin_min[live])
            best[live] = torch.where(improved.view(-1, 1, 1, 1), candidate, best_live)
            queries[live] += 1.0
            if bool((margin_min <= 0.0).all()):
                break
    return queries, best


def _l2_start(attack: Any, x: Any) -> Any:
    """The L2 start: the image tiled with ⌊h/5⌋-pixel squares of the paper's L2 pattern, each with
    a random sign per example and channel (torchattacks' and the official code's, unchanged)."""
    import torch

    delta = torch.zeros_like(x)
    height, width = x.shape[-2:]
    size = height // 5
    offset = (height - size * 5) // 2
    top = offset
    for _ in range(height // size):
        left = offset
        for _ in range(width // size):
            # Deviation: only whole squares. Both codes lay ⌊h/s⌋ × ⌊w/s⌋ squares from the offset,
            # and where the last one overhangs the image (12×12: six 2-pixel rows from pixel 1;
            # 12×40: twenty columns) the sum fails on mismatched shapes. Where every square fits
            # (h = w ≥ 25, and most sizes below) nothing changes, draws included.
            if top + size <= height and left + size <= width:
                delta[:, :, top:top + size, left:left + size] += (
                    attack.eta(size).view(1, 1, size, size) * attack.random_choice([x.shape[0], x.shape[1], 1, 1]))
            left += size
        top += size
    return delta


def _linf_candidate(attack: Any, x: Any, best: Any, size: int) -> Any:
    """L∞: one square of ±2ε per channel added to the best point, projected onto the ε-box and [0, 1]."""
    import torch

    channels, height, width = x.shape[1:]
    top = attack.random_int(0, height - size)
    left = attack.random_int(0, width - size)
    step = torch.zeros([channels, height, width], device=x.device)
    step[:, top:top + size, left:left + size] = 2.0 * attack.eps * attack.random_choice([channels, 1, 1])
    candidate = torch.min(torch.max(best + step, x - attack.eps), x + attack.eps)
    return torch.clamp(candidate, 0.0, 1.0)


def _l2_candidate(attack: Any, x: Any, best: Any, size: int) -> Any:
    """L2: the paper's step. A new square at one window takes that window's old content and the
    mass of a second window (zeroed), rescaled per channel (fix 1), then the whole perturbation
    is scaled to ε and clipped to [0, 1]."""
    import torch

    delta = best - x
    height, width = x.shape[-2:]
    top, left = attack.random_int(0, height - size), attack.random_int(0, width - size)
    first = torch.zeros_like(x)
    first[:, :, top:top + size, left:left + size] = 1.0
    old_norms = (delta[:, :, top:top + size, left:left + size] ** 2).sum(dim=(-2, -1), keepdim=True).sqrt()
    top2, left2 = attack.random_int(0, height - size), attack.random_int(0, width - size)
    second = torch.zeros_like(x)
    second[:, :, top2:top2 + size, left2:left2 + size] = 1.0
    image_norms = attack.lp_norm(delta)
    windows = window_norms(delta, torch.max(first, second))
    new = torch.ones([x.shape[0], x.shape[1], size, size], device=x.device)
    new *= attack.eta(size).view(1, 1, size, size) * attack.random_choice([x.shape[0], x.shape[1], 1, 1])
    new += delta[:, :, top:top + size, left:left + size] / (1e-12 + old_norms)
    # ε² squared in float32, as torchattacks does, so that one channel gives its bits
    budget = (attack.eps * torch.ones_like(image_norms)) ** 2
    left_over = torch.max(budget - image_norms ** 2, torch.zeros_like(image_norms))
    new = new / (1e-12 + (new ** 2).sum(dim=(-2, -1), keepdim=True).sqrt()) * (
        left_over / x.shape[1] + windows ** 2).sqrt()
    delta[:, :, top2:top2 + size, left2:left2 + size] = 0.0
    delta[:, :, top:top + size, left:left + size] = new
    return torch.clamp(x + attack.normalize(delta) * attack.eps, 0.0, 1.0)
