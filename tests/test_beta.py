"""Losses, BETA against PGD on cross-entropy, the mini-batch effect and the sanity checks."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from suite.attacks import build_attack
from suite.losses import dlr, margin, reduce_loss, targeted_cross_entropy
from suite.data.base import Example
from suite.evaluation.checks import check_black_box, check_probabilities, check_reduction, check_zero_gradients
from suite.models.base import ModelInfo, TorchClassifier
from suite.models.temperature import TemperatureScaled

from helpers import run_judged


class _Linear(TorchClassifier):
    """A classifier around a bare module, for hand-built models."""

    modality = "image"
    input_size = (1, 1, 1)

    def __init__(self, module: nn.Module, classes: int) -> None:
        super().__init__(module, device="cpu")
        self.labels = [str(i) for i in range(classes)]
        self.info = ModelInfo(spec="test:linear")

    def _forward(self, batch):
        return self.module(batch.flatten(1))


def test_losses_match_hand_computed_values():
    logits = torch.tensor([[3.0, 1.0, 0.5, -1.0], [0.0, 2.0, 1.0, 0.0]])
    labels = torch.tensor([0, 2])
    # margin: max_{j≠y} f_j − f_y, and per target
    assert torch.allclose(margin(logits, labels), torch.tensor([1.0 - 3.0, 2.0 - 1.0]))
    assert torch.allclose(margin(logits, labels, torch.tensor([3, 0])), torch.tensor([-4.0, -1.0]))
    # DLR: −(z_y − max_{j≠y} z_j) / (z_π1 − z_π3)
    assert torch.allclose(dlr(logits, labels), torch.tensor([-(3.0 - 1.0) / (3.0 - 0.5), -(1.0 - 2.0) / (2.0 - 0.0)]))
    # targeted DLR: −(z_y − z_t) / (z_π1 − (z_π3 + z_π4)/2)
    assert torch.allclose(dlr(logits, labels, torch.tensor([1, 1])),
                          torch.tensor([-(3.0 - 1.0) / (3.0 - (0.5 - 1.0) / 2), -(1.0 - 2.0) / (2.0 - 0.0)]))
    assert torch.allclose(targeted_cross_entropy(logits, labels), torch.log_softmax(logits, 1)[[0, 1], [0, 2]])
    values = torch.tensor([1.0, 2.0, 3.0])
    assert reduce_loss(values, "sum") == 6.0 and reduce_loss(values, "mean") == 2.0
    assert reduce_loss(values, "mean", batch_size=6) == 1.0


def _trap_model() -> _Linear:
    """A 1-pixel, 3-class linear model where cross-entropy points away from the only adversarial
    region. With t = x − 0.5: f_0 = 0, f_1 = −2t − 0.25, f_2 = t − 0.099; clean x = 0.5, ε = 0.1.

    - Class 1 is out of reach: its best value in the ball is f_1(−0.1) = −0.05 < 0 = f_0.
    - Class 2 wins exactly for t > 0.099: reachable, at the edge of the ball.
    - ∂CE/∂t = −2·p_1 + p_2 < 0 on the whole ball (p_1/p_2 = e^{−3t−0.151} > 1/2 for t ≤ 0.1),
      so every signed ascent step moves DOWN, into the unreachable class 1: PGD on cross-entropy
      converges to t = −0.1 and never breaks the model, unless a random start lands in
      (0.099, 0.1] (probability 0.5 %).
    - BETA's margin towards class 2, M_2 = t − 0.099, increases upwards: it finds t = 0.1.
    """
    layer = nn.Linear(1, 3)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[0.0], [-2.0], [1.0]]))
        layer.bias.copy_(torch.tensor([0.0, -2.0 * -0.5 - 0.25, -0.5 - 0.099]))
    return _Linear(layer, 3)


def test_beta_finds_what_pgd_on_cross_entropy_provably_misses():
    model = _trap_model()
    examples = [Example(id=f"x{i}", input=torch.full((1, 1, 1), 0.5), label=0) for i in range(40)]
    assert (model.predict(torch.stack([ex.input for ex in examples])) == 0).all()
    # From the clean point, PGD-CE walks into the unreachable class: it fails deterministically.
    plain = run_judged(build_attack("pgd_linf", {"eps": 0.1, "steps": 20, "random_start": False}), model, examples[:1], seed=0)
    assert not plain[0].success
    assert plain[0].adversarial.item() == pytest.approx(0.4, abs=1e-6)
    # With random starts it only succeeds when a start lands in the 0.5 % adversarial sliver.
    pgd = run_judged(build_attack("pgd_linf", {"eps": 0.1, "steps": 20, "restarts": 2}), model, examples, seed=0)
    assert sum(o.success for o in pgd) <= 2
    # BETA ascends the margin towards each target separately and breaks every example.
    beta = run_judged(build_attack("beta", {"eps": 0.1, "steps": 20}), model, examples, seed=0)
    assert all(o.success and o.prediction == 2 for o in beta)
    assert all(o.perturbation <= 0.1 + 1e-6 for o in beta)
    # The untargeted margin max_j M_j is trapped too from starts with t < −0.05, where class 1
    # leads: the max picks the wrong target. BETA keeps the targets apart.
    untargeted = run_judged(build_attack("pgd_linf", {"eps": 0.1, "loss": "margin"}), model, examples, seed=0)
    assert 0 < sum(o.success for o in untargeted) < len(examples)


def test_beta_options_are_validated():
    from suite.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown optimizer 'Nope'"):
        build_attack("beta", {"optimizer": "Nope"})
    assert build_attack("beta", {"norm": "l2"}).eps == 0.5
    assert build_attack("beta").eps == pytest.approx(8 / 255)
    assert build_attack("beta", {"norm": "l2"}).params()["norm"] == "l2"
    assert build_attack("beta", {"optimizer": "Adam", "targets": 3}).budget(10)["targets"] == 3


class _RowWise(nn.Module):
    """A linear map applied to one row at a time: batched and single passes are the same bits,
    so any difference between batch sizes comes from the attack."""

    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.linear = nn.Linear(features, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.linear(row[None]) for row in x])


def test_every_optimizer_beta_takes_steps_each_example_as_it_would_alone():
    """One optimiser steps every row's δ: only per-coordinate rules are taken (Adafactor, which
    scales its step by norms over the whole tensor, changed 1 decision of 32 and 7 query counts
    between batch 1 and the whole batch, and is refused)."""
    from suite.attacks.image.beta import ELEMENTWISE_OPTIMIZERS
    from suite.errors import ConfigError

    model = _Linear(_RowWise(16, 4), 4)
    model.input_size = (1, 4, 4)
    images = torch.rand(12, 1, 4, 4, generator=torch.Generator().manual_seed(0))
    examples = [Example(id=str(i), input=image, label=int(label))
                for i, (image, label) in enumerate(zip(images, model.logits(images).argmax(dim=1)))]
    for name in sorted(ELEMENTWISE_OPTIMIZERS):
        attack = build_attack("beta", {"optimizer": name, "eps": 0.2, "steps": 5, "lr": 0.05})
        together = attack.run(model, examples, seed=0)
        alone = [attack.run(model, [example], seed=0)[0] for example in examples]
        for a, b in zip(together, alone):
            assert torch.equal(a.adversarial, b.adversarial) and a.queries == b.queries, name
    with pytest.raises(ConfigError, match="optimizer 'Adafactor' does not step each coordinate on its own"):
        build_attack("beta", {"optimizer": "Adafactor"})


@pytest.fixture(scope="module")
def sharp_digits(digits_model):
    """The digits CNN served at temperature 0.5: logit margins doubled, like a confident model."""
    return TemperatureScaled(digits_model, 0.5)


@pytest.mark.slow
def test_mean_reduction_loses_in_fp16_and_sum_does_not(sharp_digits, digits_examples):
    images = torch.stack([ex.input for ex in digits_examples])
    correct = [ex for ex, p in zip(digits_examples, sharp_digits.predict(images)) if int(p) == ex.label][:128]
    assert len(correct) == 128

    def rate(**params):
        attack = build_attack("pgd_linf", {"eps": 0.02, "steps": 10, **params})
        return sum(o.success for o in run_judged(attack, sharp_digits, correct, seed=0)) / len(correct)

    # fp32: the sign step is scale-free, so the 1/N of a mean changes nothing.
    assert rate(reduction="mean") == rate(reduction="sum")
    # fp16 at batch 128: the mean-reduced gradients underflow and the attack loses much of its
    # success (Redgrave & Crum); summing keeps each example's gradient representable.
    summed, meaned = rate(precision="fp16"), rate(precision="fp16", reduction="mean")
    assert summed > meaned + 0.2, (summed, meaned)


def test_checks_flag_probabilities_zero_gradients_black_box_and_reduction(digits_model, digits_examples):
    logits = torch.randn(8, 10)
    assert check_probabilities(logits) == []
    assert "probabilities" in check_probabilities(logits.softmax(dim=1))[0]

    class Saturated(_Linear):  # a model whose logits do not depend on the input
        def _forward(self, batch):
            return self.module(batch.flatten(1) * 0)

    flat = Saturated(nn.Linear(1, 3), 3)
    examples = [Example(id="a", input=torch.full((1, 1, 1), 0.5), label=0)]
    assert "exactly zero for 1 of 1" in check_zero_gradients(flat, examples)[0]
    assert check_zero_gradients(digits_model, digits_examples[:8]) == []

    attacks = {"pgd_linf": build_attack("pgd_linf"), "square": build_attack("square")}  # same threat: L∞, 8/255
    assert check_black_box(attacks, {"pgd_linf": {"robust_accuracy": 0.6}, "square": {"robust_accuracy": 0.4}})
    assert not check_black_box(attacks, {"pgd_linf": {"robust_accuracy": 0.3}, "square": {"robust_accuracy": 0.4}})

    fp32 = {"pgd_linf": build_attack("pgd_linf", {"eps": 0.02, "steps": 5})}
    assert check_reduction(digits_model, fp32, digits_examples[:16], seed=0) == []
    meaned = {"pgd_linf": build_attack("pgd_linf", {"reduction": "mean"})}
    assert "studying the batch-size effect only" in check_reduction(digits_model, meaned, digits_examples[:4], 0)[0]


@pytest.mark.slow
def test_fp16_reduction_check_fires_on_a_confident_model(sharp_digits, digits_examples):
    attacks = {"pgd_linf": build_attack("pgd_linf", {"eps": 0.02, "steps": 10, "precision": "fp16"})}
    images = torch.stack([ex.input for ex in digits_examples])
    correct = [ex for ex, p in zip(digits_examples, sharp_digits.predict(images)) if int(p) == ex.label]
    warnings = check_reduction(sharp_digits, attacks, correct, seed=0)
    assert warnings and "near underflow" in warnings[0]


def _records(directory):
    lines = (directory / "records.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    records = [record for record in records if record["kind"] != "run"]  # the line that names the run
    for record in records:
        record.pop("seconds", None)  # wall time is the one field allowed to differ
    return sorted(records, key=lambda r: (r["kind"], r.get("attack", ""), r["id"]))


@pytest.mark.slow
def test_records_identical_for_batch_size_1_and_64(tmp_path):
    from test_cli import advsuite

    runs = {}
    for size in (1, 64):
        out = tmp_path / f"bs{size}"
        assert advsuite(*["evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--n", "64",
                     "--attacks", "fgm_linf,pgd_linf,beta", "--eps", "0.01", "--batch-size", str(size),
                     "--output", str(out)]) == 0
        runs[size] = out
    one, many = _records(runs[1]), _records(runs[64])
    assert len(one) == 64 + 3 * len([r for r in one if r["kind"] == "clean" and r["correct"] > 0])
    assert one == many
    first = json.loads((runs[1] / "results.json").read_text())
    second = json.loads((runs[64] / "results.json").read_text())
    for name in ("fgm_linf", "pgd_linf", "beta"):
        a, b = first["attacks"][name], second["attacks"][name]
        assert {k: v for k, v in a.items() if k != "seconds"} == {k: v for k, v in b.items() if k != "seconds"}
    assert first["batch_size"] == 1 and second["batch_size"] == 64
    # the budget of every attack is recorded
    assert first["attacks"]["beta"]["budget"]["targets"] == 9
    assert first["attacks"]["pgd_linf"]["budget"]["steps"] == 20


@pytest.mark.slow
def test_study_recipe_prints_table_and_writes_plot(tmp_path, capsys):
    from test_cli import advsuite

    recipe = tmp_path / "study.yaml"
    recipe.write_text(
        "name: mini_study\n"
        "sweep: {batch_size: [2, 16], params: {reduction: [sum, mean]}}\n"
        "tasks:\n"
        "  - name: digits\n"
        "    model: builtin:digits-cnn\n"
        "    dataset: {spec: builtin:digits, n: 32}\n"
        "    attacks: [{name: pgd_linf, eps: 0.01, steps: 5}]\n"
    )
    out = tmp_path / "out"
    assert advsuite("run", str(recipe), "--output", str(out)) == 0
    printed = capsys.readouterr().out
    assert "bs=2" in printed and "bs=16" in printed and "pgd_linf-mean" in printed
    png = (out / "study.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    rows = (out / "study.csv").read_text().splitlines()
    assert rows[0].startswith("task,batch_size,attack,success_rate")
    assert len(rows) == 1 + 2 * 2
    by_key = {(r.split(",")[1], r.split(",")[2]): r.split(",")[3] for r in rows[1:]}
    # summed loss: the same success rate at every batch size
    assert by_key[("2", "pgd_linf-sum")] == by_key[("16", "pgd_linf-sum")]
    results = json.loads((out / "digits-bs16" / "results.json").read_text())
    assert results["batch_size"] == 16 and set(results["attacks"]) == {"pgd_linf-sum", "pgd_linf-mean"}
    assert any("studying the batch-size effect only" in w for w in results["warnings"])
