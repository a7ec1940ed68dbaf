"""The radius users say: ``--eps``/``--norm`` for the default attacks, a model's declared threat
model, and where the radius came from (:mod:`suite.evaluation.radius`)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import suite
from bad_input_output import without_wordnet
from suite.cli.main import main
from suite.errors import ConfigError
from suite.evaluation.recipe import DEFAULT_ENSEMBLE_ATTACKS, TaskConfig
from suite.evaluation.radius import resolve_radius
from suite.models import load_model
from suite.models.card import BUILTIN_THREAT_MODELS, card_threat_model, card_threat_text, declared_threat_model
from suite.threat import Threat

AT = ("evaluate", "--model", "builtin:digits-cnn-at", "--dataset", "builtin:digits", "--n", "12")


def _cli(argv, capsys) -> tuple[dict, str, str]:
    with pytest.raises(SystemExit) as caught:
        main([str(part) for part in argv])
    out = capsys.readouterr()
    assert caught.value.code == 0, out.err
    output = argv[argv.index("--output") + 1]
    return json.loads((output / "results.json").read_text()), out.out, out.err


def test_eps_alone_runs_the_default_attack_at_that_radius(tmp_path, capsys):
    argv = ["evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--n", "16", "--eps", "0.05"]
    results, out, _ = _cli([*argv, "--output", tmp_path / "run"], capsys)
    assert list(results["attacks"]) == ["auto"]
    assert results["attacks"]["auto"]["threat"] == {"norm": "linf", "eps": 0.05, "level": None, "p": None, "kappa": None}
    assert results["radius"]["source"] == "requested"
    assert "radius, requested: auto: linf eps=0.05" in out


def test_a_robust_builtin_is_evaluated_at_its_declared_threat_model(tmp_path, capsys):
    results, out, _ = _cli([*AT, "--output", tmp_path / "run"], capsys)
    assert results["attacks"]["auto"]["threat"]["eps"] == 0.15
    assert results["attacks"]["auto"]["params"]["norm"] == "linf"
    assert results["radius"]["source"] == "model"
    assert "builtin:digits-cnn-at declares" in out and "radius, model" in out
    assert not results["warnings"] or all("default radius" not in w for w in results["warnings"])


def test_a_model_without_a_threat_model_keeps_the_defaults_and_is_warned_about(tmp_path, capsys, caplog):
    argv = ["--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--n", "16"]
    results, out, _ = _cli(["evaluate", *argv, "--output", tmp_path / "run"], capsys)
    assert results["attacks"]["auto"]["threat"]["eps"] == pytest.approx(8 / 255)
    assert results["radius"]["source"] == "attack defaults"
    assert any("declares no threat model" in warning and "auto" in warning for warning in results["warnings"])
    assert any("declares no threat model" in record.getMessage() for record in caplog.records)
    l2, _, _ = _cli(["evaluate", *argv, "--norm", "l2", "--output", tmp_path / "l2"], capsys)
    assert l2["attacks"]["auto"]["threat"]["norm"] == "l2" and l2["attacks"]["auto"]["threat"]["eps"] == 0.5


def test_several_radii_run_the_default_attack_at_each_in_the_python_api(digits_model):
    results = suite.evaluate(digits_model, "builtin:digits", eps=[0.01, 0.05], n=16)
    assert list(results.attacks) == ["auto-eps0.01", "auto-eps0.05"]
    assert [entry.threat.eps for entry in results.attacks.values()] == [0.01, 0.05]
    assert results.attacks["auto-eps0.05"].robust_accuracy <= results.attacks["auto-eps0.01"].robust_accuracy
    assert results.radius.source == "requested" and results.worst_case_robust_accuracy is None


def test_eps_applies_to_an_in_memory_module():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 4 * 4, 3))
    images, labels = torch.rand(12, 3, 4, 4), torch.randint(0, 3, (12,))
    results = suite.evaluate(module, (images, labels), eps=0.2, norm="l2")
    assert results.attacks["auto"].threat == Threat(norm="l2", eps=0.2)
    assert results.radius.source == "requested"


def test_the_default_ensemble_attacks_take_the_radius_and_the_declared_threat_model():
    model = load_model("builtin:digits-bat")
    assert model.info.threat_model == BUILTIN_THREAT_MODELS["digits-bat"] == Threat(norm="linf", eps=0.15)
    task = TaskConfig(model="builtin:digits-bat", dataset="builtin:digits", eps=0.1)
    resolved, radius = resolve_radius(task, model, DEFAULT_ENSEMBLE_ATTACKS)
    assert [config.name for config in resolved.attacks] == list(DEFAULT_ENSEMBLE_ATTACKS)
    assert all(config.params["eps"] == 0.1 for config in resolved.attacks) and radius.source == "requested"
    declared, radius = resolve_radius(task.model_copy(update={"eps": ()}), model, DEFAULT_ENSEMBLE_ATTACKS)
    assert all(config.params == {"norm": "linf", "eps": 0.15} for config in declared.attacks)
    assert radius.source == "model" and resolved.eps == () and declared.eps == ()
    # An attack that sets its own radius keeps it; WDA's Wasserstein budget never takes the model's.
    own = TaskConfig(model="builtin:digits-bat", dataset="builtin:digits", attacks=[{"name": "pgd_linf", "eps": 0.05}, "wda"])
    kept, radius = resolve_radius(own, model, DEFAULT_ENSEMBLE_ATTACKS)
    assert kept.attacks[0].params == {"eps": 0.05} and kept.attacks[1].params == {} and radius is None


def test_a_local_model_declares_its_threat_model_in_its_card(digits_model, tmp_path, capsys):
    directory = tmp_path / "mine"
    shutil.copytree(digits_model.info.extra["path"], directory)
    (directory / "README.md").write_text("---\nlicense: mit\n" + card_threat_text(Threat(norm="l2", eps=0.3))
                                         + "\n---\n# mine\n")
    assert declared_threat_model(f"timm:{directory}") == Threat(norm="l2", eps=0.3)
    results, out, _ = _cli(["evaluate", "--model", f"timm:{directory}", "--dataset", "builtin:digits", "--n", "8",
                            "--output", tmp_path / "run"], capsys)
    assert results["attacks"]["auto"]["threat"]["norm"] == "l2" and results["attacks"]["auto"]["threat"]["eps"] == 0.3
    assert results["radius"]["source"] == "model"
    (directory / "README.md").write_text("---\nthreat_model: {norm: l7, eps: 0.3}\n---\n")
    with pytest.raises(ConfigError, match="bad threat_model"):
        declared_threat_model(f"timm:{directory}")


def test_card_threat_model_round_trips_and_refuses_nonsense():
    for threat in (Threat(norm="linf", eps=8 / 255), Threat(norm="l2", eps=0.5)):
        assert card_threat_model(f"---\n{card_threat_text(threat)}\n---\n", "x") == threat
    assert card_threat_model("---\nlicense: mit\n---\n", "x") is None
    for bad in ("threat_model: linf", "threat_model: {norm: linf}", "threat_model: {norm: linf, eps: -1}",
                "threat_model: {norm: linf, eps: .inf}", "threat_model: {norm: linf, eps: 1, p: 2}"):
        with pytest.raises(ConfigError):
            card_threat_model(f"---\n{bad}\n---\n", "x")


def test_a_card_s_alias_bomb_is_one_short_line():
    """Nine levels of nine YAML aliases parse in milliseconds, but the message's repr of them grew
    until memory ran out (the run hung at 2.5 GB and climbing)."""
    import time

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]" for level in range(1, 9)]
    card = "---\n" + "\n".join(lines) + "\nthreat_model: *a8\n---\n"
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="has a bad threat_model") as caught:
        card_threat_model(card, "x")
    assert len(str(caught.value)) < 400 and time.perf_counter() - start < 10


def test_a_config_nested_too_deep_or_too_large_is_one_line(tmp_path):
    from suite.models import timm_dir

    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="is not a timm model directory"):
        timm_dir.read_dir_config(tmp_path)
    (tmp_path / "config.json").write_text('{"architecture": "x", "pad": "' + "y" * (timm_dir.CONFIG_BYTES + 1) + '"}')
    with pytest.raises(ConfigError, match="a timm config is a few KB"):
        timm_dir.read_dir_config(tmp_path)


def test_an_ensemble_is_no_ensemble_s_member(digits_model):
    """digits-bat as a member was scored by its averaged answer: 93.8 % where it has 85.6 %."""
    from suite.models.ensemble import RandomizedEnsemble

    inner = RandomizedEnsemble([digits_model, digits_model], [0.5, 0.5])
    with pytest.raises(ConfigError, match="is itself a randomized ensemble: list its members"):
        RandomizedEnsemble([inner, digits_model], [0.5, 0.5])


def test_ls_lists_each_robust_builtin_with_its_threat_model(capsys):
    with pytest.raises(SystemExit) as done:
        main(["ls", "models"])
    assert done.value.code == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    for name, threat in BUILTIN_THREAT_MODELS.items():
        assert rows[f"builtin:{name}"].endswith(f"[trained for {threat.label}]")
    assert "trained for" not in rows["builtin:digits-cnn"] and "trained for" not in rows["builtin:sentiment-tiny"]


def test_a_fixed_norm_attack_of_another_norm_is_refused_at_a_declared_radius():
    model = load_model("builtin:digits-cnn-at")
    task = TaskConfig(model="builtin:digits-cnn-at", dataset="builtin:digits", attacks=["pgd_l2"])
    with pytest.raises(ConfigError, match="declares the threat model linf eps=0.15, which pgd_l2 cannot run at"):
        resolve_radius(task, model, ())
    resolved, radius = resolve_radius(task.model_copy(update={"eps": (0.4,)}), model, ())
    assert resolved.attacks[0].params == {"eps": 0.4} and radius.source == "requested"


def test_training_writes_the_threat_model_into_the_card():
    from suite.train import method_for
    from suite.train.config import TrainConfig
    from suite.train.image import training_card

    config = TrainConfig(model="timm:test_resnet", dataset="builtin:digits", method="pgd_at",
                         method_params={"eps": 0.1})
    card = training_card(config, method_for(config))
    assert card_threat_model(card, "x") == Threat(norm="linf", eps=0.1)
    standard = config.model_copy(update={"method": "standard", "method_params": {}})
    assert card_threat_model(training_card(standard, method_for(standard)), "x") is None


def test_a_recipe_skips_the_tasks_whose_model_needs_missing_wordnet_and_runs_the_rest(tmp_path, monkeypatch,
                                                                                     capsys, caplog):
    without_wordnet(monkeypatch)
    recipe = tmp_path / "mixed.yaml"
    recipe.write_text(
        "name: mixed\ntasks:\n"
        "  - {name: tiny, model: builtin:sentiment-tiny, dataset: {spec: builtin:sentiment, n: 4},\n"
        "     attacks: [deepwordbug, {name: pwws, optional: true}], adversary: {kinds: [none]}}\n"
        "  - {name: ascc, model: builtin:sentiment-ascc-s0, dataset: {spec: builtin:sentiment, n: 4},\n"
        "     attacks: [deepwordbug]}\n")
    with pytest.raises(SystemExit) as caught:
        main(["run", str(recipe), "--output", str(tmp_path / "run")])
    out = capsys.readouterr()
    assert caught.value.code == 0, out.err
    assert "Traceback" not in out.err
    skipped = [record.getMessage() for record in caplog.records if "skipped" in record.getMessage()]
    assert len(skipped) == 2, out.err  # the ASCC task, and PWWS in the other task
    assert all("advsuite prefetch --wordnet-from" in line for line in skipped)
    assert any("skipped task 'ascc'" in line and "builtin:sentiment-ascc-s0" in line for line in skipped)
    assert (tmp_path / "run" / "tiny" / "results.json").is_file() and not (tmp_path / "run" / "ascc").exists()
    # One model alone is refused in one line, before anything is written.
    with pytest.raises(SystemExit) as caught:
        main(["evaluate", "--model", "builtin:sentiment-ascc-s0", "--output", str(tmp_path / "one")])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.count("\n") == 1 and "--wordnet-from" in err, err
    assert not (tmp_path / "one").exists()


def test_a_module_whose_weights_are_all_buffers_is_evaluated():
    from suite.models.wrap import from_module

    class Fixed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("weight", torch.eye(3, 16) * 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.flatten(1) @ self.weight.T

    model = from_module(Fixed(), input_size=(1, 4, 4))
    images = torch.zeros(6, 1, 4, 4)
    labels = torch.arange(6) % 3
    images.view(6, -1)[torch.arange(6), labels] = 0.5  # class k: pixel k lit, a logit margin of 2
    results = suite.evaluate(model, (images, labels), attacks=["fgm_linf"], eps=0.3)
    assert model.device == torch.device("cpu")
    assert results.clean_accuracy == 1.0 and results.attacks["fgm_linf"].robust_accuracy == 0.0


def test_results_and_the_leaderboard_say_what_a_model_was_trained_for(tmp_path):
    from suite.report import leaderboard

    results = suite.evaluate("builtin:digits-cnn-at", "builtin:digits", attacks=["fgm_linf"], n=8,
                             output=tmp_path / "run")
    assert results.model.threat_model == Threat(norm="linf", eps=0.15)
    assert results.attacks["fgm_linf"].threat.eps == 0.15  # a named attack without a radius takes the model's
    board, added, _ = leaderboard.add([tmp_path / "run" / "results.json"], tmp_path / "board" / "leaderboard.json")
    assert added == 1 and board.entries[0].trained_for == "linf eps=0.15"
    assert leaderboard.rows(board)[0]["trained for"] == "linf eps=0.15"


def test_a_ball_that_holds_every_image_is_warned_about(tmp_path):
    """Radii are in [0, 1] pixel units: L∞ ε ≥ 1 (L2 ε ≥ √d) admits every image, so robust
    accuracy there only says whether the model can be fooled at all. The usual cause is a
    radius in 0-255 levels (``--eps 8``); the warning says what 8/255 is. Not refused: a run
    at ε = 1 is a legitimate sanity check."""
    from suite.evaluation.radius import vacuous_radius

    warned = vacuous_radius("auto", Threat(norm="linf", eps=8.0), (1, 8, 8))
    assert "linf eps=8 admits every image in [0, 1]" in warned and "8/255 = 0.03137" in warned
    assert vacuous_radius("auto", Threat(norm="linf", eps=0.5), (1, 8, 8)) is None
    assert vacuous_radius("pgd_l2", Threat(norm="l2", eps=8.0), (1, 8, 8)) is not None  # √64 = 8, the diagonal
    assert vacuous_radius("pgd_l2", Threat(norm="l2", eps=7.9), (1, 8, 8)) is None
    assert vacuous_radius("pwws", Threat(level="word"), None) is None
    assert vacuous_radius("wda", Threat(norm="l2", eps=100.0, p=1.0), (1, 8, 8)) is None  # a Wasserstein budget
    results = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf"], eps=8, n=2,
                             output=tmp_path / "run")
    assert any("fgm_linf: linf eps=8 admits every image" in warning for warning in results.warnings)
