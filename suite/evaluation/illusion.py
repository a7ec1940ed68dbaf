"""The illusion-of-robustness flag.

A model shows an *illusion of robustness* ("Extreme Confidence and the Illusion of Robustness
in Adversarial Training") when its robust accuracy under an out-of-the-box attack is higher,
by more than a threshold, than under

- the same attack run by a temperature-aware adversary (``<attack>@cal`` / ``<attack>@opt``),
- or a transfer attack (texts crafted on another model): compared with the same attack run on
  the model itself when the task has it, else with the strongest out-of-the-box attack.
"""

from __future__ import annotations

from typing import Any


def illusion_findings(attacks: dict[str, dict[str, Any]], threshold: float) -> dict[str, Any]:
    """``{"flagged", "threshold", "max_drop", "findings"}`` from the results' attack entries."""
    plain = {key: entry for key, entry in attacks.items()
             if entry.get("adversary", "none") == "none" and entry.get("threat_model", "").find("transfer") < 0}
    findings = []
    for key, entry in attacks.items():
        kind = entry.get("adversary", "none")
        if kind != "none":
            reference_key = entry.get("base_attack", key)
            why = f"the {kind}-temperature adversary (T_a = {entry.get('adversary_temperature', 1.0):.4g})"
        elif "transfer" in entry.get("threat_model", ""):
            inner = entry.get("params", {}).get("attack")
            reference_key = inner if inner in plain else min(plain, key=lambda k: plain[k]["robust_accuracy"], default=None)
            why = f"a transfer attack from {entry.get('params', {}).get('source')}"
        else:
            continue
        if reference_key not in plain:
            continue
        drop = plain[reference_key]["robust_accuracy"] - entry["robust_accuracy"]
        if drop > threshold:
            findings.append({
                "attack": key,
                "reference": reference_key,
                "robust_accuracy": entry["robust_accuracy"],
                "reference_robust_accuracy": plain[reference_key]["robust_accuracy"],
                "drop": drop,
                "message": (f"{key}: {why} lowers robust accuracy from "
                            f"{100 * plain[reference_key]['robust_accuracy']:.1f}% ({reference_key}) to "
                            f"{100 * entry['robust_accuracy']:.1f}%, {100 * drop:.1f} pp"),
            })
    return {
        "flagged": bool(findings),
        "threshold": threshold,
        "max_drop": max((finding["drop"] for finding in findings), default=0.0),
        "findings": findings,
    }
