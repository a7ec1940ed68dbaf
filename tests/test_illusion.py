"""Illusion of robustness: design and adversary temperatures, calibration, transfer, the flag.

Tests run the built-in text model offline; the expected numbers are directions and margins
measured on it (docs/illusion.md), not hard-coded results.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from suite.calibration import calibration_metrics, fit_nll_temperature, optimise_temperature
from suite.data.builtin import sentiment
from suite.errors import ResourceMissingError
from suite.evaluation.recipe import parse_recipe
from suite.evaluation.options import RunOptions
from suite.evaluation.prepare import prepare
from suite.evaluation.runner import execute
from suite.models.temperature import TemperatureScaled

UPCONF, DOWNCONF = 0.005, 2e6


def _task(temperature: float = 1.0, attacks=("deepwordbug",), kinds=("none", "cal"), n: int = 60, **adversary):
    recipe = parse_recipe({
        "name": "t",
        "tasks": [{
            "name": "t",
            "model": {"spec": "builtin:sentiment-tiny", "temperature": temperature},
            "dataset": {"spec": "builtin:sentiment", "split": "test", "n": n},
            "attacks": list(attacks),
            "adversary": {"kinds": list(kinds), "split": "validation", **adversary},
        }],
    })
    return recipe.tasks[0]


def advsuite(*args: str) -> int:
    from suite.cli.main import main

    with pytest.raises(SystemExit) as caught:
        main(list(args))
    return caught.value.code


def _run(tmp_path: Path, name: str, batch_size: int = 32, **kwargs):
    return execute(prepare(_task(**kwargs), RunOptions(seed=0, batch_size=batch_size, output=tmp_path / name)))


# --------------------------------------------------------------------------- calibration metrics


def test_ece_mce_nll_match_a_hand_computed_example():
    # Confidences 0.9 (right), 0.9 (wrong), 0.7 (right), 0.7 (right); 15 bins over (0, 1]:
    # 0.9 falls in bin 13 (accuracy 1/2, gap 0.4), 0.7 in bin 10 (accuracy 1, gap 0.3).
    probabilities = np.array([[0.9, 0.1], [0.9, 0.1], [0.3, 0.7], [0.7, 0.3]])
    labels = [0, 1, 1, 0]
    metrics = calibration_metrics(np.log(probabilities), labels)
    assert metrics["ece"] == pytest.approx(0.5 * 0.4 + 0.5 * 0.3)
    assert metrics["mce"] == pytest.approx(0.4)
    assert metrics["nll"] == pytest.approx(-(math.log(0.9) + math.log(0.1) + 2 * math.log(0.7)) / 4)
    assert metrics["mean_confidence"] == pytest.approx(0.8)
    assert metrics["accuracy"] == pytest.approx(0.75)
    filled = {row["lower"]: row for row in metrics["reliability"] if row["count"]}
    assert [row["count"] for row in filled.values()] == [2, 2]
    assert len(metrics["reliability"]) == 15


def test_metrics_stay_exact_at_extreme_temperatures():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.5, 0.5]])
    labels = [0, 1, 1]
    hot = calibration_metrics(logits / UPCONF, labels)
    cold = calibration_metrics(logits / DOWNCONF, labels)
    # Saturated, yet exact: the wrong row costs its margin / T = 1 / 0.005, over 3 rows.
    assert hot["mean_confidence"] == 1.0 and hot["nll"] == pytest.approx(200 / 3, rel=1e-6)
    assert cold["mean_confidence"] == pytest.approx(0.5, abs=1e-6)
    assert cold["nll"] == pytest.approx(math.log(2), abs=1e-6)


def test_nll_temperature_undoes_a_design_temperature_exactly():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 3, generator=generator) * 2
    labels = [int(torch.multinomial(torch.softmax(row, 0), 1, generator=generator)) for row in logits]
    base = fit_nll_temperature(logits, labels)
    # 1e-12 and 1e20: a search over a fixed range (1e-9, 1e9) ended at its upper bound for both
    # (at 1e20 the NLL was log 2 to the last bit at Brent's first points, and it drifted there).
    for design in (UPCONF, DOWNCONF, 1e-12, 1e20):
        served = fit_nll_temperature(logits / design, labels)
        assert served.temperature * design == pytest.approx(base.temperature, rel=1e-5)
        assert served.nll == pytest.approx(base.nll, rel=1e-6)
        assert not served.at_bound and served.rule == "nll"


def test_cal_when_every_fitting_example_is_right_is_the_rule_of_successions_confidence():
    """No NLL minimum (it falls as T → 0): the fit used to stop anywhere on float64's flat floor
    (T_cal 1.8e-5 on 16 sentences, a view 56,000× more overconfident than the model). Now the
    view's mean confidence is (n + 1)/(n + 2): here 3/4, at T = 3 / ln 3, for any design temperature."""
    logits = torch.tensor([[3.0, 0.0], [0.0, 3.0]])
    for design in (1.0, UPCONF, DOWNCONF, 1e-12, 1e20):
        fit = fit_nll_temperature(logits / design, [0, 1])
        assert fit.rule == "confidence" and not fit.at_bound
        assert fit.temperature * design == pytest.approx(3 / math.log(3), rel=1e-6)
    fit = fit_nll_temperature(logits, [0, 1], bounds=(10.0, 1e3))  # the root lies below the range
    assert fit.at_bound and fit.temperature == pytest.approx(10.0)
    for label in (0, 1):  # a tie at the top, on either side of argmax's choice: confidence ≤ 1/2 < 2/3
        tied = fit_nll_temperature(torch.tensor([[3.0, 3.0, 0.0]]), [label])
        assert tied.rule == "confidence" and tied.at_bound


def test_opt_search_records_every_evaluation_and_finds_the_valley():
    calls = []

    def q(temperature: float) -> float:  # a step function with its minimum near T = 100
        calls.append(temperature)
        return round(min(1.0, abs(math.log10(temperature) - 2) / 4) * 20) / 20

    search = optimise_temperature(q, bounds=(1e-6, 1e6), maxiter=20, initial=(1.0,))
    assert search.evaluations[0] == (1.0, 0.5)
    assert search.attack_runs == len(search.evaluations) == len(calls)  # no T evaluated twice
    assert search.q == min(value for _, value in search.evaluations) == 0.0
    assert 10 ** 1.8 <= search.temperature <= 10 ** 2.2


# --------------------------------------------------------------------------- temperature and the model


def test_temperature_never_changes_clean_predictions(sentiment_model):
    texts = sentiment("test").inputs
    reference = sentiment_model.predict(texts)
    for temperature in (UPCONF, 0.5, 3.0, DOWNCONF):
        served = TemperatureScaled(sentiment_model, temperature)
        assert torch.equal(served.predict(texts), reference)
        assert torch.equal(TemperatureScaled(served, 1 / temperature, adversary=True).predict(texts), reference)


def test_a_temperature_that_underflows_the_decisions_is_refused_not_scored(sentiment_model):
    """At T = 1e308 every float32 logit divides to 0: the served model answers class 0 whatever
    its input, and attacks see no gradient, so scoring it by its base's decisions reported 100 %
    robust accuracy where T = 1 gives 0 %. Its scoring passes refuse it; T = 1e30 is served."""
    import suite
    from suite.errors import ConfigError
    from suite.models import ModelConfig

    texts = sentiment("test").inputs[:8]
    labels = torch.tensor(sentiment("test").labels[:8])
    served = TemperatureScaled(sentiment_model, 1e308)
    for score in (lambda: served.scores(texts, labels), lambda: served.text_rows(texts)):
        with pytest.raises(ConfigError, match=r"temperature 1e\+308 ties the top two logits of 8 of 8 inputs .*float32"):
            score()
    assert TemperatureScaled(sentiment_model, 1e308, adversary=True).scores(texts, labels)[0].abs().max() == 0
    logits, _ = TemperatureScaled(sentiment_model, 1e30).scores(texts, labels)
    assert torch.equal(logits.argmax(dim=1), sentiment_model.predict(texts))
    with pytest.raises(ConfigError, match="ties the top two logits of 30 of 30"):
        suite.evaluate(ModelConfig(spec="builtin:digits-cnn", temperature=1e308), "builtin:digits", attacks=["fgm_linf"],
                       eps=0.05, n=30)


def test_wrapper_counts_queries_scales_logits_and_takes_gradients_in_eval_mode(sentiment_model):
    from suite.attacks.text.offline import import_textattack
    from suite.attacks.text.wrapper import make_wrapper

    import_textattack()
    wrapper = make_wrapper(TemperatureScaled(sentiment_model, 10.0, adversary=True), batch_size=2)
    texts = ["a great film", "dull and slow", "fine", "awful acting"]
    outputs = wrapper(texts)
    assert wrapper.queries == 4
    torch.testing.assert_close(outputs, sentiment_model.logits(texts) / 10.0)
    gradient = wrapper.get_grad("a great film")
    assert wrapper.queries == 5
    assert not sentiment_model.module.training
    assert gradient["gradient"].shape == (gradient["ids"].shape[1], sentiment_model.module.config.hidden_size)
    assert np.abs(gradient["gradient"]).sum() > 0
    assert not any(parameter.requires_grad for parameter in sentiment_model.module.parameters())


def test_memoised_model_serves_the_base_logits_to_every_view_and_bounds_its_memo(sentiment_model):
    from suite.models.temperature import Memoised

    memo = Memoised(sentiment_model, capacity=3)
    texts = ["a great film", "dull and slow", "a great film", "fine"]
    expected = sentiment_model.logits(texts)
    torch.testing.assert_close(memo.logits(texts), expected, atol=1e-5, rtol=0)
    assert memo.hits == 1  # the repeated text, within one batch
    view = TemperatureScaled(memo, 10.0, adversary=True)
    torch.testing.assert_close(view.logits(["dull and slow", "fine"]), expected[[1, 3]] / 10.0, atol=1e-6, rtol=0)
    assert memo.hits == 3  # a view of the memo is served from it
    memo.logits(["awful acting", "so so"])
    assert len(memo._memo) == 3 and "awful acting" in memo._memo and "dull and slow" not in memo._memo
    # Gradients are never remembered: they go to the model, and views still pass them through.
    _, embeddings, logits = view.embedding_logits(["a great film"])
    assert embeddings.requires_grad and logits.requires_grad


def test_search_model_remembers_only_deterministic_text_models(sentiment_model):
    from suite.evaluation.adversary import same_search, search_model
    from suite.models import load_model
    from suite.models.temperature import Memoised

    assert isinstance(search_model(sentiment_model), Memoised)
    digits = load_model("builtin:digits-cnn")
    assert search_model(digits) is digits
    # The same attack at temperatures equal in float32 is one search; Platt's view never is.
    assert same_search(("pwws", 11.234678417672056), ("pwws", 11.2346784177))
    assert not same_search(("pwws", 11.2346), ("pwws", 11.2347))
    assert not same_search(("pwws", 2.0), ("deepwordbug", 2.0))
    assert not same_search(("pwws", None), ("pwws", None))


def test_shared_forward_passes_and_reused_searches_leave_every_record_unchanged(tmp_path, monkeypatch):
    import suite.evaluation.runner as runner
    from suite.evaluation.adversary import same_search

    def rows(name: str) -> list[dict]:
        lines = (tmp_path / name / "records.jsonl").read_text().splitlines()
        found = [json.loads(line) for line in lines]
        for row in found:
            row.pop("seconds", None)
            row.pop("same_search_as", None)
        return sorted(found, key=lambda row: (row["kind"], row.get("attack", ""), row["id"]))

    settings = dict(temperature=UPCONF, n=16, kinds=("none", "cal", "opt"), opt_n=16, maxiter=2)
    fast = _run(tmp_path, "fast", **settings)
    monkeypatch.setattr(runner, "search_model", lambda model: model)
    monkeypatch.setattr(runner, "same_search", lambda first, second: False)
    plain = _run(tmp_path, "plain", **settings)
    assert rows("fast") == rows("plain")
    cal, opt = fast.attacks["deepwordbug@cal"], fast.attacks["deepwordbug@opt"]
    # Measured: opt keeps T_cal here, so its search is cal's, reused and labelled as such.
    assert same_search(("deepwordbug", cal.adversary_temperature), ("deepwordbug", opt.adversary_temperature))
    assert opt.same_search_as == "deepwordbug@cal" and cal.same_search_as is None
    assert plain.attacks["deepwordbug@opt"].same_search_as is None
    assert opt.robust_accuracy == plain.attacks["deepwordbug@opt"].robust_accuracy


# --------------------------------------------------------------------------- resources


def test_missing_resource_is_one_line_naming_the_fetch_command():
    from suite.attacks import build_attack

    with pytest.raises(ResourceMissingError) as caught:
        build_attack("textfooler_minilm").check_resources()
    message = str(caught.value)
    assert "\n" not in message
    assert "paragramcf" in message and "advsuite prefetch --attacks textfooler_minilm" in message


def test_every_registered_text_recipe_declares_its_resources():
    from suite.attacks import ATTACKS
    from suite.attacks.text.recipes import TextAttackRecipe

    names = {"deepwordbug", "pwws", "textfooler", "bae", "textbugger", "pruthi", "input_reduction", "checklist",
             "textfooler_minilm", "bae_minilm", "textbugger_minilm"}
    assert names <= set(ATTACKS)
    for name in names:
        resources = ATTACKS.get(name).resources
        assert resources and all(resource.describe() for resource in resources)
        assert issubclass(ATTACKS.get(name), TextAttackRecipe)


def test_wordnet_install_from_a_dict_dir(tmp_path, monkeypatch):
    from suite.attacks.text import resources

    monkeypatch.setenv("ADVSUITE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ResourceMissingError, match="wordnet-base"):
        resources.install_wordnet(tmp_path)
    lexnames = resources.lexnames_text().splitlines()
    assert len(lexnames) == 45 and lexnames[0] == "00\tadj.all\t3" and lexnames[44] == "44\tadj.ppl\t3"
    assert lexnames[3] == "03\tnoun.Tops\t1" and lexnames[29] == "29\tverb.body\t2"
    if not resources.DEBIAN_WORDNET.is_dir():
        pytest.skip("Debian's wordnet-base is not installed (apt-get install wordnet-base)")
    target = resources.install_wordnet()
    assert (target / "lexnames").read_text() == resources.lexnames_text()
    assert (target / "index.sense").read_text() == ""
    assert not any(path.is_symlink() for path in target.iterdir())
    assert resources.wordnet_problem(target) is None

    # Files of the right names that are not WordNet are refused (they were installed, and every
    # attack on WordNet then ended in a traceback); an installed copy that does not read is replaced.
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    for name in resources.WORDNET_FILES:
        (garbage / name).write_text("garbage\n")
    (target / "data.noun").write_text("garbage\n")
    with pytest.raises(ResourceMissingError, match="does not read as WordNet 3.0 .its index.noun has no entry for 'dog'"):
        resources.install_wordnet(garbage)
    assert resources.wordnet_problem(target) == "its data.noun has no synset at offset 02084071"
    assert resources.install_wordnet() == target and resources.wordnet_problem(target) is None


def test_optional_attack_with_a_missing_resource_is_skipped_with_a_note(tmp_path, monkeypatch):
    from suite.attacks.text import recipes
    from suite.attacks.text.resources import Resource

    absent = Resource("package", "no_such_package_for_advsuite", "test", install="run: pip install nothing")
    monkeypatch.setattr(recipes.PWWS, "resources", (absent,))
    with pytest.raises(ResourceMissingError, match="no_such_package_for_advsuite"):
        prepare(_task(attacks=("pwws",), kinds=("none",), n=8), RunOptions(seed=0, batch_size=8, output=tmp_path / "strict"))
    task = _task(attacks=("deepwordbug", {"name": "pwws", "optional": True}), kinds=("none",), n=8)
    results = execute(prepare(task, RunOptions(seed=0, batch_size=8, output=tmp_path / "lenient")))
    assert set(results.attacks) == {"deepwordbug"}
    assert any("skipped attack 'pwws'" in warning for warning in results.warnings)


# --------------------------------------------------------------------------- the illusion


@pytest.fixture(scope="module")
def illusion_runs(tmp_path_factory):
    """Base, ↑conf and ↓conf under DeepWordBug with the none and cal adversaries (n = 60)."""
    root = tmp_path_factory.mktemp("illusion")
    return {
        "base": _run(root, "base"),
        "up": _run(root, "up", temperature=UPCONF),
        "down": _run(root, "down", temperature=DOWNCONF),
        "up_dir": root / "up",
    }


@pytest.mark.slow
def test_overconfident_model_looks_more_robust_until_the_adversary_calibrates(illusion_runs):
    base, up = illusion_runs["base"], illusion_runs["up"]
    assert up.clean_accuracy == base.clean_accuracy
    base_ra = base.attacks["deepwordbug"].robust_accuracy
    # Out of the box, the saturated ↑conf model stalls DeepWordBug (measured: 53.3% vs 43.3%).
    assert up.attacks["deepwordbug"].robust_accuracy >= base_ra + 0.05
    # The calibrated adversary brings it back to within a few points of the base model.
    assert abs(up.attacks["deepwordbug@cal"].robust_accuracy - base_ra) <= 0.04
    assert up.illusion.flagged and up.illusion.findings[0]["attack"] == "deepwordbug@cal"
    assert up.illusion.max_drop >= 0.05
    assert not base.illusion.flagged


@pytest.mark.slow
def test_an_illusion_finding_carries_the_paired_test_of_its_drop(illusion_runs):
    finding = illusion_runs["up"].illusion.findings[0]
    lines = [json.loads(line) for line in (illusion_runs["up_dir"] / "records.jsonl").read_text().splitlines()]
    clean = {r["id"]: r["correct"] for r in lines if r["kind"] == "clean"}
    robust = {key: {i: next(r["robust"] for r in lines if r["kind"] == "attack" and r["attack"] == key and r["id"] == i)
                    if clean[i] > 0 else 0.0 for i in clean} for key in (finding["reference"], finding["attack"])}
    # McNemar's exact test, written out: the examples only one of the two searches broke.
    before, after = robust[finding["reference"]], robust[finding["attack"]]
    gained, lost = sum(after[i] > before[i] for i in clean), sum(after[i] < before[i] for i in clean)
    n = gained + lost
    expected = min(1.0, 2 * sum(math.comb(n, k) for k in range(min(gained, lost) + 1)) / 2 ** n)
    assert lost - gained == round(finding["drop"] * len(clean))  # the drop is these examples
    assert (finding["p_value"], finding["test"]) == (expected, "McNemar exact")
    assert finding["p_value"] < 0.05  # the calibrated adversary's drop on 60 sentences is no noise
    assert f"(paired p={expected:.2g})" in finding["message"] or "(paired p<0.001)" in finding["message"]


@pytest.mark.slow
def test_fitted_adversary_temperature_undoes_the_design_temperature(illusion_runs):
    t_base = illusion_runs["base"].adversary["cal"]["temperature"]
    t_up = illusion_runs["up"].adversary["cal"]["temperature"]
    t_down = illusion_runs["down"].adversary["cal"]["temperature"]
    assert t_up > 100 and t_down < 1e-3
    assert t_up * UPCONF == pytest.approx(t_base, rel=1e-3)
    assert t_down * DOWNCONF == pytest.approx(t_base, rel=1e-3)
    assert illusion_runs["up"].attacks["deepwordbug@cal"].adversary_temperature == t_up


@pytest.mark.slow
def test_results_carry_calibration_and_confidence_per_model(illusion_runs):
    base, up, down = illusion_runs["base"], illusion_runs["up"], illusion_runs["down"]
    assert up.calibration["mean_confidence"] == pytest.approx(1.0)
    assert down.calibration["mean_confidence"] == pytest.approx(0.5, abs=1e-5)
    # The served temperature moves confidence and NLL, never accuracy.
    assert base.calibration["accuracy"] == up.calibration["accuracy"] == down.calibration["accuracy"]
    assert up.calibration["nll"] > base.calibration["nll"]
    assert up.attacks["deepwordbug"].mean_confidence == pytest.approx(1.0)
    assert down.attacks["deepwordbug@cal"].mean_confidence == pytest.approx(0.5, abs=1e-5)
    assert "reliability.png" in up.plots
    # Distinct models in results.
    assert up.model.name == "builtin:sentiment-tiny@T=0.005" and base.model.name == "builtin:sentiment-tiny"


@pytest.mark.slow
def test_transfer_from_the_base_model_pierces_the_overconfident_one(tmp_path):
    task = _task(temperature=UPCONF, kinds=("none",),
                 attacks=("deepwordbug", {"name": "transfer", "source": "builtin:sentiment-tiny", "attack": "deepwordbug"}))
    results = execute(prepare(task, RunOptions(seed=0, batch_size=32, output=tmp_path / "transfer")))
    own, transfer = results.attacks["deepwordbug"], results.attacks["transfer"]
    assert transfer.mean_queries == 1.0
    assert transfer.robust_accuracy <= own.robust_accuracy - 0.05
    assert results.illusion.flagged and results.illusion.findings[0]["attack"] == "transfer"


def test_records_do_not_depend_on_batch_size_with_adversaries(tmp_path):
    def records(batch_size: int) -> list[dict]:
        result = _run(tmp_path, f"bs{batch_size}", batch_size=batch_size, temperature=UPCONF, n=16)
        lines = (tmp_path / f"bs{batch_size}" / "records.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in lines]
        for row in rows:
            row.pop("seconds", None)
        return result, sorted(rows, key=lambda row: (row["kind"], row.get("attack", ""), row["id"]))

    one, rows_one = records(1)
    many, rows_many = records(16)
    assert rows_one == rows_many
    attacked = [row for row in rows_one if row["kind"] == "attack"]
    assert attacked and all(row["queries"] > 0 and "confidence" in row for row in attacked)
    assert all(row["temperature"] > 100 for row in attacked if row["attack"] == "deepwordbug@cal")
    assert one.calibration == many.calibration


def test_cal_undoes_design_temperatures_a_fixed_search_range_could_not_reach(tmp_path):
    """Served at 1e-12 and 1e20 the calibrated adversary searched on the view at a bound of
    (1e-9, 1e9): no better than the out-of-the-box attack, and no flag. Its range now follows
    the logits' scale: the same T_cal · T_d and the same outcomes as at T = 1."""
    base = _run(tmp_path, "base", n=16, kinds=("none", "cal"))
    rows = {}
    for name, design in (("base", 1.0), ("tiny", 1e-12), ("huge", 1e20)):
        served = base if design == 1.0 else _run(tmp_path, name, n=16, kinds=("none", "cal"), temperature=design)
        cal = served.adversary["cal"]
        assert cal["rule"] == "nll" and not cal["at_bound"]
        assert cal["temperature"] * design == pytest.approx(base.adversary["cal"]["temperature"], rel=1e-5)
        assert served.attacks["deepwordbug@cal"].robust_accuracy == base.attacks["deepwordbug@cal"].robust_accuracy
        assert not [warning for warning in served.warnings if warning.startswith("cal:")]
        lines = (tmp_path / name / "records.jsonl").read_text().splitlines()
        rows[name] = sorted((r["id"], r["robust"]) for r in map(json.loads, lines)
                            if r["kind"] == "attack" and r["attack"] == "deepwordbug@cal")
    # The same outcome on every sentence (a text may differ: the view's float32 scores round
    # otherwise at 1e12 and 1e-20, and a search then breaks a tie the other way).
    assert rows["tiny"] == rows["base"] == rows["huge"]


def test_cal_on_examples_all_classified_right_is_warned_and_no_sharper_than_their_count_allows(sentiment_model):
    """Fitted on sentences the model gets all right, the NLL has no minimum: T_cal came out at
    1.8e-5 (a view 56,000× more overconfident than the model, which raised the robust accuracy
    of its search from 56 % to 81 %) with a log line that called it a search bound."""
    import suite
    from suite.calibration.temperature import mean_confidence

    test = sentiment("test")
    predicted = sentiment_model.predict(list(test.inputs)).tolist()
    right = [i for i, label in enumerate(test.labels) if predicted[i] == label][:12]
    texts, labels = [test.inputs[i] for i in right], [test.labels[i] for i in right]
    results = suite.evaluate(sentiment_model, (texts, labels), attacks=["deepwordbug"])
    cal = results.adversary["cal"]
    assert cal["rule"] == "confidence" and not cal["at_bound"]
    logits = sentiment_model.logits(texts).double().numpy()
    assert mean_confidence(logits, cal["temperature"]) == pytest.approx(13 / 14, abs=1e-6)
    (warning,) = [warning for warning in results.warnings if warning.startswith("cal:")]
    assert "every one of the 12 fitting example(s) is classified correctly" in warning


def test_adversary_temperatures_are_refused_for_image_tasks(tmp_path):
    from suite.errors import ConfigError

    recipe = parse_recipe({"name": "i", "tasks": [{
        "model": "builtin:digits-cnn", "dataset": {"spec": "builtin:digits", "n": 4},
        "attacks": ["fgm_linf"], "adversary": {"kinds": ["none", "cal"]},
    }]})
    with pytest.raises(ConfigError, match="apply to text attacks"):
        prepare(recipe.tasks[0], RunOptions(seed=0, batch_size=4, output=tmp_path / "img"))


@pytest.mark.slow
def test_ior_text_recipe_prints_the_table_and_writes_the_plots(tmp_path, capsys):
    """The shipped recipe's design-temperature tasks (base, T = 0.005, T = 2e6) for training
    seed 0 on 40 test sentences (Q(T) on 20), with every adversary it lists (the full recipe trains 18
    models: bench territory)."""
    from suite.cli.run import run_loaded
    from suite.evaluation.recipe import Sweep, load_recipe
    from suite.evaluation.recipes_dir import resolve_recipe

    recipe = load_recipe(resolve_recipe("ior_text"))
    tasks = tuple(task.model_copy(update={"dataset": task.dataset.model_copy(update={"n": 40}),
                                          "adversary": task.adversary.model_copy(update={"opt_n": 20}),
                                          "attacks": task.attacks[:1]})  # DeepWordBug: PWWS is slow
                  for task in recipe.tasks if task.name in ("base", "upconf", "downconf"))
    out = tmp_path / "ior"
    run_loaded(recipe.model_copy(update={"tasks": tasks, "sweep": Sweep(seeds=(0,))}), out, overwrite=False)
    printed = capsys.readouterr().out
    assert "robust accuracy by adversary temperature" in printed
    assert "ILLUSION OF ROBUSTNESS: builtin:sentiment-base-s0@T=0.005" in printed
    assert "mechanism: design temperature" in printed
    for task in ("base-s0", "upconf-s0", "downconf-s0"):
        results = json.loads((out / task / "results.json").read_text())
        assert {"reliability.png", "opt_search.png"} <= set(results["plots"])
        assert all((out / task / plot).stat().st_size > 1000 for plot in results["plots"])
        searches = list(results["adversary"]["opt"].values())
        assert len({search["temperature"] for search in searches}) == 1  # fitted once, with DeepWordBug
        for search in searches:
            assert search["attack"] == "deepwordbug"
            assert search["attack_runs"] == len(search["evaluations"]) >= 3
            assert search["q"] == min(q for _, q in search["evaluations"])
        assert set(results["calibration_after"]) >= {"cal", "opt", "platt"}
    rows = (out / "adversary_table.csv").read_text().splitlines()
    assert rows[0].startswith("task,model,attack,none,cal,T_cal,opt,T_opt,platt")
    upconf = json.loads((out / "upconf-s0" / "results.json").read_text())
    assert upconf["illusion"]["flagged"] and upconf["illusion"]["mechanism"] == "design temperature"
    base = json.loads((out / "base-s0" / "results.json").read_text())
    assert upconf["clean_accuracy"] == base["clean_accuracy"]
    assert (out / "ior_tables.md").is_file()


def test_evaluate_adversary_flag(tmp_path, capsys):
    base = ["evaluate", "--model", "builtin:sentiment-tiny", "--dataset", "builtin:sentiment", "--n", "8",
            "--attacks", "deepwordbug"]
    assert advsuite(*base, "--adversary", "none", "--output", str(tmp_path / "a")) == 0
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    assert set(results["attacks"]) == {"deepwordbug"} and results["adversary"]["cal"] is None
    assert advsuite(*base, "--adversary", "none,hot", "--output", str(tmp_path / "b")) == 2
    assert "kinds.1" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_prefetch_offline_fails_in_one_line_per_resource(capsys):
    assert advsuite("prefetch") == 2
    assert advsuite("prefetch", "--list", "--attacks", "deepwordbug") == 0
    assert "cached" in capsys.readouterr().out
    assert advsuite("prefetch", "--attacks", "textfooler_minilm") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "could not be fetched" in err[0]


def test_prefetch_list_writes_nothing(tmp_path):
    """A listing is a check: with WordNet not in the cache, it says where it would come from
    (Debian's wordnet-base, where installed) rather than installing it and calling it cached."""
    import os
    import subprocess
    import sys

    from suite.attacks.text.resources import DEBIAN_WORDNET

    # A fresh process: NLTK's search path is process-wide, and this one's holds the test cache.
    done = subprocess.run([sys.executable, "-m", "suite", "prefetch", "--list", "--attacks", "pwws"],
                          env={**os.environ, "ADVSUITE_CACHE": str(tmp_path / "cache")}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    wordnet = next(line for line in out.splitlines() if "'wordnet'" in line)
    assert ("from Debian's wordnet-base at first use" if DEBIAN_WORDNET.is_dir() else "MISSING") in wordnet, out
    assert not list((tmp_path / "cache").rglob("wordnet*"))


def test_seed_replicates_are_one_model_family_on_one_dataset():
    """Tables group tasks named ``<task>-s<seed>`` as replicates of one task: tasks only named
    alike (m-s1 on one model, m-s2 on another) were averaged as its seeds."""
    from types import SimpleNamespace

    from suite.report.ior import group_seeds

    def run(task, model, dataset="builtin:sentiment"):
        return SimpleNamespace(task=task, model=SimpleNamespace(spec=model),
                               dataset=SimpleNamespace(spec=dataset, split="test"))

    sweep = [run(f"ddi-s{seed}", f"builtin:sentiment-ddi-at-s{seed}") for seed in range(3)]
    assert list(group_seeds(sweep)) == ["ddi"] and group_seeds(sweep)["ddi"] == sweep
    same = [run("tiny-s0", "builtin:sentiment-tiny"), run("tiny-s1", "builtin:sentiment-tiny")]
    assert list(group_seeds(same)) == ["tiny"]
    unrelated = [run("m-s1", "builtin:sentiment-tiny"), run("m-s2", "builtin:sentiment-base-s0")]
    assert list(group_seeds(unrelated)) == ["m-s1", "m-s2"]
    elsewhere = [run("d-s0", "builtin:sentiment-tiny"), run("d-s1", "builtin:sentiment-tiny", "hf:./other.csv")]
    assert list(group_seeds(elsewhere)) == ["d-s0", "d-s1"]


def test_rounded_text_scores_are_warned_about_and_temperatures_are_not(sentiment_model):
    """Served scores rounded to a few decimals stall a score-based search on plateaus (no
    adversary temperature undoes rounding): a check deletes single words and counts the texts
    whose logits did not move at all. A temperature, however extreme, moves them, so the
    overconfident and underconfident views of the same model draw no warning."""
    from suite.data.base import Example
    from suite.evaluation.checks import check_score_plateaus
    from suite.models.temperature import LogitView

    class Rounded(LogitView):
        def __init__(self, base, digits: int) -> None:
            super().__init__(base)
            self.digits = digits

        def _rescale(self, logits):
            probabilities = torch.softmax(logits.float(), dim=-1)
            return torch.log((torch.round(probabilities * 10**self.digits) / 10**self.digits).clamp_min(1e-4))

        def _forward(self, batch):
            return self._rescale(self.base._forward(batch))

    split = sentiment("test")
    examples = [Example(i, x, y) for i, x, y in zip(split.ids, split.inputs, split.labels)][:40]
    for digits in (1, 2, 3):
        (warning,) = check_score_plateaus(Rounded(sentiment_model, digits), examples)
        assert "rounded or quantised" in warning and "of 64 single-word deletions" in warning
    for served in (sentiment_model, TemperatureScaled(sentiment_model, 0.005), TemperatureScaled(sentiment_model, 1e6)):
        assert check_score_plateaus(served, examples) == []


def test_scores_tied_by_float32_softmax_are_warned_about(tmp_path):
    """Served at T = 1e9 the logits are a few 1e-9 apart: not tied (the run is not refused),
    but their float32 softmax is exactly (0.5, 0.5). TextAttack then skipped every label-1
    example as already misclassified and searched the others on flat scores: robust accuracy
    came out equal to the clean accuracy, unwarned. At the paper's 2e6 the probabilities still
    differ, and nothing is said."""
    flat = _run(tmp_path, "flat", temperature=1e9, kinds=("none",), n=30)
    (warning,) = [w for w in flat.warnings if "tie in float32 softmax" in w]
    correct = round(flat.clean_accuracy * 30)
    assert f"of the {correct} examples the model classifies correctly" in warning
    assert "so deepwordbug (at the served scale, adversary none)" in warning
    assert flat.attacks["deepwordbug"].robust_accuracy == flat.clean_accuracy  # the overstated number it flags
    steep = _run(tmp_path, "steep", temperature=DOWNCONF, kinds=("none",), n=30)
    assert not any("float32 softmax" in w for w in steep.warnings)
    assert steep.attacks["deepwordbug"].robust_accuracy < steep.clean_accuracy
    # The cal adversary alone undoes the temperature: its number is not overstated, and the
    # warning (said of every such run before) is not given.
    undone = _run(tmp_path, "undone", temperature=1e9, kinds=("cal",), n=30)
    assert not any("float32 softmax" in w for w in undone.warnings)
    assert undone.attacks["deepwordbug@cal"].robust_accuracy < undone.clean_accuracy


@pytest.mark.parametrize("falling", [True, False])
def test_an_opt_temperature_at_a_search_bound_is_flagged(falling):
    # Q falling all the way to the upper bound (or rising from the lower one): the best evaluated
    # T is at that bound, and a T beyond the search range might do better still.
    from suite.calibration.temperature import BOUNDS
    from suite.evaluation.adversary import _at_bound

    search = optimise_temperature(lambda t: 1 / (1 + math.log(t) + 30) if falling else math.log(t) + 30, maxiter=40)
    edge = BOUNDS[1] if falling else BOUNDS[0]
    assert abs(math.log(search.temperature / edge)) < 0.25
    assert _at_bound(search.temperature, BOUNDS)
    assert not _at_bound(1.0, BOUNDS) and not _at_bound(BOUNDS[1] / 1.5, BOUNDS)


def test_a_drop_of_exactly_the_threshold_is_not_flagged_whatever_its_rounding():
    """13/20 → 12/20 and 12/20 → 11/20 are both drops of one sentence in 20 (5 pp): the first
    was flagged and the second not, by the rounding of their float differences."""
    from suite.report.illusion import illusion_findings
    from suite.report.results import AttackEntry

    def findings(before: int, after: int, n: int = 20):
        entries = {"dwb": AttackEntry.model_construct(adversary="none", access="black-box", robust_accuracy=before / n,
                                                      base_attack=None, params={}),
                   "dwb@cal": AttackEntry.model_construct(adversary="cal", access="black-box",
                                                          robust_accuracy=after / n, base_attack="dwb",
                                                          adversary_temperature=10.0, params={})}
        return illusion_findings(entries, 0.05)

    assert 13 / 20 - 12 / 20 > 0.05 > 12 / 20 - 11 / 20  # the rounding the flag used to follow
    for before in range(1, 21):
        assert not findings(before, before - 1).flagged
        if before >= 2:
            assert findings(before, before - 2).flagged


def test_each_fit_that_may_search_less_well_is_said_in_the_results():
    """cal by the confidence rule or at a bound, opt at a bound, Platt at its upper scale: each
    was a log line at most (Platt's bound not even that), never a results warning."""
    from dataclasses import asdict

    from suite.evaluation.adversary import adversary_warnings

    def info(logits, labels, **extra):
        fit = asdict(fit_nll_temperature(torch.tensor(logits), labels))
        return {"n": len(labels), "cal": {**fit, "bounds": list(fit["bounds"])}, "opt": {}, "platt": None, **extra}

    wrong = info([[3.0, 0.0], [0.0, 3.0]], [1, 0])  # every answer wrong: the NLL falls towards log 2 as T grows
    assert wrong["cal"]["at_bound"] and wrong["cal"]["rule"] == "nll"
    (said,) = adversary_warnings(wrong)
    assert said.startswith("cal: the NLL-optimal temperature sits at the upper bound")
    (said,) = adversary_warnings(info([[3.0, 0.0], [0.0, 3.0]], [0, 1]))
    assert "every one of the 2 fitting example(s) is classified correctly" in said
    assert adversary_warnings(info([[3.0, 0.0], [0.0, 3.0], [2.0, 0.0]], [0, 1, 1])) == []
    opt = {"pwws": {"temperature": 1e9 * 0.9, "bounds": [1e-9, 1e9], "attack": "deepwordbug"},
           "deepwordbug": {"temperature": 1e9 * 0.9, "bounds": [1e-9, 1e9], "attack": "deepwordbug"}}
    (said,) = adversary_warnings({"cal": None, "opt": opt, "platt": None})  # one search, said once
    assert said.startswith("opt (deepwordbug): the temperature that minimises")
    (said,) = adversary_warnings({"cal": None, "opt": {}, "platt": {"at_upper_bound": True}})
    assert said.startswith("platt: a class's scale reached the fit's upper bound")
    (said,) = adversary_warnings({"cal": None, "opt": {}, "platt": {"changed_predictions": 3}})
    assert said.startswith("platt: the Platt adversary's scaling changes 3 prediction(s)")
