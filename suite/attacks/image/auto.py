"""``auto`` and ``auto_plus``: the default image evaluation, an ensemble in the manner of
AutoAttack (Croce & Hein, ICML 2020, Sec. 4) built from the suite's own attacks.

Each component runs only on the examples every earlier one left classified correctly, and an
example counts as broken if any component broke it, so adding a component can only lower robust
accuracy. All components are the suite's own :mod:`.apgd` attacks: per-example schedules,
losses reduced by sum and randomness drawn from each example's generator, so an ensemble's
records do not depend on the batch size (an example's generator is shared by the components it
reaches, in order).

- ``auto`` (the default when no attacks are given): APGD-CE (100 steps), then APGD-T towards the
  9 most likely wrong classes with 30 steps each, then 100 more steps towards the one target
  that came closest. Cross-entropy finds most adversarial examples fast; the targeted DLR loss
  then catches what a saturated or misleading cross-entropy hides (the BETA paper's point: a
  margin per target class, Robey et al., ICLR 2024, Sec. 4 and App. D). AutoAttack gives each
  of its 9 targets 100 steps. Tuned on the built-in models (docs/attacks/measured.md): 3
  targets × 100 steps missed examples of the robust models under L∞ that only targets 4-9
  break, while 9 targets × 30 steps found them at the same number of gradient rows. Measured
  on models it was not tuned on, 30 steps fell short of AutoAttack on a few examples near the
  boundary, which only a 100-step targeted search breaks; every traced break was towards the
  target closest after 30 steps, so a last 100-step search towards it
  (``best_target_steps``) closes the gap at a ninth of the cost of 100 steps on every target.
- ``auto_plus``: APGD-CE, APGD-T towards 9 targets (AutoAttack's own budget), then APGD-DLR
  with 3 random restarts.

Where the DLR loss is undefined (fewer than 3 or 4 classes) the APGD components use the margin
(:mod:`.apgd`, note 7), so binary and 3-class models run the same ensembles.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field

from suite.attacks.base import register_attack
from suite.attacks.image.apgd import APGDCE, APGDDLR, APGDT
from suite.attacks.image.driver import NormChoiceAttack
from suite.attacks.image.search import EVALUATION, Found, SearchMode, on_examples


class _Ensemble(NormChoiceAttack):
    steps: int = Field(100, ge=1)
    targets: int = Field(3, ge=1)
    #: How APGD-T picks its targets (:class:`~.apgd.APGDT`): ``logit`` or ``linear``.
    ranking: Literal["logit", "linear"] = "logit"

    def components(self) -> list:
        raise NotImplementedError

    def _common(self) -> dict[str, Any]:
        return {"norm": self.norm_name, "eps": self.eps, "precision": self.precision, "reduction": self.reduction,
                "l2_step": self.l2_step}

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        parts = [{"attack": part.name, **part.budget(num_classes)} for part in self.components()]
        counts = [part["max_queries"] for part in parts]
        return {"components": parts, "max_queries": None if None in counts else sum(counts)}

    def _perturb(self, model, x, y, generators, mode: SearchMode = EVALUATION):
        found = self.find(model, x, y, generators, mode)
        return found.adversarial, found.queries

    def find(self, model, x: torch.Tensor, y: torch.Tensor, generators: list[torch.Generator],
             mode: SearchMode = EVALUATION) -> Found:
        found = Found.unbroken(x, y)
        for index, component in enumerate(self.components()):
            todo = (found.levels > 0).nonzero().squeeze(1)
            if len(todo) == 0:
                break
            result = component.find(model, x[todo], y[todo], [generators[i] for i in todo.tolist()],
                                    on_examples(mode, todo))
            found.queries[todo] += result.queries
            # The first component's iterate stands for an unbroken example (the components'
            # objectives are not comparable); a later one replaces it only by a lower level:
            # by breaking it, or leaving less of a randomized ensemble right (a lower L).
            found.keep(todo, result, (result.levels < found.levels[todo]) | (index == 0))
        return found


@register_attack("auto")
class Auto(_Ensemble):
    """The default image evaluation: APGD-CE with ``steps`` (default 100) iterations, then, on
    what it left unbroken, APGD-T towards the ``targets`` (default 9) most likely wrong classes
    with ``target_steps`` (default 30) iterations each, then ``best_target_steps`` (default 100;
    0: none) more towards the target that came closest. ``norm`` linf (default ε 8/255) or l2
    (default ε 0.5).
    """

    #: 2: the last search towards the closest target (``best_target_steps``) was added.
    #: 3: APGD's fused step (:func:`~.apgd.apgd_updater`: the same search, rounded otherwise).
    #: 4: a randomized ensemble's iterates are kept by their exact L, and its examples stop only
    #: where no member is right (:func:`~suite.models.base.attack_level`).
    version: ClassVar[int] = 4
    targets: int = Field(9, ge=1)
    target_steps: int = Field(30, ge=1)
    best_target_steps: int = Field(100, ge=0)

    def components(self) -> list:
        common = self._common()
        return [APGDCE(**common, steps=self.steps),
                APGDT(**common, steps=self.target_steps, targets=self.targets, ranking=self.ranking,
                      best_target_steps=self.best_target_steps)]


@register_attack("auto_plus")
class AutoPlus(_Ensemble):
    """A stronger, slower ``auto``: APGD-CE, APGD-T towards ``targets`` (default 9) classes, then
    APGD-DLR with ``restarts`` (default 3) random restarts; ``steps`` (default 100) each."""

    #: 2: APGD's fused step (:func:`~.apgd.apgd_updater`: the same search, rounded otherwise).
    #: 3: a randomized ensemble's iterates are kept by their exact L, and its examples stop only
    #: where no member is right (:func:`~suite.models.base.attack_level`).
    version: ClassVar[int] = 3
    targets: int = Field(9, ge=1)
    restarts: int = Field(3, ge=1)

    def components(self) -> list:
        common = self._common()
        return [APGDCE(**common, steps=self.steps),
                APGDT(**common, steps=self.steps, targets=self.targets, ranking=self.ranking),
                APGDDLR(**common, steps=self.steps, restarts=self.restarts)]
