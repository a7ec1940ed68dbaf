"""``--precision bf16|fp16``: every gradient attack of a task searches under autocast.

Opt-in per run, for speed on GPUs (bf16 halves activation memory and runs on tensor cores). It
changes only the search: every adversarial input is still scored on the served model in float32
(:mod:`.scoring`), and a search stops a row (or ``auto`` hands an example on as broken) only where
float32 logits agree, so success is never decided in low precision; the mini-batch check
(:func:`suite.evaluation.checks.check_reduction`: fp16 gradients near underflow under a mean
loss) runs in the precision of the first attack that sums its loss (none runs it when every
attack averages), and the zero-gradient check in each precision an attack searches in. The precision becomes each attack's own
``precision`` parameter, so it is part of the run's identity: a bf16 run never resumes fp32
records.

Low precision weakens the search, and every such run says so (:func:`rounding_note`, in the
results' warnings): autocast rounds each convolution's and linear layer's input to 8 (bf16) or
11 (fp16) significant bits, so a small perturbation of the normalised input is partly rounded
away. Measured: ``auto`` on ``builtin:digits-cnn`` at L∞ 0.006 (60 test digits, about 1.9 bf16
steps) gave 73.3 % robust in fp32 and 80.0 % in bf16, on the CPU and on an H200 alike (0 % and
1.7 % at 0.012), while bf16 hits were taken as they came; since they are confirmed in float32
(2026-11-30), 73.3 % and 0 % in both, on the CPU. The fp32 number is the one to publish.

Channels-last memory format is not part of ``--precision``: it is its own opt-in
(``--channels-last``, :attr:`~suite.evaluation.options.RunOptions.channels_last`), because on an
H200 it made ResNet-50's input-gradient passes slower, in fp32 and in bf16 alike
(docs/attacks/measured.md, "On a lent GPU").

Refused in one line, before anything runs: a text model (text attacks score discrete candidates
with the model as it is), an attack that takes no precision (the torchattacks baselines run in
float32), and a model that cannot run in that precision (its forward or backward under autocast
fails, or gives non-finite logits where float32 gives finite ones).
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from suite.attacks import ATTACKS
from suite.data.base import Example
from suite.errors import ConfigError
from suite.evaluation.recipe import AttackConfig, TaskConfig
from suite.models.base import Classifier

Precision = Literal["fp32", "fp16", "bf16"]


def takes_precision(config: AttackConfig) -> bool:
    return "precision" in ATTACKS.get(config.name).model_fields


def with_precision(task: TaskConfig, model: Classifier) -> TaskConfig:
    """``task`` with its ``precision`` set on every attack that sets none (and ``precision``
    cleared); refused for a text model and for attacks that take no precision. ``fp32`` is the
    attacks' default, so it sets nothing: a run with ``--precision fp32`` is the run without it."""
    precision = task.precision
    if precision is None:
        return task
    if model.modality != "image":
        raise ConfigError(f"--precision applies to image models; {model.info.name!r} is a {model.modality} model, "
                          "whose attacks score discrete candidates with the model as it is")
    if precision == "fp32":  # every attack's default: the same run as without --precision (it resumes it)
        return task.model_copy(update={"precision": None})
    refused = [config.key for config in task.attacks if not takes_precision(config)]
    if refused:
        raise ConfigError(f"precision {precision} does not apply to {', '.join(refused)} (it runs in float32): "
                          "leave out --precision, or name the suite's own attacks")
    configs = tuple(
        config.model_copy(update={"params": {"precision": precision, **config.params}}) if takes_precision(config)
        else config
        for config in task.attacks
    )
    return task.model_copy(update={"attacks": configs, "precision": None})


def check_precision(model: Classifier, precision: Precision, example: Example) -> None:
    """Refuse, in one line, a model that cannot search in ``precision``: one forward+backward of
    ``example`` under autocast must run and give finite logits where float32 does."""
    if precision == "fp32":
        return
    from suite.attacks.image.loop import autocast

    x = example.input.unsqueeze(0).to(model.device, torch.float32)
    try:
        reference = model.logits(x).float()
        inputs = x.clone().requires_grad_(True)
        with autocast(model.device, precision):
            logits = model.logits(inputs, grad=True)
        (gradient,) = torch.autograd.grad(logits.float().logsumexp(dim=1).sum(), inputs)
    except (RuntimeError, TypeError, NotImplementedError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ConfigError(f"{model.info.name!r} cannot run under {precision} autocast on {model.device.type}: "
                          f"{first}") from None
    finite = bool(torch.isfinite(logits.float()).all() and torch.isfinite(gradient).all())
    if bool(torch.isfinite(reference).all()) and not finite:
        raise ConfigError(f"{model.info.name!r} gives non-finite logits or gradients under {precision} autocast "
                          "(finite in float32): its activations overflow; use --precision bf16 or leave it out")


#: Significant bits kept after the leading one: a value in [2^k, 2^(k+1)) becomes a multiple of
#: 2^(k - bits).
MANTISSA_BITS = {"bf16": 7, "fp16": 10}


def input_step(model: Classifier, precision: Precision) -> float:
    """The largest rounding step, in [0, 1] pixel units, of the model's normalised input under
    ``precision``: per channel, the step at the normalised value farthest from 0 (pixel 0 or 1),
    times the channel's std (a model without mean/std: its input as it is)."""
    part = next(iter(getattr(model, "members", None) or [model]))
    mean, std = getattr(part, "mean", None), getattr(part, "std", None)
    means = [0.0] if mean is None else torch.as_tensor(mean).flatten().tolist()
    stds = [1.0] * len(means) if std is None else torch.as_tensor(std).flatten().tolist()
    steps = []
    for m, s in zip(means, stds):
        largest = max(abs(m), abs(1 - m)) / s
        steps.append(2.0 ** (math.floor(math.log2(largest)) - MANTISSA_BITS[precision]) * s if largest > 0 else 0.0)
    return max(steps)


def rounding_note(model: Classifier, precision: Precision, attacks: dict) -> str:
    """The warning every bf16/fp16 run carries: how coarsely autocast rounds the input, against
    the smallest L∞ radius among the attacks that search in ``precision``."""
    from suite.attacks.image.norms import Linf

    step = input_step(model, precision)
    radii = [attack.eps for attack in attacks.values()
             if getattr(attack, "precision", None) == precision and getattr(attack, "norm", None) is Linf]
    against = f" (L∞ ε {min(radii):g} is {min(radii) / step:.1f} such steps)" if radii and step else ""
    return (f"precision {precision}: autocast rounds each layer's input to {MANTISSA_BITS[precision] + 1} significant "
            f"bits, so an input pixel moves in steps of up to {step:.2g}{against}; small perturbations are partly "
            "rounded away and the search can be weaker than in fp32 (its hits are confirmed in fp32, its steps are "
            "not): publish the fp32 number")


def channels_last(model: Classifier) -> None:
    """Put the model's network (or each member's) in channels-last memory format (the run asks
    for it on CUDA only: :func:`suite.evaluation.prepare.prepare`)."""
    for part in getattr(model, "members", None) or [model]:
        module = getattr(part, "module", None)
        if isinstance(module, torch.nn.Module):
            module.to(memory_format=torch.channels_last)
