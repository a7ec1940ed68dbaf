"""Randomized models that are not ensembles (suite/models/randomized.py): scored by their
expected accuracy over fresh draws, attacked through the average of many draws (EOT), and as
reproducible as a deterministic model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

import suite
from suite.attacks import build_attack
from suite.evaluation.scoring import score_outputs
from suite.models.randomized import EOT_DRAWS, SCORE_DRAWS, Randomized
from suite.models.temperature import LogitView
from suite.models.wrap import from_module


class GumbelMax(nn.Module):
    """A linear model that answers with its logits plus Gumbel noise on every query: by the
    Gumbel-max trick, a draw decides for class k with probability softmax(W x)_k exactly, so
    each example's expected accuracy is known in closed form."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.linear = nn.Linear(16, 3)

    def forward(self, x):
        logits = 3 * self.linear(x.flatten(1))
        return logits - torch.log(-torch.log(torch.rand_like(logits).clamp(1e-12, 1 - 1e-7)))


class InputNoise(LogitView):
    """A noise-injection defence: Gaussian noise (σ = 0.05) added to the pixels on every query."""

    def _forward(self, batch):
        return self.base._forward(batch + 0.05 * torch.randn_like(batch))


def _records(directory) -> dict:
    lines = (directory / "records.jsonl").read_text().splitlines()
    return {(r["kind"], r.get("attack"), r["id"]): {k: v for k, v in r.items() if k != "seconds"}
            for r in map(json.loads, lines)}


def test_a_randomized_model_is_scored_by_its_expected_accuracy(tmp_path):
    """Scored on one draw, an example of this model counts as right or wrong by luck; the suite
    gives each its share of 100 fresh draws, and the mean is the model's expected accuracy."""
    module = GumbelMax()
    images = torch.rand(64, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, 3, (64,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        exact = torch.softmax(3 * module.linear(images.flatten(1)), dim=1)[torch.arange(64), labels]
    model = from_module(module, input_size=(1, 4, 4))
    results = suite.evaluate(model, (images, labels), attacks=["fgm_linf"], eps=0.01, output=tmp_path)
    assert any("randomized" in note and "EOT" in note for note in results.warnings)
    # Within four standard errors of the exact expected accuracy (a mean of 64 estimates of 100 draws).
    assert results.clean_accuracy == pytest.approx(float(exact.mean()), abs=4 * 0.5 / (64 * SCORE_DRAWS) ** 0.5)
    clean = [r["correct"] for (kind, _, _), r in _records(tmp_path).items() if kind == "clean"]
    assert all(abs(value * SCORE_DRAWS - round(value * SCORE_DRAWS)) < 1e-4 for value in clean)
    assert sum(0 < value < 1 for value in clean) > 32  # fractional, where one draw gives 0 or 1
    assert json.loads((tmp_path / "results.json").read_text())["model"]["randomized"] == {
        "eot_draws": EOT_DRAWS, "score_draws": SCORE_DRAWS}


def test_eot_breaks_what_attacks_through_single_draws_leave(digits_model, digits_examples, tmp_path):
    """The illusion: PGD that follows one draw's gradient a step, and stops at the first draw
    that misclassifies, leaves 45 % of the noisy model's expected accuracy on these 40 digits
    (L∞ 0.03); through the average of 20 draws, run to its last step, it leaves none. Both are
    scored the same way (expected accuracy over 100 fresh draws)."""
    noisy = InputNoise(digits_model)
    examples = digits_examples[:40]
    images = torch.stack([example.input for example in examples])
    labels = torch.tensor([example.label for example in examples])
    pgd = {"name": "pgd_linf", "steps": 10}
    results = suite.evaluate(noisy, (images, labels), attacks=[pgd], eps=0.03, output=tmp_path)
    eot = results.attacks["pgd_linf"].robust_accuracy

    view = Randomized(noisy, seed=0)
    attack = build_attack("pgd_linf", {"eps": 0.03, "steps": 10})
    clean = view.correctness(images, labels)
    attacked = [example for example, value in zip(examples, clean) if value > 0]
    single = score_outputs(view, attacked, attack.run(noisy, attacked, seed=0))  # one draw per step
    single_draw = sum(min(s["robust"], float(c)) for s, c in zip(single, clean[clean > 0])) / len(examples)
    assert results.clean_accuracy > 0.85
    assert eot < 0.6 * single_draw, (eot, single_draw)
    # No example stopped at the first iterate that fooled its 20 draws: the search ran on.
    queries = {r["queries"] for (kind, _, _), r in _records(tmp_path).items() if kind == "attack"}
    assert queries == {pgd["steps"] + 1}


def test_randomized_records_do_not_depend_on_the_batch_size(digits_model, digits_examples, tmp_path):
    """Each row's draws are seeded from its own bytes and run on their own: batch size 1 and 7,
    and a second run, write the same records."""
    noisy = InputNoise(digits_model)
    examples = digits_examples[:9]
    data = (torch.stack([ex.input for ex in examples]), torch.tensor([ex.label for ex in examples]))
    runs = []
    for name, batch_size in (("one", 1), ("four", 4), ("again", 4)):
        suite.evaluate(noisy, data, attacks=[{"name": "pgd_linf", "steps": 5}, "fgm_linf"], eps=0.03,
                       output=tmp_path / name,
                       options=suite.RunOptions(batch_size=batch_size))
        runs.append(_records(tmp_path / name))
    assert runs[0] == runs[1] == runs[2]
    assert any(0 < r["robust"] < 1 for (kind, _, _), r in runs[0].items() if kind == "attack")


def test_randomness_the_suite_cannot_seed_is_said_to_be_unreproducible(tmp_path):
    """A model that draws from a generator of its own is still averaged and scored over draws,
    but its numbers change from run to run: the note says so."""

    class Private(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(16, 3)
            self.generator = torch.Generator()

        def forward(self, x):
            return self.linear(x.flatten(1)) + torch.randn(len(x), 3, generator=self.generator)

    images = torch.rand(8, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    results = suite.evaluate(from_module(Private(), input_size=(1, 4, 4)), (images, torch.zeros(8, dtype=torch.long)),
                             attacks=["fgm_linf"], eps=0.01)
    (note,) = [note for note in results.warnings if "randomized" in note]
    assert "cannot seed" in note and "not reproducible" in note


def test_a_deterministic_model_is_left_as_it_is(digits_model, digits_examples):
    from suite.models.randomized import randomized_view

    model, note = randomized_view(digits_model, [ex.input for ex in digits_examples[:8]], seed=0)
    assert model is digits_model and note is None


def test_a_deterministic_model_that_gives_nan_or_inf_is_not_taken_for_a_randomized_one():
    """NaN − NaN, and a row centred with an infinity in it, read as a difference: a model that
    gives the same NaN or infinite logits on every pass was evaluated through 20 draws, and
    refused by certify as randomized."""
    from suite.models.randomized import randomized_view

    class Broken(nn.Module):
        def forward(self, x):
            logits = x.flatten(1)[:, :3].clone()
            logits[0, 0] = float("nan")
            logits[-1, 1] = float("inf")
            return logits

    model = from_module(Broken(), input_size=(1, 4, 4))
    inputs = list(torch.rand(4, 1, 4, 4, generator=torch.Generator().manual_seed(0)))
    assert randomized_view(model, inputs, seed=0) == (model, None)


def test_an_attack_counts_a_randomized_example_broken_only_when_no_draw_decides_for_its_label():
    """The averaged answer flips while draws still decide for the label: the attack goes on."""
    from suite.models.base import attack_decide

    draws = torch.tensor([[[2.0, 0.0, 1.0], [0.0, 3.0, 1.0], [0.0, 3.0, 1.0]],    # one draw of three for class 0
                          [[0.0, 2.0, 1.0], [0.0, 1.0, 2.0], [0.0, 2.0, 1.0]]])   # none
    averaged = torch.logsumexp(torch.log_softmax(draws, dim=-1), dim=1) - torch.log(torch.tensor(3.0))
    labels = torch.tensor([0, 0])
    assert averaged.argmax(dim=1).tolist() == [1, 1]  # the averaged answer is wrong for both
    averaged.draws = draws
    assert attack_decide(averaged, labels).tolist() == [0, 1]
    # Without the draws, the averaged logits decide, as for any model.
    assert attack_decide(averaged.clone(), labels).tolist() == [1, 1]


def test_a_search_that_runs_on_keeps_the_iterate_that_fooled_every_draw():
    """On a randomized model the search runs every step; an iterate that fooled every draw is
    kept over later ones that did not, whatever their objective (it rises at every step here)."""
    from suite.models.base import Classifier, ModelInfo
    from suite.seeding import example_generator

    class Flicker(Classifier):
        modality, labels, input_size = "image", ["a", "b"], (1, 1, 1)
        info = ModelInfo(spec="test:flicker")
        runs_every_step = True
        calls = 0

        @property
        def device(self):
            return torch.device("cpu")

        def _forward(self, batch):
            self.calls += 1
            x = batch.flatten(1)[:, :1]
            logits = torch.cat([5 - x, 0 * x + 0.5 * self.calls], dim=1)  # CE of label 0 rises every call
            fooled = self.calls == 3  # only the third pass's draws all decide for class 1
            logits.draws = torch.tensor([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0] if not fooled else [0.0, 1.0]]).expand(
                len(batch), 3, 2)
            return logits

    attack = build_attack("pgd_linf", {"eps": 0.1, "steps": 5})
    x, y = torch.full((1, 1, 1, 1), 0.5), torch.tensor([0])
    found = attack._restart_search(Flicker(), x, y, [example_generator(0, "pgd_linf", 0)], steps=5, restarts=1,
                                   loss="ce", make_update=lambda origin, start: attack._ascent(origin, 0.02))
    assert found.predictions.tolist() == [1] and found.queries.tolist() == [6]


class NoisyText(LogitView):
    """A randomized text defence: Gaussian noise (σ = 4, against margins of 6-7.5) added to the logits on every query."""

    def _forward(self, batch):
        logits = self.base._forward(batch)
        return logits + 4.0 * torch.randn_like(logits)

    def text_rows(self, texts):
        return self.logits(list(texts)).cpu() if texts else torch.empty(0, self.num_classes)


def test_a_randomized_text_model_is_scored_by_expected_accuracy_and_batch_size_changes_nothing(sentiment_model,
                                                                                                tmp_path):
    """A text model whose answers change from query to query was scored on one draw, with a
    warning: now its examples are scored by their share of 100 fresh draws, its attacks search
    through the average of 20, and the records are the same at batch sizes 1 and 3."""
    from suite.data.builtin import sentiment

    split = sentiment("test")
    texts, labels = list(split.inputs[:5]), list(split.labels[:5])
    runs = []
    for name, batch_size in (("one", 1), ("three", 3)):
        results = suite.evaluate(NoisyText(sentiment_model), (texts, labels), attacks=["deepwordbug"],
                                 adversary=["none"], output=tmp_path / name,
                                 options=suite.RunOptions(batch_size=batch_size))
        runs.append(_records(tmp_path / name))
    assert any("randomized" in note and "EOT" in note for note in results.warnings)
    assert not any("change across identical queries" in note for note in results.warnings)
    assert runs[0] == runs[1]
    clean = [r["correct"] for (kind, _, _), r in runs[0].items() if kind == "clean"]
    assert all(abs(value * SCORE_DRAWS - round(value * SCORE_DRAWS)) < 1e-4 for value in clean)
    assert any(0 < value < 1 for value in clean)
    clean_by_id = {key: r["correct"] for (kind, _, key), r in runs[0].items() if kind == "clean"}
    attacked = {key: r["robust"] for (kind, _, key), r in runs[0].items() if kind == "attack"}
    assert attacked and all(0 <= value <= clean_by_id[key] for key, value in attacked.items())


def test_a_randomized_text_models_embedding_gradient_is_summed_over_its_draws(sentiment_model):
    """Gradient-guided text searches take the input-embedding gradient of the averaged answer:
    through the view of a model with no randomness, its 20 identical draws sum to that model's
    own gradient (one draw's share would be a 20th of it)."""
    from suite.attacks.text.offline import import_textattack
    from suite.attacks.text.wrapper import make_wrapper

    import_textattack()
    plain = make_wrapper(sentiment_model).get_grad("a great film")
    averaged = make_wrapper(Randomized(sentiment_model, seed=0)).get_grad("a great film")
    assert torch.equal(averaged["ids"], plain["ids"])
    np.testing.assert_allclose(averaged["gradient"], plain["gradient"], rtol=1e-4, atol=1e-6)
    assert np.abs(plain["gradient"]).sum() > 0


class NoisyLength(LogitView):
    """A randomized binary text model: class 1's logit is the text's length − 5, and each logit
    has Gaussian noise (σ = 2) on every query."""

    def _forward(self, batch):
        margin = torch.tensor([float(len(text) - 5) for text in batch])
        return torch.stack([torch.zeros_like(margin), margin], dim=1) + 2.0 * torch.randn(len(batch), 2)


def test_a_text_search_on_a_randomized_model_reaches_its_goal_only_where_no_draw_decides_for_the_label(
        sentiment_model):
    """TextAttack's goal (the averaged answer flipped) left up to half of the draws deciding for
    the label, where an image search stops only once none does. A text search's goal on a
    randomized model's view is now the image search's: "abcdef" flips the averaged answer but
    some draws still decide for label 0; a 15-letter text fools every draw."""
    from suite.attacks.text.offline import import_textattack
    from suite.attacks.text.recipe_base import every_draw_goal
    from suite.attacks.text.wrapper import make_wrapper

    import_textattack()
    from textattack.goal_function_results import GoalFunctionResultStatus
    from textattack.goal_functions import UntargetedClassification
    from textattack.shared import AttackedText

    view = Randomized(NoisyLength(sentiment_model), seed=0)
    texts = ["abcdef", "a" * 15, "abc"]
    averaged = view.logits(texts)
    assert averaged.argmax(dim=1).tolist() == [1, 1, 0]
    assert 0 in view.draw_winners("abcdef").tolist() and 0 not in view.draw_winners("a" * 15).tolist()
    statuses = {}
    for name, goal in (("plain", UntargetedClassification(make_wrapper(view))),
                       ("every draw", every_draw_goal(UntargetedClassification)(make_wrapper(view)))):
        goal.init_attack_example(AttackedText("abc"), 0)
        results, _ = goal.get_results([AttackedText(text) for text in texts])
        statuses[name] = [result.goal_status == GoalFunctionResultStatus.SUCCEEDED for result in results]
    assert statuses == {"plain": [True, True, False], "every draw": [False, True, False]}
    # Forgotten winners are drawn again: the same draws.
    remembered = view.draw_winners("abcdef")
    view._winners.clear()
    assert torch.equal(view.draw_winners("abcdef"), remembered)
