"""Evaluation core v2: fractional correctness on a randomized model, the aggregation hook of a
distributional attack, the Python API on objects in memory and on specs, and v1 results."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from torch import nn

import suite
from suite.attacks.base import ATTACKS, Attack, AttackOutput, InfeasibleError, Threat
from suite.errors import ConfigError, SuiteError
from suite.evaluation.options import RunOptions
from suite.models.base import Classifier, ModelInfo

DATA = Path(__file__).parent / "data"
PROBABILITIES = (0.7, 0.3)


class TwoMemberEnsemble(Classifier):
    """A randomized ensemble of two fixed linear members, drawn with probabilities 0.7 and 0.3.

    Inputs are 1×1×2 "images" x = (x0, x1); member 1 predicts class 1 when x0 > 0.5, member 2
    when x1 > 0.5 (else class 0). For label 0 the exact expected accuracy is
    0.7·[x0 < 0.5] + 0.3·[x1 < 0.5].
    """

    modality = "image"
    labels = ["0", "1"]
    input_size = (1, 1, 2)
    info = ModelInfo(spec="test:two-member-ensemble", revision="fixed")

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def _members(self, batch: torch.Tensor) -> list[torch.Tensor]:
        x = batch.flatten(1)
        return [torch.stack([0.5 - x[:, axis], x[:, axis] - 0.5], dim=1) * 10 for axis in (0, 1)]

    def _forward(self, batch: torch.Tensor) -> torch.Tensor:
        # Expected logits: what a gradient attack on the expected loss would ascend.
        return sum(p * member for p, member in zip(PROBABILITIES, self._members(batch)))

    def correctness(self, batch, labels, *, logits=None):
        return sum(p * (member.argmax(dim=1) == labels).float() for p, member in zip(PROBABILITIES, self._members(batch)))


class Shift(Attack):
    """A fixed move of one coordinate (clamped to [0, 1]): a known outcome on the toy model."""

    modality: ClassVar[str] = "image"
    axis: int
    by: float

    @property
    def threat(self) -> Threat:
        return Threat(norm="linf", eps=0.4)

    def run(self, model, examples, seed):
        outputs = []
        for example in examples:
            moved = example.input.clone()
            moved[0, 0, self.axis] = (moved[0, 0, self.axis] + self.by).clamp(0, 1)
            outputs.append(AttackOutput(moved, float((moved - example.input).abs().max()), 1, 0.0))
        return outputs


class ToyWasserstein(Shift):
    """A distributional toy: every attacked example moves with mass 1/κ (WDA's P_adv,
    accuracy (1 − 1/κ)·clean + (1/κ)·adversarial), or raises when ``infeasible``."""

    metric: ClassVar[str] = "distributional"
    kappa: float = 2.0
    infeasible: bool = False

    @property
    def threat(self) -> Threat:
        return Threat(norm="linf", eps=0.4, p=1.0, kappa=self.kappa)

    def aggregate(self, clean, records) -> dict[str, Any]:
        if self.infeasible:
            raise InfeasibleError("toy_wda: the allocation needs 3 times the Wasserstein budget")
        clean_accuracy = sum(record["correct"] for record in clean) / len(clean)
        adversarial = sum(record["robust"] for record in records) / len(clean)
        return {"accuracy": (1 - 1 / self.kappa) * clean_accuracy + adversarial / self.kappa,
                "adversarial_accuracy": adversarial}


@pytest.fixture
def toy_attacks():
    for name, cls in (("toy_shift", Shift), ("toy_wda", ToyWasserstein)):
        cls.name = name
        ATTACKS.add(name, cls)
    yield
    ATTACKS.remove("toy_shift")
    ATTACKS.remove("toy_wda")


def _toy_data() -> tuple[torch.Tensor, torch.Tensor]:
    """Four examples of label 0 with expected clean accuracy 1.0, 0.7, 0.3 and 0."""
    points = [(0.2, 0.2), (0.2, 0.8), (0.8, 0.2), (0.8, 0.8)]
    return torch.tensor(points).view(4, 1, 1, 2), torch.zeros(4, dtype=torch.long)


def test_randomized_model_gets_exact_fractional_accuracy_and_worst_case(toy_attacks, tmp_path):
    attacks = [
        {"name": "toy_shift", "label": "right0", "axis": 0, "by": 0.4},   # x0 + 0.4
        {"name": "toy_shift", "label": "right1", "axis": 1, "by": 0.4},   # x1 + 0.4
        {"name": "toy_shift", "label": "left0", "axis": 0, "by": -0.4},   # helps example 3
    ]
    results = suite.evaluate(TwoMemberEnsemble(), _toy_data(), attacks=attacks, output=tmp_path)
    assert results.clean_accuracy == pytest.approx((1.0 + 0.7 + 0.3 + 0.0) / 4)
    # right0: (0.6, 0.2) → 0.3, (0.6, 0.8) → 0, (1.0, 0.2) → 0.3; the fourth is not attacked.
    assert results.attacks["right0"].robust_accuracy == pytest.approx((0.3 + 0.0 + 0.3) / 4)
    # right1: (0.2, 0.6) → 0.7, (0.2, 1.0) → 0.7, (0.8, 0.6) → 0.
    assert results.attacks["right1"].robust_accuracy == pytest.approx((0.7 + 0.7 + 0.0) / 4)
    # left0 makes the third example MORE correct (0.3 → 1.0): robust is capped at the clean value.
    assert results.attacks["left0"].robust_accuracy == pytest.approx((1.0 + 0.7 + 0.3) / 4)
    assert results.attacks["right0"].n_attacked == 3
    # Success rate: the share of clean correctness removed, (0.7 + 0.7 + 0) / 2.0.
    assert results.attacks["right0"].success_rate == pytest.approx(0.7)
    # Per example, the minimum over attacks: 0.3, 0, 0, 0.
    assert results.worst_case_robust_accuracy == pytest.approx(0.3 / 4)
    # What the worst case owes each attack: right0 alone took 0.4 + 0.7, right1 alone 0.3.
    assert results.broken_only_by == pytest.approx({"right0": 1.1, "right1": 0.3, "left0": 0.0})
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
    clean = {r["id"]: r["correct"] for r in records if r["kind"] == "clean"}
    assert clean == pytest.approx({"0": 1.0, "1": 0.7, "2": 0.3, "3": 0.0})
    robust = {r["id"]: r["robust"] for r in records if r["kind"] == "attack" and r["attack"] == "right1"}
    assert robust == pytest.approx({"0": 0.7, "1": 0.7, "2": 0.0})


def test_distributional_attack_reports_its_own_metric_outside_the_worst_case(toy_attacks, tmp_path):
    from suite.report import leaderboard

    attacks = [{"name": "toy_shift", "axis": 1, "by": 0.4}, {"name": "toy_wda", "axis": 0, "by": 0.4}]
    results = suite.evaluate(TwoMemberEnsemble(), _toy_data(), attacks=attacks, output=tmp_path)
    assert set(results.attacks) == {"toy_shift"} and set(results.distributional) == {"toy_wda"}
    entry = results.distributional["toy_wda"]
    # (1 − 1/2)·0.5 + (1/2)·(0.3 + 0 + 0.3)/4
    assert entry.accuracy == pytest.approx(0.25 + 0.075)
    assert entry.details["adversarial_accuracy"] == pytest.approx(0.15)
    assert entry.threat.p == 1.0 and entry.threat.kappa == 2.0 and entry.metric == "distributional"
    # The worst case is the point-wise attack's alone (toy_wda would have lowered it to 0.3/4).
    assert results.worst_case_robust_accuracy == pytest.approx(results.attacks["toy_shift"].robust_accuracy)
    assert set(results.broken_only_by) == {"toy_shift"}
    assert all("toy_wda" not in group.attacks for group in results.threat_models.values())
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["distributional"]["toy_wda"]["accuracy"] == pytest.approx(0.325)
    for row in leaderboard.entries_from_results(results):
        assert "toy_wda" not in row.robust_accuracy
        assert row.worst_case_robust_accuracy == pytest.approx(results.worst_case_robust_accuracy)
    with pytest.raises(InfeasibleError, match="Wasserstein budget"):
        suite.evaluate(TwoMemberEnsemble(), _toy_data(), attacks=[{"name": "toy_wda", "axis": 0, "by": 0.4,
                                                                    "infeasible": True}])


# --------------------------------------------------------------------------- the Python API


def _linear_net() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(40, 1, 4, 4, generator=generator)
    weights = torch.randn(16, 3, generator=generator)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    with torch.no_grad():
        net[1].weight.copy_(weights.T)
        net[1].bias.zero_()
    labels = (images.flatten(1) @ weights).argmax(dim=1)
    return net, images, labels


def test_api_on_a_plain_module_and_tensors_respects_the_ball_and_resumes(tmp_path):
    net, images, labels = _linear_net()
    out = tmp_path / "api"
    first = suite.evaluate(net, (images, labels), attacks=["pgd_linf", "fgm_linf"], eps=0.05, output=out)
    assert first.clean_accuracy == 1.0 and first.model.spec == "module:Sequential"
    assert first.model.revision.startswith("sha256-")
    assert 0 < first.attacks["pgd_linf"].robust_accuracy < 1
    assert first.attacks["pgd_linf"].robust_accuracy <= first.attacks["fgm_linf"].robust_accuracy
    records = (out / "records.jsonl").read_text()
    for record in map(json.loads, records.splitlines()):
        if record["kind"] == "attack":
            assert record["perturbation"] <= 0.05 + 1e-6
    # Resume: a second call reads every record back and adds none.
    again = suite.evaluate(net, (images, labels), attacks=["pgd_linf", "fgm_linf"], eps=0.05, output=out)
    assert (out / "records.jsonl").read_text() == records
    assert again.attacks["pgd_linf"] == first.attacks["pgd_linf"].model_copy(
        update={"seconds": again.attacks["pgd_linf"].seconds})
    # Other weights are another model: the directory is refused without overwrite.
    with torch.no_grad():
        net[1].bias.add_(0.01)
    with pytest.raises(ConfigError, match="the model.s weights changed"):
        suite.evaluate(net, (images, labels), attacks=["pgd_linf", "fgm_linf"], eps=0.05, output=out)
    # In memory: the same numbers, and no files at all.
    with torch.no_grad():
        net[1].bias.sub_(0.01)
    in_memory = suite.evaluate(net, (images, labels), attacks=["fgm_linf"], eps=0.05)
    assert in_memory.attacks["fgm_linf"].robust_accuracy == first.attacks["fgm_linf"].robust_accuracy
    assert in_memory.plots == [] and sorted(path.name for path in tmp_path.iterdir()) == ["api"]


@pytest.mark.slow
def test_api_on_a_transformers_model_matches_the_spec(sentiment_model):
    from suite.data.builtin import sentiment

    test = sentiment("test")
    texts, labels = list(test.inputs[:12]), list(test.labels[:12])
    options = RunOptions(batch_size=4)
    by_spec = suite.evaluate("builtin:sentiment-tiny", (texts, labels), attacks=["deepwordbug"],
                             adversary=["none"], options=options)
    by_object = suite.evaluate((sentiment_model.module, sentiment_model.tokenizer), (texts, labels),
                               attacks=["deepwordbug"], adversary=["none"], options=options)
    assert by_object.model.spec.startswith("transformers:")
    assert by_object.clean_accuracy == by_spec.clean_accuracy
    for field in ("robust_accuracy", "success_rate", "mean_queries", "mean_perturbation"):
        assert getattr(by_object.attacks["deepwordbug"], field) == getattr(by_spec.attacks["deepwordbug"], field)


def test_api_on_a_spec_matches_the_cli(tmp_path):
    from test_cli import advsuite

    args = dict(attacks=["pgd_linf"], eps=0.03, n=16)
    api = suite.evaluate("builtin:digits-cnn", "builtin:digits", **args, output=tmp_path / "api")
    assert advsuite("evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--attacks", "pgd_linf",
                    "--eps", "0.03", "--n", "16", "--output", str(tmp_path / "cli")) == 0

    def records(directory: Path) -> list[dict]:
        rows = [json.loads(line) for line in (directory / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
        return [{key: value for key, value in row.items() if key != "seconds"} for row in rows]

    assert records(tmp_path / "api") == records(tmp_path / "cli")
    cli = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert api.clean_accuracy == cli["clean_accuracy"]
    assert api.attacks["pgd_linf"].robust_accuracy == cli["attacks"]["pgd_linf"]["robust_accuracy"]
    assert api.attacks["pgd_linf"].threat == Threat(norm="linf", eps=0.03)


def test_api_errors_are_the_cli_lines(capsys):
    from test_cli import advsuite

    with pytest.raises(SuiteError) as caught:
        suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["pgd_lnf"])
    assert advsuite("evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits",
                    "--attacks", "pgd_lnf") == 2
    assert capsys.readouterr().err.strip() == f"advsuite: error: {caught.value}"
    with pytest.raises(ConfigError, match="eps does not apply to deepwordbug: it takes no radius"):
        suite.evaluate("builtin:sentiment-tiny", "builtin:sentiment", attacks=["deepwordbug"], eps=0.1)
    net, images, labels = _linear_net()
    with pytest.raises(SuiteError, match=r"pixels in \[0, 1\]"):
        suite.evaluate(net, (images * 255, labels), attacks=["fgm_linf"])
    poisoned = images.clone()
    poisoned[1, 0, 0, 0] = float("nan")  # min() and max() do not see it: NaN compares false
    with pytest.raises(SuiteError, match="NaN or infinite"):
        suite.evaluate(net, (poisoned, labels), attacks=["fgm_linf"])
    with pytest.raises(SuiteError, match="out of range"):
        suite.evaluate(net, (images, labels + 5), attacks=["fgm_linf"])
    with pytest.raises(ConfigError, match="model must be"):
        suite.evaluate(42, (images, labels))
    with pytest.raises(SuiteError, match=r"label (0|1).5 is not a class index"):  # int(0.5) made it class 0
        suite.evaluate(net, (images, labels.float() + 0.5), attacks=["fgm_linf"])


@pytest.mark.parametrize("keywords, says", [
    ({"n": -1}, "n must be a whole number >= 1 (None: every example), not -1"),  # evaluated all but one
    ({"n": True}, "n must be a whole number >= 1"),
    ({"n": 2.5}, "n must be a whole number >= 1"),
    ({"eps": True}, "eps must be a number or a non-empty list of numbers, not True"),  # ran at eps 1
    ({"eps": "0.1"}, "eps must be a number or a non-empty list"),
    ({"eps": []}, "eps must be a number or a non-empty list"),  # fell back to the defaults
    ({"attacks": [1]}, "attacks must be attack names or {'name': ...} mappings, not [1]"),
    ({"options": {"seed": 1}}, "options must be a suite.RunOptions, not dict"),
    ({"output": ""}, "output must be a directory path (None: in memory), not ''"),  # wrote into the cwd
    ({"options": "RunOptions(seed=-1)"}, "options must be a suite.RunOptions, not str"),
])
def test_api_keywords_of_the_wrong_kind_are_one_line(keywords, says):
    with pytest.raises(ConfigError) as caught:
        suite.evaluate("builtin:digits-cnn", "builtin:digits", **keywords)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_run_options_and_recipe_limits_are_checked():
    for options, says in (({"seed": -1}, "seed must be a whole number >= 0, not -1"),
                          ({"batch_size": 0}, "batch_size must be a whole number >= 1 or 'auto', not 0"),
                          ({"batch_size": 1.5}, "batch_size must be a whole number >= 1 or 'auto', not 1.5")):
        with pytest.raises(ConfigError, match=re.escape(says)):
            suite.RunOptions(**options)
    for limit in (-1, 0, "5", True):  # limit=-1 ran 358 examples where the task said 10
        with pytest.raises(ConfigError, match="limit must be a whole number >= 1"):
            suite.run_recipe("quickstart", limit=limit)


def test_a_single_name_is_one_attack_not_its_letters(tmp_path):
    """``attacks="fgm_linf"`` was the attacks f, g, m...: now the attack fgm_linf."""
    results = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks="fgm_linf", eps=0.05, n=4)
    assert list(results.attacks) == ["fgm_linf"]


# --------------------------------------------------------------------------- results v1


def test_version_1_results_still_merge_into_the_leaderboard(tmp_path):
    from suite.report import leaderboard

    path = tmp_path / "leaderboard.json"
    board, added, _ = leaderboard.add([DATA / "results_v1_vision.json", DATA / "results_v1_text.json"], path)
    assert added == 2
    v1 = json.loads((DATA / "results_v1_vision.json").read_text())
    vision = next(entry for entry in board.entries if entry.threat_model == "linf")
    assert (vision.eps, vision.norm) == (0.03, "linf")
    assert vision.worst_case_robust_accuracy == v1["threat_models"]["linf eps=0.03"]["worst_case_robust_accuracy"]
    assert vision.robust_accuracy == {key: entry["robust_accuracy"] for key, entry in v1["attacks"].items()}
    # Version 1 called every text attack word-level; its entry keeps that name.
    text = next(entry for entry in board.entries if entry.task == "builtin:sentiment/test")
    assert text.threat_model == "word-level" and text.eps is None
    upgraded = leaderboard.read_results(DATA / "results_v1_vision.json")
    assert upgraded.schema_version == 2 and upgraded.attacks["pgd_linf"].access == "white-box"
    assert upgraded.broken_only_by == v1["broken_only_by"]
