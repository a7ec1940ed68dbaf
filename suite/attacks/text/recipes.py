"""TextAttack word-level attack recipes, run through TextAttack's own classes.

Each example is attacked with TextAttack's ``Attack.attack(text, label)``. TextAttack draws
from Python's and NumPy's global RNGs and takes no generator, so each example runs inside
:func:`suite.seeding.global_rng_seeded` with a seed derived from (run seed, attack, example id),
and the global state is restored afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field, PrivateAttr

from suite.attacks.base import Attack, AttackOutput, register_attack
from suite.attacks.text.offline import import_textattack
from suite.attacks.text.wrapper import make_wrapper
from suite.data.base import Example
from suite.models.base import Classifier
from suite.seeding import example_seed, global_rng_seeded


class TextAttackRecipe(Attack):
    """Run one TextAttack recipe on a batch of examples."""

    modality: ClassVar[str] = "text"
    query_budget: int | None = Field(None, gt=0)
    model_batch_size: int = Field(32, gt=0)
    # (wrapper, TextAttack Attack) per model: built once, reused by every batch (recipes such
    # as PWWS load WordNet when built). Not a hyperparameter; not part of equality.
    _built: dict[int, tuple[Any, Any]] = PrivateAttr(default_factory=dict)

    @property
    def threat_model(self) -> str:
        return "word-level"

    def build(self, wrapper: Any) -> Any:
        """Build TextAttack's ``Attack`` object for ``wrapper``."""
        raise NotImplementedError

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        return {"query_budget": self.query_budget}

    def _attack_for(self, model: Classifier) -> tuple[Any, Any]:
        if id(model) not in self._built:
            import_textattack()
            wrapper = make_wrapper(model, self.model_batch_size)
            attack = self.build(wrapper)
            if self.query_budget is not None:
                attack.goal_function.query_budget = self.query_budget
            self._built[id(model)] = (wrapper, attack)
        return self._built[id(model)]

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        wrapper, attack = self._attack_for(model)  # first: it makes textattack importable
        from textattack.attack_results import SuccessfulAttackResult

        outputs = []
        for example in examples:
            start = time.perf_counter()
            queries_before = wrapper.queries
            with global_rng_seeded(example_seed(seed, self.name, example.id)):
                result = attack.attack(example.input, example.label)
            adversarial = result.perturbed_result.attacked_text
            original = result.original_result.attacked_text
            changed = len(original.all_words_diff(adversarial)) if adversarial.words else 0
            outputs.append(
                AttackOutput(
                    success=isinstance(result, SuccessfulAttackResult),
                    prediction=int(result.perturbed_result.output),
                    perturbation=changed / max(1, len(original.words)),
                    queries=wrapper.queries - queries_before,
                    seconds=time.perf_counter() - start,
                    adversarial=adversarial.text,
                )
            )
            # TextAttack caches model outputs per text; clear it so no example's search depends
            # on which examples came before it (or in its batch).
            attack.clear_cache()
        return outputs


@register_attack("deepwordbug")
class DeepWordBug(TextAttackRecipe):
    """DeepWordBug (Gao et al. 2018): greedy character edits on the most important words.

    TextAttack's ``DeepWordBugGao2018`` recipe (https://arxiv.org/abs/1801.04354): word
    importance by deletion, character swap/substitution/deletion/insertion, Levenshtein
    distance ≤ 30, untargeted. Needs only NLTK stopwords (shipped with the suite).
    """

    def build(self, wrapper: Any) -> Any:
        from textattack.attack_recipes import DeepWordBugGao2018

        return DeepWordBugGao2018.build(wrapper)
