"""Randomized models that are not ensembles (suite/models/randomized.py): scored by their
expected accuracy over fresh draws, attacked through the average of many draws (EOT), and as
reproducible as a deterministic model."""

from __future__ import annotations

import json

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
    """The illusion: PGD that follows one draw's gradient a step leaves 59 % of the noisy model's
    expected accuracy on these 60 digits (L∞ 0.03); through the average of 20 draws it leaves
    25 %. Both are scored the same way (expected accuracy over 100 fresh draws)."""
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
    print(f"single draw {single_draw:.4f}, EOT {eot:.4f}")
    assert eot < 0.6 * single_draw, (eot, single_draw)


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
