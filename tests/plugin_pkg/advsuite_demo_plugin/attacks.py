"""``uniform_noise``: random search in the L∞ ball, the weakest honest black-box baseline.

Each example gets ``samples`` points drawn uniformly from its L∞ ball of radius ``eps``
(intersected with the [0, 1] box by clipping, which only shrinks the perturbation), all scored
in one batch; the point with the lowest margin (true logit minus the largest other) is kept. A
model that uniform noise breaks is not robust at all; one it does not break may still be.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field

from suite.attacks import Attack, AttackOutput, Threat
from suite.seeding import example_generator


class UniformNoise(Attack):
    """Uniform noise in the L∞ ball: ``samples`` (default 20) draws per example, the lowest margin kept.

    Threat model L∞ (default ε 8/255), pixels in [0, 1]; black-box (scores only).
    """

    # No ``name`` here: the suite names the attack after its entry point (uniform_noise).
    modality: ClassVar[str] = "image"
    access: ClassVar[str] = "black-box"

    eps: float = Field(8 / 255, ge=0, allow_inf_nan=False)
    samples: int = Field(20, ge=1)

    @property
    def threat(self) -> Threat:
        return Threat(norm="linf", eps=self.eps)

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        return {"samples": self.samples, "max_queries": self.samples}

    def run(self, model, examples: Sequence, seed: int) -> list[AttackOutput]:
        import torch

        start = time.perf_counter()
        x = torch.stack([example.input for example in examples]).to(model.device, torch.float32)
        labels = torch.tensor([example.label for example in examples], device=model.device)
        # Each example's draws come from its own generator: (seed, attack, example id).
        noise = torch.stack([
            torch.rand((self.samples, *x.shape[1:]), generator=example_generator(seed, self.name, example.id))
            for example in examples
        ]).to(model.device)
        candidates = (x[:, None] + self.eps * (2 * noise - 1)).clamp(0.0, 1.0)  # N×S×C×H×W
        logits = model.logits(candidates.flatten(0, 1)).view(len(examples), self.samples, -1)
        true = logits.gather(2, labels[:, None, None].expand(-1, self.samples, 1)).squeeze(2)
        others = logits.scatter(2, labels[:, None, None].expand(-1, self.samples, 1), float("-inf")).amax(dim=2)
        best = (true - others).argmin(dim=1)
        adversarial = candidates[torch.arange(len(examples), device=x.device), best]
        sizes = (adversarial - x).flatten(1).abs().amax(dim=1)
        seconds = (time.perf_counter() - start) / len(examples)
        return [AttackOutput(adversarial=adv.cpu(), perturbation=float(size), queries=self.samples, seconds=seconds)
                for adv, size in zip(adversarial, sizes)]
