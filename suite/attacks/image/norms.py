"""Threat-model geometry shared by the gradient attacks: one class per norm.

Each norm knows its random start, its steepest-ascent step (the dual-norm maximiser: sign for L∞,
the normalised gradient for L2, a signed one-hot for L1), its projection onto the ε-ball and how to
measure a perturbation. All operate per example on N×C×H×W tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from suite.seeding import per_generator


def _per_example(values: torch.Tensor) -> torch.Tensor:
    """Reshape a length-N vector to broadcast over N×C×H×W."""
    return values.view(-1, 1, 1, 1)


def project_linf(delta: torch.Tensor, eps: float) -> torch.Tensor:
    """Closest point of the L∞ ball of radius ``eps``."""
    return delta.clamp(-eps, eps)


def project_l2(delta: torch.Tensor, eps: float) -> torch.Tensor:
    """Closest point of the L2 ball of radius ``eps`` (per example)."""
    norms = delta.flatten(1).norm(dim=1).clamp_min(1e-12)
    return delta * _per_example((eps / norms).clamp(max=1.0))


def random_starts(geometry: type, shape: torch.Size, eps: float, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """``geometry.random_start`` for each generator, stacked: the same values as a loop, each
    row's draw made in a thread (:func:`~suite.seeding.per_generator`; on this project's 2-core
    CPU, 256 starts at 224² took 0.15–0.21 s one at a time and 0.09–0.13 s in two threads)."""
    return torch.stack(per_generator(lambda generator: geometry.random_start(shape, eps, generator), generators,
                                     shape.numel()))


class Linf:
    """L∞ threat model: ‖δ‖∞ ≤ ε."""

    name = "linf"

    @staticmethod
    def random_start(shape: torch.Size, eps: float, generator: torch.Generator) -> torch.Tensor:
        return (torch.rand(shape, generator=generator) * 2 - 1) * eps

    @staticmethod
    def step(grad: torch.Tensor, size: float) -> torch.Tensor:
        # A unit step skips the multiplication (exact either way): one pass less over the images.
        return grad.sign() if size == 1.0 else size * grad.sign()

    project = staticmethod(project_linf)

    @staticmethod
    def measure(delta: torch.Tensor) -> torch.Tensor:
        return delta.flatten(1).abs().amax(dim=1)


class L2:
    """L2 threat model: ‖δ‖₂ ≤ ε."""

    name = "l2"

    @staticmethod
    def random_start(shape: torch.Size, eps: float, generator: torch.Generator) -> torch.Tensor:
        # Uniform in the L2 ball: Gaussian direction, radius ε·U^(1/d).
        direction = torch.randn(shape, generator=generator)
        direction = direction / direction.flatten().norm().clamp_min(1e-12)
        radius = eps * torch.rand((), generator=generator) ** (1.0 / direction.numel())
        return direction * radius

    @staticmethod
    def step(grad: torch.Tensor, size: float) -> torch.Tensor:
        # Rescale by the largest entry first: squaring a tiny gradient (a confident model, a
        # mean-reduced loss) would underflow, and a norm floor would then shrink the step.
        grad = grad / _per_example(grad.flatten(1).abs().amax(dim=1).clamp_min(torch.finfo(grad.dtype).tiny))
        norms = grad.flatten(1).norm(dim=1).clamp_min(1e-12)
        return (grad if size == 1.0 else size * grad) / _per_example(norms)

    project = staticmethod(project_l2)

    @staticmethod
    def measure(delta: torch.Tensor) -> torch.Tensor:
        return delta.flatten(1).norm(dim=1)


class L2Floored(L2):
    """L2 with the mini-batch paper's normalisation, for its study only (``l2_step: floored``).

    Redgrave & Crum, eq. 2, normalise by ‖g‖₂ as TensorFlow code does (cleverhans'
    ``optimize_linear``): g / √max(1e-12, Σg²), with no rescaling first. A gradient whose norm is
    under 1e-6 then gives a step shorter than ``size``, and a mean-reduced loss divides every
    example's gradient by the batch size: the step collapses for confident examples in large
    batches, in fp32 too. :class:`L2` rescales first, so its step always has length ``size``.
    """

    @staticmethod
    def step(grad: torch.Tensor, size: float) -> torch.Tensor:
        squares = grad.flatten(1).pow(2).sum(dim=1).clamp_min(1e-12)
        return size * grad / _per_example(squares.sqrt())


class L2FlooredPixels(L2Floored):
    """:class:`L2Floored` in the paper's units (``l2_step: floored_pixels``): its official code
    attacks raw 0–255 pixels, whose gradient is the [0, 1] gradient over 255, so its floor of
    1e-6 on that gradient's norm is 255e-6 on the suite's: the step is size · g / max(255e-6,
    ‖g‖). The direction and length are the paper's exactly; only where the floor bites moves."""

    #: ‖g‖ below which the step shortens, in [0, 1] units (the paper's 1e-6, times 255).
    FLOOR = 255e-6

    @staticmethod
    def step(grad: torch.Tensor, size: float) -> torch.Tensor:
        squares = grad.flatten(1).pow(2).sum(dim=1).clamp_min(L2FlooredPixels.FLOOR ** 2)
        return size * grad / _per_example(squares.sqrt())


def project_l1(delta: torch.Tensor, eps: float) -> torch.Tensor:
    """Closest point (Euclidean) of the L1 ball of radius ``eps``, per example: soft-thresholding
    at the θ of Duchi et al., "Efficient Projections onto the l1-Ball for Learning in High
    Dimensions", ICML 2008, Fig. 1 (sort the magnitudes, find the last index where the running
    mean stays below them). Examples already inside the ball are returned as they are."""
    flat = delta.flatten(1)
    magnitudes = flat.abs()
    inside = magnitudes.sum(dim=1) <= eps
    if bool(inside.all()):
        return delta
    ordered = magnitudes.sort(dim=1, descending=True).values
    cumulative = ordered.cumsum(dim=1) - eps
    index = torch.arange(1, flat.shape[1] + 1, device=flat.device, dtype=flat.dtype)
    support = (ordered * index > cumulative).sum(dim=1, keepdim=True).clamp_min(1)
    theta = cumulative.gather(1, support - 1) / support.to(flat.dtype)
    projected = flat.sign() * (magnitudes - theta).clamp_min(0)
    return torch.where(inside.view(-1, 1), flat, projected).view_as(delta)


class L1:
    """L1 threat model: ‖δ‖₁ ≤ ε (the distributional attacks' cost norm r = 1)."""

    name = "l1"

    @staticmethod
    def random_start(shape: torch.Size, eps: float, generator: torch.Generator) -> torch.Tensor:
        # Uniform in the L1 ball: a Laplace direction on the sphere, radius ε·U^(1/d).
        uniform = torch.rand(shape, generator=generator).clamp(1e-12, 1 - 1e-12)
        laplace = torch.log(uniform) * torch.where(torch.rand(shape, generator=generator) < 0.5, -1.0, 1.0)
        direction = laplace / laplace.abs().sum().clamp_min(1e-12)
        radius = eps * torch.rand((), generator=generator) ** (1.0 / direction.numel())
        return direction * radius

    @staticmethod
    def step(grad: torch.Tensor, size: float) -> torch.Tensor:
        """``size`` times the L1 steepest-ascent direction: a signed one-hot at the largest |g|
        (the maximiser of ⟨g, h⟩ over ‖h‖₁ = 1)."""
        flat = grad.flatten(1)
        index = flat.abs().argmax(dim=1, keepdim=True)
        step = torch.zeros_like(flat).scatter(1, index, flat.gather(1, index).sign())
        return size * step.view_as(grad)

    project = staticmethod(project_l1)

    @staticmethod
    def measure(delta: torch.Tensor) -> torch.Tensor:
        return delta.flatten(1).abs().sum(dim=1)


#: Threat models by the name recorded in results.
NORMS: dict[str, type] = {"linf": Linf, "l2": L2}
#: The cost norms r of the distributional attacks (L1 is theirs only).
COST_NORMS: dict[str, type] = {**NORMS, "l1": L1}
