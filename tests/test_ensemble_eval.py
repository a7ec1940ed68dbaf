"""Randomized ensembles in the evaluation: exact scoring end to end, default attacks, the checks
that steer towards ARC, the α sweep, and the BAT built-in (whose APGD number overstates)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import suite
from suite.data.base import Example
from suite.evaluation.checks import check_ensemble_attacks
from suite.evaluation.recipe import parse_recipe
from suite.models import load_model
from suite.models.wrap import from_module

PAIR = "ensemble:0.7*builtin:digits-cnn-at,0.3*builtin:digits-cnn"


def _records(directory):
    return [json.loads(line) for line in (directory / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]


def test_evaluate_scores_an_ensemble_with_its_exact_expected_accuracy(tmp_path):
    attacks = [{"name": "arc", "eps": 0.15, "steps": 3}, {"name": "apgd_rec", "eps": 0.15, "steps": 5}]
    results = suite.evaluate(PAIR, "builtin:digits", n=24, attacks=attacks, output=tmp_path)
    records = _records(tmp_path)
    clean = {r["id"]: r["correct"] for r in records if r["kind"] == "clean"}
    attacked = {}
    for record in records:
        if record["kind"] == "attack":
            attacked.setdefault(record["id"], []).append(record["robust"])
    # Every value is a sum of member probabilities: 0, 0.3, 0.7 or 1.
    for value in [*clean.values(), *(v for values in attacked.values() for v in values)]:
        assert min(abs(value - level) for level in (0, 0.3, 0.7, 1)) < 1e-6
    model = load_model(PAIR)
    ids = sorted(clean)
    assert results.clean_accuracy == pytest.approx(sum(clean.values()) / len(clean))
    worst = [min([clean[i], *attacked.get(i, [])]) for i in ids]
    assert results.worst_case_robust_accuracy == pytest.approx(sum(worst) / len(worst))
    assert [m.probability for m in results.model.members] == [0.7, 0.3]
    assert not any("without arc" in warning for warning in results.warnings)
    assert model.info.extra["members"][0]["spec"] == "builtin:digits-cnn-at"
    # On the leaderboard an ensemble's members and probabilities stay with it.
    from suite.report import leaderboard

    board, added, _ = leaderboard.add([tmp_path / "results.json"], tmp_path / "board" / "leaderboard.json")
    (entry,) = board.entries
    assert [(m.spec, m.probability) for m in entry.members] == [("builtin:digits-cnn-at", 0.7), ("builtin:digits-cnn", 0.3)]
    assert "0.7×builtin:digits-cnn-at + 0.3×builtin:digits-cnn" in leaderboard.rows(board)[0]["model"]


def test_an_ensemble_runs_arc_apgd_rec_and_auto_by_default(tmp_path):
    from suite.evaluation.options import RunOptions
    from suite.evaluation.prepare import prepare
    from suite.evaluation.recipe import TaskConfig

    task = TaskConfig(model=PAIR, dataset={"spec": "builtin:digits", "n": 4})
    prepared = prepare(task, RunOptions(output=tmp_path))
    assert list(prepared.attacks) == ["arc", "apgd_rec", "auto"]


def test_an_ensemble_member_that_is_randomized_itself_is_refused():
    """Its expected accuracy is exact over members that answer one way: a noisy member was scored
    on single draws (0.5 or 1.0 at one input from call to call), the worst case overstated by 3
    points, with no warning."""
    from suite.errors import ConfigError
    from suite.models.ensemble import RandomizedEnsemble
    from suite.models.randomized import randomized_view

    labels = ["a", "b", "c"]
    noisy = from_module(Noisy(), input_size=(1, 2, 2), labels=labels, name="noisy")
    plain = from_module(nn.Sequential(nn.Flatten(), nn.Linear(4, 3)), input_size=(1, 2, 2), labels=labels, name="plain")
    inputs = [torch.rand(1, 2, 2, generator=torch.Generator().manual_seed(i)) for i in range(8)]
    with pytest.raises(ConfigError, match="ensemble member 'noisy' answers identical queries differently"):
        randomized_view(RandomizedEnsemble([plain, noisy], [0.5, 0.5]), inputs, seed=0)
    never_drawn = RandomizedEnsemble([plain, noisy], [1.0, 0.0])
    assert randomized_view(never_drawn, inputs, seed=0) == (never_drawn, None)


def test_alpha_and_batch_size_sweeps_multiply_and_each_copy_names_its_alpha():
    """The batch-size copies were made from the task before its α copies, so every α was lost
    (both runs at 0.85); and an α copy of an inline spec kept the old α in its model name."""
    recipe = parse_recipe({
        "name": "s", "sweep": {"alphas": [0.5, 0.9], "batch_size": [4, 8]},
        "tasks": [{"name": "t", "model": "ensemble:0.85*builtin:digits-cnn-at,0.15*builtin:digits-cnn",
                   "dataset": "builtin:digits", "attacks": ["arc"]}]})
    tasks = {task.name: task for task in recipe.expanded_tasks()}
    assert sorted(tasks) == ["t-a0.5-bs4", "t-a0.5-bs8", "t-a0.9-bs4", "t-a0.9-bs8"]
    chosen = tasks["t-a0.9-bs8"]
    assert chosen.batch_size == 8 and [m.probability for m in chosen.model.members] == pytest.approx([0.9, 0.1])
    assert chosen.model.spec == "ensemble:0.9*builtin:digits-cnn-at,0.1*builtin:digits-cnn"


def test_ensemble_without_arc_is_warned_about():
    model = load_model(PAIR)
    attacks = {"apgd_rec": suite.attacks.build_attack("apgd_rec", {})}
    assert "without arc" in check_ensemble_attacks(model, attacks)[0]
    attacks["arc"] = suite.attacks.build_attack("arc", {})
    assert check_ensemble_attacks(model, attacks) == []
    assert "without apgd_rec" in check_ensemble_attacks(model, {"arc": attacks["arc"]})[0]
    assert check_ensemble_attacks(load_model("builtin:digits-cnn"), {"x": attacks["apgd_rec"]}) == []
    # The worst case is per threat: arc at L2 beside apgd_rec at L∞ leaves each threat to one of them.
    apart = {"arc": suite.attacks.build_attack("arc", {"norm": "l2", "eps": 1.0}), "apgd_rec": attacks["apgd_rec"]}
    said = check_ensemble_attacks(model, apart)
    assert len(said) == 2 and any("without arc at" in line for line in said)
    assert any("without apgd_rec at" in line for line in said)


class Noisy(nn.Module):
    """A randomized defence that is not an ensemble: noise added to the logits on every query."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x.flatten(1)) + torch.randn(len(x), 3)


def test_outputs_that_change_across_identical_queries_are_evaluated_through_draws():
    from suite.models.randomized import Randomized, randomized_view

    inputs = [torch.rand(1, 2, 2) for _ in range(8)]
    view, note = randomized_view(from_module(Noisy(), input_size=(1, 2, 2)), inputs, seed=0)
    assert isinstance(view, Randomized)
    assert "randomized" in note and "ensemble:" in note
    deterministic = from_module(nn.Sequential(nn.Flatten(), nn.Linear(4, 3)), input_size=(1, 2, 2))
    assert randomized_view(deterministic, inputs, seed=0) == (deterministic, None)
    ensemble = load_model(PAIR)  # exact expected accuracy: no draws
    digits = [torch.rand(1, 32, 32, generator=torch.Generator().manual_seed(i)) for i in range(8)]
    assert randomized_view(ensemble, digits, seed=0) == (ensemble, None)

    class Offset(Noisy):  # the same noise beside a constant 1e6 on every logit (no decision changes)
        def forward(self, x):
            return super().forward(x) + 1e6

    # A tolerance relative to the largest logit hid it; rows are compared centred.
    assert isinstance(randomized_view(from_module(Offset(), input_size=(1, 2, 2)), inputs, seed=0)[0], Randomized)


def test_a_model_that_answers_otherwise_under_autograd_is_warned_about():
    """Attacks query the model with autograd on, the suite scores it with autograd off: a model
    whose logits depend on the mode (here: shifted one class when gradients are on, so every
    attack sees its clean input misclassified and stops) reported 100 % robust accuracy for
    0 % true, with no warning."""
    from suite.evaluation.checks import check_grad_mode

    class Shifty(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 3)

        def forward(self, x):
            logits = self.linear(x.flatten(1))
            return logits.roll(1, dims=1) if torch.is_grad_enabled() else logits

    examples = [Example(str(i), torch.rand(1, 2, 2), i % 3) for i in range(8)]
    (warning,) = check_grad_mode(from_module(Shifty(), input_size=(1, 2, 2)), examples)
    assert "answers differently when gradients are taken" in warning and "decisions change" in warning
    assert check_grad_mode(from_module(nn.Sequential(nn.Flatten(), nn.Linear(4, 3)), input_size=(1, 2, 2)),
                           examples) == []


class Masked(nn.Module):
    """The built-in digits CNN on [0, 1] pixels behind a gradient mask: ``shattered`` adds
    2e-3·sin(3e4·x) to each pixel (it hardly moves the input; its gradient oscillates),
    ``noisy`` keeps the forward pass and returns noise as the input's gradient."""

    def __init__(self, classifier, mask: str) -> None:
        super().__init__()
        self.net, self.mask = classifier.module, mask
        self.register_buffer("mean", classifier.mean.detach().clone().cpu())
        self.register_buffer("std", classifier.std.detach().clone().cpu())

    def forward(self, x):
        x = x + 2e-3 * torch.sin(3e4 * x) if self.mask == "shattered" else _NoisyBackward.apply(x)
        return self.net((x - self.mean) / self.std)


class _NoisyBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return torch.randn(grad.shape, generator=torch.Generator().manual_seed(1))


def test_shattered_or_noisy_gradients_are_warned_about(digits_model, digits_examples, tmp_path):
    """Gradient attacks led by a shattered or noisy gradient report robustness that is not there
    (the default ``auto``: 60 % on the shattered CNN at L∞ 0.03, whose served function is the
    CNN's within 0.002 a pixel; the CNN is at 0 %). Nothing else in the checks saw it: the
    gradient is finite and non-zero. The direction check does, and stays quiet on the plain CNN
    at every radius."""
    from suite.attacks import build_attack
    from suite.evaluation.checks import check_gradient_direction

    correct = [example for example in digits_examples[:64]
               if int(digits_model.logits(example.input[None]).argmax()) == example.label]
    for norm, eps in [("linf", 0.003), ("linf", 0.03), ("linf", 0.3), ("l2", 0.25), ("l2", 3.0)]:
        attack = {"auto": build_attack("auto", {"norm": norm, "eps": eps})}
        assert check_gradient_direction(digits_model, attack, correct, {"auto": 0.5}) == [], (norm, eps)
        for mask in ("shattered", "noisy"):
            masked = from_module(Masked(digits_model, mask), input_size=(1, 32, 32))
            (warning,) = check_gradient_direction(masked, attack, correct, {"auto": 0.5})
            assert "does not point uphill" in warning and "--attacks auto,square" in warning, (mask, norm, eps)
        # Nothing to overstate where the attack broke everything.
        assert check_gradient_direction(masked, attack, correct, {"auto": 0.0}) == []
    shattered = from_module(Masked(digits_model, "shattered"), input_size=(1, 32, 32), name="shattered")
    results = suite.evaluate(shattered, "builtin:digits", n=16, eps=0.03, output=tmp_path / "shattered")
    assert results.attacks["auto"].robust_accuracy >= 0.25
    assert any("does not point uphill" in warning for warning in results.warnings), results.warnings


def test_alpha_sweep_expands_ensembles_and_keeps_the_baseline():
    recipe = parse_recipe({
        "name": "s", "sweep": {"alphas": [0.5, 1.0]},
        "tasks": [
            {"name": "rec", "model": {"spec": "ensemble:pair", "members": [
                {"spec": "builtin:digits-cnn-at", "probability": 0.9},
                {"spec": "builtin:digits-cnn", "probability": 0.06}, {"spec": "builtin:digits-cnn", "probability": 0.04}]},
             "dataset": "builtin:digits", "attacks": ["arc"]},
            {"name": "at", "model": "builtin:digits-cnn-at", "dataset": "builtin:digits", "attacks": ["pgd_linf"]},
        ]})
    tasks = {task.name: task for task in recipe.expanded_tasks()}
    assert sorted(tasks) == ["at", "rec-a0.5", "rec-a1"]
    assert [m.probability for m in tasks["rec-a0.5"].model.members] == pytest.approx([0.5, 0.3, 0.2])
    assert [m.probability for m in tasks["rec-a1"].model.members] == [1.0, 0.0, 0.0]
    assert tasks["at"].model.members is None
    # A model that is not an ensemble keeps its identity (no members key).
    assert "members" not in tasks["at"].identity(0)["model"]


def test_alpha_sweep_writes_its_table_and_plot(tmp_path, capsys):
    from suite.cli.run import run_loaded

    recipe = parse_recipe({
        "name": "sweep", "sweep": {"alphas": [0.5, 1.0]},
        "tasks": [
            {"name": "rec", "model": {"spec": "ensemble:pair", "members": [
                {"spec": "builtin:digits-cnn-at", "probability": 0.5}, {"spec": "builtin:digits-cnn", "probability": 0.5}]},
             "dataset": {"spec": "builtin:digits", "n": 6},
             "attacks": [{"name": "arc", "eps": 0.15, "steps": 2}, {"name": "apgd_rec", "eps": 0.15, "steps": 2}]},
            {"name": "at", "model": "builtin:digits-cnn-at", "dataset": {"spec": "builtin:digits", "n": 6},
             "attacks": [{"name": "pgd_linf", "eps": 0.15, "steps": 2}]},
        ]})
    results = run_loaded(recipe, tmp_path, overwrite=False)
    table = capsys.readouterr().out
    assert "a=0.5" in table and "a=1" in table and "builtin:digits-cnn-at" in table
    rows = (tmp_path / "alpha_sweep.csv").read_text().splitlines()
    assert rows[0] == "task,model,alpha,attack,robust_accuracy,clean_accuracy"
    assert len(rows) == 1 + 2 * 3 + 1  # 2 alphas × (arc, apgd_rec, worst case) + the baseline's attack
    assert (tmp_path / "alpha_sweep.png").read_bytes()[:4] == b"\x89PNG"
    at_alpha_one = next(r for r in results if r.task == "rec-a1")
    assert at_alpha_one.clean_accuracy == next(r for r in results if r.task == "at").clean_accuracy


def test_bat_builtin_overstates_robustness_under_adaptive_pgd(tmp_path):
    """The BAT built-in: its partner is not robust; APGD (as the paper runs it) reports more
    robustness than ARC, and more than the worst case the suite reports."""
    from suite.models.ensemble import is_ensemble
    from suite.models.registry import BUILTIN_MODELS, ENSEMBLE_BUILTINS, is_ensemble_spec

    model = load_model("builtin:digits-bat")
    assert is_ensemble(model) and is_ensemble_spec("builtin:digits-bat")  # certify refuses it before loading
    assert ENSEMBLE_BUILTINS == {name for name in BUILTIN_MODELS.names() if "ensemble" in BUILTIN_MODELS.describe(name)}
    search = model.info.extra["bat_alpha_search"]
    alpha = search["alpha"]
    assert [m["probability"] for m in model.info.extra["members"]] == pytest.approx([alpha, 1 - alpha])
    assert search["grid"][0]["alpha"] == 0.5 and search["grid"][-1]["alpha"] == 1.0
    assert max(row["robust_accuracy"] for row in search["grid"]) == next(
        row["robust_accuracy"] for row in search["grid"] if row["alpha"] == alpha)
    partner = suite.evaluate("builtin:digits-cnn-bat", "builtin:digits", n=30,
                             attacks=[{"name": "pgd_linf", "eps": 0.15, "steps": 10}])
    assert partner.attacks["pgd_linf"].robust_accuracy <= 0.1
    attacks = [{"name": "apgd_rec", "eps": 0.15, "steps": 20, "step": 0.0375, "rand_init": False},
               {"name": "arc", "eps": 0.15, "steps": 10}]
    results = suite.evaluate("builtin:digits-bat", "builtin:digits", n=60, attacks=attacks, output=tmp_path)
    apgd, arc = (results.attacks[key].robust_accuracy for key in ("apgd_rec", "arc"))
    assert arc < apgd - 0.05
    assert results.worst_case_robust_accuracy <= arc


@pytest.mark.parametrize("name", ["arc", "apgd_rec"])
def test_ensemble_attacks_on_cnns_do_not_depend_on_the_batch(name, digits_examples):
    model = load_model(PAIR)
    examples = digits_examples[:12]
    labels = torch.tensor([example.label for example in examples])
    attack = suite.attacks.build_attack(name, {"eps": 0.15, "steps": 3})
    together = attack.run(model, examples, 0)
    alone = [attack.run(model, [example], 0)[0] for example in examples]
    # The expected accuracy each adversarial input gets is identical; batched conv kernels round
    # differently from single-example ones, so the pixels agree to float noise (as test_attacks).
    scored = [model.correctness(torch.stack([o.adversarial for o in outputs]), labels) for outputs in (together, alone)]
    assert torch.equal(scored[0], scored[1])
    assert float(scored[0].mean()) < float(model.correctness(torch.stack([e.input for e in examples]), labels).mean())
    for a, b in zip(together, alone):
        torch.testing.assert_close(a.adversarial, b.adversarial, atol=2e-3, rtol=0)
        assert a.perturbation <= 0.15 + 1e-6


def test_a_served_temperature_passes_through_to_the_members(digits_examples):
    from suite.models.config import ModelConfig

    hot = load_model(ModelConfig(spec=PAIR, temperature=4.0))
    plain = load_model(PAIR)
    x = torch.stack([example.input for example in digits_examples[:4]])
    y = torch.tensor([example.label for example in digits_examples[:4]])
    assert torch.allclose(hot.member_logits(x) * 4.0, plain.member_logits(x), atol=1e-5)
    assert torch.equal(hot.correctness(x, y), plain.correctness(x, y))
    found = suite.attacks.build_attack("arc", {"eps": 0.15, "steps": 2}).run(hot, digits_examples[:2], 0)
    assert len(found) == 2
