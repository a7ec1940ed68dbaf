"""``advsuite certify``: the W_1 certificate of a model (:mod:`suite.wdro`) beside the losses
the Wasserstein attacks reach, over a grid of ε.

For each ε the report holds E_PN[ℓ], the certified lower and upper bounds where they exist, the
estimates (E + l_N·ε, E + L_N·ε), and the loss E_Padv[ℓ] of the distribution each attack builds
in the W_1 ball (WDA with κ = 1 and 2, WDA++). An attack's distribution is in the ball, so its
loss can never exceed a certified upper bound; the test suite checks it. The attacks maximise
misclassification, not the loss, so their losses sit anywhere below the sup: they are shown
beside the lower bound, never compared with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import torch

from suite.attacks import build_attack
from suite.wdro import certify
from suite.wdro.bounds import CertLoss, CostNorm, loss_of
from suite.data.base import Example
from suite.evaluation.scoring import clean_scores
from suite.models.base import Classifier

#: The attacks whose W_1 losses the report shows: WDA at κ = 1 (point-wise) and 2, and WDA++.
CERTIFY_ATTACKS = (("wda", {"kappa": 1.0}), ("wda_k2", {"kappa": 2.0}), ("wda_pp", {}))


def attack_loss(model: Classifier, examples: Sequence[Example], name: str, params: dict[str, Any],
                loss: CertLoss, seed: int = 0, clean_twin: torch.Tensor | None = None) -> dict[str, float]:
    """E_Padv[ℓ] and the accuracy of the distribution a Wasserstein attack builds (p = 1):
    (1/N) Σ (1 − a_i)·ℓ(X_i) + a_i·ℓ(X̃_i), with a_i its moved mass. ``clean_twin``: the
    examples' float64 logits (:meth:`~suite.models.base.Classifier.float64_logits`), computed
    here when not given (the report computes them once for every attack and ε)."""
    attack = build_attack("wda_pp" if name == "wda_pp" else "wda", {**params, "p": 1})
    y = torch.tensor([example.label for example in examples])
    clean = clean_scores(model, examples)
    attacked = [example for example, right in zip(examples, clean.correct.tolist()) if right > 0]
    moved = dict(zip([example.id for example in attacked], attack.run(model, attacked, seed) if attacked else []))
    records, after_logits, after_inputs = [], [], []
    for example, clean_logits, right in zip(examples, clean.logits, clean.correct.tolist()):
        output = moved.get(example.id)
        if output is None:
            after_logits.append(clean_logits)
            after_inputs.append(example.input)
            continue
        after_inputs.append(output.adversarial.detach().cpu())
        # Scored one example per pass, as the evaluation does: a point WDA++ left on the boundary
        # gets the same verdict whatever else is scored with it.
        logits, correct = model.scores(output.adversarial.unsqueeze(0).to(model.device), torch.tensor([example.label]))
        after_logits.append(logits[0].cpu())
        records.append({"id": example.id, "robust": min(float(correct[0]), right), "perturbation": output.perturbation,
                        "extras": dict(output.extras)})
    details = attack.aggregate([{"id": e.id, "correct": c} for e, c in zip(examples, clean.correct.tolist())], records)
    if name == "wda_pp":
        masses = {item["id"]: item["mass"] for item in details["transport"]}
    else:
        masses = {example.id: 1 / attack.kappa for example in attacked}
    # The losses as the certificate computes E (:func:`suite.wdro.certify`): in float64 where the
    # model allows it. The float32 model's rounding put an attack's loss 2e-9 (relative) above the
    # certified upper bound at ε = 1e-20.
    before_twin = clean_twin if clean_twin is not None else _clean_twin(model, examples)
    after_twin = None if before_twin is None else model.float64_logits(torch.stack(after_inputs).float())
    before = loss_of(loss, clean.logits.double() if before_twin is None else before_twin, y)
    after = loss_of(loss, torch.stack(after_logits).double() if after_twin is None else after_twin, y)
    weights = torch.tensor([masses.get(example.id, 0.0) for example in examples], dtype=torch.float64)
    return {"loss": float(((1 - weights) * before + weights * after).mean()), "accuracy": float(details["accuracy"]),
            "transport_cost": float(details["transport_cost"])}


def _clean_twin(model: Classifier, examples: Sequence[Example]) -> torch.Tensor | None:
    return model.float64_logits(torch.stack([example.input for example in examples]).float())


def certification_report(model: Classifier, examples: Sequence[Example], *, norm: CostNorm = "l2",
                         loss: CertLoss = "ce", eps: Sequence[float] = (0.1,), boxed: bool = True,
                         attacks: bool = True, seed: int = 0) -> dict[str, Any]:
    """The certificate over ``eps`` with, per ε, the W_1 losses of :data:`CERTIFY_ATTACKS`."""
    certificate = certify(model, examples, norm=norm, loss=loss, eps=eps, boxed=boxed)
    clean_twin = _clean_twin(model, examples) if attacks else None
    for row in certificate.rows:
        row["attacks"] = {}
        if not attacks or row["eps"] == 0:
            continue
        for label, params in CERTIFY_ATTACKS:
            row["attacks"][label] = attack_loss(model, examples, label, {"norm": norm, "eps": row["eps"], **params},
                                                loss, seed, clean_twin)
    report = asdict(certificate)
    report["model"] = model.info.name
    # The content hash of the weights certified: a model retrained in place keeps its name, and its
    # old certificate could not be told from a current one.
    report["weights"] = model.weights_hash()
    return report
