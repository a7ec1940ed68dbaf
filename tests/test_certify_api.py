"""``suite.certify``: the same certificate as ``advsuite certify``, number for number, whatever form
the model and data take (a spec, a plain ``nn.Module`` with tensors, a Classifier with an EvalSet),
and one-line refusals of the forms it cannot certify."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import suite
from suite import strict_json
from suite.data.config import DatasetConfig
from suite.data.load import load_eval_set
from suite.errors import ConfigError, DataError, SuiteError
from suite.models.builtin import DIGITS_MEAN, DIGITS_STD
from suite.models.ensemble import RandomizedEnsemble
from suite.models.wrap import from_module


def as_json(report: dict) -> dict:
    """The report as ``certificate.json`` holds it (tuples as lists, floats round-tripped)."""
    return json.loads(strict_json.dumps(report, "the certificate"))


def cli_certificate(output: Path, *argv: str) -> dict:
    """Run ``advsuite certify ... --output <output>`` in-process; its certificate.json."""
    from suite.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["certify", *argv, "--output", str(output)])
    assert exit_.value.code in (0, None)
    return json.loads((output / "certificate.json").read_text())


def without(report: dict, *keys: str) -> dict:
    return {key: value for key, value in report.items() if key not in keys}


def renamed_ids(value, ids: dict[str, str]):
    """``value`` with every ``"id"`` entry (the example a rate was found at) renamed by ``ids``."""
    if isinstance(value, dict):
        return {key: ids.get(item, item) if key == "id" else renamed_ids(item, ids) for key, item in value.items()}
    if isinstance(value, list):
        return [renamed_ids(item, ids) for item in value]
    return value


def seeded_net(seed: int = 0) -> torch.nn.Module:
    """timm's ``test_resnet`` for digits (1 channel, 10 classes) with seeded random weights: the
    smallest architecture a timm directory can name (timm has no plain MLP)."""
    import timm

    torch.manual_seed(seed)
    return timm.create_model("test_resnet", num_classes=10, in_chans=1).eval()


def digits_examples(n: int, seed: int = 0):
    """The examples ``--dataset builtin:digits --n <n> --seed <seed>`` certifies, as an EvalSet."""
    from suite.data.base import InputSpec

    spec = InputSpec("image", tuple(str(digit) for digit in range(10)), (1, 32, 32))
    return load_eval_set(DatasetConfig(spec="builtin:digits", n=n), spec, seed)


def test_a_plain_module_with_tensors_equals_the_cli_on_its_timm_directory(tmp_path, monkeypatch):
    from suite.models.timm_dir import save_timm_dir

    net = seeded_net()
    save_timm_dir(tmp_path / "net", net, "test_resnet", input_size=(1, 32, 32), mean=(0.0,), std=(1.0,),
                  label_names=[str(digit) for digit in range(10)])
    examples = digits_examples(12).examples
    images = torch.stack([example.input for example in examples])
    labels = [example.label for example in examples]
    options = {"norm": "l2", "loss": "ce", "eps": [0.1, 0.5], "boxed": False, "attacks": False}
    work = tmp_path / "api"
    work.mkdir()
    monkeypatch.chdir(work)  # no output: nothing may be written, here or anywhere below

    report = suite.certify(net, (images, labels), **options)

    assert list(work.iterdir()) == []
    cli = cli_certificate(tmp_path / "cli", "--model", f"timm:{tmp_path / 'net'}", "--dataset", "builtin:digits",
                          "--n", "12", "--eps", "0.1,0.5", "--unboxed", "--no-attacks")
    # In-memory examples are named by their row; the CLI's by the dataset's ids: the same examples.
    rows = {str(row): example.id for row, example in enumerate(examples)}
    assert renamed_ids(without(as_json(report), "model", "dataset"), rows) == without(cli, "model", "dataset")
    assert [row["eps"] for row in report["rows"]] == [0.1, 0.5] and report["dataset"]["n"] == cli["dataset"]["n"] == 12
    assert report["dataset"]["spec"].startswith("memory:") and report["model"] == "module:ResNet"


def test_a_classifier_on_an_eval_set_equals_the_cli_on_the_builtin_with_attacks(tmp_path, digits_model):
    model = from_module(digits_model.module, input_size=(1, 32, 32), mean=DIGITS_MEAN, std=DIGITS_STD)
    eval_set = digits_examples(8)

    report = suite.certify(model, eval_set, eps=0.3)

    cli = cli_certificate(tmp_path / "cli", "--model", "builtin:digits-cnn", "--n", "8", "--eps", "0.3")
    assert without(as_json(report), "model", "dataset") == without(cli, "model", "dataset")
    assert set(report["rows"][0]["attacks"]) == {"wda", "wda_k2", "wda_pp"}
    assert report["dataset"]["fingerprint"] == cli["dataset"]["fingerprint"] and report["dataset"]["n"] == 8


def test_a_spec_writes_and_returns_the_certificate_the_cli_writes(tmp_path):
    # numpy's scalars are numbers here as in suite.evaluate (n=np.int64(10) was "not an integer"),
    # and np.float32(0.01) is the 0.01 it shows (it was 0.009999999776482582, another radius than the CLI's)
    report = suite.certify("builtin:digits-cnn", "builtin:digits", norm="linf", loss="margin",
                           eps=[np.float32(0.01), 0.02], n=np.int64(10), seed=np.int32(3), attacks=False,
                           output=tmp_path / "api")

    written = json.loads((tmp_path / "api" / "certificate.json").read_text())
    cli = cli_certificate(tmp_path / "cli", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits",
                          "--norm", "linf", "--loss", "margin", "--eps", "0.01,0.02", "--n", "10", "--seed", "3",
                          "--no-attacks")
    assert as_json(report) == written == cli
    assert report["dataset"] == {"spec": "builtin:digits", "split": "test", "n": 10,
                                 "fingerprint": cli["dataset"]["fingerprint"]}
    assert (tmp_path / "api" / "certificate.png").read_bytes()[:4] == b"\x89PNG"


def test_the_model_s_own_dataset_is_the_default(tmp_path):
    report = suite.certify("builtin:digits-cnn", None, eps=0.1, n=4, attacks=False)
    assert report["dataset"]["spec"] == "builtin:digits" and report["dataset"]["n"] == 4


def _ensemble():
    members = [from_module(seeded_net(seed), input_size=(1, 32, 32)) for seed in (0, 1)]
    return RandomizedEnsemble(members, [0.5, 0.5])


def _text_pair():
    from transformers import BertConfig, BertForSequenceClassification

    from tiny_models import WORDS, tiny_tokenizer

    config = BertConfig(vocab_size=len(WORDS), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=16, num_labels=2)
    return BertForSequenceClassification(config), tiny_tokenizer()


IMAGES = (torch.rand(4, 1, 32, 32), [0, 1, 2, 3])


def _noisy():
    """A randomized defence (noise on its input on every query): one fixed function it is not."""
    net = seeded_net()

    class Noisy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x):
            return self.net(x + 0.1 * torch.randn_like(x))

    return from_module(Noisy(), input_size=(1, 32, 32))

REFUSED = {
    "model-an-int": (lambda: (42, IMAGES), ConfigError, "model must be a spec, a Classifier"),
    "data-an-int": (lambda: ("builtin:digits-cnn", 42), ConfigError, "dataset must be a spec"),
    "module-on-a-spec": (lambda: (seeded_net(), "builtin:digits"), ConfigError, "needs its input size"),
    "texts-for-an-image-model": (lambda: (from_module(seeded_net(), input_size=(1, 32, 32)), (["a", "b"], [0, 1])),
                                 DataError, "is an image model"),
    "pixels-above-one": (lambda: (seeded_net(), (IMAGES[0] + 1, IMAGES[1])), DataError, "in [0, 1]"),
    "text-spec": (lambda: ("builtin:sentiment-tiny", "builtin:sentiment"), ConfigError, "takes text"),
    "hf-spec": (lambda: ("hf:./nowhere", "builtin:digits"), ConfigError, "certify works on image models"),
    "text-pair-in-memory": (lambda: (_text_pair(), (["good movie"], [1])), ConfigError, "takes text"),
    "ensemble-spec": (lambda: ("ensemble:0.5*builtin:digits-cnn,0.5*builtin:digits-cnn", "builtin:digits"),
                      ConfigError, "is a randomized ensemble"),
    "ensemble-in-memory": (lambda: (_ensemble(), IMAGES), ConfigError, "is a randomized ensemble"),
    "ensemble-builtin": (lambda: ("builtin:digits-bat", None), ConfigError, "'builtin:digits-bat' is a randomized ensemble"),
    "randomized-in-memory": (lambda: (_noisy(), IMAGES), ConfigError, "is randomized .its logits differ by up to"),
    "module-without-data": (lambda: (seeded_net(), None), ConfigError, "needs its input size"),
    "memory-model-without-data": (lambda: (from_module(seeded_net(), input_size=(1, 32, 32)), None), ConfigError,
                                  "names no dataset"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_forms_it_cannot_certify_are_refused_in_one_line(case, tmp_path, monkeypatch):
    make, error, message = REFUSED[case]
    monkeypatch.chdir(tmp_path)
    model, data = make()

    def no_load(*args, **kwargs):  # every form is refused before a model loads (a built-in may train)
        raise AssertionError("loaded a model")

    monkeypatch.setattr("suite.evaluation.certify_api.load_model", no_load)
    with pytest.raises(error, match=message.replace("[", r"\[").replace("]", r"\]")) as caught:
        suite.certify(model, data, eps=0.1, n=4, attacks=False)
    assert "\n" not in str(caught.value) and isinstance(caught.value, SuiteError)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("options,message", [
    ({"norm": "l3"}, "norm 'l3' is not one of linf, l2, l1"),
    ({"loss": "dlr"}, "loss 'dlr' is not one of ce, margin"),
    ({"eps": [0.1, -1.0]}, "a radius must be a finite number >= 0"),
    ({"eps": [0.1, float("nan")]}, "a radius must be a finite number >= 0"),
    ({"eps": [0.1, 0.1]}, "eps lists a radius twice"),
    ({"eps": []}, "eps must be a number or a non-empty list of numbers, not []"),
    ({"eps": "0.1"}, "eps must be a number or a non-empty list of numbers, not '0.1'"),  # was the radii '0', '.'...
    ({"eps": [[0.1]]}, "eps must be a number or a non-empty list of numbers"),
    ({"n": 0}, "n must be a whole number >= 1"),
    ({"output": 123}, "output must be a directory path (None: in memory), not 123"),
    ({"boxed": "False"}, "boxed must be True or False, not 'False'"),  # ran boxed, recorded "False"
    ({"seed": -1}, "seed must be an integer >= 0"),
    ({"device": "banana"}, "device 'banana' is not a device"),
])
def test_bad_options_are_refused_before_anything_loads(options, message, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("suite.evaluation.certify_api.load_model", no_loading)
    with pytest.raises(ConfigError, match=re.escape(message)):
        suite.certify("builtin:digits-cnn", "builtin:digits", **{"attacks": False, **options})


def test_an_output_holding_other_files_is_refused_before_anything_loads(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(ConfigError, match="holds files advsuite certify did not write"):
        suite.certify("builtin:sentiment-tiny", "builtin:sentiment", output=tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == ["notes.txt"]


def test_suite_certify_stays_the_api_once_the_bounds_are_imported():
    import importlib

    from suite.evaluation.certify_api import certify

    importlib.import_module("suite.wdro.bounds")  # the bounds live in suite.wdro: no package shadows the name
    assert suite.certify is certify
