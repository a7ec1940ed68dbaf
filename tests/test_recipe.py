"""Recipes: typed, frozen, unknown keys rejected, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.errors import ConfigError, UnknownNameError
from suite.evaluation.recipe import load_recipe, parse_recipe

REPO = Path(__file__).resolve().parents[1]


def test_shipped_recipes_validate():
    for path in sorted((REPO / "recipes").glob("*.yaml")):
        recipe = load_recipe(path)
        assert recipe.tasks


def test_quickstart_has_text_and_vision_tasks():
    recipe = load_recipe(REPO / "recipes" / "quickstart.yaml")
    specs = {task.model.spec: [a.name for a in task.attacks] for task in recipe.tasks}
    assert specs["builtin:sentiment-tiny"] == ["deepwordbug"]
    assert "auto" in specs["builtin:digits-cnn"]
    with pytest.raises(Exception):
        recipe.tasks[0].model.spec = "hf:x"  # frozen


def _recipe(**task):
    base = {"model": "builtin:digits-cnn", "dataset": "builtin:digits", "attacks": ["pgd_linf"]}
    return {"name": "r", "tasks": [{**base, **task}]}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**_recipe(), "sed": 1}, "sed: unknown parameter"),
        (_recipe(attacks=[{"name": "pgd_linf", "eps": -1}]), "attack 'pgd_linf': eps: Input should be greater"),
        (_recipe(dataset={"spec": "builtin:digits", "n": 0}), "n: Input should be greater than 0"),
        (_recipe(model={"spec": "builtin:digits-cnn", "temperature": 0}), "temperature: Input should be greater than 0"),
        (_recipe(model="digits-cnn"), "needs a scheme"),
        (_recipe(attacks=["pgd_linf", "pgd_linf"]), "attack listed twice \\(give one a 'label'\\): pgd_linf"),
        ({**_recipe(), "sweep": {"batch_size": [0, 4]}}, "batch sizes must be positive"),
        ({**_recipe(), "sweep": {"params": {"reduction": []}}}, "sweep parameter 'reduction' has no values"),
        ({**_recipe(), "sweep": {"params": {"reduction": ["sum", "avg"]}}}, "reduction: Input should be 'sum' or 'mean'"),
        ({**_recipe(), "sweep": {"params": {"precision": ["fp8"]}}}, "precision: Input should be"),
        ({**_recipe(attacks=["square"]), "sweep": {"params": {"precision": ["fp16"]}}}, "precision: unknown parameter"),
    ],
)
def test_bad_recipes_are_one_line_errors(data, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse_recipe(data)
    assert "\n" not in str(caught.value)


def test_unknown_attack_suggests_a_name():
    with pytest.raises(UnknownNameError, match="Did you mean: pgd_linf"):
        parse_recipe(_recipe(attacks=["pgd_lnf"]))


def test_malformed_and_missing_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntasks: [\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_recipe(bad)
    with pytest.raises(ConfigError, match="cannot read recipe"):
        load_recipe(tmp_path / "missing.yaml")
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just text\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_recipe(scalar)


def test_sweep_expands_tasks_and_labels_attacks():
    recipe = parse_recipe({**_recipe(attacks=[{"name": "pgd_linf", "eps": 0.1}, "fgm_l2"]),
                           "sweep": {"batch_size": [1, 8], "params": {"reduction": ["sum", "mean"]}}})
    tasks = recipe.expanded_tasks()
    assert [(t.name, t.batch_size) for t in tasks] == [("default-bs1", 1), ("default-bs8", 8)]
    labels = [a.key for a in tasks[0].attacks]
    assert labels == ["pgd_linf-sum", "pgd_linf-mean", "fgm_l2-sum", "fgm_l2-mean"]
    assert tasks[0].attacks[1].params == {"eps": 0.1, "reduction": "mean"}
    # batch size does not enter the identity: every batch size must give the same results
    assert tasks[0].identity(0) == tasks[1].identity(0)


def test_same_attack_twice_under_labels():
    recipe = parse_recipe(_recipe(attacks=[{"name": "pgd_linf", "eps": 0.01, "label": "small"}, "pgd_linf"]))
    assert [a.key for a in recipe.tasks[0].attacks] == ["small", "pgd_linf"]
