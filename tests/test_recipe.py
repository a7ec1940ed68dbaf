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
        # Booleans and numeric strings are not numbers (task eps: true had run at ε = 1,
        # threshold: true flagged no illusion ever).
        (_recipe(eps=True), "eps.0: Input should be a valid number"),
        (_recipe(eps=["0.1"]), "eps.0: Input should be a valid number"),
        (_recipe(temperatures=[True]), "temperatures.0: Input should be a valid number"),
        (_recipe(model={"spec": "builtin:digits-cnn", "temperature": "2"}), "temperature: Input should be a valid"),
        (_recipe(model={"spec": "builtin:digits-cnn", "max_length": True}), "max_length: Input should be a valid"),
        (_recipe(adversary={"threshold": True}), "threshold: Input should be a valid number"),
        (_recipe(adversary={"bounds": [True, "10"]}), "bounds.0: Input should be a valid number"),
        (_recipe(certify={"eps": [True]}), "eps.0: Input should be a valid number"),
        ({**_recipe(), "sweep": {"alphas": [True]}}, "alphas.0: Input should be a valid number"),
        # A sweep value of nested lists (a YAML alias bomb's) is refused before it is written out;
        # two values naming one attack (0.1 and 0.10 are both fgm_linf-0.1) are refused.
        ({**_recipe(), "sweep": {"params": {"eps": [[[0.1] * 10] * 10]}}}, "must be plain words or numbers"),
        ({**_recipe(), "sweep": {"params": {"eps": [0.1, 0.10]}}}, "lists a value twice: 0.1"),
        ({**_recipe(), "sweep": {"params": {"eps": [1, 1.0]}}}, "lists a value twice: 1.0"),
        # Keys name samples/<key>/: 'clean' is the clean inputs', and case alone is one folder.
        (_recipe(attacks=[{"name": "fgm_linf", "label": "clean"}]), "may not be labelled 'clean'"),
        (_recipe(attacks=[{"name": "fgm_linf", "label": "A"}, {"name": "pgd_linf", "label": "a"}]),
         "attack labels differ only in case .*: a"),
        # A task named like a table the recipe writes beside it.
        (_recipe(name="study.csv"), "task 'study.csv' is named like the recipe's file"),
        (_recipe(name="Recipe.JSON"), "is named like the recipe's file 'recipe.json'"),
        # A temperature whose product with the model's is 0 or infinite (a traceback, or a run at ∞).
        (_recipe(model={"spec": "builtin:digits-cnn", "temperature": 1e-200}, temperatures=[1e-200]),
         "temperature 1e-200 times the model's 1e-200 is 0"),
        (_recipe(model={"spec": "builtin:digits-cnn", "temperature": 1e200}, temperatures=[1e200]), "is inf"),
        # A transfer source the spec shows cannot craft texts: an image model, a built-in that is none.
        (_recipe(attacks=[{"name": "transfer", "source": "timm:resnet18"}]), "'timm:resnet18' is an image model"),
        (_recipe(attacks=[{"name": "transfer", "source": "builtin:digits-cnn"}]), "is an image model"),
        (_recipe(attacks=[{"name": "transfer", "source": "builtin:nope"}]), "'builtin:nope' names no built-in model"),
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


@pytest.mark.parametrize(("written", "read"), [
    ("n: 010", "n: Input should be a valid integer"),  # YAML 1.1: octal 8
    ("n: 1:30", "n: Input should be a valid integer"),  # base 60: 90
    ("n: 4_0", "n: Input should be a valid integer"),  # 40
    ("seed: 0x10", "seed: Input should be a valid integer"),  # 16
    ("eps: 0:30.5", "eps.0: Input should be a valid number"),  # 30.5
    ("eps: 010", "eps.0: Input should be a valid number"),  # read as the float 10.0 before
    ("eps: 010.5", "eps.0: Input should be a valid number"),
])
def test_yaml_11_number_forms_are_not_numbers(tmp_path, written, read):
    """PyYAML reads YAML 1.1, where these were silently other numbers; the recipe loader reads
    numbers as YAML 1.2 does (plain decimals), and ``1e-2`` (no dot) is the number 0.01."""
    key, value = written.split(": ")
    task = "    dataset: {spec: builtin:digits, " + (f"n: {value}" if key == "n" else "n: 8") + "}\n"
    path = tmp_path / "r.yaml"
    path.write_text("name: r\n" + (f"seed: {value}\n" if key == "seed" else "") + "tasks:\n  - model: builtin:digits-cnn\n"
                    + task + "    attacks: [{name: fgm_linf, eps: 1e-2}]\n" + (f"    eps: {value}\n" if key == "eps" else ""))
    with pytest.raises(ConfigError, match=read):
        load_recipe(path)
    path.write_text("name: r\ntasks:\n  - model: builtin:digits-cnn\n    dataset: {spec: builtin:digits, n: 8}\n"
                    "    attacks: [{name: fgm_linf, eps: 1e-2}]\n    adversary: {threshold: 5e-2}\n")
    task = load_recipe(path).tasks[0]
    assert task.attacks[0].params["eps"] == 0.01 and task.adversary.threshold == 0.05


def test_a_recipe_file_past_a_mebibyte_is_refused_unread(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# padding\n" * 200_000 + "name: r\n")
    with pytest.raises(ConfigError, match=r"big.yaml' is 1.9 MiB: a recipe is a few KB"):
        load_recipe(path)
