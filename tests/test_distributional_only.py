"""A worst case over no point-wise attack is undefined: a run of distributional attacks only
(``wda_pp`` alone) records ``null``, has no threat models, and no consumer (table, Hub export,
compare, summary plot, per-class, leaderboard) shows or publishes a worst case for it; mixed with
point-wise attacks, WDA++ stays out of their worst case."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

import suite
from suite.cli.main import main
from suite.errors import ConfigError
from suite.evaluation.metrics import worst_case_interval, worst_case_robust_accuracy
from suite.report import compare, hub, leaderboard
from suite.report.results import Results, ThreatModelEntry
from suite.report.summary_plot import summary_bars
from suite.report.table import results_table

MODEL, DATASET = "builtin:digits-cnn", "builtin:digits"


@pytest.fixture(scope="module")
def wda_pp_only(tmp_path_factory):
    output = tmp_path_factory.mktemp("wda-pp-only")
    results = suite.evaluate(MODEL, DATASET, attacks=[{"name": "wda_pp", "maxiter": 8}], n=16, output=output)
    return results, output


def test_a_minimum_over_no_attack_is_none():
    clean = [{"id": 0, "correct": 1.0}, {"id": 1, "correct": 0.0}]
    assert worst_case_robust_accuracy(clean, []) is None and worst_case_interval(clean, []) is None
    one = [{0: {"robust": 0.0}}]
    assert worst_case_robust_accuracy(clean, one) == 0.0 and worst_case_interval(clean, one)[0] == 0.0


def test_wda_pp_alone_has_no_worst_case(wda_pp_only):
    results, output = wda_pp_only
    assert results.attacks == {} and results.threat_models == {} and results.broken_only_by == {}
    assert results.worst_case_robust_accuracy is None and results.worst_case_robust_accuracy_ci is None
    entry = results.distributional["wda_pp"]
    assert results.clean_accuracy == 1.0  # the 16 digits are all correct...
    assert entry.accuracy == 0.0 < results.clean_accuracy  # ...and WDA++ flips every one
    assert results.per_class and all(item.threat_models == {} for item in results.per_class.values())
    written = json.loads((output / "results.json").read_text())
    assert written["worst_case_robust_accuracy"] is None and written["worst_case_robust_accuracy_ci"] is None
    assert written["threat_models"] == {}


def test_no_consumer_shows_or_publishes_a_worst_case(wda_pp_only):
    results, output = wda_pp_only
    table = results_table([results])
    assert "worst case" not in table and "wda_pp (distributional)" in table
    found = {score.metric: score.value for score in hub.scores(results)}
    assert "worst_case_robust_accuracy" not in found
    assert found["distributional_accuracy"] == 0.0 and found["accuracy"] == 1.0
    assert compare.overall_view(results).worst == {}
    bars = summary_bars(json.loads((output / "results.json").read_text()))
    assert [bar.kind for bar in bars] == ["clean", "distributional"]
    with pytest.raises(ConfigError, match=r"ran no point-wise attack \(distributional: wda_pp\)"):
        leaderboard.entries_from_results(results)


def test_an_earlier_file_reads_its_clean_accuracy_as_no_worst_case(wda_pp_only):
    results, _ = wda_pp_only
    # What the writer recorded before: the clean accuracy as the minimum over no attack.
    data = results.model_dump(mode="json") | {"worst_case_robust_accuracy": 1.0,
                                              "worst_case_robust_accuracy_ci": [0.8, 1.0]}
    read = Results.model_validate(data)
    assert read.worst_case_robust_accuracy is None and read.worst_case_robust_accuracy_ci is None


def test_a_threat_model_group_needs_a_point_wise_attack():
    with pytest.raises(ValidationError, match="at least 1 item"):
        ThreatModelEntry(threat={"norm": "linf", "eps": 0.03}, attacks=[], worst_case_robust_accuracy=1.0)


def test_cli_table_prints_no_worst_case_and_leaderboard_refuses(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as caught:
        main(["evaluate", "--model", MODEL, "--dataset", DATASET, "--attacks", "wda_pp", "--n", "16",
              "--output", str(out)])
    assert caught.value.code == 0
    printed = capsys.readouterr().out
    assert "wda_pp (distributional)" in printed and "worst case" not in printed
    assert json.loads((out / "results.json").read_text())["worst_case_robust_accuracy"] is None
    with pytest.raises(SystemExit) as caught:
        main(["leaderboard", "add", str(out), "--leaderboard", str(tmp_path / "board.json")])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.count("\n") == 1 and "ran no point-wise attack" in err
    assert not (tmp_path / "board.json").exists()


def test_mixed_run_takes_the_worst_case_over_point_wise_attacks_only(tmp_path):
    attacks = ["fgm_linf", {"name": "pgd_linf", "steps": 5}, {"name": "wda_pp", "maxiter": 8}]
    results = suite.evaluate(MODEL, DATASET, attacks=attacks, eps=0.01, n=16, output=tmp_path)
    assert list(results.threat_models) == ["linf eps=0.01"]
    group = results.threat_models["linf eps=0.01"]
    assert group.attacks == ["fgm_linf", "pgd_linf"] and set(results.broken_only_by) == {"fgm_linf", "pgd_linf"}
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
    clean = {r["id"]: r["correct"] for r in records if r["kind"] == "clean"}
    robust = {(r["attack"], r["id"]): r["robust"] for r in records if r["kind"] == "attack"}
    # Per example, the minimum over the two point-wise attacks (examples not attacked count 0).
    expected = sum(min(robust[("fgm_linf", i)], robust[("pgd_linf", i)]) if clean[i] > 0 else 0.0
                   for i in clean) / len(clean)
    assert results.worst_case_robust_accuracy == group.worst_case_robust_accuracy == pytest.approx(expected)
    # WDA++ reaches lower (it flips every digit within ε under W_1) but is not in the minimum.
    assert results.distributional["wda_pp"].accuracy < expected <= results.attacks["pgd_linf"].robust_accuracy
    table = results_table([results])
    assert sum("worst case" in line for line in table.splitlines()) == 1
