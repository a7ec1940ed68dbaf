"""Typed threat-model metadata: what set of inputs an attack may choose from, how it may use the
model, and whether its number is point-wise or distributional.

It sits at the bottom of the package, so that attacks declare it and results, the leaderboard
and the illusion findings read it without importing each other.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: ``white-box``: gradients of the evaluated model; ``black-box``: its scores only;
#: ``transfer``: crafted on another model, the evaluated model only scores the result.
Access = Literal["white-box", "black-box", "transfer"]
#: ``pointwise``: each example in its own ball, in the worst case over attacks;
#: ``distributional``: one budget shared by all examples, reported on its own.
Metric = Literal["pointwise", "distributional"]
Norm = Literal["linf", "l2", "l1"]
TextLevel = Literal["word", "character", "mixed"]
#: The largest radius an attack takes: float32's largest number (a radius beyond it becomes
#: infinite in the attacks' float32 arithmetic; any radius past 1 in L∞ already admits every image).
MAX_RADIUS = 3.4028234663852886e38


class Threat(BaseModel):
    """The set of inputs an attack may choose from, as recorded in results and the leaderboard.

    Attributes:
        norm: Norm of the perturbation ball (images); ``None`` for text.
        eps: Radius of that ball, in [0, 1] pixel units; for a distributional attack, the
            Wasserstein budget ε of the ambiguity set W_p(P, P_N) ≤ ε.
        level: Text attacks: ``word`` (whole words substituted, inserted or deleted),
            ``character`` (edits inside words) or ``mixed`` (both).
        p: Distributional attacks: the order of the Wasserstein distance.
        kappa: Distributional attacks: the fraction 1/κ of probability mass that moves.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    norm: Norm | None = None
    eps: float | None = Field(None, ge=0, allow_inf_nan=False)
    level: TextLevel | None = None
    p: float | None = Field(None, ge=1, allow_inf_nan=False)
    kappa: float | None = Field(None, ge=1, allow_inf_nan=False)

    @property
    def distributional(self) -> bool:
        return self.p is not None

    @property
    def label(self) -> str:
        """A short name: ``linf eps=0.03``, ``word-level``, ``W1 l2 eps=0.5``."""
        if self.level is not None:
            return f"{self.level}-level"
        name = self.norm or "unbounded"
        if self.eps is not None:
            name = f"{name} eps={self.eps:g}"
        if self.p is not None:
            name = f"W{self.p:g} {name}" + (f" kappa={self.kappa:g}" if self.kappa is not None else "")
        return name
