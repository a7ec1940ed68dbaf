"""The driver every torchattacks-backed attack shares (:mod:`.baselines`, :mod:`.square`): our
:class:`~suite.models.base.Classifier` behind the ``nn.Module`` torchattacks expects, seeded per
batch from the example ids with the global RNG restored, queries counted per example, a
progress bar, and the result projected exactly onto the ε-ball and the box. The module
docstring of :mod:`.baselines` says where torchattacks differs from the official code.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from suite.attacks.base import Attack, AttackOutput, Threat
from suite.attacks.image.driver import image_outputs, with_default_eps
from suite.attacks.image.norms import NORMS
from suite.data.base import Example
from suite.errors import ResourceMissingError
from suite.models.base import Classifier, decide
from suite.progress import progress_bar
from suite.seeding import example_seed, global_rng_seeded
from suite.threat import MAX_RADIUS

if TYPE_CHECKING:
    import torch
    from torch import nn

#: The extra ``baselines`` pins torchattacks 3.3.0: 3.4.0 and later pin requests~=2.25.1 (never
#: imported), which conflicts with datasets' requests>=2.32.2 (pip would downgrade both);
#: 3.3.0 declares no dependencies, and its APGD, APGD-T, FAB and Square are 3.5.1's code
#: (checked: the same outputs and query counts on builtin:digits-cnn).
INSTALL_HINT = "pip install 'advsuite[baselines]' (or: pip install torchattacks==3.3.0)"


def import_torchattacks():
    try:
        import torchattacks
    except ImportError as error:
        raise ResourceMissingError(f"the baseline attacks need torchattacks: {INSTALL_HINT}") from error
    return torchattacks


class TorchattacksAttack(Attack):
    """Shared driver for the torchattacks baselines (L∞ or L2, pixels in [0, 1]).

    torchattacks draws from torch's global generator, seeded here once per batch from its
    examples' ids: an example's draws depend on the batch it is in (``square`` at 200 queries
    broke 6 of 48 digits in one batch, 7 one at a time), so these attacks are
    :attr:`~suite.attacks.base.Attack.batch_dependent`.
    """

    modality: ClassVar[str] = "image"

    @property
    def batch_dependent(self) -> bool:
        return True

    norm: Literal["linf", "l2"] = "linf"
    eps: float = Field(8 / 255, ge=0, le=MAX_RADIUS, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _eps_for_norm(cls, data: Any) -> Any:
        return with_default_eps(data)

    @property
    def threat(self) -> Threat:
        return Threat(norm=self.norm, eps=self.eps)

    def check_resources(self) -> None:
        """Refuse, before anything runs, when torchattacks is not installed (found without importing it)."""
        if importlib.util.find_spec("torchattacks") is None:
            raise ResourceMissingError(f"attack {self.name!r} needs torchattacks, which is not installed: {INSTALL_HINT}")

    @property
    def torchattacks_norm(self) -> str:
        return {"linf": "Linf", "l2": "L2"}[self.norm]

    def _build(self, torchattacks, module: nn.Module, num_classes: int, seed: int) -> Any:
        raise NotImplementedError

    def max_calls(self, num_classes: int) -> int:
        """The most forward passes torchattacks makes on one batch (the progress bar's total)."""
        raise NotImplementedError

    def _check_classes(self, num_classes: int) -> None:
        pass

    def _canvas(self, x: torch.Tensor) -> torch.Tensor:
        """The images the torchattacks attack works on (the module crops back to ``x``'s size)."""
        return x

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        return self._attack(model, examples, seed)[0]

    def _attack(self, model: Classifier, examples: Sequence[Example], seed: int,
                desc: str | None = None) -> tuple[list[AttackOutput], torch.Tensor]:
        """The outputs, and the model's predictions on them (AutoAttack passes on what is unbroken).

        The attack checks its final inputs once (one query): torchattacks' verdict may not survive
        the exact projection onto the ε-ball below. ``desc`` labels the progress bar.
        """
        import torch

        from suite.attacks.image.query_counting import QueryCountingModule

        torchattacks = import_torchattacks()
        start = time.perf_counter()
        num_classes = len(model.labels)
        self._check_classes(num_classes)
        x = torch.stack([example.input for example in examples]).to(model.device, torch.float32)
        y = torch.tensor([example.label for example in examples], device=model.device)
        batch_seed = example_seed(seed, self.name, *(example.id for example in examples))
        label = f"{desc or self.name} ({len(examples)} ex)"
        with progress_bar(self.max_calls(num_classes), label, unit="call") as bar, global_rng_seeded(batch_seed):
            height, width = x.shape[-2:]
            module = QueryCountingModule(model, x, on_call=bar.update, size=(height, width))
            attack = self._build(torchattacks, module, num_classes, batch_seed % 2**31)
            adversarial = attack(self._canvas(x), y).detach()[..., :height, :width]
        # Keep the ε-ball and the box exact whatever rounding the attack did.
        delta = NORMS[self.norm].project(adversarial - x, self.eps)
        adversarial = (x + delta).clamp(0.0, 1.0)
        predictions = decide(model.logits(adversarial), y)
        outputs = image_outputs(NORMS[self.norm], x, adversarial, module.queries + 1, time.perf_counter() - start)
        return outputs, predictions
