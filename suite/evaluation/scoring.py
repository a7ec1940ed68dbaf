"""The one scoring path: every input is judged by the served model, the same way for every modality.

- Clean inputs are scored in fixed chunks of :data:`SCORE_CHUNK` examples in evaluation order, so
  their logits (which calibration and the adversary temperatures also use) never depend on the
  batch size or on the number of processes: every process computes the same numbers. A text
  model's go through its pooled rows, as its searches' and records' do, so a text has one value
  per task.
- An attack's adversarial inputs are scored with the verdict of one example per forward pass, so
  it never depends on which other examples shared its batch, or on the resume point: a batch is
  scored at once and every near tie again alone (:func:`score_batch`); text, through the
  model's pooled rows, whose values do not depend on the batch on the CPU.

A score is the model's correctness in [0, 1] (:meth:`Classifier.correctness`), the class its
logits favour, and its confidence (the largest softmax probability, in float64). An attack's
``robust`` value is capped by the example's clean correctness: the unperturbed input is always in
the threat model, so no attack makes an example more correct than it was.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from suite.attacks.base import AttackOutput
from suite.data.base import Example
from suite.errors import AttackOutputError, ConfigError
from suite.models.base import Classifier, answered, decide
from suite.threat import Threat

logger = logging.getLogger(__name__)

#: Rows per forward pass of the clean scoring (fixed, so results never depend on the task's
#: batch size).
SCORE_CHUNK = 64
#: Batched scoring (:func:`score_batch`) rescores alone every example whose top two logits are
#: within this fraction of the logits' scale (largest |logit|, at least 1).
TIE_MARGIN = 1e-3
#: The same on CUDA, where TF32 matmuls and convolutions round to about 1e-3.
TIE_MARGIN_CUDA = 3e-2
#: Slack of :func:`check_outputs`: a pixel may leave [0, 1], and a perturbation its radius, by
#: this much (absolute) plus this fraction of the radius: float32 rounding of a projection.
OUTPUT_SLACK = 1e-5
#: Bumped whenever records computed by this module would change (what correctness, robust or
#: the clean pass mean): part of a run's identity, so records of an older scoring are not resumed.
#: 5: a row of logits that gives no answer (a NaN, a +inf) is never correct.
#: 6: a label tied for the largest logit is not correct (:func:`~suite.models.base.decide`).
SCORING_VERSION = 6


@dataclass(frozen=True)
class CleanScores:
    """Served logits and correctness of a list of examples, in their order."""

    logits: torch.Tensor
    correct: torch.Tensor


def stack(model: Classifier, inputs: Sequence[Any]) -> Any:
    """One model batch from per-example inputs (a list of texts, or an N×C×H×W tensor)."""
    return list(inputs) if model.modality == "text" else torch.stack(list(inputs))


def clean_scores(model: Classifier, examples: Sequence[Example]) -> CleanScores:
    """Logits and correctness of ``examples`` in fixed chunks of :data:`SCORE_CHUNK` (a chunk
    that runs out of device memory is scored in halves, with a log line: :mod:`.batching`).

    A text model that pools texts is scored through its :meth:`~Classifier.text_rows`, the rows
    its searches and records read: a text has one logit vector per task (on the CPU, its
    text's alone). The runner passes the task's memo of those rows
    (:class:`~suite.models.temperature.Memoised`), so every search's first query, its
    unperturbed text, is answered from the clean pass."""
    from suite.evaluation.batching import run_in_batches

    logits, correct = [], []

    pools = model.modality == "text" and model.argmax_verdicts

    def score(chunk: list[Example]) -> None:
        batch = stack(model, [example.input for example in chunk])
        labels = torch.tensor([example.label for example in chunk])
        rows = model.text_rows(batch) if pools else None
        if rows is not None:
            chunk_logits, chunk_correct = rows, model.correctness(batch, labels, logits=rows)
        else:
            chunk_logits, chunk_correct = model.scores(batch, labels)
        correct.append(chunk_correct)
        logits.append(chunk_logits.cpu())

    run_in_batches(examples, SCORE_CHUNK, score, what="clean pass", device=model.device)
    if not logits:
        return CleanScores(torch.empty(0, model.num_classes), torch.empty(0))
    scores = CleanScores(torch.cat(logits), torch.cat(correct))
    invalid = (~answered(scores.logits)).nonzero().flatten().tolist()
    if invalid:  # nothing fitted on these logits (calibration, temperatures) would mean anything
        raise ConfigError(
            f"model {model.info.name!r} gives no valid logits (a NaN, or an infinite largest logit) on {len(invalid)} "
            f"of {len(examples)} clean example(s) (the first: {examples[invalid[0]].id!r}): none of its scores can "
            "be trusted; check its weights and what it expects as input")
    return scores


def check_outputs(attack: str, threat: Threat, model: Classifier, examples: Sequence[Example],
                  outputs: Sequence[AttackOutput]) -> None:
    """Refuse, in one line, an image attack's output that is no input of its threat model.

    Every adversarial image must be a finite tensor of the model's input size with pixels in
    [0, 1], and, for a pointwise threat with a radius, within that radius of its example in the
    threat's norm (up to :data:`OUTPUT_SLACK`). An input outside would be scored, and counted as
    broken, though the attack found no valid one: a NaN input from a NaN gradient, a plugin
    that skips its projection. Text outputs are TextAttack's, whose constraints are the threat
    model; a distributional threat bounds the batch's mean cost, not each example's, so only
    the box and finiteness are checked there.
    """
    if model.modality != "image" or threat.level is not None:
        return
    input_size = model.input_size
    from suite.attacks.image.norms import COST_NORMS

    ball = threat.eps is not None and not threat.distributional and threat.norm in COST_NORMS
    for example, output in zip(examples, outputs):
        adversarial, problem = output.adversarial, None
        if adversarial is None:
            continue
        if not isinstance(adversarial, torch.Tensor) or not adversarial.is_floating_point():
            kind = adversarial.dtype if isinstance(adversarial, torch.Tensor) else type(adversarial).__name__
            problem = f"is not a float image tensor (it is {kind})"
        elif input_size is not None and tuple(adversarial.shape) != tuple(input_size):
            problem = f"is not an image of the model's input size {tuple(input_size)} (it is {tuple(adversarial.shape)})"
        elif not bool(torch.isfinite(adversarial).all()):
            problem = ("holds NaN or infinite pixels (the model's input gradient may be NaN or infinite there: "
                       "evaluate it in fp32, or mend the model)")
        elif float(adversarial.min()) < -OUTPUT_SLACK or float(adversarial.max()) > 1 + OUTPUT_SLACK:
            problem = f"leaves [0, 1] (pixels from {float(adversarial.min()):g} to {float(adversarial.max()):g})"
        elif ball:
            distance = float(COST_NORMS[threat.norm].measure(
                (adversarial.float() - example.input.to(adversarial.device).float()).unsqueeze(0))[0])
            if distance > threat.eps * (1 + OUTPUT_SLACK) + OUTPUT_SLACK:
                problem = f"is {distance:g} from its example in {threat.norm}, beyond the radius {threat.eps:g}"
        if problem is not None:
            raise AttackOutputError(f"attack {attack!r} returned, for example {example.id!r}, an input that {problem}; "
                                    "nothing of its batch is recorded")


def clean_record(example: Example, logits: torch.Tensor, correct: float) -> dict[str, Any]:
    return {"kind": "clean", "id": example.id, "label": example.label, "prediction": _decision(logits, example.label),
            "correct": float(correct)}


def score_output(model: Classifier, example: Example, output: AttackOutput, clean_correct: float) -> dict[str, Any]:
    """The scored part of an attack record: ``robust``, ``prediction`` and ``confidence``."""
    adversarial = example.input if output.adversarial is None else output.adversarial
    batch = stack(model, [adversarial])
    logits, correctness = model.scores(batch, torch.tensor([example.label]))
    correct = float(correctness[0])
    served = logits[0].double()
    return {
        "robust": min(correct, clean_correct),
        "prediction": _decision(served, example.label),
        "confidence": confidence(served),
    }


def _decision(logits: torch.Tensor, label: int) -> int:
    """The class one row of logits decides for against ``label`` (:func:`~suite.models.base.decide`:
    a tie for the top is not a decision for the label)."""
    return int(decide(logits.view(1, -1), torch.tensor([label]))[0])


def confidence(logits: torch.Tensor) -> float:
    """The largest softmax probability of one row of logits; 0 where the row gives no answer
    (:func:`~suite.models.base.answered`: no distribution, and never correct)."""
    if not bool(answered(logits)):
        return 0.0
    return float(torch.softmax(logits, dim=0).max())


def score_outputs(model: Classifier, examples: Sequence[Example], outputs: Sequence[AttackOutput]) -> list[dict[str, Any]]:
    """:func:`score_batch` for a batch of correctly classified examples (``robust`` 0 = broken)."""
    return score_batch(model, examples, outputs, [1.0] * len(examples))


def score_batch(model: Classifier, examples: Sequence[Example], outputs: Sequence[AttackOutput],
                clean_correct: Sequence[float], pooled: Classifier | None = None) -> list[dict[str, Any]]:
    """:func:`score_output` of a whole attack batch, with the verdicts of scoring each alone.

    A deterministic image model is scored in one forward pass; each example whose two largest
    logits are within :data:`TIE_MARGIN` of the logits' scale is then scored again alone, and
    that verdict stands. Batched and single kernels round differently, by far less than that
    margin (float32 on the CPU: about 1e-6 of the scale; TF32 on CUDA, about 1e-3, so the margin
    there is :data:`TIE_MARGIN_CUDA`), so any verdict the batch could flip is rescored alone: the
    records are those of one example per forward pass (image records keep no confidence, only
    the verdict). A text model's batch goes through :meth:`Classifier.text_rows`, whose rows on
    the CPU depend on their own text alone (the record keeps that row's confidence); one
    without it, and randomized models (fractional correctness), are scored one example at a
    time.

    ``pooled`` is where a text batch's rows come from: the task's memo of the served model's
    rows (:class:`~suite.models.temperature.Memoised`), which holds every text the search
    scored, so the adversarial texts are not run through the model again. On the CPU its rows
    are the model's own ``text_rows`` rows, bit for bit. Default: the model. Examples scored
    alone (near ties on CUDA) always go to the model itself.
    """
    inputs = [ex.input if out.adversarial is None else out.adversarial for ex, out in zip(examples, outputs)]
    text = model.modality == "text"
    logits = None
    if (len(examples) >= 2 or text) and model.argmax_verdicts:
        # A text model that pools texts (Classifier.text_rows) gives each row a value that depends
        # on its text alone on the CPU, so the batch's verdicts are those of each text alone and
        # nothing is rescored; on CUDA a pass rounds as a batch does, and near ties are rescored.
        logits = ((pooled or model).text_rows(inputs) if text
                  else model.logits(torch.stack(inputs)).detach().cpu())
    if logits is None:
        return [score_output(model, ex, out, correct) for ex, out, correct in zip(examples, outputs, clean_correct)]
    logits = logits.double()
    if text and model.device.type == "cpu":
        near = torch.zeros(len(examples), dtype=torch.bool)  # each row is its text's own: nothing to rescore
    else:
        near = near_ties(logits, model.device)
    finite = answered(logits)
    if not bool(finite.all()):
        logger.warning("%d adversarial input(s) of %d give no valid logits (a NaN, or an infinite largest logit) on "
                       "%r: counted as misclassified", int((~finite).sum()), len(examples), model.info.name)
    decided = decide(logits, torch.tensor([example.label for example in examples])).tolist()
    scores = []
    for row, (example, output, correct) in enumerate(zip(examples, outputs, clean_correct)):
        if near[row]:
            scores.append(score_output(model, example, output, correct))
            continue
        prediction = decided[row]
        right = prediction == example.label and bool(finite[row])  # as Classifier.correctness
        scores.append({"robust": min(float(right), correct), "prediction": prediction,
                       "confidence": confidence(logits[row])})
    return scores


def near_ties(logits: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Which rows of N×C ``logits`` (computed on ``device``) have their two largest logits within
    the tie margin of the logits' scale (largest |logit|, at least 1): :data:`TIE_MARGIN_CUDA` on
    CUDA, :data:`TIE_MARGIN` elsewhere. Their verdict may differ where another batch, thread count
    or GPU rounds differently; no other row's can."""
    if logits.shape[1] < 2:
        return torch.zeros(len(logits), dtype=torch.bool)
    logits = logits.double()
    top = logits.topk(2, dim=1).values
    margin = TIE_MARGIN_CUDA if device.type == "cuda" else TIE_MARGIN
    return (top[:, 0] - top[:, 1]) <= margin * logits.abs().amax(dim=1).clamp_min(1.0)


def attack_record(key: str, model: Classifier, example: Example, output: AttackOutput, clean_correct: float,
                  temperature: float | None = 1.0, score: dict[str, Any] | None = None) -> dict[str, Any]:
    """The record of one attacked example, scored on the served ``model``.

    Args:
        key: The attack's key in results (``pgd_linf``, ``pwws@cal``...).
        model: The served model (never the adversary's view).
        temperature: The adversary temperature the search ran at (recorded when not 1).
        score: Its :func:`score_output`, when already computed (:func:`score_batch`).
    """
    score = score if score is not None else score_output(model, example, output, clean_correct)
    record = {
        "kind": "attack",
        "attack": key,
        "id": example.id,
        "robust": score["robust"],
        "prediction": score["prediction"],
        "perturbation": float(output.perturbation),
        "queries": int(output.queries),
        "seconds": float(output.seconds),
    }
    if output.forward_rows is not None:
        record["forward_rows"] = int(output.forward_rows)
    if temperature is not None and temperature != 1.0:
        record["temperature"] = temperature
    if isinstance(output.adversarial, str):
        # Discrete inputs only: an image's confidence is a continuous function of the search's
        # iterates, which batched kernels round differently, so it would tie records to the batch
        # size; its decision does not.
        record["confidence"] = score["confidence"]
        record["adversarial"] = output.adversarial
    if output.extras:
        record["extras"] = dict(output.extras)
    return record
