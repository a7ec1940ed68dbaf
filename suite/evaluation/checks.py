"""Sanity checks on an evaluation, in the spirit of AutoAttack's ``checks.py`` (Croce & Hein,
ICML 2020). Each returns a list of one-line warnings; the runner records them in
``results.json`` and logs them. None of them changes a result: they say when a number should
not be trusted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from suite.attacks import Attack
from suite.data.base import Example
from suite.evaluation.gradient_checks import (
    CHECK_EXAMPLES,
    check_batch_dependence,
    check_dead_pixels,
    check_edge_gradients,
    check_zero_gradients,
)
from suite.losses import cross_entropy, reduce_loss
from suite.models.base import Classifier
from suite.models.ensemble import is_ensemble
from suite.models.randomized import Randomized, spread

if TYPE_CHECKING:
    from suite.evaluation.prepare import PreparedTask

logger = logging.getLogger(__name__)


def check_probabilities(logits: torch.Tensor) -> list[str]:
    """Warn when the model's outputs look like probabilities rather than logits.

    Attacks on softmax outputs see gradients squashed by a second softmax, and the margin and
    DLR losses lose their meaning (AutoAttack's ``check_range_output``).
    """
    if logits.numel() == 0:
        return []
    in_range = bool(((logits >= 0) & (logits <= 1)).all())
    sums_to_one = bool(torch.allclose(logits.sum(dim=1), torch.ones(len(logits), device=logits.device), atol=1e-3))
    if in_range and sums_to_one:
        return ["the model returns probabilities (outputs in [0, 1] summing to 1), not logits: gradient attacks "
                "are weakened and margin/DLR losses are distorted; serve the logits"]
    return []


def check_grad_mode(model: Classifier, examples: Sequence[Example]) -> list[str]:
    """Warn when the model answers differently with autograd on, as attacks query it, and off,
    as the suite scores it: attacks then search another function than the one scored (a model
    can even look misclassified to its attack everywhere, which stops at once). Differences
    under 1e-2 of the centred logits' scale are rounding: the two modes may run other kernels,
    which in bf16 differ by up to about 0.4 %."""
    if model.modality != "image" or not examples:
        return []
    batch = list(examples[:CHECK_EXAMPLES])
    x = torch.stack([example.input for example in batch]).to(model.device, torch.float32)
    scored = model.logits(x).detach().float()
    with torch.enable_grad():
        attacked = model.logits(x.clone().requires_grad_(True), grad=True).detach().float()
    difference, scale = spread(scored, attacked)
    if not difference <= 1e-2 * scale:  # NaN counts as a change
        changed = int((scored.argmax(dim=1) != attacked.argmax(dim=1)).sum())
        return [f"the model answers differently when gradients are taken (logits differ by up to {difference:.3g}; "
                f"{changed} of {len(batch)} decisions change): attacks search another function than the one scored, "
                "so robust accuracy may be overstated; make its forward pass the same with autograd on and off"]
    return []


#: Random steps a gradient step is compared with (:func:`check_gradient_direction`).
RANDOM_STEPS = 8
#: The least share of its first-order prediction a gradient step must realise, in the median.
LINEAR_SHARE = 0.05


def check_gradient_direction(model: Classifier, attacks: Mapping[str, Attack], examples: Sequence[Example],
                             robust_accuracy: Mapping[str, float]) -> list[str]:
    """Warn when the input gradient does not point uphill at the scale the attacks step at:
    shattered (a preprocessing like ``x + 2e-3·sin(3e4·x)``, which hardly moves the input but
    makes its gradient oscillate), noisy or obfuscated gradients lead gradient attacks nowhere,
    and their robust accuracy is then an upper bound (Athalye et al., ICML 2018, Sec. 3; the
    check AutoAttack relies on Square for, Croce & Hein 2020).

    For at most :data:`CHECK_EXAMPLES` examples, at a point drawn within ε/2 of each (attacks
    spend their steps inside the ball, not at the clean point, where pixels at 0 or 1 can keep
    a shattered gradient's sign), one step of ε/2 along the margin loss's gradient, in the
    first white-box attack's geometry (its sign under L∞), is compared with
    :data:`RANDOM_STEPS` random steps of the same geometry and size. A gradient that points
    uphill beats the best of them on nearly every example and realises a fair share of its
    first-order prediction ⟨g, δ⟩ (measured: at least 0.15 on the built-in digits models from
    L∞ 0.003 to 0.3 and L2 0.1 to 3; shattered or random gradients 0.02 or less). The warning
    says which failed: beating the random steps on under half the examples, or a median share
    under :data:`LINEAR_SHARE`. Only where a white-box attack left an example unbroken (there
    is nothing to overstate otherwise); ten passes, with no randomness drawn from the run.
    """
    if model.modality != "image" or not examples:
        return []
    # At ε = 0 no attack moves the input, and no step could go uphill: nothing to check.
    gradient = [(name, attack) for name, attack in attacks.items() if attack.access == "white-box"
                and getattr(attack, "geometry", None) is not None and robust_accuracy.get(name, 0.0) > 0
                and float(attack.threat.eps or 0) > 0]
    if not gradient:
        return []
    name, attack = gradient[0]
    geometry, eps = attack.geometry, float(attack.threat.eps)
    batch = list(examples[:CHECK_EXAMPLES])
    x = torch.stack([example.input for example in batch]).to(model.device, torch.float32)
    y = torch.tensor([example.label for example in batch], device=model.device)
    generator = torch.Generator().manual_seed(0)

    def draw() -> torch.Tensor:
        return torch.randn(x.shape, generator=generator).to(x.device)

    scale = torch.rand(len(x), generator=generator).view(-1, *[1] * (x.dim() - 1)).to(x.device)
    point = (x + geometry.project(geometry.step(draw(), eps / 2) * scale, eps / 2)).clamp(0.0, 1.0)
    inputs = point.clone().requires_grad_(True)
    logits = model.logits(inputs, grad=True)
    if not logits.requires_grad:
        return []  # no gradient path: check_zero_gradients says so
    (grad,) = torch.autograd.grad(_margin(logits, y).sum(), inputs)
    grad = grad.float()
    usable = torch.isfinite(grad.flatten(1)).all(dim=1) & (grad.flatten(1).abs().amax(dim=1) > 0)
    if 2 * int(usable.sum()) < len(batch):
        # The checks at the examples passed (run_checks asks here only then): the gradient
        # vanishes off the data. A model that answered g's one-hot, detached, farther than 1e-3
        # from the digits' subspace scored 92.2 % where g's decisions scored 42.2 %, unwarned.
        return [f"the input gradient is zero or not finite at {len(batch) - int(usable.sum())} of {len(batch)} "
                f"points drawn within {eps / 2:g} ({geometry.name}) of the examples, where at the examples it is "
                "not: it vanishes off the data (a detector, purifier or gate), so gradient attacks cannot move "
                f"them and {name!r} may overstate robust accuracy, an upper bound only; check it with a black-box "
                "attack (--attacks auto,square) and an attack adapted to the model"]
    with torch.no_grad():
        start = _margin(model.logits(point), y)
        moved = (point + geometry.step(grad, eps / 2)).clamp(0.0, 1.0)
        along = _margin(model.logits(moved), y)
        predicted = ((moved - point) * grad).flatten(1).sum(dim=1)
        best = torch.full_like(along, float("-inf"))
        for _ in range(RANDOM_STEPS):
            best = torch.maximum(best, _margin(model.logits((point + geometry.step(draw(), eps / 2)).clamp(0.0, 1.0)), y))
    counted = int(usable.sum())
    wins = int(((along > best) & usable).sum())
    share = float(((along - start)[usable] / predicted[usable].clamp_min(1e-30)).median())
    problems = []
    if 2 * wins < counted:
        problems.append(f"a step along it beat the best of {RANDOM_STEPS} random steps of the same size on only "
                        f"{wins} of {counted} examples")
    if not share >= LINEAR_SHARE:  # NaN counts as a failure
        problems.append(f"its steps realised a median {share:.2g} of the gain the gradient predicts")
    if not problems:
        return []
    return [f"the input gradient does not point uphill at the attacks' scale ({'; '.join(problems)}, at radius "
            f"{eps:g} in {geometry.name} around {len(batch)} examples): shattered, noisy or obfuscated gradients, "
            f"so {name!r} and the other gradient attacks may overstate robust accuracy, an upper bound only; "
            "check it with a black-box attack (--attacks auto,square)"]


def _margin(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """max_{j≠y} z_j − z_y per row: the loss whose gradient the direction check follows (it
    does not saturate as the cross-entropy does on a confident model)."""
    others = logits.float().scatter(1, labels.view(-1, 1), float("-inf")).amax(dim=1)
    return others - logits.float().gather(1, labels.view(-1, 1)).squeeze(1)


#: Single-word deletions per text in :func:`check_score_plateaus`.
DELETIONS = 4


def check_score_plateaus(model: Classifier, examples: Sequence[Example]) -> list[str]:
    """Warn when a text model's served scores are rounded or quantised: a score-based search
    (every TextAttack recipe's goal function, greedy word importance) sees no progress on a
    plateau and stops, so robust accuracy is overstated (served as log(round(softmax, 2)),
    ``builtin:sentiment-tiny`` reported 43 % under DeepWordBug where the same searches on its
    unrounded scores found 32 %). It is the illusion of extreme confidence's cousin, but no
    temperature undoes it, so neither ``cal`` nor ``opt`` does.

    Deletes each of the first :data:`DELETIONS` words of at most :data:`CHECK_EXAMPLES` texts
    (each deletion changes the text's tokens) and counts the deletions that leave every logit
    of the text exactly as it was: on a model whose scores vary continuously, none does (an
    overconfident model's logits still move, though its probabilities round to 1). One pass.
    """
    if model.modality != "text" or not examples:
        return []
    texts = [example.input for example in examples[:CHECK_EXAMPLES] if isinstance(example.input, str)]
    variants = [(index, " ".join(words[:at] + words[at + 1:])) for index, words in enumerate(t.split() for t in texts)
                if len(words) > 1 for at in range(min(DELETIONS, len(words)))]
    if len(variants) < 2 * DELETIONS:
        return []
    rows = model.logits([*texts, *(text for _, text in variants)]).float()
    unchanged = sum(bool(torch.equal(rows[index], rows[len(texts) + at])) for at, (index, _) in enumerate(variants))
    if 2 * unchanged < len(variants):
        return []
    return [f"the model's scores look rounded or quantised: {unchanged} of {len(variants)} single-word deletions left "
            "every logit exactly as it was; score-based text attacks stall on such plateaus, so robust accuracy may be "
            "overstated (no adversary temperature undoes rounding); attack the unrounded scores if you can"]


def check_softmax_ties(model: Classifier, examples: Sequence[Example], clean_logits: torch.Tensor,
                       attacks: Mapping[str, Attack], kinds: Sequence[str] = ("none",)) -> list[str]:
    """Warn when text attacks cannot see the served model's decisions: TextAttack's goal
    functions score every candidate by the float32 softmax of the served logits, and logits a
    large design temperature shrinks (T = 1e9: about 4e-9 apart) give exactly equal
    probabilities. Its search then skips an example (it reads the tie's first class as the
    prediction) or steers by nothing, and the example counts robust: robust accuracy came out
    equal to clean accuracy, with no other warning. Read from the clean pass; no extra pass.

    Only the searches at the served scale are concerned: those of the ``none`` adversary
    (``kinds``: the task's adversary kinds), not a transfer attack's (it searches its source).
    The ``cal`` adversary's fitted temperature undoes the design temperature, and a task that
    runs only ``cal`` (or ``opt``, ``platt``) gets no warning."""
    served = [key for key, attack in attacks.items() if attack.modality == "text" and attack.access != "transfer"]
    if model.modality != "text" or "none" not in kinds or not served:
        return []
    logits = clean_logits.float()
    if logits.dim() != 2 or logits.shape[1] < 2 or len(logits) != len(examples):
        return []
    labels = torch.tensor([example.label for example in examples], device=logits.device)
    top = logits.topk(2, dim=1).values
    decided = (logits.argmax(dim=1) == labels) & (top[:, 0] > top[:, 1])
    chances = torch.softmax(logits, dim=1).topk(2, dim=1).values
    tied = decided & (chances[:, 0] == chances[:, 1])
    if not bool(tied.any()):
        return []
    gap = float((top[:, 0] - top[:, 1])[tied].max())
    return [f"the served scores of {int(tied.sum())} of the {int(decided.sum())} examples the model classifies "
            f"correctly tie in float32 softmax (their top two logits differ by at most {gap:.2g}): TextAttack's "
            f"searches score texts by those probabilities, so {', '.join(served)} (at the served scale, adversary "
            "none) skip these examples or cannot steer, and count them robust; their robust accuracy is overstated "
            "(the cal adversary undoes a design temperature)"]


def check_ensemble_attacks(model: Classifier, attacks: Mapping[str, Attack]) -> list[str]:
    """Warn when a randomized ensemble is evaluated without ARC, or with ARC alone.

    Adaptive PGD (``apgd_rec``), and any attack on the ensemble's averaged output, is
    inconsistent on randomized ensembles (Dbouk & Shanbhag, ICML 2022, Thm 4.2): it can report
    robustness an ε-ball perturbation breaks. ARC is consistent but greedy, so the honest
    number is the worst case over both.
    """

    if not is_ensemble(model) or model.modality != "image":
        return []
    # The worst case is taken per threat: arc at L2 1.0 beside apgd_rec at L∞ 0.15 leaves each
    # threat's number to one of them.
    threats: dict[str, set[str]] = {}
    for attack in attacks.values():
        if not attack.threat.distributional:  # outside the worst case
            threats.setdefault(attack.threat.label, set()).add(attack.name)
    split = len(threats) > 1
    warnings = []
    for threat, names in threats.items():
        where = f" at {threat}" if split else ""
        if "arc" not in names:
            warnings.append(f"the model is a randomized ensemble evaluated without arc{where}: adaptive PGD and "
                            "attacks on its averaged output overstate a randomized ensemble's robustness (Dbouk & "
                            "Shanbhag 2022, Thm 4.2); add arc (and apgd_rec: the worst case over both is the honest "
                            "number)")
        elif "apgd_rec" not in names:
            warnings.append(f"the model is a randomized ensemble evaluated with arc but without apgd_rec{where}: ARC "
                            "fools members greedily, largest probability first, and can miss a lower expected "
                            "accuracy adaptive PGD finds; add apgd_rec")
    return warnings


def check_black_box(attacks: Mapping[str, Attack], metrics: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Warn when a black-box attack beats every white-box one (AutoAttack's ``check_square_sr``).

    A query-only attack should not beat attacks that see gradients under the same threat; when
    it does, the gradients are probably masked or obfuscated.
    """
    warnings = []
    for threat in {attack.threat for attack in attacks.values()}:
        same = {name: attack for name, attack in attacks.items() if attack.threat == threat and name in metrics}
        white = {name: metrics[name]["robust_accuracy"] for name, attack in same.items() if attack.access == "white-box"}
        black = {name: metrics[name]["robust_accuracy"] for name, attack in same.items() if attack.access == "black-box"}
        if not white or not black:
            continue
        best_white = min(white.values())
        warnings += [
            f"black-box attack {name!r} ({100 * value:.1f}% robust accuracy) beats every white-box attack "
            f"(best {100 * best_white:.1f}%): gradients look masked; the white-box numbers overstate robustness"
            for name, value in black.items() if value < best_white
        ]
    return sorted(warnings)


def check_reduction(model: Classifier, attacks: Mapping[str, Attack], examples: Sequence[Example], seed: int) -> list[str]:
    """Warn when averaging the loss over a batch would change a gradient attack's steps.

    Takes the cross-entropy gradient of one batch of at most :data:`CHECK_EXAMPLES` examples at
    the clean inputs, in the precision of the first gradient attack, reduced once by sum and once
    by mean, and compares that attack's step directions (its sign or normalised-gradient rule)
    example by example. A sum gives every example its own gradient; a step that changes under the
    1/N of a mean means the gradients are near underflow (Redgrave & Crum): with a mean loss the
    results would depend on the batch size. Two gradient passes: the check does not rerun an
    attack (with ``auto``, the default, that would cost more than a small evaluation). ``seed``
    is unused: the check draws no random numbers.
    """
    if not examples:
        return []
    batch = list(examples[:CHECK_EXAMPLES])
    reducible = {name: attack for name, attack in attacks.items() if attack.loss_reduction is not None}
    warnings = [
        f"attack {name!r} uses reduction 'mean', which is for studying the batch-size effect only; "
        "its results depend on the batch size"
        for name, attack in reducible.items() if attack.loss_reduction == "mean"
    ]
    summed_attacks = [(name, attack) for name, attack in reducible.items() if attack.loss_reduction == "sum"]
    if summed_attacks:
        # One gradient attack is enough to see the scale of the model's gradients.
        name, attack = summed_attacks[0]
        changed = _steps_changed_by_mean(model, attack, batch)
        if changed:
            warnings.append(f"attack {name!r}: averaging the loss over a batch of {len(batch)} changes the step "
                            f"direction of {changed} of {len(batch)} examples: gradients are near underflow "
                            f"(precision {attack.precision}); results would depend on the batch size with a mean loss")
    return warnings


def _steps_changed_by_mean(model: Classifier, attack: Attack, batch: Sequence[Example]) -> int:
    """How many examples of ``batch`` take a different step (cosine < 0.99, or zero against
    non-zero) when ``attack``'s step rule is fed the mean-reduced instead of the summed gradient."""
    from suite.attacks.image.loop import autocast

    x = torch.stack([ex.input for ex in batch]).to(model.device, torch.float32)
    y = torch.tensor([ex.label for ex in batch], device=model.device)
    steps = []
    for reduction in ("sum", "mean"):
        inputs = x.clone().requires_grad_(True)
        with autocast(model.device, attack.precision):
            logits = model.logits(inputs, grad=True)
        (grad,) = torch.autograd.grad(reduce_loss(cross_entropy(logits, y), reduction, len(batch)), inputs)
        steps.append(attack.geometry.step(grad.float(), 1.0).flatten(1))
    zero = [step.abs().sum(dim=1) == 0 for step in steps]
    cosine = torch.nn.functional.cosine_similarity(steps[0], steps[1], dim=1, eps=1e-30)
    changed = (zero[0] != zero[1]) | (~zero[0] & ~zero[1] & (cosine < 0.99))
    return int(changed.sum())


def run_checks(prepared: PreparedTask, clean_logits: torch.Tensor, robust_accuracy: Mapping[str, float]) -> list[str]:
    """Every check of this module on a finished task; the warnings are logged and returned.

    Args:
        clean_logits: The clean pass's logits, in evaluation order.
        robust_accuracy: Robust accuracy of each attack run out of the box (from the summary).
    """
    model, attacks = prepared.model, prepared.attacks
    correct = prepared.attacked()
    metrics = {name: {"robust_accuracy": value} for name, value in robust_accuracy.items()}
    # A randomized model is evaluated through its view (EOT, expected accuracy: preparation
    # probed every model, randomized_view), which answers identical queries identically, unless
    # its draws come from a source the suite cannot seed (its note says so already): the checks
    # that compare passes are left out then.
    noisy = isinstance(model, Randomized) and not model.reproducible
    warnings = [
        *check_probabilities(clean_logits[:CHECK_EXAMPLES]),
        *([] if noisy or is_ensemble(model) else check_grad_mode(model, prepared.eval_set.examples)),
        *([] if noisy else check_score_plateaus(model, correct)),
        *check_softmax_ties(model, prepared.eval_set.examples, clean_logits, attacks, prepared.adversary.kinds),
        *check_ensemble_attacks(model, attacks),
        *([] if isinstance(model, Randomized) or is_ensemble(model)
          else check_batch_dependence(model, prepared.eval_set.examples)),
        *(zero := check_zero_gradients(model, correct, attacks)),
        *([] if noisy or zero else check_edge_gradients(model, attacks, correct)),
        *([] if noisy or zero else check_dead_pixels(model, attacks, correct)),
        *([] if noisy or zero or is_ensemble(model)
          else check_gradient_direction(model, attacks, correct, robust_accuracy)),
        *check_black_box({name: attack for name, attack in attacks.items() if name in metrics}, metrics),
        *([] if noisy else check_reduction(model, attacks, correct, prepared.attack_seed)),
    ]
    for warning in warnings:
        logger.warning("%s: %s", prepared.name, warning)
    return warnings
