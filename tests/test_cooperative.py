"""Cooperative text searches find, example by example, what TextAttack finds one at a time.

The reference is a plain TextAttack ``Attacker`` run on each example alone, with
``random_seed`` set to the seed the suite gives that example, around a plain ``ModelWrapper``
(the model's own forward, padded per query, divided by the served temperature). The suite runs
the same recipe's searches of a whole batch together (:mod:`suite.attacks.text.cooperative`).

TextFooler and TextBugger need resources that cannot be had offline (counter-fitted
embeddings, the POS tagger, the Universal Sentence Encoder): their searches are run here with
the same transformation, search method and remaining constraints, and word embeddings taken
from the model itself (an offline stand-in for ``paragramcf``).
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from suite.attacks import build_attack
from suite.attacks.text.recipes import TextAttackRecipe
from suite.data.base import Example
from suite.models import hf_text
from suite.models.base import Classifier
from suite.models.temperature import Memoised, TemperatureScaled
from suite.seeding import example_seed

N = 24
EXTREME = 0.005  # the ↑conf design temperature: float32 softmax saturates


@pytest.fixture(scope="module")
def examples(sentiment_model):
    from suite.data.builtin import sentiment

    split = sentiment("test")
    predictions = sentiment_model.predict(split.inputs[: 4 * N]).tolist()
    chosen = [i for i, p in enumerate(predictions) if p == split.labels[i]][:N]
    return [Example(split.ids[i], split.inputs[i], split.labels[i]) for i in chosen]


def _model_embedding(model: Classifier):
    """TextAttack ``WordEmbedding`` from the model's input embeddings (whole words only)."""
    from textattack.shared import WordEmbedding

    vocab = model.tokenizer.get_vocab()
    words = sorted((word for word in vocab if word.isalpha()), key=vocab.get)
    matrix = model.module.get_input_embeddings().weight.detach()[[vocab[w] for w in words]]
    # Nearest neighbours precomputed, as paragramcf ships them (TextAttack 0.3.11 cannot compute them itself).
    neighbours = torch.cdist(matrix, matrix).argsort(dim=1)[:, :51].numpy()
    return WordEmbedding(matrix.numpy(), {w: i for i, w in enumerate(words)}, dict(enumerate(words)), neighbours)


class _TextFoolerOffline(TextAttackRecipe):
    """TextFoolerJin2019's search (embedding swaps, WIR by deletion, embedding distance ≥ 0.5)
    without the POS tagger and USE, on the model's own embeddings."""

    name: ClassVar[str] = "textfooler_offline"
    embedding: ClassVar[Any] = None

    def build(self, wrapper):
        from textattack import Attack
        from textattack.constraints.pre_transformation import RepeatModification, StopwordModification
        from textattack.constraints.semantics import WordEmbeddingDistance
        from textattack.goal_functions import UntargetedClassification
        from textattack.search_methods import GreedyWordSwapWIR
        from textattack.transformations import WordSwapEmbedding

        transformation = WordSwapEmbedding(max_candidates=50, embedding=self.embedding)
        constraints = [RepeatModification(), StopwordModification(),
                       WordEmbeddingDistance(embedding=self.embedding, min_cos_sim=0.5)]
        return Attack(UntargetedClassification(wrapper), constraints, transformation, GreedyWordSwapWIR("delete"))


class _TextBuggerOffline(TextAttackRecipe):
    """TextBuggerLi2018's search (character bugs at random positions and embedding swaps, WIR
    by deletion) without homoglyphs and USE, on the model's own embeddings."""

    name: ClassVar[str] = "textbugger_offline"
    embedding: ClassVar[Any] = None

    def build(self, wrapper):
        from textattack import Attack
        from textattack.constraints.pre_transformation import RepeatModification, StopwordModification
        from textattack.goal_functions import UntargetedClassification
        from textattack.search_methods import GreedyWordSwapWIR
        from textattack.transformations import (CompositeTransformation, WordSwapEmbedding,
                                                WordSwapNeighboringCharacterSwap, WordSwapRandomCharacterDeletion,
                                                WordSwapRandomCharacterInsertion)

        edges = {"random_one": True, "skip_first_char": True, "skip_last_char": True}
        transformation = CompositeTransformation([
            WordSwapRandomCharacterInsertion(letters_to_insert=" ", **edges),
            WordSwapRandomCharacterDeletion(**edges),
            WordSwapNeighboringCharacterSwap(**edges),
            WordSwapEmbedding(max_candidates=5, embedding=self.embedding),
        ])
        return Attack(UntargetedClassification(wrapper), [RepeatModification(), StopwordModification()],
                      transformation, GreedyWordSwapWIR("delete"))


def _recipe(name: str, model: Classifier) -> TextAttackRecipe:
    if name == "pwws":
        from suite.attacks.text.resources import NLTK

        if not NLTK["wordnet"].available():
            pytest.skip("WordNet is not installed (apt-get install wordnet-base, or advsuite prefetch --attacks pwws)")
    if name in ("deepwordbug", "pwws"):
        return build_attack(name)
    cls = {"textfooler": _TextFoolerOffline, "textbugger": _TextBuggerOffline}[name]
    from suite.attacks.text.offline import import_textattack

    import_textattack()
    cls.embedding = _model_embedding(model)
    return cls()


def _plain_results(recipe: TextAttackRecipe, model: Classifier, temperature: float, examples, seed: int):
    """A plain ``Attacker`` per example, seeded as the suite seeds that example."""
    import textattack
    from textattack.models.wrappers import ModelWrapper

    class Plain(ModelWrapper):
        def __init__(self):
            self.model = model.module

        def __call__(self, texts):
            encoded = model.tokenizer(list(texts), padding=True, truncation=True, return_tensors="pt")
            with torch.no_grad():
                return self.model(**encoded).logits / temperature

    attack = recipe.build(Plain())
    results = []
    for example in examples:
        args = textattack.AttackArgs(num_examples=1, random_seed=example_seed(seed, recipe.name, example.id) % 2**32,
                                     disable_stdout=True, silent=True)
        dataset = textattack.datasets.Dataset([(example.input, example.label)])
        result = textattack.Attacker(attack, dataset, args).attack_dataset()[0]
        results.append((result, attack.goal_function.num_queries))
        attack.clear_cache()
    return results


@pytest.mark.parametrize("temperature", [1.0, EXTREME], ids=["T=1", "T=0.005"])
@pytest.mark.parametrize("name", ["deepwordbug", "pwws", "textfooler", "textbugger"])
def test_cooperative_searches_find_what_a_plain_attacker_finds(sentiment_model, examples, name, temperature):
    recipe = _recipe(name, sentiment_model)
    from suite.attacks.text.offline import import_textattack

    import_textattack()
    from textattack.attack_results import SuccessfulAttackResult

    served = sentiment_model if temperature == 1.0 else TemperatureScaled(sentiment_model, temperature)
    ours = recipe.run(served, examples, 0)  # one block: every search of the batch together
    theirs = _plain_results(recipe, sentiment_model, temperature, examples, 0)
    assert [o.adversarial for o in ours] == [r.perturbed_result.attacked_text.text for r, _ in theirs]
    assert [o.queries for o in ours] == [queries for _, queries in theirs]
    broken = (sentiment_model.predict([o.adversarial for o in ours]) != torch.tensor([e.label for e in examples]))
    assert broken.tolist() == [isinstance(r, SuccessfulAttackResult) for r, _ in theirs]
    assert all(o.forward_rows <= o.queries for o in ours)  # TextAttack's cache answers the rest
    if temperature == 1.0:
        assert broken.any(), "the tiny model is vulnerable: some search must succeed"


def _fields(outputs):
    return [(o.adversarial, o.perturbation, o.queries, o.forward_rows) for o in outputs]


@pytest.mark.parametrize("name", ["deepwordbug", "textbugger"])
def test_records_do_not_depend_on_the_block(sentiment_model, examples, name):
    """Blocks of 1, 5 and 24 searches, on the served model and on an adversary's memoised view:
    the same outputs (the rows a search gets do not depend on what shares their pass)."""
    recipe = _recipe(name, sentiment_model)
    alone = [out for ex in examples for out in recipe.run(sentiment_model, [ex], 3)]
    fives = [out for i in range(0, N, 5) for out in recipe.run(sentiment_model, examples[i: i + 5], 3)]
    together = recipe.run(sentiment_model, examples, 3)
    assert _fields(alone) == _fields(fives) == _fields(together)
    for window in (1, 5):  # streamed: the next example's search starts as soon as one finishes
        streamed = dict(pair for pairs in recipe.stream(sentiment_model, examples, 3, window) for pair in pairs)
        assert _fields([streamed[i] for i in range(N)]) == _fields(together)
    view = TemperatureScaled(Memoised(sentiment_model), 2.0, adversary=True)
    reversed_block = recipe.run(view, examples[::-1], 3)[::-1]
    fresh_alone = [out for ex in examples for out in recipe.run(
        TemperatureScaled(Memoised(sentiment_model), 2.0, adversary=True), [ex], 3)]
    assert _fields(reversed_block) == _fields(fresh_alone)


def test_a_stream_starts_the_next_search_as_soon_as_one_finishes(sentiment_model, examples):
    """Streamed in a window of 5, a finished search's place goes to the next example at once and
    its output is handed out then: the block's slow searches never run alone, so the searches
    make fewer pooled queries than in blocks of 5, for the same outputs."""
    recipe = build_attack("deepwordbug")
    queries = []

    class Counting(TemperatureScaled):
        def text_rows(self, texts):
            queries.append(len(texts))
            return super().text_rows(texts)

    model = Counting(sentiment_model, 1.0)
    blocks = [out for i in range(0, N, 5) for out in recipe.run(model, examples[i: i + 5], 3)]
    in_blocks, queries[:] = len(queries), []
    streamed = [pair for pairs in recipe.stream(model, examples, 3, window=5) for pair in pairs]
    order = [index for index, _ in streamed]
    assert sorted(order) == list(range(N)) and order != list(range(N))  # handed out as they finish
    assert len(queries) < in_blocks
    outputs = dict(streamed)
    assert _fields([outputs[i] for i in range(N)]) == _fields(blocks)


@pytest.mark.parametrize("name", ["deepwordbug", "pwws"])
def test_two_lanes_overlap_passes_with_turns_and_find_the_same(sentiment_model, examples, monkeypatch, name):
    """In two lanes, one half's pass runs in a thread of its own while the other half takes its
    turns (as on a GPU): the same outputs as one lane, handed out as they finish; passes are
    made in that thread only, and some turns run while a pass is under way."""
    from suite.attacks.text import cooperative

    recipe = _recipe(name, sentiment_model)
    one = dict(pair for pairs in recipe.stream(sentiment_model, examples, 3, window=8) for pair in pairs)
    passes, turns = [], []

    class Slow(TemperatureScaled):
        def text_rows(self, texts):
            start = time.perf_counter()
            time.sleep(0.02)  # long enough for the other lane's turns to run meanwhile
            rows = super().text_rows(texts)
            passes.append((start, time.perf_counter(), threading.current_thread().name))
            return rows

    give_turn = cooperative.Driver._give_turn

    def timed(self, search):
        turns.append(time.perf_counter())
        give_turn(self, search)

    monkeypatch.setattr(cooperative.Driver, "_give_turn", timed)
    monkeypatch.setattr(cooperative.Driver, "lane_count", lambda self: 2)
    two = dict(pair for pairs in recipe.stream(Slow(sentiment_model, 1.0), examples, 3, window=8) for pair in pairs)
    assert _fields([two[i] for i in range(N)]) == _fields([one[i] for i in range(N)])
    assert {thread for _, _, thread in passes} == {"advsuite-text-pass_0"}
    assert any(start < turn < end for start, end, _ in passes for turn in turns)


class _Device(Classifier):
    """A stand-in with a device, pooled rows or not, and thread safety or not (never called)."""

    modality = "text"
    labels = ["neg", "pos"]
    info = None

    def __init__(self, device, pools, safe):
        self._device, self.pools, self.safe = torch.device(device), pools, safe

    @property
    def device(self):
        return self._device

    @property
    def thread_safe(self):
        return self.safe

    def text_rows(self, texts):
        return torch.empty(0, 2) if self.pools else None

    def _forward(self, batch):
        raise AssertionError("not called")


@pytest.mark.parametrize(("device", "pools", "safe", "concurrent", "lanes"), [
    ("cuda", True, True, 256, 2),
    ("cuda", True, True, 1, 1),   # one search: nothing to overlap with
    ("cuda", False, True, 256, 1),  # each search's texts on their own
    ("cuda", True, False, 256, 1),  # a model in memory may keep state between calls
    ("cpu", True, True, 256, 1),  # a pass and the other lane's turns would share the cores
    ("meta", True, True, 256, 2),
])
def test_two_lanes_where_the_passes_run_beside_the_host(device, pools, safe, concurrent, lanes):
    from suite.attacks.text.cooperative import Driver

    model = _Device(device, pools, safe)
    assert Driver(model, concurrent, 8).lane_count() == lanes
    assert Driver(model, concurrent, 8, lanes=2).lane_count() == min(2, concurrent)
    assert Driver(Memoised(model) if safe else model, concurrent, 8).lane_count() == (
        2 if (device != "cpu" and safe and concurrent > 1) else 1)


def test_the_memo_serves_two_threads_at_once(sentiment_model, examples):
    """Two threads reading a small memo at once (it evicts all the while) get the model's own
    rows, and the memo stays consistent."""
    texts = [ex.input for ex in examples]
    expected = dict(zip(texts, sentiment_model.text_rows(texts)))
    memo = Memoised(sentiment_model, capacity=5)
    errors = []

    def read(seed):
        generator = random.Random(seed)
        try:
            for _ in range(40):
                batch = generator.sample(texts, 4)
                rows = memo.text_rows(batch)
                assert all(torch.equal(row, expected[text]) for text, row in zip(batch, rows))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=read, args=(seed,)) for seed in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(memo._memo) == 5 and all(torch.equal(row, expected[text]) for text, row in memo._memo.items())


class _Unpooled(Classifier):
    """A text model that cannot pool unrelated texts (no ``text_rows``)."""

    modality = "text"

    def __init__(self, base):
        self.base, self.labels, self.info, self.tokenizer = base, base.labels, base.info, base.tokenizer
        self.calls = []

    @property
    def device(self):
        return self.base.device

    def _forward(self, batch):
        self.calls.append(len(batch))
        return self.base._forward(batch)


def test_a_model_without_pooled_rows_gets_each_search_alone(sentiment_model, examples):
    recipe = build_attack("deepwordbug", {"model_batch_size": 7})
    unpooled = _Unpooled(sentiment_model)
    together = recipe.run(unpooled, examples[:8], 0)
    alone = [out for ex in examples[:8] for out in recipe.run(_Unpooled(sentiment_model), [ex], 0)]
    assert _fields(together) == _fields(alone)
    assert max(unpooled.calls) <= 7  # the recipe's model_batch_size still sizes its passes


def test_an_error_or_interrupt_in_the_driver_leaves_no_search_running(sentiment_model, examples):
    class Failing(TemperatureScaled):
        def __init__(self, base, error):
            super().__init__(base, 1.0)
            self.error, self.calls = error, 0

        def text_rows(self, texts):
            self.calls += 1
            if self.calls == 3:
                raise self.error
            return super().text_rows(texts)

    recipe = build_attack("deepwordbug")
    recipe.run(sentiment_model, examples[:1], 0)  # built
    threads = threading.active_count()
    states = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state().clone())
    for error in (RuntimeError("out of memory"), KeyboardInterrupt()):
        with pytest.raises(type(error)):
            recipe.run(Failing(sentiment_model, error), examples, 0)
        assert threading.active_count() == threads
        assert random.getstate() == states[0]
        assert (np.random.get_state()[1] == states[1]).all() and torch.equal(torch.get_rng_state(), states[2])
    # and the recipe still runs, finding what it found before
    assert _fields(recipe.run(sentiment_model, examples[:4], 0)) == _fields(
        [out for ex in examples[:4] for out in recipe.run(sentiment_model, [ex], 0)])


def test_a_search_seeds_torch_as_manual_seed_does():
    """Each search starts from ``torch.manual_seed(its seed)``'s CPU state (as an ``Attacker``
    with that seed does), without queueing seeds for devices that are not up."""
    from suite.attacks.text.cooperative import seed_torch

    before = torch.get_rng_state()
    try:
        torch.manual_seed(1234)
        expected = torch.get_rng_state()
        torch.rand(3)
        seed_torch(1234)
        assert torch.equal(torch.get_rng_state(), expected)
        assert not torch.equal(expected, before)
    finally:
        torch.set_rng_state(before)


def test_remembered_word_splits_are_textattacks_own(sentiment_model, examples):
    from suite.attacks.text.cooperative import remember_word_splits
    from suite.attacks.text.offline import import_textattack

    import_textattack()
    import textattack.shared.attacked_text as attacked_text
    import textattack.shared.utils.strings as strings

    remember_word_splits()
    remember_word_splits()  # once only
    remembered = strings.words_from_text
    assert remembered.remembered and attacked_text.words_from_text is remembered
    assert not getattr(remembered.original, "remembered", False)
    texts = [e.input for e in examples] + ["'quoted' well-known e-mail a@b.c", "  spaced\tout  ", "", "中文 句子",
                                            "mixed 中文 and 'words' -- here", "no\u00a0break\u3000ideographic\nline",
                                            "'' -- ** @@ _ ' - x'y-z", "homoglyph ѕрам ɑЬϲ 𝚏ɡ"]
    # Tokens of every kind the split treats specially, joined by every kind of whitespace: a
    # text's words are its tokens' words only where TextAttack splits it token by token.
    rng = random.Random(0)
    pieces = ["a", "Word", "'", "-", "_", "*", "@", ".", ",", "!", "ѕ", "ɑ", "中", "文", "9", "é", "\u200b"]
    spaces = [" ", "  ", "\t", "\n", "\u00a0", "\u3000"]
    texts += ["".join(rng.choice(pieces + spaces) for _ in range(rng.randint(0, 24))) for _ in range(400)]
    for text in texts * 2:  # the second time from the memo
        first = remembered(text)
        assert first == remembered.original(text), text
        first.append("changed")  # a caller's change reaches no later call
    assert remembered("a b c", ["b"]) == ["a", "c"]


@pytest.mark.parametrize("side", ["right", "left"])
def test_pooled_rows_pad_as_the_tokenizer_pads(sentiment_model, examples, side, monkeypatch):
    """text_rows tokenises each text once and pads the pass itself: the tensors are exactly the
    tokenizer's own ``padding="max_length"`` output on the right, whichever side the tokenizer
    pads (on the left a text's tokens leave the positions it has alone), and the logits those of
    the model on them."""
    tokenizer = sentiment_model.tokenizer
    monkeypatch.setattr(tokenizer, "padding_side", side)
    texts = [ex.input for ex in examples[:6]] + ["ok", "a b c d e f g h i j k l m n o p q r s t u v w x y z"]
    encoded = tokenizer(texts, truncation=True, max_length=sentiment_model.max_length)
    members = [7, 0, 3, 3, 6]
    length = max(len(encoded["input_ids"][i]) for i in members) + 5
    ours = sentiment_model._padded(encoded, members, length)
    theirs = tokenizer([texts[i] for i in members], padding="max_length", truncation=True, max_length=length,
                       padding_side="right", return_tensors="pt")
    assert set(ours) == set(theirs) and all(torch.equal(ours[key], theirs[key]) for key in theirs)
    assert (ours["attention_mask"] == 0).any()
    rows = sentiment_model.text_rows(texts)
    with torch.no_grad():
        for i, text in enumerate(texts):
            step = hf_text.CPU_LENGTH_STEP
            padded = -(-len(encoded["input_ids"][i]) // step) * step
            alone = tokenizer([text] * hf_text.CPU_ROW_STEP, padding="max_length", max_length=padded,
                              padding_side="right", return_tensors="pt")
            assert torch.equal(rows[i], sentiment_model.module(**alone).logits[0].float())


@pytest.mark.parametrize("threads", [2, 16])
def test_a_pooled_row_is_its_text_alone_at_every_pass_size(sentiment_model, examples, threads):
    """On the CPU a text's row is the same bit for bit whichever texts share its pass, at every
    pass size from 1 to 40 texts: a pass's row count is filled up to a multiple of 8. With 1–3
    rows past a multiple of 8 the kernels rounded those rows differently (9–11 texts with 2
    threads; 17–19 and 25–27 too with 16)."""
    words = [word for ex in examples for word in ex.input.split()]
    candidates = [" ".join(words[i: i + 4 + i % 5]) for i in range(400)]
    step = hf_text.CPU_LENGTH_STEP
    padded = [-(-len(ids) // step) for ids in sentiment_model.tokenizer(candidates)["input_ids"]]
    common = max(set(padded), key=padded.count)
    texts = [text for text, length in zip(candidates, padded) if length == common][:40]  # one padded length
    assert len(texts) == 40
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        alone = torch.cat([sentiment_model.text_rows([text]) for text in texts])
        for n in range(2, len(texts) + 1):
            assert torch.equal(sentiment_model.text_rows(texts[:n]), alone[:n]), n
    finally:
        torch.set_num_threads(before)


def test_a_task_runs_each_text_through_the_model_once(sentiment_model, examples, tmp_path, monkeypatch):
    """The clean pass, every adversary's searches and the scoring of their records share the
    task's memo of the served model's rows: no text reaches the model twice, and the records
    are those of a run without the memo (tests/test_illusion.py)."""
    import json

    import suite

    seen: list[str] = []
    original = hf_text.HFTextClassifier.text_rows

    def counting(self, texts):
        seen.extend(texts)
        return original(self, texts)

    monkeypatch.setattr(hf_text.HFTextClassifier, "text_rows", counting)
    data = ([ex.input for ex in examples], [ex.label for ex in examples])
    suite.evaluate(sentiment_model, data, attacks=["deepwordbug"], adversary=["none", "cal"], output=tmp_path / "run")
    assert len(seen) == len(set(seen))
    records = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
    adversarial = {r["adversarial"] for r in records if r["kind"] == "attack"}
    assert {ex.input for ex in examples} <= set(seen) and adversarial <= set(seen)
    assert {r["attack"] for r in records if r["kind"] == "attack"} == {"deepwordbug", "deepwordbug@cal"}


def test_a_batch_of_searches_leaves_no_reference_cycles(sentiment_model, examples):
    """Each search's TextAttack objects are freed by reference counting when its output is read
    (Search.release): inside a run, what earlier batches left is frozen, so cycles among them
    would stay until the run's end."""
    import gc

    recipe = build_attack("pwws")
    recipe.run(sentiment_model, examples[:2], 0)  # built (WordNet's index loaded)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        outputs = recipe.run(sentiment_model, examples[:4], 0)
        gc.collect()
        left = [type(o).__module__ + "." + type(o).__qualname__ for o in gc.garbage
                if type(o).__module__.split(".")[0] in ("suite", "textattack")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert len(outputs) == 4 and not left, sorted(set(left))


def test_words_changed_counts_a_split_or_deleted_word_once():
    from suite.attacks.text.recipe_base import words_changed

    words = "the band sounded tired and the songs did not last".split()
    swapped = list(words)
    swapped[1], swapped[4] = "bnad", "or"
    assert words_changed(words, swapped) == 2  # the same count: position by position (TextAttack's)
    split = words[:1] + ["ba", "nd"] + words[2:]  # TextBugger's space: every later word shifted
    assert words_changed(words, split) == 1
    assert words_changed(words, words[:3] + words[5:]) == 2  # two words deleted (input reduction)
    assert words_changed(words, []) == len(words) and words_changed([], []) == 0


def test_textbugger_and_input_reduction_perturbations_count_words_changed(sentiment_model, examples):
    """TextBugger's space insertion and input reduction's deletions change the word count: each
    record's perturbation is the share of original words outside the longest matching runs (it
    was position by position, 0.889 for 2 edited words of 9), and input reduction's mean
    perturbation is over every example it reduced (it breaks none, so the mean over broken ones
    was always 0)."""
    import difflib

    from suite.attacks.text.offline import import_textattack
    from suite.evaluation.metrics import attack_metrics

    import_textattack()
    from textattack.shared import AttackedText

    def expected(original: str, adversarial: str) -> float:
        a, b = AttackedText(original).words, AttackedText(adversarial).words
        if len(a) == len(b):
            return sum(x != y for x, y in zip(a, b)) / len(a)
        kept = sum(block.size for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks())
        return (len(a) - kept) / len(a)

    bugged = _recipe("textbugger", sentiment_model).run(sentiment_model, examples, 0)
    resized = [(e, o) for e, o in zip(examples, bugged)
               if len(AttackedText(e.input).words) != len(AttackedText(o.adversarial).words)]
    assert resized, "some TextBugger text must split a word"
    for example, output in resized:
        assert output.perturbation == pytest.approx(expected(example.input, output.adversarial))
    reduced = build_attack("input_reduction", {}).run(sentiment_model, examples[:6], 0)
    assert all(0 < o.perturbation < 1 for o in reduced)
    for example, output in zip(examples, reduced):
        assert output.perturbation == pytest.approx(expected(example.input, output.adversarial))
    clean = [{"id": e.id, "correct": 1.0} for e in examples[:6]]
    attacked = {e.id: {"robust": 1.0, "queries": o.queries, "perturbation": o.perturbation, "seconds": 0.0}
                for e, o in zip(examples, reduced)}
    assert attack_metrics(clean, attacked)["mean_perturbation"] == 0.0  # nothing broken
    assert attack_metrics(clean, attacked, "attacked")["mean_perturbation"] == pytest.approx(
        sum(o.perturbation for o in reduced) / 6)
    assert build_attack("input_reduction", {}).perturbation_over == "attacked"
