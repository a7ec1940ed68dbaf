"""TextAttack word-level attack recipes, run through TextAttack's own classes.

Every recipe declares the offline resources it needs (:attr:`TextAttackRecipe.resources`); a
missing one fails before the recipe is built, in one line naming the fetch command. Where a
TextAttack recipe cannot run as shipped, our variant has its own name and its docstring lists
each deviation:

- ``textfooler_minilm`` / ``bae_minilm``: the Universal Sentence Encoder needs tensorflow and
  tensorflow_hub (not dependencies of the suite); these use a torch sentence encoder instead.
- ``textbugger_minilm``: the same, and without homoglyph swaps (TextAttack 0.3.11's wheel
  lacks ``shared/intentional_homoglyphs.txt``).

Each example is attacked with TextAttack's ``Attack.attack(text, label)``, on a clone of the
recipe's ``Attack`` of its own, and up to the batch size of searches run as cooperating
searches whose candidates share forward passes, each recorded as it ends and replaced by the
next example's (:mod:`suite.attacks.text.cooperative`): each finds what it
would find alone. TextAttack draws from Python's and NumPy's global RNGs and takes no
generator, so each search's global RNG state is seeded from (run seed, attack, example id) and
kept as its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from pydantic import Field, PrivateAttr

from suite.attacks.base import Access, Attack, AttackOutput, TextLevel, Threat, register_attack
from suite.attacks.text.cooperative import (Driver, Search, clone_attack, remember_replacements,
                                             remember_word_splits)
from suite.attacks.text.offline import import_textattack
from suite.attacks.text.resources import NLTK, Resource, require
from suite.attacks.text.wrapper import make_wrapper
from suite.collector import hold_made_since, long_lived_frozen
from suite.data.base import Example
from suite.models.base import Classifier
from suite.seeding import example_seed


SENTENCE_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
STOPWORDS = NLTK["stopwords"]
POS_TAGGER = (NLTK["averaged_perceptron_tagger_eng"], NLTK["universal_tagset"])
PARAGRAMCF = Resource("embedding", "paragramcf", "counter-fitted word embeddings for synonym swaps")
USE = Resource("package", "tensorflow_hub", "Universal Sentence Encoder (tfhub.dev, needs the network)",
               install="run: pip install tensorflow tensorflow_hub (or use the *_minilm variant)")
MINILM = Resource("hub", SENTENCE_ENCODER, "torch sentence encoder replacing USE")


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
    version: ClassVar[int] = 3
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


def _output(search: Search) -> AttackOutput:
    """A finished search's output; the search lets go of its TextAttack objects."""
    adversarial = search.result.perturbed_result.attacked_text
    original = search.result.original_result.attacked_text
    changed = len(original.all_words_diff(adversarial)) if adversarial.words else 0
    output = AttackOutput(
        adversarial=adversarial.text,
        perturbation=changed / max(1, len(original.words)),
        # What TextAttack's query budget counts (its cache's answers too) ...
        queries=search.attack.goal_function.num_queries,
        seconds=search.seconds,
        # ... and the rows this search sent to the model (texts scored, one per gradient).
        forward_rows=search.wrapper.queries,
    )
    search.release()
    return output


@register_attack("deepwordbug")
class DeepWordBug(TextAttackRecipe):
    """DeepWordBug (Gao et al. 2018, https://arxiv.org/abs/1801.04354): character edits.

    TextAttack's ``DeepWordBugGao2018``: word importance by deletion, character swap,
    substitution, deletion and insertion, Levenshtein distance ≤ 30, untargeted. Needs only the
    NLTK stopwords (shipped with the suite).
    """

    level: ClassVar[TextLevel] = "character"

    def build(self, wrapper: Any) -> Any:
        from textattack.attack_recipes import DeepWordBugGao2018

        return DeepWordBugGao2018.build(wrapper)


@register_attack("pwws")
class PWWS(TextAttackRecipe):
    """PWWS (Ren et al. 2019, ACL): WordNet synonym swaps ranked by probability-weighted saliency.

    TextAttack's ``PWWSRen2019``. Needs WordNet (``advsuite prefetch --attacks pwws``, or Debian's
    ``wordnet-base`` offline; see :mod:`suite.attacks.text.resources`).
    """

    resources: ClassVar[tuple[Resource, ...]] = (STOPWORDS, NLTK["wordnet"])

    def build(self, wrapper: Any) -> Any:
        from textattack.attack_recipes import PWWSRen2019

        return PWWSRen2019.build(wrapper)


@register_attack("textfooler")
class TextFooler(TextAttackRecipe):
    """TextFooler (Jin et al. 2020, AAAI), exactly as TextAttack ships it (``TextFoolerJin2019``).

    Needs the counter-fitted embeddings, the NLTK POS tagger, and the Universal Sentence
    Encoder through tensorflow_hub (not a suite dependency); ``textfooler_minilm`` does not.
    """

    resources: ClassVar[tuple[Resource, ...]] = (STOPWORDS, PARAGRAMCF, *POS_TAGGER, USE)

    def build(self, wrapper: Any) -> Any:
        from textattack.attack_recipes import TextFoolerJin2019

        return TextFoolerJin2019.build(wrapper)


@register_attack("textfooler_minilm")
class TextFoolerMiniLM(TextAttackRecipe):
    """TextFooler with a torch sentence encoder in place of the Universal Sentence Encoder.

    Deviation from ``TextFoolerJin2019`` (the only one): the USE constraint (angular similarity
    ≥ 0.8408 over 15-word windows) is computed with ``all-MiniLM-L6-v2`` mean-pooled embeddings
    (:class:`suite.attacks.text.encoders.TorchSentenceEncoder`) at the same threshold and window.
    MiniLM similarities are not calibrated like USE's, so the constraint is only comparable in
    spirit; results are labelled with this name, never as TextFooler's.
    """

    resources: ClassVar[tuple[Resource, ...]] = (STOPWORDS, PARAGRAMCF, *POS_TAGGER, MINILM)

    def build(self, wrapper: Any) -> Any:
        from textattack.attack_recipes import TextFoolerJin2019

        return _replace_use(TextFoolerJin2019.build(wrapper))


@register_attack("bae")
class BAE(TextAttackRecipe):
    """BAE-R (Garg and Ramakrishnan 2020, EMNLP), as TextAttack ships it (``BAEGarg2019``).

    Needs ``bert-base-uncased`` (masked LM), the NLTK POS tagger and the Universal Sentence
    Encoder through tensorflow_hub; ``bae_minilm`` replaces the last.
    """

    resources: ClassVar[tuple[Resource, ...]] = (
        STOPWORDS, Resource("hub", "bert-base-uncased", "masked LM proposing replacements"), *POS_TAGGER, USE,
    )

    def build(self, wrapper: Any) -> Any:
        from textattack.attack_recipes import BAEGarg2019

        return BAEGarg2019.build(wrapper)


@register_attack("bae_minilm")
class BAEMiniLM(BAE):
    """BAE-R with the USE constraint computed by a torch sentence encoder (see ``textfooler_minilm``)."""

    resources: ClassVar[tuple[Resource, ...]] = (
        STOPWORDS, Resource("hub", "bert-base-uncased", "masked LM proposing replacements"), *POS_TAGGER, MINILM,
    )

    def build(self, wrapper: Any) -> Any:
        return _replace_use(super().build(wrapper))


@register_attack("textbugger")
class TextBugger(TextAttackRecipe):
    """TextBugger (Li et al. 2019, NDSS), as TextAttack ships it (``TextBuggerLi2018``).

    TextAttack 0.3.11's wheel lacks the homoglyph table this recipe reads; ``textbugger_minilm``
    runs without it.
    """

    level: ClassVar[TextLevel] = "mixed"  # character bugs and word swaps

    resources: ClassVar[tuple[Resource, ...]] = (
        STOPWORDS, PARAGRAMCF, USE,
        Resource("file", "shared/intentional_homoglyphs.txt", "homoglyph swaps",
                 install="TextAttack 0.3.11's wheel omits it; install TextAttack from source or use textbugger_minilm"),
    )

    def build(self, wrapper: Any) -> Any:
        from textattack.attack_recipes import TextBuggerLi2018

        return TextBuggerLi2018.build(wrapper)


@register_attack("textbugger_minilm")
class TextBuggerMiniLM(TextAttackRecipe):
    """TextBugger without homoglyph swaps, with a torch sentence encoder in place of USE.

    Deviations from ``TextBuggerLi2018``: (1) no ``WordSwapHomoglyphSwap`` (its data file is
    missing from TextAttack 0.3.11's wheel), so the bugs are space insertion, character deletion,
    neighbour swap and embedding swaps; (2) the USE constraint (cosine ≥ 0.8) uses
    ``all-MiniLM-L6-v2`` (see ``textfooler_minilm``).
    """

    level: ClassVar[TextLevel] = "mixed"  # character bugs and word swaps

    resources: ClassVar[tuple[Resource, ...]] = (STOPWORDS, PARAGRAMCF, MINILM)

    def build(self, wrapper: Any) -> Any:
        from textattack import Attack as TextAttackAttack
        from textattack.constraints.pre_transformation import RepeatModification, StopwordModification
        from textattack.goal_functions import UntargetedClassification
        from textattack.search_methods import GreedyWordSwapWIR
        from textattack.transformations import (
            CompositeTransformation,
            WordSwapEmbedding,
            WordSwapNeighboringCharacterSwap,
            WordSwapRandomCharacterDeletion,
            WordSwapRandomCharacterInsertion,
        )

        from suite.attacks.text.encoders import TorchSentenceEncoder

        edges = {"random_one": True, "skip_first_char": True, "skip_last_char": True}
        transformation = CompositeTransformation([
            WordSwapRandomCharacterInsertion(letters_to_insert=" ", **edges),
            WordSwapRandomCharacterDeletion(**edges),
            WordSwapNeighboringCharacterSwap(**edges),
            WordSwapEmbedding(max_candidates=5),
        ])
        constraints = [RepeatModification(), StopwordModification(), TorchSentenceEncoder(SENTENCE_ENCODER, threshold=0.8)]
        return TextAttackAttack(UntargetedClassification(wrapper), constraints, transformation,
                                GreedyWordSwapWIR(wir_method="delete"))


@register_attack("pruthi")
class Pruthi(TextAttackRecipe):
    """Pruthi et al. 2019 (ACL): one typo (swap, deletion, insertion, QWERTY) in a word of ≥ 4 letters.

    TextAttack's ``Pruthi2019``; needs only the NLTK stopwords.
    """

    level: ClassVar[TextLevel] = "character"

    def build(self, wrapper: Any) -> Any:
        from textattack.attack_recipes import Pruthi2019

        return Pruthi2019.build(wrapper)


@register_attack("input_reduction")
class InputReduction(TextAttackRecipe):
    """Input reduction (Feng et al. 2018, EMNLP): delete words while the prediction stays the same.

    TextAttack's ``InputReductionFeng2018``. It never changes the prediction by design, so its
    robust accuracy is the clean accuracy; ``perturbation`` (the fraction of words removed) is
    the number to read. Needs only the NLTK stopwords.
    """

    def build(self, wrapper: Any) -> Any:
        from textattack.attack_recipes import InputReductionFeng2018

        return InputReductionFeng2018.build(wrapper)


@register_attack("checklist")
class CheckList(TextAttackRecipe):
    """CheckList invariance tests (Ribeiro et al. 2020, ACL): contractions, names, numbers, places.

    TextAttack's ``CheckList2020``; names and locations are found by flair's English NER model
    (``flair/ner-english`` from the Hub).
    """

    resources: ClassVar[tuple[Resource, ...]] = (
        Resource("flair", "flair/ner-english", "named-entity tagger for name and location swaps"),
    )

    def build(self, wrapper: Any) -> Any:
        from textattack.attack_recipes import CheckList2020

        return CheckList2020.build(wrapper)


def _replace_use(attack: Any) -> Any:
    """The same TextAttack ``Attack`` with each USE constraint computed by a torch encoder.

    Threshold, metric, window and comparison mode are kept; only the encoder changes.
    """
    from textattack.constraints.semantics.sentence_encoders import UniversalSentenceEncoder

    from suite.attacks.text.encoders import TorchSentenceEncoder

    constraints = []
    for constraint in attack.pre_transformation_constraints + attack.constraints:
        if isinstance(constraint, UniversalSentenceEncoder):
            constraint = TorchSentenceEncoder(
                SENTENCE_ENCODER, threshold=constraint.threshold, metric=constraint.metric,
                compare_against_original=constraint.compare_against_original,
                window_size=constraint.window_size if constraint.window_size != float("inf") else None,
                skip_text_shorter_than_window=constraint.skip_text_shorter_than_window,
            )
        constraints.append(constraint)
    return type(attack)(attack.goal_function, constraints, attack.transformation, attack.search_method)
