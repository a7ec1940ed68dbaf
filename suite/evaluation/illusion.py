"""The illusion-of-robustness flag.

A model shows an *illusion of robustness* ("Extreme Confidence and the Illusion of Robustness
in Adversarial Training") when its robust accuracy under an out-of-the-box attack is higher,
by more than a threshold, than under

- the same attack run by a temperature-aware adversary (``<attack>@cal`` / ``<attack>@opt``),
- or a transfer attack (texts crafted on another model): compared with the same attack run on
  the model itself when the task has it, else with the strongest out-of-the-box attack of the
  same threat.

Everything is read from the typed fields of the attack entries (``adversary``, ``access``,
``threat``), never parsed from names.
"""

from __future__ import annotations

from collections.abc import Mapping

from suite.report.results import AttackEntry, IllusionEntry


def illusion_findings(attacks: Mapping[str, AttackEntry], threshold: float) -> IllusionEntry:
    """The flag and its findings, from the results' point-wise attack entries."""
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
        if drop > threshold:
            findings.append({
                "attack": key,
                "reference": reference_key,
                "robust_accuracy": entry.robust_accuracy,
                "reference_robust_accuracy": reference,
                "drop": drop,
                "message": (f"{key}: {why} lowers robust accuracy from {100 * reference:.1f}% ({reference_key}) to "
                            f"{100 * entry.robust_accuracy:.1f}%, {100 * drop:.1f} pp"),
            })
    return IllusionEntry(
        flagged=bool(findings),
        threshold=threshold,
        max_drop=max((finding["drop"] for finding in findings), default=0.0),
        findings=findings,
    )
