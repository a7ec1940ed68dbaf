"""``suite.run_recipe``: the same runs, records and numbers as ``advsuite run`` on the same recipe,
from a file, a shipped recipe's name, a mapping or a loaded recipe, in memory or into a directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import suite
from suite.errors import UnknownNameError
from suite.evaluation.recipe import parse_recipe

from helpers import without_keys

RECIPE = {
    "name": "tiny",
    "seed": 3,
    "batch_size": 4,
    "tasks": [{
        "name": "digits",
        "model": "builtin:digits-cnn",
        "dataset": {"spec": "builtin:digits", "split": "test", "n": 8},
        "attacks": [{"name": "fgm_linf", "eps": 0.1}, {"name": "pgd_linf", "eps": 0.1, "steps": 2}],
    }],
}
#: What differs between two runs of the same recipe: wall time, date, where and how it was called.
VARYING = {"seconds", "clean_seconds", "compute_seconds", "created", "provenance", "plots"}


def numbers(value):
    """``value`` (a results.json mapping) without the fields that vary between identical runs."""
    return without_keys(value, VARYING)


def records(directory: Path) -> list[dict]:
    return [{key: item for key, item in json.loads(line).items() if key != "seconds"}
            for line in (directory / "records.jsonl").read_text().splitlines()]


def cli_results(recipe_file: Path, output: Path, *flags: str) -> dict:
    """Run ``advsuite run <recipe_file> --output <output>`` in-process; its results.json."""
    from suite.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["run", str(recipe_file), "--output", str(output), *flags])
    assert exit_.value.code in (0, None)
    return json.loads((output / "digits" / "results.json").read_text())


@pytest.fixture(scope="module")
def recipe_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("recipe") / "tiny.yaml"
    path.write_text(yaml.safe_dump(RECIPE))
    return path


def test_run_recipe_gives_the_numbers_and_records_of_advsuite_run(recipe_file, tmp_path):
    expected = cli_results(recipe_file, tmp_path / "cli")
    assert expected["seed"] == 3 and expected["batch_size"] == 4 and expected["dataset"]["n"] == 8
    assert 0 <= expected["worst_case_robust_accuracy"] <= expected["attacks"]["fgm_linf"]["robust_accuracy"]
    assert expected["clean_accuracy"] > expected["worst_case_robust_accuracy"]  # eps 0.1 breaks some digits

    from_file = suite.run_recipe(recipe_file)  # in memory: nothing written
    from_mapping = suite.run_recipe(RECIPE, output=tmp_path / "api")
    for results in (from_file, from_mapping):
        assert [result.task for result in results] == ["digits"]
        assert numbers(results[0].model_dump(mode="json")) == numbers(expected)
    assert records(tmp_path / "api" / "digits") == records(tmp_path / "cli" / "digits")
    written = json.loads((tmp_path / "api" / "digits" / "results.json").read_text())
    assert written["provenance"]["command"] == "suite.run_recipe(...)"
    assert expected["provenance"]["command"].startswith("advsuite")  # the CLI's own command line


def test_limit_caps_every_task_as_the_flag_does(recipe_file, tmp_path):
    expected = cli_results(recipe_file, tmp_path / "cli", "--limit", "4")
    [result] = suite.run_recipe(parse_recipe(RECIPE), limit=4)  # a loaded recipe
    assert result.dataset.n == 4 and expected["dataset"]["n"] == 4
    assert numbers(result.model_dump(mode="json")) == numbers(expected)


def test_a_shipped_recipe_by_name_and_an_unknown_name():
    from suite.evaluation import recipe_run

    assert suite.run_recipe is recipe_run.run_recipe and "run_recipe" in suite.__all__
    with pytest.raises(UnknownNameError, match="unknown recipe 'quickstrat'. Did you mean: quickstart?"):
        suite.run_recipe("quickstrat")


def test_a_recipe_never_writes_its_tables_over_files_it_did_not_write(tmp_path):
    """The tables a recipe writes beside its tasks (study.csv...) replaced a user's file of that
    name, and a second recipe into the same directory replaced the first's, mixing their runs."""
    from suite.errors import ConfigError

    swept = {**RECIPE, "sweep": {"batch_size": [4]}}
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "study.csv").write_text("my,own\n1,2\n")
    with pytest.raises(ConfigError, match="holds 'study.csv', which no run of this recipe wrote"):
        suite.run_recipe(swept, output=mine)
    assert sorted(p.name for p in mine.iterdir()) == ["study.csv"] and (mine / "study.csv").read_text() == "my,own\n1,2\n"

    out = tmp_path / "out"
    suite.run_recipe(swept, output=out)
    mark = {"kind": "advsuite recipe output", "recipe": "tiny", "tables": ["study.csv", "study.png"]}
    assert json.loads((out / "recipe.json").read_text()) == mark and (out / "study.csv").is_file()
    suite.run_recipe(swept, output=out)  # the same recipe again: it resumes
    other = {**swept, "name": "other", "tasks": [{**RECIPE["tasks"][0], "name": "more"}]}
    with pytest.raises(ConfigError, match="holds the runs of recipe 'tiny' .*choose another --output"):
        suite.run_recipe(other, output=out)
    assert json.loads((out / "recipe.json").read_text()) == mark
    before = (out / "study.csv").read_text()
    (out / "notes.csv").write_text("mine\n")
    suite.run_recipe({**other, "sweep": None}, output=out, overwrite=True)  # taken over: tiny's tables go
    assert json.loads((out / "recipe.json").read_text()) == {**mark, "recipe": "other", "tables": []}
    assert not (out / "study.csv").exists() and before and (out / "notes.csv").read_text() == "mine\n"


def test_a_recipe_json_the_suite_did_not_write_is_never_replaced(tmp_path):
    """A user's own recipe kept as recipe.json in the output directory, beside their study.csv:
    --overwrite replaced the recipe by the mark and deleted the study (any recipe.json without
    a "recipe" key was taken for another recipe's mark). Now refused, --overwrite or not; a
    directory named recipe.json is refused before anything runs, not after every task."""
    from suite.errors import ConfigError

    swept = {**RECIPE, "sweep": {"batch_size": [4]}}
    for name, make in (("file", lambda path: path.write_text(json.dumps(RECIPE))), ("dir", Path.mkdir),
                       ("mark", lambda path: path.write_text('{"kind": "advsuite recipe output", "recipe": "tiny", "tables": ["../x"]}'))):
        out = tmp_path / name
        out.mkdir()
        make(out / "recipe.json")
        (out / "study.csv").write_text("my,own\n")
        before = sorted(p.name for p in out.iterdir())
        for overwrite in (False, True):
            with pytest.raises(ConfigError, match="holds 'recipe.json', which advsuite did not write"):
                suite.run_recipe(swept, output=out, overwrite=overwrite)
        assert sorted(p.name for p in out.iterdir()) == before and (out / "study.csv").read_text() == "my,own\n"


def test_a_first_mark_is_read_and_rewritten(tmp_path):
    """Marks written before they named their tables ({"recipe": name}) still name the recipe."""
    swept = {**RECIPE, "sweep": {"batch_size": [4]}}
    out = tmp_path / "out"
    suite.run_recipe(swept, output=out)
    (out / "recipe.json").write_text('{"recipe": "tiny"}\n')
    suite.run_recipe(swept, output=out)
    assert json.loads((out / "recipe.json").read_text())["tables"] == ["study.csv", "study.png"]


def test_a_bad_last_task_is_refused_naming_it_before_the_first_runs(tmp_path):
    """certify on a text model was found only when its task ran, after the tasks before it had
    run and written their directories, in an error that did not say which task."""
    from suite.errors import ConfigError

    text = {"name": "words", "model": "builtin:sentiment-tiny", "dataset": {"spec": "builtin:sentiment", "n": 4},
            "attacks": ["deepwordbug"], "adversary": {"kinds": ["none"]}, "certify": {"eps": [0.1]}}
    recipe = {**RECIPE, "tasks": [*RECIPE["tasks"], text]}
    with pytest.raises(ConfigError, match="^task 'words': certify works on image models"):
        suite.run_recipe(recipe, output=tmp_path / "out")
    assert not (tmp_path / "out").exists()
