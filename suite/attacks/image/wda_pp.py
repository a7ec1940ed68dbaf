"""WDA++ (Le et al., Algorithm 2): the nearest flip of every point, then the budget ε^p spent on
the cheapest flips first. The shared fields, steps and defaults are :mod:`.wda`'s (its module
notes describe both attacks)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar, Literal

import torch
from pydantic import AliasChoices, Field, field_validator
from pydantic_core import PydanticCustomError

from suite.attacks.base import AttackOutput, Threat, register_attack
from suite.attacks.image.driver import image_outputs
from suite.attacks.image.search import EVALUATION, SearchMode
from suite.attacks.image.wda import _check_budget, _Distributional, _other_classes
from suite.data.base import Example
from suite.models.base import Classifier, decide


@register_attack("wda_pp")
class WDAPlusPlus(_Distributional):
    """WDA++ (Le et al., Algorithm 2): the nearest flip of every point, then the budget ε^p spent
    on the cheapest flips first (a_i = min(1, N·B/d_i^p)).

    Defaults: L∞ (``norm``: linf, l2 or l1), W_1 (``p``: 1 or 2), the most likely rivals
    (``top_k``; App. E's 5, 10 or 20 by the number of classes), up to 20 steps of α (0.6375·ε
    under L∞, 0.4·ε under L2 and L1), 10 bisections
    (``search_steps``). Records hold each point's flip distance (``extras.distance``; null: no
    flip found); the results hold the mass each point moved (``transport``) and their mean
    (``moved_mass``: misclassified points, which get 1/κ_i = 1 but stay put, are not in it).
    """

    #: 2: in low precision, a point flips only where float32 logits misclassify it too, and the
    #: bisection runs in float32 (its end is the flip the distance is of).
    version: ClassVar[int] = 2
    # The paper's names (topK, srchiter) are accepted too. "auto": App. E's choice by the number
    # of classes (5 for CIFAR-10, 10 for CIFAR-100, 20 for ImageNet); null: every other class.
    top_k: int | Literal["auto"] | None = Field("auto", validation_alias=AliasChoices("top_k", "topK"))
    search_steps: int = Field(10, ge=0, validation_alias=AliasChoices("search_steps", "srchiter"))

    @field_validator("top_k", mode="before")
    @classmethod
    def _top_k(cls, value: Any) -> Any:
        if value is None or value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PydanticCustomError("top_k", "Input should be a whole number ≥ 1, auto, or null (every other "
                                      "class), not {value}", {"value": repr(value)})
        return value

    @property
    def threat(self) -> Threat:
        return Threat(norm=self.norm_name, eps=self.eps, p=float(self.p))

    def rivals(self, num_classes: int) -> int:
        """How many rivals each example's steps go towards (``top_k`` resolved, at most K − 1)."""
        if self.top_k is None:
            return num_classes - 1
        if self.top_k == "auto":
            wanted = 5 if num_classes <= 10 else 10 if num_classes <= 100 else 20
        else:
            wanted = self.top_k
        return min(wanted, num_classes - 1)

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        rivals = None if num_classes is None else self.rivals(num_classes)
        return {"maxiter": self.maxiter, "top_k": self.top_k if rivals is None else rivals,
                "search_steps": self.search_steps,
                "step_size": self.step_size,
                "max_queries": None if rivals is None else 2 * rivals * self.maxiter + self.search_steps + 1}

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        start = time.perf_counter()
        x = torch.stack([example.input for example in examples]).to(model.device, torch.float32)
        y = torch.tensor([example.label for example in examples], device=model.device)
        adversarial, queries, flipped = self._flips(model, x, y)
        outputs = image_outputs(self.geometry, x, adversarial, queries, time.perf_counter() - start)
        return [replace(output, extras={"distance": output.perturbation if hit else None})
                for output, hit in zip(outputs, flipped.tolist())]

    def _perturb(self, model, x, y, generators, mode: SearchMode = EVALUATION):
        adversarial, queries, _ = self._flips(model, x, y)
        return adversarial, queries

    def _flips(self, model, x, y):
        """The flipped end of each example's bisection (the example itself where nothing flipped),
        its queries, and whether it flipped (misclassified clean examples count as flipped)."""
        n = len(x)
        current = x.clone()
        before, after = x.clone(), x.clone()
        queries = torch.ones(n, dtype=torch.long, device=x.device)
        with torch.no_grad():
            clean = model.logits(x).float()
        wrong = decide(clean, y) != y
        flipped = wrong.clone()
        rivals = _other_classes(clean, y, self.rivals(clean.shape[1]))
        # maxiter steps, where Algorithm 2 writes iter = 0 … maxiter (maxiter + 1): as WDA's (above).
        for _ in range(self.maxiter):
            live = (~flipped).nonzero().squeeze(1)
            if len(live) == 0:
                break
            point, _, logits = self._rival_step(model, current[live], y[live], rivals[live])
            queries[live] += 2 * rivals.shape[1]
            hit = decide(logits, y[live]) != y[live]
            rows = live[hit]
            before[rows], after[rows] = current[rows], point[hit]
            flipped[rows] = True
            current[live] = point
        searched = (flipped & ~wrong).nonzero().squeeze(1)
        adversarial = x.clone()
        if len(searched):
            low = torch.zeros(len(searched), device=x.device)
            high = torch.ones(len(searched), device=x.device)
            delta = after[searched] - before[searched]
            for _ in range(self.search_steps):
                middle = (low + high) / 2
                with torch.no_grad():  # float32 whatever the precision: it decides the recorded flip
                    logits = model.logits(before[searched] + middle.view(-1, 1, 1, 1) * delta).float()
                queries[searched] += 1
                crossed = decide(logits, y[searched]) != y[searched]
                high = torch.where(crossed, middle, high)
                low = torch.where(crossed, low, middle)
            adversarial[searched] = (before[searched] + high.view(-1, 1, 1, 1) * delta).clamp(0.0, 1.0)
        return adversarial, queries, flipped & ~wrong

    def aggregate(self, clean: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        n = len(clean)
        by_id = {record["id"]: record for record in records}
        # d_i: 0 for a point not attacked (misclassified), the flip distance, or ∞ (no flip found).
        distances = []
        for record in clean:
            attacked = by_id.get(record["id"])
            if attacked is None:
                distances.append(0.0)
            else:
                distance = attacked.get("extras", {}).get("distance")
                distances.append(math.inf if distance is None else float(distance))
        masses = allocate(distances, self.eps, self.p)
        spent = sum(mass * distance ** self.p for mass, distance in zip(masses, distances) if mass > 0) / max(n, 1)
        _check_budget("wda_pp", spent, self.eps, self.p)
        accuracy = 0.0
        for record, mass in zip(clean, masses):
            attacked = by_id.get(record["id"])
            after = record["correct"] if attacked is None else attacked["robust"]
            accuracy += (1 - mass) * record["correct"] + mass * after
        transport = [{"id": record["id"], "distance": distance, "mass": mass}
                     for record, distance, mass in zip(clean, distances, masses) if mass > 0 and distance > 0]
        # The paper sets 1/κ_i = 1 where d_i = 0 (Sec. 4, after eq. 11; Algorithm 2), but there
        # X_adv = X_i: a misclassified point never moves, so moved_mass counts only d_i > 0 (the
        # mass of `transport`), not Σ 1/κ_i.
        return {"accuracy": accuracy / max(n, 1),
                "clean_accuracy": sum(record["correct"] for record in clean) / max(n, 1),
                "moved_mass": sum(item["mass"] for item in transport) / max(n, 1), "transport_cost": spent,
                "budget": self.eps ** self.p,
                "wasserstein_bound": spent ** (1 / self.p), "unflipped": sum(math.isinf(d) for d in distances),
                "transport": transport}


def allocate(distances: Sequence[float], eps: float, p: int) -> list[float]:
    """WDA++'s greedy budget allocation (Algorithm 2, lines 19–24): the mass a_i ∈ [0, 1] each
    point moves, cheapest first, a_i = min(1, N·B/d_i^p), until B = ε^p is spent. Equal value
    per point and cost a_i·d_i^p/N make this the fractional-knapsack optimum. d_i = 0 moves for
    free; d_i = ∞ never moves. Computed in float64."""
    n = len(distances)
    masses = [0.0] * n
    remaining = float(eps) ** p
    for index in sorted(range(n), key=lambda i: (distances[i], i)):
        distance = distances[index]
        if distance == 0:
            masses[index] = 1.0
            continue
        if remaining <= 0 or math.isinf(distance):
            break
        cost = distance ** p / n
        masses[index] = min(1.0, remaining / cost)
        remaining -= masses[index] * cost
    return masses



__all__ = ["WDAPlusPlus", "allocate"]
