"""A results.json changed after its run is refused before it is published; one shared without its
records is published as unverified and never replaces a verified entry; a weaker evaluation
never replaces a stronger one, on the leaderboard or in a model card (suite.report.verify)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

import suite
from suite.errors import ConfigError
from suite.evaluation.options import RunOptions
from suite.report import hub, leaderboard


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Real runs of builtin:digits-cnn at L∞ 0.015 on 8 test digits: FGM and PGD, FGM alone
    (the same n, seed and data: another recipe), and FGM alone on 4 digits with seed 1."""
    root = tmp_path_factory.mktemp("verify")
    suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf", "pgd_linf"], eps=0.015, n=8,
                   output=root / "both")
    suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf"], eps=0.015, n=8, output=root / "fgm")
    suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf"], eps=0.015, n=4,
                   options=RunOptions(seed=1), output=root / "small")
    return {name: root / name for name in ("both", "fgm", "small")}


def _copy(run: Path, to: Path, edit, files=("results.json", "records.jsonl", "run.json")) -> Path:
    to.mkdir()
    for name in files:
        shutil.copy(run / name, to / name)
    data = json.loads((to / "results.json").read_text())
    edit(data)
    (to / "results.json").write_text(json.dumps(data))
    return to


def test_the_runs_break_what_the_checks_rely_on(runs):
    both = json.loads((runs["both"] / "results.json").read_text())
    fgm = json.loads((runs["fgm"] / "results.json").read_text())
    # PGD breaks examples FGM leaves: dropping it raises the worst case.
    assert both["worst_case_robust_accuracy"] < fgm["worst_case_robust_accuracy"]
    assert both["config_hash"] != fgm["config_hash"]


def _drop_pgd(data: dict) -> None:
    fgm = data["attacks"]["fgm_linf"]
    del data["attacks"]["pgd_linf"]
    data["broken_only_by"].pop("pgd_linf", None)
    for group in data["per_class"].values():
        del group["attacks"]["pgd_linf"]
        kept = group["attacks"]["fgm_linf"]
        for threat in group["threat_models"].values():
            threat.update(worst_case_robust_accuracy=kept["robust_accuracy"],
                          worst_case_robust_accuracy_ci=kept["robust_accuracy_ci"])
    for group in [*data["threat_models"].values(), data]:
        group["worst_case_robust_accuracy"] = fgm["robust_accuracy"]
        group["worst_case_robust_accuracy_ci"] = fgm["robust_accuracy_ci"]
    for group in data["threat_models"].values():
        group["attacks"] = ["fgm_linf"]


def _retarget(data: dict) -> None:
    """ε 0.015 → 0.3 everywhere in the file (the records and run.json are the run's)."""
    text = json.dumps(data).replace('"eps": 0.015', '"eps": 0.3').replace("eps=0.015", "eps=0.3")
    data.clear()
    data.update(json.loads(text))


def _flag(data: dict) -> None:
    data["illusion"].update(flagged=True, max_drop=0.9)


@pytest.mark.parametrize("edit, message", [
    (_drop_pgd, "its records.jsonl holds records of attack 'pgd_linf' that results.json does not report"),
    (_retarget, "its task's attacks"),
    (_flag, "its illusion of robustness is flagged with a largest drop of 0.9, but its attacks' accuracies give 0"),
    (lambda data: data["attacks"]["pgd_linf"]["params"].update(eps=0.3),
     "attack 'pgd_linf' has eps 0.3 but its threat 0.015"),
    (lambda data: data.update(config_hash="0" * 16), "its config_hash '0000000000000000' is not its run.json's"),
], ids=["an attack dropped", "another eps", "a flag raised", "an attack's params", "the recipe hash"])
def test_results_changed_after_the_run_are_refused_by_add_and_export(runs, tmp_path, edit, message):
    changed = _copy(runs["both"], tmp_path / "changed", edit)
    for publish in (lambda: leaderboard.add([changed / "results.json"], tmp_path / "lb" / "leaderboard.json"),
                    lambda: hub.export(changed, tmp_path / "card")):
        with pytest.raises(ConfigError, match="results.json was changed after the run") as refused:
            publish()
        assert message in str(refused.value)
    assert not (tmp_path / "lb").exists() and not (tmp_path / "card").exists()


def test_a_weaker_evaluation_never_replaces_a_stronger_entry(runs, tmp_path):
    path = tmp_path / "leaderboard.json"
    board, added, _ = leaderboard.add([runs["both"] / "results.json"], path)
    assert added == 1 and board.entries[0].verified is True
    before = path.read_text()
    with pytest.raises(ConfigError, match="another evaluation, with recipe .* these results come from recipe"):
        leaderboard.add([runs["fgm"] / "results.json"], path)
    # Results shared alone: checked against themselves only, so unverified, and never over a verified entry.
    alone = _copy(runs["both"], tmp_path / "alone", lambda data: None, files=("results.json",))
    with pytest.raises(ConfigError, match="An unverified entry never replaces a verified one"):
        leaderboard.add([alone / "results.json"], path)
    assert path.read_text() == before
    board, _, replaced = leaderboard.add([runs["fgm"] / "results.json"], path, replace=True)
    assert replaced == 1 and set(board.entries[0].robust_accuracy) == {"fgm_linf"}
    fresh, _, _ = leaderboard.add([alone / "results.json"], tmp_path / "other" / "leaderboard.json")
    assert fresh.entries[0].verified is False
    assert leaderboard.rows(fresh)[0]["n"] == "8 (unverified)"


def test_a_card_holds_one_evaluation_per_model_split_and_threat(runs, tmp_path):
    """Re-exported from another evaluation, the card used to keep the old PGD result (0 %) beside a
    new worst case over FGM alone: refused now, and with replace the old group goes whole."""
    hub_runs = {}
    for name in ("both", "small"):  # as if on a Hub dataset, so that .eval_results are written too

        def on_hub(data):
            data["dataset"]["spec"] = data["config"]["dataset"]["spec"] = "hf:ylecun/mnist"
        hub_runs[name] = _copy(runs[name], tmp_path / name, on_hub, files=("results.json",))
    card = tmp_path / "card"
    hub.export(hub_runs["both"], card)
    before = (card / "README.md").read_text()
    with pytest.raises(ConfigError, match=r"from another evaluation \(n 8 there, 4 here; seed 0 there, 1 here\)"):
        hub.export(hub_runs["small"], card)
    assert (card / "README.md").read_text() == before
    done = hub.export(hub_runs["small"], card, replace=True)
    metadata = yaml.safe_load((card / "README.md").read_text().split("---")[1])
    metrics = [metric for result in metadata["model-index"][0]["results"] for metric in result["metrics"]]
    assert sorted(metric["config"] for metric in metrics) == [
        "clean", "fgm_linf, linf eps=0.015", "worst case, linf eps=0.015"]
    assert {metric["args"]["n"] for metric in metrics} == {4}
    entries = yaml.safe_load((card / done.files[1]).read_text())
    assert sorted(entry["dataset"]["task_id"] for entry in entries) == [
        "test/accuracy", "test/robust_accuracy/linf-eps0.015/fgm_linf", "test/worst_case_robust_accuracy/linf-eps0.015"]


def test_a_lone_surrogate_is_refused_in_one_line(runs, tmp_path, capsys):
    from suite.cli.main import main

    def name(data):
        data["model"]["name"] = data["model"]["spec"] = "builtin:digits-cnn\ud800"
    changed = _copy(runs["both"], tmp_path / "s", name, files=("results.json",))
    for command in (["compare", str(changed), str(changed)], ["export", str(changed), "--to", str(tmp_path / "c")]):
        with pytest.raises(SystemExit) as done:
            main(command)
        assert done.value.code == 2
        error = capsys.readouterr().err
        assert "lone UTF-16 surrogate" in error and error.count("\n") == 1
    assert not (tmp_path / "c").exists()


def test_the_device_is_the_runs_not_the_configurations(runs, tmp_path):
    """cuda:0 and cuda:1, or the default and the device it resolves to, are one evaluation: the
    same config hash (so the same leaderboard recipe), and a results file that names its device
    passes the identity check against a run.json that names none."""
    from suite.evaluation.recipe import TaskConfig
    from suite.report.results_file import read_results
    from suite.report.verify import check_identity

    def task(**model):
        return TaskConfig(name="t", model={"spec": "builtin:digits-cnn", **model}, dataset="builtin:digits",
                          attacks=[{"name": "fgm_linf"}])

    hashes = {task(**device).fingerprint(0) for device in ({}, {"device": "cpu"}, {"device": "cuda:1"})}
    assert len(hashes) == 1
    assert task(device="cuda").identity(0)["model"]["device"] is None
    members = [{"spec": "builtin:digits-cnn", "probability": 0.5, "device": "cpu"},
               {"spec": "builtin:digits-cnn-at", "probability": 0.5}]
    ensemble = TaskConfig(name="e", model={"spec": "ensemble:pair", "members": members}, dataset="builtin:digits",
                          attacks=[{"name": "fgm_linf"}])
    assert [m["device"] for m in ensemble.identity(0)["model"]["members"]] == [None, None]
    # Its results as a run with --device cpu writes them: the configuration names the device.
    named = _copy(runs["fgm"], tmp_path / "named", lambda data: data["config"]["model"].update(device="cpu"))
    assert check_identity(named / "results.json", read_results(named / "results.json"))
    # ...but another model option is still another evaluation.
    edited = _copy(runs["fgm"], tmp_path / "edited", lambda data: data["config"]["model"].update(max_length=7))
    with pytest.raises(ConfigError, match="model.max_length"):
        check_identity(edited / "results.json", read_results(edited / "results.json"))
