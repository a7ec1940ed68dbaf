"""The checks of an evaluation that read the input gradient itself (see :mod:`.checks`, which
runs them): zero, NaN or infinite gradients at the examples, in each precision a white-box
attack searches in; a gradient that vanishes only on the edge of the pixel box, or on pixels the
model's answer depends on; and answers that depend on the rest of the batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from suite.attacks import Attack
from suite.data.base import Example
from suite.losses import cross_entropy
from suite.models.base import Classifier

#: Examples used by the checks that run the model (enough to see a pattern, cheap to run).
CHECK_EXAMPLES = 16
#: Of those, the examples whose input gradient is taken alone too (a backward pass each).
GRADIENT_ALONE = 4


def input_gradient(model: Classifier, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
    """∇ₓ Σ CE(f(x), y) in fp32 (each example's own gradient, whatever the batch); ``None`` where
    the logits have no gradient path to the input, zeros where the path does not reach it."""
    inputs = x.detach().clone().requires_grad_(True)
    logits = model.logits(inputs, grad=True)
    if not logits.requires_grad:
        return None
    (grad,) = torch.autograd.grad(cross_entropy(logits, y).sum(), inputs, allow_unused=True)
    return torch.zeros_like(inputs) if grad is None else grad


def check_zero_gradients(model: Classifier, examples: Sequence[Example],
                         attacks: Mapping[str, Attack] | None = None) -> list[str]:
    """Warn when the cross-entropy gradient with respect to the input is exactly zero, or NaN or
    infinite.

    Zero gradients (saturated softmax, non-differentiable preprocessing, an overconfident model)
    make gradient attacks report robustness that is not there (AutoAttack's
    ``check_zero_gradients``); so do NaN ones, along which no step can be taken. Where white-box
    ``attacks`` search in a lower precision (``--precision``), the gradient is taken again under
    that autocast: fp16 underflows (softmax − one-hot below 6e-8 is 0) where fp32 does not, even
    with the summed loss (the mini-batch study, Redgrave & Crum, Sec. 4.2, says low precision
    weakens attacks at any batch size).
    """
    if model.modality != "image" or not examples:
        return []
    batch = list(examples[:CHECK_EXAMPLES])
    x = torch.stack([example.input for example in batch]).to(model.device, torch.float32)
    y = torch.tensor([example.label for example in batch], device=model.device)
    grad = input_gradient(model, x, y)
    if grad is None:  # only black-box attacks ran (white-box ones are refused on it)
        return ["the model's logits have no gradient path to its input (it binarises, rounds or detaches it): only "
                "black-box attacks can run on it, and gradient-based checks of masking cannot"]
    invalid = int((~torch.isfinite(grad.flatten(1)).all(dim=1)).sum())
    if invalid:
        return [f"the input gradient of the cross-entropy is NaN or infinite for {invalid} of {len(batch)} examples: "
                "gradient attacks step only along its finite part there (a NaN input is in no threat model), so "
                "robust accuracy may be overstated; mend the model (or evaluate it in fp32)"]
    zero = int((grad.flatten(1).abs().amax(dim=1) == 0).sum())
    if zero:
        return [f"the input gradient of the cross-entropy is exactly zero for {zero} of {len(batch)} examples: "
                "gradient attacks cannot move them (margin losses such as apgd_t and beta included, when the "
                "model itself has no gradient, e.g. rounded or quantised inputs), so robust accuracy here may be "
                "overstated, an upper bound only; check it with a black-box attack (--attacks auto,square)"]
    return _low_precision_zero_gradients(model, x, y, attacks or {})


def _low_precision_zero_gradients(model: Classifier, x: torch.Tensor, y: torch.Tensor,
                                  attacks: Mapping[str, Attack]) -> list[str]:
    """The zero-gradient check again in each lower precision a white-box attack searches in."""
    from suite.attacks.image.loop import autocast

    warnings = []
    for precision in sorted({getattr(attack, "precision", "fp32") for attack in attacks.values()
                             if attack.access == "white-box"} - {"fp32"}):
        inputs = x.clone().requires_grad_(True)
        with autocast(model.device, precision):
            logits = model.logits(inputs, grad=True)
        (grad,) = torch.autograd.grad(cross_entropy(logits.float(), y).sum(), inputs)
        zero = int((~torch.isfinite(grad.flatten(1)).all(dim=1) | (grad.flatten(1).abs().amax(dim=1) == 0)).sum())
        if zero:
            searching = ", ".join(sorted(key for key, attack in attacks.items()
                                         if getattr(attack, "precision", "fp32") == precision))
            warnings.append(f"under {precision} autocast the input gradient of the cross-entropy is zero or not "
                            f"finite for {zero} of {len(x)} examples where it is finite and non-zero in fp32: "
                            f"{searching} cannot move them (low-precision underflow), so robust accuracy may be "
                            f"overstated; evaluate in fp32 (the default)")
    return warnings


def check_edge_gradients(model: Classifier, attacks: Mapping[str, Attack], examples: Sequence[Example]) -> list[str]:
    """Warn when the input gradient vanishes on the edge of the pixel box and not just inside it.

    A model that clamps (clips, hardtanh) its input to [0, 1] passes no gradient at the clamp's
    bounds (torch's clamp gives 0 there), and every random start and projection of a gradient
    attack puts pixels exactly on them: those pixels never move again. A CNN that clamped its
    input scored 93.8 % under ``auto`` where the same function without the clamp scored 28.1 %,
    and no other check spoke. Compared at the examples with every pixel rounded to 0 or 1 and
    at that point moved 1e-3 inside: the share of pixels with a zero gradient on the edge and a
    non-zero one inside.
    """
    if model.modality != "image" or not examples or all(attack.access != "white-box" for attack in attacks.values()):
        return []
    x = torch.stack([example.input for example in examples[:CHECK_EXAMPLES]]).to(model.device, torch.float32)
    y = torch.tensor([example.label for example in examples[:CHECK_EXAMPLES]], device=model.device)
    grads = []
    for point in (x.round(), x.round().clamp(1e-3, 1 - 1e-3)):
        point = point.requires_grad_(True)
        logits = model.logits(point, grad=True)
        if not logits.requires_grad:
            return []
        grads.append(torch.autograd.grad(cross_entropy(logits, y).sum(), point)[0])
    share = float(((grads[0] == 0) & (grads[1] != 0)).float().mean())
    if share < 0.5:
        return []
    return [f"the input gradient is zero on the edge of the pixel box (pixels at exactly 0 or 1) for {share:.0%} of "
            "pixels where just inside it is not: the model clamps or clips its input, and a clamp passes no gradient "
            "at its bounds, so gradient attacks cannot move the pixels their starts and projections put there and "
            "robust accuracy may be overstated; remove the clamp (inputs are already in [0, 1]) or check with a "
            "black-box attack (--attacks auto,square)"]


def check_dead_pixels(model: Classifier, attacks: Mapping[str, Attack], examples: Sequence[Example]) -> list[str]:
    """Warn when the input gradient is zero on a share of the pixels for every example, while
    the model's answer depends on them.

    A model that runs part of its input detached (``torch.where(mask, x.detach(), x)``: a
    preprocessing branch under ``no_grad``) computes the same function with a gradient on the
    other pixels only: with half of the pixels detached ``auto`` scored 73.4 % where the same
    function scored 42.2 %, and the zero-gradient check (whole examples) did not speak. Taken at
    points drawn within 0.05 of the examples (ties of max pooling broken), the pixels whose
    gradient is zero on every one; where they are 10 % or more, they are moved by ±0.05 and
    the margin compared.
    """
    if model.modality != "image" or not examples or all(attack.access != "white-box" for attack in attacks.values()):
        return []
    x = torch.stack([example.input for example in examples[:CHECK_EXAMPLES]]).to(model.device, torch.float32)
    y = torch.tensor([example.label for example in examples[:CHECK_EXAMPLES]], device=model.device)
    generator = torch.Generator().manual_seed(0)
    point = (x + (torch.rand(x.shape, generator=generator).to(x.device) - 0.5) * 0.1).clamp(0.0, 1.0)
    grad = input_gradient(model, point, y)
    if grad is None:
        return []
    dead = (grad == 0).all(dim=0)  # per pixel, over the examples
    share = float(dead.float().mean())
    if share < 0.1:
        return []
    signs = torch.randint(0, 2, x.shape, generator=generator).to(x.device).float() * 2 - 1
    with torch.no_grad():
        moved = torch.where(dead, (point + 0.05 * signs).clamp(0.0, 1.0), point)
        before, after = model.logits(point), model.logits(moved)
    changed = (after - before).abs().amax(dim=1) > 1e-3 * (1 + before.abs().amax(dim=1))
    if 4 * int(changed.sum()) < len(x):
        return []  # pixels the model does not read (a stride that skips them): no gradient is right
    return [f"the input gradient is zero on {share:.0%} of the pixels for every one of {len(x)} examples, while "
            f"moving those pixels by 0.05 changes the model's logits on {int(changed.sum())} of them: part of the "
            "input reaches the model without a gradient (detached, or computed outside autograd), so gradient "
            "attacks search only the other pixels and robust accuracy may be overstated, an upper bound only; "
            "keep the gradient path, or check with a black-box attack (--attacks auto,square)"]


def check_batch_dependence(model: Classifier, examples: Sequence[Example]) -> list[str]:
    """Warn when the model answers an example otherwise alone than among others.

    BatchNorm without running statistics (``track_running_stats=False``) normalises by each
    batch's own, in eval mode too: a PGD-AT CNN so scored 48.4 % at batch 32, 53.1 % at 8 and
    31.2 % at 1, its clean accuracy 93.8 % against 92.2 %, and records no longer per example.
    :data:`CHECK_EXAMPLES` examples scored in one pass and each alone; a decision that differs,
    or logits that differ by over 1e-3 of their scale (rounding is ~1e-6), is said.
    """
    if model.modality != "image" or len(examples) < 2:
        return []
    x = torch.stack([example.input for example in examples[:CHECK_EXAMPLES]]).to(model.device, torch.float32)
    with torch.no_grad():
        together = model.logits(x)
        alone = [model.logits(x[row : row + 1]) for row in range(len(x))]
    if any(tuple(single.shape) != (1, together.shape[1]) for single in alone):
        return [f"the model gives {together.shape[1]} logits per example in a batch of {len(x)} and another count "
                "for one example alone: its answers depend on the batch, and every number of this run with them"]
    alone_logits = torch.cat(alone)
    scale = 1 + together.abs().amax(dim=1)
    differs = ((alone_logits - together).abs().amax(dim=1) > 1e-3 * scale) | (
        alone_logits.argmax(dim=1) != together.argmax(dim=1))
    if bool(differs.any()):
        return [f"the model answers {int(differs.sum())} of {len(x)} examples otherwise alone than in a batch of "
                f"{len(x)}: its outputs depend on the rest of the batch (BatchNorm using batch statistics, "
                "track_running_stats=False, or another batch-level operation), so its clean and robust accuracy "
                "depend on the batch size and on which examples share a batch; normalise with fixed statistics"]
    return _gradient_batch_dependence(model, x, together.argmax(dim=1))


def _gradient_batch_dependence(model: Classifier, x: torch.Tensor, y: torch.Tensor) -> list[str]:
    """Each example's summed cross-entropy gradient taken in the batch against alone: a backward
    pass that divides by the batch (a custom autograd function, a hook averaging the loss) keeps
    every answer and shrinks every gradient N times. Sign and normalised steps do not see it;
    fp16 rounding does (robust accuracy 20 % at batch 1, 80 % at 128, with no warning before)."""

    together = input_gradient(model, x, y)
    if together is None:  # no gradient path at all: the run refuses white-box attacks for it
        return []
    # A few alone suffice (a batch-level backward moves every row) and cost a pass each.
    together = together[:GRADIENT_ALONE].flatten(1)
    alone = torch.cat([input_gradient(model, x[row : row + 1], y[row : row + 1]).flatten(1)
                       for row in range(len(together))])
    norms = torch.maximum(together.norm(dim=1), alone.norm(dim=1))
    live = norms > 1e-30  # a gradient that is zero both ways is the zero-gradient check's
    differs = live & ((together - alone).norm(dim=1) > 1e-3 * norms)
    if not bool(differs.any()):
        return []
    ratio = (together.norm(dim=1) / alone.norm(dim=1).clamp_min(1e-38))[differs].median()
    return [f"the model's input gradient of {int(differs.sum())} of {len(together)} examples differs in a batch of "
            f"{len(x)} from the gradient alone (median norm ratio {float(ratio):.3g}) while its answers do not: its "
            "backward pass depends on the batch (a loss or gradient averaged over it), so attacks that read the "
            "gradient's size (fp16 rounding, unnormalised steps) depend on the batch size"]
