"""``--precision``: image attacks search under autocast; scoring stays float32 (suite/evaluation/precision.py)."""

from __future__ import annotations

import pytest
import torch

import suite
from suite.errors import ConfigError
from suite.evaluation.options import RunOptions
from suite.models.wrap import from_module

from helpers import without_keys


def test_bf16_reaches_every_gradient_attack_and_is_part_of_the_run_identity(tmp_path):
    """The precision becomes each attack's parameter (``auto``'s components included), so a bf16
    run is another run than fp32: its directory refuses the fp32 command rather than resuming."""
    out = tmp_path / "bf16"
    results = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf", {"name": "apgd_ce", "steps": 3}],
                             n=12, eps=0.1, precision="bf16", output=out)
    assert {key: entry.params["precision"] for key, entry in results.attacks.items()} == {"fgm_linf": "bf16",
                                                                                          "apgd_ce": "bf16"}
    assert results.clean_accuracy > 0.9  # scored in float32, as always
    with pytest.raises(ConfigError, match="holds another run"):
        suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf", {"name": "apgd_ce", "steps": 3}],
                       n=12, eps=0.1, output=out)
    again = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf", {"name": "apgd_ce", "steps": 3}],
                           n=12, eps=0.1, precision="bf16", output=out)
    timing = {"seconds", "clean_seconds", "compute_seconds", "created"}
    assert without_keys(again.model_dump(mode="json"), timing) == without_keys(results.model_dump(mode="json"), timing)


def test_fp32_is_the_run_without_a_precision(tmp_path):
    """fp32 is every attack's default: asking for it names the same run (it resumes it)."""
    out = tmp_path / "fp32"
    args = dict(attacks=["fgm_linf"], n=8, eps=0.1, output=out, options=RunOptions(batch_size=4))
    first = suite.evaluate("builtin:digits-cnn", "builtin:digits", **args)
    records = (out / "records.jsonl").read_text()
    again = suite.evaluate("builtin:digits-cnn", "builtin:digits", precision="fp32", **args)
    assert (out / "records.jsonl").read_text() == records  # resumed: nothing recomputed
    assert again.attacks["fgm_linf"].params == first.attacks["fgm_linf"].params


def test_an_attack_that_sets_its_own_precision_keeps_it():
    results = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=[{"name": "fgm_linf", "precision": "fp32"}],
                             n=4, eps=0.1, precision="bf16", options=RunOptions(batch_size=4))
    assert results.attacks["fgm_linf"].params["precision"] == "fp32"


def test_torchattacks_baselines_are_refused_under_bf16():
    with pytest.raises(ConfigError, match=r"precision bf16 does not apply to ta_apgd_ce \(it runs in float32\)"):
        suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf", "ta_apgd_ce"], n=4,
                       precision="bf16")


class Overflowing(torch.nn.Module):
    """Logits of order 1e6: fine in float32, infinite in float16 (whose largest value is 65504)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.linear(x.flatten(1)) * 1e6


def test_a_model_that_overflows_in_fp16_is_refused_in_one_line():
    model = from_module(Overflowing(), input_size=(1, 8, 8), device="cpu")
    images, labels = torch.rand(4, 1, 8, 8), [0, 1, 2, 3]
    with pytest.raises(ConfigError, match="gives non-finite logits or gradients under fp16 autocast"):
        suite.evaluate(model, (images, labels), attacks=["fgm_linf"], eps=0.1, precision="fp16")
    results = suite.evaluate(model, (images, labels), attacks=["fgm_linf"], eps=0.1, precision="bf16")
    assert results.attacks["fgm_linf"].params["precision"] == "bf16"


def test_a_low_precision_run_warns_how_coarsely_its_input_is_rounded():
    """builtin:digits-cnn normalises with mean 0.3, std 0.4: pixel 1 becomes 1.75, where bf16 keeps
    steps of 2^-7, i.e. 0.4 * 2^-7 = 0.0031 pixels; L∞ 0.006 is 1.9 of them. An fp32 run has no
    such warning."""
    bf16 = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf"], n=4, eps=0.006,
                          precision="bf16", options=RunOptions(batch_size=4))
    (note,) = [w for w in bf16.warnings if w.startswith("precision bf16")]
    assert "steps of up to 0.0031 (L∞ ε 0.006 is 1.9 such steps)" in note and "publish the fp32 number" in note
    fp16 = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_l2"], n=4, eps=0.5,
                          precision="fp16", options=RunOptions(batch_size=4))
    (note,) = [w for w in fp16.warnings if w.startswith("precision fp16")]
    assert "11 significant bits" in note and "steps of up to 0.00039;" in note  # no L∞ attack: no ratio
    fp32 = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf"], n=4, eps=0.006,
                          options=RunOptions(batch_size=4))
    assert not [w for w in fp32.warnings if w.startswith("precision")]


def test_bf16_autocast_rounds_away_a_perturbation_below_its_step():
    """What the warning says, on the CPU's autocast: at normalised value 1.75 (digits-cnn's pixel
    1), a perturbation of 0.001 pixels (0.0025 normalised, under bf16's step of 2^-7) changes
    nothing a convolution sees under bf16, and changes its float32 output."""
    from suite.attacks.image.loop import autocast

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(1, 4, 3)
    x = torch.ones(1, 1, 8, 8)
    normalised = lambda pixels: (pixels - 0.3) / 0.4  # noqa: E731
    with autocast(torch.device("cpu"), "bf16"):
        assert torch.equal(conv(normalised(x)), conv(normalised(x - 0.001)))
    assert not torch.equal(conv(normalised(x)), conv(normalised(x - 0.001)))


def test_channels_last_is_its_own_option():
    """Not part of --precision; on the CPU it changes nothing and says so; refused for a text
    model; the helper puts a network's 4-D weights in channels-last format."""
    from suite.evaluation.precision import channels_last

    results = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf"], n=4, eps=0.01,
                             options=RunOptions(batch_size=4, channels_last=True))
    assert "channels-last applies on CUDA; this run on the cpu is unchanged" in results.warnings
    with pytest.raises(ConfigError, match="--channels-last applies to image models; 'builtin:sentiment-tiny' is a text"):
        suite.evaluate("builtin:sentiment-tiny", "builtin:sentiment", attacks=["deepwordbug"], n=2,
                       options=RunOptions(channels_last=True))
    network = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(144, 10))
    model = from_module(network, input_size=(3, 8, 8), device="cpu")
    channels_last(model)
    assert network[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert not network[0].weight.is_contiguous()


def test_the_rounding_step_at_imagenet_normalisation_is_about_one_255th():
    """ImageNet's mean and std (timm's defaults): pixel 1 of the red channel becomes 2.249, where
    bf16 keeps steps of 2^-6, i.e. 0.229 * 2^-6 = 0.00358 pixels, close to ε = 1/255 (README)."""
    from suite.evaluation.precision import input_step

    network = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(144, 10))
    model = from_module(network, input_size=(3, 8, 8), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                        device="cpu")
    assert input_step(model, "bf16") == pytest.approx(0.229 * 2**-6)
    assert input_step(model, "fp16") == pytest.approx(0.229 * 2**-9)


def test_fp16_gradients_that_underflow_are_flagged_even_with_the_summed_loss():
    """A linear model with margins of 20–60 logits: softmax − one-hot is 1e-9 to 1e-26, finite
    in float32 and below fp16's smallest value (6e-8), so under fp16 autocast the input gradient
    of the summed cross-entropy is 0 and an fp16 search cannot move the example."""
    from suite.attacks import build_attack
    from suite.data.base import Example
    from suite.evaluation.checks import check_zero_gradients

    layer = torch.nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[10.0, 10.0, 0.0, 0.0], [-10.0, -10.0, 0.0, 0.0]]))
    model = from_module(torch.nn.Sequential(torch.nn.Flatten(), layer), input_size=(1, 1, 4))
    examples = [Example(i, torch.tensor([[[value, value, 0.5, 0.5]]]), 0) for i, value in enumerate([0.5, 0.75, 1.0])]
    fp32 = {"fgm": build_attack("fgm_linf", {"eps": 0.1})}
    fp16 = {"fgm": build_attack("fgm_linf", {"eps": 0.1, "precision": "fp16"})}
    assert check_zero_gradients(model, examples, fp32) == []  # finite, non-zero in float32
    (warning,) = check_zero_gradients(model, examples, fp16)
    assert "under fp16 autocast" in warning and "for 3 of 3 examples" in warning and "fgm" in warning
    # What it says is so: the fp16 search leaves every example where it was; in fp32 the step is
    # taken (it keeps the first example's, where the loss it can measure rises).
    assert [output.perturbation for output in fp16["fgm"].run(model, examples, seed=0)] == [0.0] * 3
    assert fp32["fgm"].run(model, examples[:1], seed=0)[0].perturbation == pytest.approx(0.1)


class NearTie(torch.nn.Module):
    """Class 0 leads class 1 by 1e-4 of the first pixel: float32 tells them apart; under bf16
    autocast the weight 1.0001 rounds to 1, and the two logits tie."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2, bias=False)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[1.0001, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))

    def forward(self, x):
        return self.linear(x.flatten(1))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_low_precision_hit_counts_only_where_float32_agrees(precision):
    """A tie under autocast is a hit there (a tie never counts as correct), but float32 scoring
    calls the example robust: the search had stopped it as broken, and ``auto`` handed it on as
    broken, so nothing searched it further (AutoAttack hands on what the model still classifies
    correctly). The hit is decided again on float32 logits before it counts."""
    from suite.attacks.image.loop import run_search

    model = from_module(NearTie(), input_size=(1, 2, 2), device="cpu")
    x = torch.tensor([[[[1.0, 0.0], [0.0, 0.0]]]])
    y = torch.tensor([0])
    assert model.logits(x)[0, 0] > model.logits(x)[0, 1]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model.logits(x)
    assert low[0, 0] == low[0, 1]  # the tie the search sees under autocast
    found = run_search(model, x, y, x.clone(), 0, lambda rows, points, grads, values: points, "ce",
                       precision=precision)
    assert not bool(found.success[0]) and int(found.predictions[0]) == 0 and float(found.levels[0]) == 1.0


def test_apgd_rec_stops_a_row_only_where_float32_agrees():
    """The same on a randomized ensemble: two members that tie under bf16 autocast (L = 0 there)
    and decide for the label in float32 (L = 1). The search stopped the row at its first pass;
    it now searches every step, as in float32."""
    from suite.attacks import build_attack
    from suite.data.base import Example
    from suite.models.ensemble import RandomizedEnsemble

    class Member(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.tensor([[1.0, 0.0], [1.0001, 0.0]]))

        def forward(self, x):
            return (x.flatten(1) - 0.5) @ self.weight.T

    members = [from_module(Member(), input_size=(1, 1, 2), labels=["0", "1"], name=f"m{i}") for i in range(2)]
    model = RandomizedEnsemble(members, [0.5, 0.5])
    example = Example("x", torch.tensor([[[0.75, 0.5]]]), 1)
    assert float(model.correctness(example.input[None], torch.tensor([1]))[0]) == 1.0
    queries = {}
    for precision in ("fp32", "bf16"):
        attack = build_attack("apgd_rec", {"norm": "linf", "eps": 1e-6, "steps": 5, "rand_init": False,
                                           "precision": precision})
        (output,) = attack.run(model, [example], seed=0)
        queries[precision] = output.queries
        assert float(model.correctness(output.adversarial[None], torch.tensor([1]))[0]) == 1.0
    assert queries["bf16"] == queries["fp32"] > 2


@pytest.mark.parametrize("name", ["wda", "wda_pp"])
def test_wda_flips_only_where_float32_agrees(name):
    """WDA stopped a point, and WDA++ recorded a flip (and bisected to it), where only the bf16
    logits tied: a flip float32 scoring does not see, so WDA searched no further and WDA++
    spent its transport budget on a point that stays correct. Under bf16 both now search as
    in float32 on the near tie."""
    from suite.attacks import build_attack
    from suite.data.base import Example

    model = from_module(NearTie(), input_size=(1, 2, 2), labels=["0", "1"], device="cpu")
    example = Example("x", torch.tensor([[[1.0, 0.0], [0.0, 0.0]]]), 0)
    outputs = {}
    for precision in ("fp32", "bf16"):
        attack = build_attack(name, {"norm": "linf", "eps": 0.01, "precision": precision})
        (outputs[precision],) = attack.run(model, [example], seed=0)
    assert outputs["bf16"].queries == outputs["fp32"].queries > 3
    assert bool(model.logits(outputs["bf16"].adversarial[None]).argmax(dim=1) == 0)
    if name == "wda_pp":
        assert outputs["bf16"].extras["distance"] is None and outputs["fp32"].extras["distance"] is None
