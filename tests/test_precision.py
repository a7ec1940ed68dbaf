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
