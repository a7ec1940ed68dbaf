"""TextAttack word-level attack recipes, run through TextAttack's own classes.

Every recipe declares the offline resources it needs (:attr:`TextAttackRecipe.resources`); a
missing one fails before the recipe is built, in one line naming the fetch command. Where a
TextAttack recipe cannot run as shipped, our variant has its own name and its docstring lists
each deviation:

- ``textfooler_minilm`` / ``bae_minilm``: the Universal Sentence Encoder needs tensorflow and
  tensorflow_hub (not dependencies of the suite); these use a torch sentence encoder instead.
- ``textbugger_minilm``: the same, and without homoglyph swaps (TextAttack 0.3.11's wheel
  lacks ``shared/intentional_homoglyphs.txt``).

How each recipe runs its searches (cooperating, streamed, each as it would run alone) is the
base class's, :class:`~suite.attacks.text.recipe_base.TextAttackRecipe`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from suite.attacks.base import TextLevel, register_attack
from suite.attacks.text.recipe_base import STOPWORDS, TextAttackRecipe
from suite.attacks.text.resources import NLTK, Resource


SENTENCE_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
POS_TAGGER = (NLTK["averaged_perceptron_tagger_eng"], NLTK["universal_tagset"])
PARAGRAMCF = Resource("embedding", "paragramcf", "counter-fitted word embeddings for synonym swaps")
USE = Resource("package", "tensorflow_hub", "Universal Sentence Encoder (tfhub.dev, needs the network)",
               install="run: pip install tensorflow tensorflow_hub (or use the *_minilm variant)")
MINILM = Resource("hub", SENTENCE_ENCODER, "torch sentence encoder replacing USE")


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
    # 5: ``perturbation`` counts a word split in two or removed once (recipe_base.words_changed).
    version: ClassVar[int] = 5

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
    # 5: ``perturbation`` counts a word split in two or removed once (recipe_base.words_changed).
    version: ClassVar[int] = 5

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
    the number to read, and its ``mean_perturbation`` is over every attacked example (every other
    attack's is over the examples it broke). Needs only the NLTK stopwords.
    """

    # 5: ``perturbation`` counts a word split in two or removed once (recipe_base.words_changed);
    # 6: a text left with no word counts every word removed (it had counted none).
    version: ClassVar[int] = 6
    perturbation_over: ClassVar[str] = "attacked"

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
    # 5: ``perturbation`` counts a word split in two or removed once (recipe_base.words_changed).
    version: ClassVar[int] = 5

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
