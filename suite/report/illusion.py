"""The illusion-of-robustness flag.

A model shows an *illusion of robustness* ("Extreme Confidence and the Illusion of Robustness
in Adversarial Training") when its robust accuracy under an out-of-the-box attack is higher,
by more than a threshold, than under

- the same attack run by a temperature-aware adversary (``<attack>@cal`` / ``<attack>@opt``),
- or a transfer attack (texts crafted on another model): compared with the same attack run on
  the model itself when the task has it, else with the strongest out-of-the-box attack of the
  same threat.

Everything is read from the typed fields of the attack entries (``adversary``, ``access``,
``threat``), never parsed from names. Each finding carries the paired test of its drop on the
task's examples (``p_value``, ``test``: McNemar's exact test, or the sign-flip test for a
randomized model; :mod:`suite.report.paired`): the flag is raised by the threshold alone, and the
p-value says whether the drop could be the noise of n examples.

When the flag is raised by an aware adversary, the block names the mechanism when the run can
tell (the paper's two sources of extreme confidence):

- ``design temperature``: the model is served at T ≠ 1 (the ↑conf / ↓conf models, Sec. 3);
- ``training-induced overconfidence``: served at T = 1, but its own logits are overconfident:
  the NLL-optimal temperature T_cal is above :data:`OVERCONFIDENT_T` (DDi-AT's global gradient
  normalisation, App. B, is one cause; plain and PGD training give T_cal of 7–22 too), or ``training-induced underconfidence`` below 1/:data:`OVERCONFIDENT_T`.

Otherwise (a transfer attack alone, or calibration that cannot tell) ``mechanism`` is ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from suite.report.paired import paired_test, shown_p
from suite.report.results import AttackEntry, IllusionEntry

#: T_cal beyond which a model's own logits count as overconfident (its NLL-optimal temperature
#: is more than twice the served one).
OVERCONFIDENT_T = 2.0
#: Below any drop of one example in a million (robust accuracies are fractions of n examples).
THRESHOLD_SLACK = 1e-9


def illusion_findings(attacks: Mapping[str, AttackEntry], threshold: float, *, served_temperature: float = 1.0,
                      calibration: Mapping[str, Any] | None = None,
                      adversary: Mapping[str, Any] | None = None,
                      per_example: Mapping[str, Mapping[str, float]] | None = None) -> IllusionEntry:
    """The flag, its findings and (when it can tell) the mechanism, from the results' point-wise
    attack entries, the served temperature, clean calibration and the adversary fits;
    ``per_example`` (per attack key, each example's robust correctness) gives each finding's
    paired p-value."""
    plain = {key: entry for key, entry in attacks.items() if entry.adversary == "none" and entry.access != "transfer"}
    findings = []
    for key, entry in attacks.items():
        if entry.adversary == "platt":
            reference_key = entry.base_attack or key
            why = "the Platt-scaling adversary (vector scaling fitted by NLL)"
        elif entry.adversary != "none":
            reference_key = entry.base_attack or key
            why = f"the {entry.adversary}-temperature adversary (T_a = {entry.adversary_temperature:.4g})"
        elif entry.access == "transfer":
            inner = entry.params.get("attack")
            same_threat = {k: e for k, e in plain.items() if e.threat == entry.threat}
            reference_key = inner if inner in plain else min(
                same_threat, key=lambda k: same_threat[k].robust_accuracy, default=None)
            why = f"a transfer attack from {entry.params.get('source')}"
        else:
            continue
        if reference_key not in plain:
            continue
        reference = plain[reference_key].robust_accuracy
        drop = reference - entry.robust_accuracy
        # "More than the threshold", decided on the examples: a drop of exactly 5 pp (one
        # sentence in 20) is 0.05000000000000004 or 0.04999999999999993 as a difference of
        # fractions, and was flagged or not by that rounding.
        if drop > threshold + THRESHOLD_SLACK:
            tested = (paired_test(per_example[reference_key], per_example[key])
                      if per_example and reference_key in per_example and key in per_example else None)
            p_value, test = tested or (None, None)
            findings.append({
                "attack": key,
                "reference": reference_key,
                "robust_accuracy": entry.robust_accuracy,
                "reference_robust_accuracy": reference,
                "drop": drop,
                "p_value": p_value,
                "test": test,
                "message": (f"{key}: {why} lowers robust accuracy from {100 * reference:.1f}% ({reference_key}) to "
                            f"{100 * entry.robust_accuracy:.1f}%, {100 * drop:.1f} pp"
                            + ("" if p_value is None else f" (paired {shown_p(p_value)})")),
            })
    mechanism, detail = None, None
    if any(attacks[finding["attack"]].adversary != "none" for finding in findings):
        mechanism, detail = _mechanism(served_temperature, calibration, adversary)
    return IllusionEntry(
        flagged=bool(findings),
        threshold=threshold,
        max_drop=max((finding["drop"] for finding in findings), default=0.0),
        findings=findings,
        mechanism=mechanism,
        mechanism_detail=detail,
    )


def _mechanism(served: float, calibration: Mapping[str, Any] | None,
               adversary: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    if served != 1.0:
        side = "overconfident" if served < 1 else "underconfident"
        return "design temperature", (f"the model is served at T = {served:.4g} ({side} probabilities); "
                                      "the aware adversary rescales them")
    fit = (adversary or {}).get("cal")
    if not fit:
        return None, None
    temperature = fit["temperature"]
    confidence = (calibration or {}).get("mean_confidence")
    evidence = f"NLL-optimal temperature T_cal = {temperature:.4g}" + (
        f", mean confidence {100 * confidence:.2f}%" if confidence is not None else "")
    if temperature > OVERCONFIDENT_T:
        # Not "as DDi-AT makes them": plainly trained and PGD-trained models have T_cal of 7–22 as
        # well (docs/illusion.md), so T_cal says the logits are overconfident, not what made them so.
        return "training-induced overconfidence", (f"served at T = 1, the model's own logits are overconfident "
                                                   f"({evidence}): a saturated softmax weakens attacks that follow "
                                                   "its gradient")
    if temperature < 1 / OVERCONFIDENT_T:
        return "training-induced underconfidence", f"served at T = 1, the model's own logits are underconfident ({evidence})"
    return None, None
