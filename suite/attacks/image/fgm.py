"""FGM / FGSM: Goodfellow, Shlens & Szegedy, "Explaining and Harnessing Adversarial Examples",
ICLR 2015 (https://arxiv.org/abs/1412.6572): one step of size ε along the steepest-ascent
direction of the loss (sign of the gradient for L∞, normalised gradient for L2).

Deviation: the step is taken from the clean input and then checked once more (the second query),
and the clean input is kept when it scores higher on the loss (the driver's best iterate).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from suite.attacks.base import register_attack
from suite.attacks.image.driver import GradientAttack
from suite.attacks.image.search import EVALUATION, SearchMode
from suite.attacks.image.norms import L2, Linf
from suite.losses import LossName
from suite.threat import MAX_RADIUS


class _FGM(GradientAttack):
    #: 2: a randomized ensemble's iterates are kept by their exact L, and its examples stop only
    #: where no member is right (:func:`~suite.models.base.attack_level`).
    version: ClassVar[int] = 2
    loss: LossName = "ce"

    def _perturb(self, model, x, y, generators, mode: SearchMode = EVALUATION):
        search = self._search(model, x, y, x, steps=1, update=self._ascent(x, self.eps), loss=self.loss, mode=mode)
        return search.best, search.queries

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        return {"steps": 1, "restarts": 1, "max_queries": 2}


@register_attack("fgm_linf")
class FGMLinf(_FGM):
    """FGSM (Goodfellow et al. 2015): one signed-gradient step of size ``eps`` (default 8/255).

    Threat model L∞, pixels in [0, 1]; ``loss`` ce (default), margin or dlr.
    """

    norm: ClassVar[type] = Linf


@register_attack("fgm_l2")
class FGML2(_FGM):
    """Fast gradient method (Goodfellow et al. 2015): one normalised-gradient step of L2 size ``eps``.

    Threat model L2 (default ε 0.5), pixels in [0, 1]; ``loss`` ce (default), margin or dlr.
    """

    norm: ClassVar[type] = L2
    eps: float = Field(0.5, ge=0, le=MAX_RADIUS, allow_inf_nan=False)
