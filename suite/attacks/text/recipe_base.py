"""The base of the TextAttack recipes: how one recipe attacks a stream of examples.

Each example is attacked with TextAttack's ``Attack.attack(text, label)``, on a clone of the
recipe's ``Attack`` of its own, and up to the batch size of searches run as cooperating
searches whose candidates share forward passes, each recorded as it ends and replaced by the
next example's (:mod:`suite.attacks.text.cooperative`): each finds what it would find alone.
TextAttack draws from Python's and NumPy's global RNGs and takes no generator, so each search's
global RNG state is seeded from (run seed, attack, example id) and kept as its own. The recipes
themselves are in :mod:`suite.attacks.text.recipes`.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from pydantic import Field, PrivateAttr

from suite.attacks.base import Access, Attack, AttackOutput, TextLevel, Threat
from suite.attacks.text.cooperative import (Driver, Search, clone_attack, remember_replacements,
                                             remember_word_splits)
from suite.attacks.text.offline import import_textattack
from suite.attacks.text.resources import NLTK, Resource, require
from suite.attacks.text.wrapper import make_wrapper
from suite.collector import hold_made_since, long_lived_frozen
from suite.data.base import Example
from suite.models.base import Classifier
from suite.seeding import example_seed

STOPWORDS = NLTK["stopwords"]


class TextAttackRecipe(Attack):
    """Run one TextAttack recipe on a batch of examples.

    TextAttack's objects are built once per attack, around one wrapper; each run points the
    wrapper at the model view it is given (the served model, or an adversary-temperature view of
    it: the attack cannot tell). TextAttack's goal functions query scores only: the access is
    black-box.
    """

    modality: ClassVar[str] = "text"
    access: ClassVar[Access] = "black-box"
    # 2: ``queries`` is TextAttack's own count (what its budget limits); ``forward_rows`` is new.
    # 3: a CPU pass's rows are filled up to a multiple of 8 (``HFTextClassifier.text_rows``): a
    # row that sat past a multiple of 8 in a pass of 9–11 rows rounded differently, so a
    # record's confidence (and, in a tie at that rounding, a search's choice) could differ.
    # 4: on a randomized model's view the goal is reached only where no draw decides for the
    # label (every_draw_goal); other models' searches are unchanged.
    version: ClassVar[int] = 4
    streams: ClassVar[bool] = True
    #: What an edit changes: whole words (``word``) or characters inside words (``character``).
    level: ClassVar[TextLevel] = "word"
    #: What the recipe needs on disk (checked before it is built).
    resources: ClassVar[tuple[Resource, ...]] = (STOPWORDS,)
    query_budget: int | None = Field(None, gt=0)
    model_batch_size: int = Field(32, gt=0)
    # The TextAttack Attack every search clones: built on first use, reused by every batch and model view.
    _built: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def threat(self) -> Threat:
        return Threat(level=self.level)

    def build(self, wrapper: Any) -> Any:
        """Build TextAttack's ``Attack`` object for ``wrapper``."""
        raise NotImplementedError

    def check_resources(self) -> None:
        """Raise a one-line :class:`~suite.errors.ResourceMissingError` if anything is missing."""
        require(self.name, self.resources)

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        return {"query_budget": self.query_budget}

    def _template(self, model: Classifier) -> Any:
        """The recipe's TextAttack ``Attack``, built once (recipes such as PWWS load WordNet when
        built); every search runs a clone of it (:func:`~suite.attacks.text.cooperative.clone_attack`)."""
        if not self._built:
            self.check_resources()
            import_textattack()
            remember_word_splits()
            attack = self.build(make_wrapper(model, self.model_batch_size))
            remember_replacements(attack.transformation)
            self._built["attack"] = attack
        return self._built["attack"]

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        """Attack every example, their searches all running together; outputs in their order."""
        outputs: list[AttackOutput | None] = [None] * len(examples)
        for finished in self.stream(model, examples, seed, window=len(examples)):
            for index, output in finished:
                outputs[index] = output
        return outputs  # type: ignore[return-value]

    def stream(self, model: Classifier, examples: Sequence[Example], seed: int, window: int
               ) -> Iterator[list[tuple[int, AttackOutput]]]:
        """Attack the examples with at most ``window`` searches alive at once, and yield the
        outputs of those that finished after each round of turns, as ``(index in examples,
        output)``. A finished search's place goes to the next example at once
        (:meth:`~suite.attacks.text.cooperative.Driver.stream`), so the passes stay full until the
        last examples, where blocks of ``window`` each ended with a tail of their slowest searches
        alone (on the CPU, with a 2-layer BERT and DeepWordBug on 960 Rotten Tomatoes
        sentences, 885 passes in blocks of 128, 554 streamed 128 at a time). What an example finds does not depend
        on ``window`` or on which searches share its passes (``text_rows``). Each search is built
        when its place opens."""
        template = self._template(model)
        window = max(1, min(window, len(examples)))
        driver = Driver(model, concurrent=window, chunk=self.model_batch_size)
        index = {}

        def searches() -> Iterator[Search]:
            for position, example in enumerate(examples):
                # One seed for Python, NumPy and torch, < 2**32 as TextAttack's own set_seed needs: a
                # search is an Attacker's run on this example alone with random_seed = this seed.
                search = Search(text=example.input, label=example.label,
                                seed=example_seed(seed, self.name, example.id) % 2**32, attack=None, wrapper=None)
                search.wrapper = make_wrapper(model, self.model_batch_size, channel=driver.channel(search))
                search.attack = clone_attack(template, search.wrapper)
                if getattr(model, "draw_winners", None) is not None:  # a randomized model's view
                    goal = search.attack.goal_function
                    goal.__class__ = every_draw_goal(type(goal))
                if self.query_budget is not None:
                    search.attack.goal_function.query_budget = self.query_budget
                index[id(search)] = position
                yield search

        since = 0
        try:
            # The recipe and what earlier searches left (the memo, WordNet's index, records) live
            # on: out of the collector's scans while the searches make their many short-lived
            # objects; frozen again after every ``window`` finished searches.
            with long_lived_frozen(), contextlib.closing(driver.stream(searches())) as rounds:
                for finished in rounds:
                    yield [(index.pop(id(search)), _output(search)) for search in finished]
                    since += len(finished)
                    if since >= window:
                        since = 0
                        # Constraints (shared by the searches) may cache per text: bounded memory.
                        template.clear_cache()
                        hold_made_since()
        finally:
            template.clear_cache()


@functools.lru_cache(maxsize=None)
def every_draw_goal(goal_class: type) -> type:
    """``goal_class`` whose goal is reached where no attack draw of a randomized model decides
    for the label (:meth:`~suite.models.randomized.Randomized.draw_winners`), as an image
    search's is (:func:`~suite.models.base.attack_decide`), rather than where the averaged
    answer first flips, which leaves up to half of the draws right. The search's scores (the
    averaged answer's probabilities) are unchanged; so is the skip check, which reads the goal:
    an example is skipped only where no draw decides for its label. Deviation from TextAttack,
    for randomized models only."""

    class EveryDraw(goal_class):
        def _is_goal_complete(self, model_output: Any, attacked_text: Any) -> bool:
            winners = self.model.model.draw_winners(attacked_text.text)
            return not bool((winners == self.ground_truth_output).any())

    EveryDraw.__name__ = EveryDraw.__qualname__ = f"EveryDraw{goal_class.__name__}"
    return EveryDraw


def words_changed(original: Sequence[str], adversarial: Sequence[str]) -> int:
    """The original words an attack changed. With as many words on both sides, those that
    differ position by position (TextAttack's ``all_words_diff``); otherwise the words outside
    the longest matching runs of the two sequences (``difflib``), so that a word split in two
    (TextBugger's space) or deleted (input reduction, CheckList's contractions) counts once,
    where position by position every word after it counted as changed (0.889 of a 9-word text
    for 2 edited words). A text with every word deleted changed them all (it had counted 0)."""
    if len(original) == len(adversarial):
        return sum(a != b for a, b in zip(original, adversarial))
    matcher = difflib.SequenceMatcher(None, list(original), list(adversarial), autojunk=False)
    return len(original) - sum(block.size for block in matcher.get_matching_blocks())


def _output(search: Search) -> AttackOutput:
    """A finished search's output; the search lets go of its TextAttack objects."""
    adversarial = search.result.perturbed_result.attacked_text
    original = search.result.original_result.attacked_text
    output = AttackOutput(
        adversarial=adversarial.text,
        perturbation=words_changed(original.words, adversarial.words) / max(1, len(original.words)),
        # What TextAttack's query budget counts (its cache's answers too) ...
        queries=search.attack.goal_function.num_queries,
        seconds=search.seconds,
        # ... and the rows this search sent to the model (texts scored, one per gradient).
        forward_rows=search.wrapper.queries,
    )
    search.release()
    return output
