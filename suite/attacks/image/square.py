"""The ``square`` attack: Square Attack (Andriushchenko et al., "Square Attack: a query-efficient
black-box adversarial attack via random search", ECCV 2020) through torchattacks' driver
(:class:`~suite.attacks.image.torchattacks_driver.TorchattacksAttack`: seeding, query counting, the exact
projection), searching as the official AutoAttack code does (:mod:`.square_search`). It is
also ``autoattack``'s last component. Torch and torchattacks are imported only when it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from suite.attacks.base import Access, AttackOutput, register_attack
from suite.attacks.image.square_search import official_square
from suite.attacks.image.torchattacks_driver import TorchattacksAttack
from suite.data.base import Example
from suite.errors import ConfigError
from suite.models.base import Classifier
from suite.seeding import example_generator

if TYPE_CHECKING:
    import torch


@register_attack("square")
class Square(TorchattacksAttack):
    """Square Attack (Andriushchenko et al. 2020), score-based black-box: torchattacks.Square with
    the official code's search (:mod:`.square_search`: L2 windows per channel, the side capped).

    Defaults as in AutoAttack: 5000 queries, p_init 0.8, margin loss, no rescaled schedule.
    ``sampled: true`` (randomized ensembles only) queries the ensemble as deployed: each query is
    answered by one member, drawn from a generator seeded per example (one example at a time),
    as a black-box attacker would see it; the default queries its mean probabilities.
    """

    access: ClassVar[Access] = "black-box"
    version: ClassVar[int] = 2  # 2: the official search (windows per channel under L2, side capped)

    queries: int = Field(5000, ge=1)
    p_init: float = Field(0.8, gt=0, le=1)
    sampled: bool = False

    @property
    def batch_dependent(self) -> bool:
        return not self.sampled  # sampled: one example at a time, seeded by its id

    def check_model(self, model: Classifier) -> None:
        from suite.models.ensemble import is_ensemble

        if self.sampled and not is_ensemble(model):
            raise ConfigError(f"square: sampled applies to randomized ensembles; {model.info.name!r} is not one")

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        if not self.sampled:
            return super().run(model, examples, seed)
        from suite.models.ensemble import Served

        self.check_model(model)
        return [self._attack(Served(model, example_generator(seed, self.name, "served", example.id)), [example],
                             seed)[0][0] for example in examples]

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        return {"max_queries": self.queries + 2, "restarts": 1}

    def max_calls(self, num_classes: int) -> int:
        return self.queries + 3  # the clean check, the initial margin, then one pass per query

    def _canvas(self, x: torch.Tensor) -> torch.Tensor:
        # torchattacks' (and the official) L2 initialisation tiles the image with ⌊H/5⌋-pixel
        # squares and loops ⌊H/s⌋ times: an image under 5×5 divides by zero. Pad such images with
        # zeros to 5×5; the classifier sees only the top-left H×W, so the padding cannot help
        # the attack, and the perturbation of the image is at most ε (the L2 budget spent on
        # padding only makes the search weaker, never unsound).
        import torch

        height, width = x.shape[-2:]
        if min(height, width) >= 5:
            return x
        return torch.nn.functional.pad(x, (0, max(0, 5 - width), 0, max(0, 5 - height)))

    def _build(self, torchattacks, module, num_classes, seed):
        return official_square(torchattacks)(
            module, norm=self.torchattacks_norm, eps=self.eps, n_queries=self.queries, n_restarts=1,
            p_init=self.p_init, seed=seed, resc_schedule=False,
        )
