"""Plugins and optional dependencies: what ``pip install`` gives, and how what is missing says so.

- A real plugin package (``tests/plugin_pkg``: the attack ``uniform_noise`` and the model scheme
  ``demo:``) is pip-installed offline into a scratch ``--target`` directory (the venv stays
  clean) and used by name from ``advsuite`` subprocesses: listed with its origin, evaluated,
  its outputs inside the ε-ball.
- The registry's entry-point machinery on hand-made distributions (a ``.dist-info`` directory on
  ``sys.path`` is all ``importlib.metadata`` reads): read on first use, origins, a built-in name
  kept, two plugins on one name refused, a broken plugin one line naming its distribution.
- An attack whose optional dependency (torchattacks) is missing: one line naming the attack and
  the install command, exit 2, nothing written.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suite.cli.main import main
from suite.registry import BUILTIN, PluginError, Registry

PLUGIN_SRC = Path(__file__).parent / "plugin_pkg"
PLUGIN = "advsuite-demo-plugin 0.1.0"


def advsuite(*args: str, path: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m suite ARGS`` with ``path`` first on PYTHONPATH (where the plugin lives)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "suite", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def fake_distribution(root: Path, name: str, version: str, entry_points: dict[str, dict[str, str]],
                      modules: dict[str, str] | None = None, summary: str = "A fake plugin") -> Path:
    """A distribution as ``importlib.metadata`` sees one: a ``.dist-info`` dir (and modules) in ``root``."""
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items())
        for group, entries in entry_points.items()))
    for module, source in (modules or {}).items():
        (root / f"{module}.py").write_text(source)
    return root


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The demo plugin, pip-installed offline into a scratch target directory."""
    work = tmp_path_factory.mktemp("plugin")
    source = shutil.copytree(PLUGIN_SRC, work / "src", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = work / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--no-index", "--disable-pip-version-check", "--target", str(target), str(source)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return target


# -- a real plugin, installed -------------------------------------------------------------------

def _row(stdout: str, name: str) -> str:
    return next(line for line in stdout.splitlines() if line.split()[0] == name)


def test_ls_lists_plugin_entries_with_their_origin(installed, tmp_path):
    attacks = advsuite("ls", "attacks", path=installed, cwd=tmp_path)
    assert attacks.returncode == 0 and attacks.stderr == "", attacks.stderr
    assert PLUGIN in _row(attacks.stdout, "uniform_noise")
    assert _row(attacks.stdout, "pgd_linf").split()[1] == BUILTIN
    models = advsuite("ls", "models", path=installed, cwd=tmp_path)
    assert models.returncode == 0 and PLUGIN in _row(models.stdout, "demo:")
    assert _row(models.stdout, "hf:").split()[1] == BUILTIN


def test_evaluate_runs_the_plugin_attack_on_the_plugin_model_inside_the_ball(installed, tmp_path):
    eps = 0.3
    done = advsuite("evaluate", "--model", "demo:centroid", "--dataset", "builtin:digits", "--attacks",
                    "uniform_noise", "--eps", str(eps), "--n", "24", "--output", str(tmp_path / "out"),
                    path=installed, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    entry = results["attacks"]["uniform_noise"]
    assert entry["threat"]["norm"] == "linf" and entry["threat"]["eps"] == eps
    assert results["clean_accuracy"] >= 0.6  # the nearest-class-mean model is a real classifier
    records = [json.loads(line) for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
    clean = [r for r in records if r["kind"] == "clean"]
    noise = [r for r in records if r.get("attack") == "uniform_noise"]
    assert len(clean) == 24 and len(noise) == sum(r["correct"] > 0 for r in clean) > 0
    assert all(0 < r["perturbation"] <= eps + 1e-6 and r["queries"] == 20 for r in noise)


#: The plugin's attack judged outside the suite's records: the distance of every output to its
#: input, the box, and the same outputs whatever the batch order.
INDEPENDENT = """
import json, torch
from suite.attacks import ATTACKS, build_attack
from suite.data.base import Example
from suite.data.builtin import digits
from suite.models import load_model
model = load_model("demo:centroid")
split = digits("test")
examples = [Example(i, x, y) for i, x, y in list(zip(split.ids, split.inputs, split.labels))[:16]]
attack = build_attack("uniform_noise", {"eps": 0.3})
outputs = attack.run(model, examples, seed=0)
backwards = attack.run(model, examples[::-1], seed=0)[::-1]
x = torch.stack([e.input for e in examples])
adv = torch.stack([o.adversarial for o in outputs])
broken = int((model.logits(adv).argmax(1) != torch.tensor([e.label for e in examples])).sum())
print(json.dumps({"distance": float((adv - x).abs().amax()), "low": float(adv.min()), "high": float(adv.max()),
                  "same": all(torch.equal(a.adversarial, b.adversarial) for a, b in zip(outputs, backwards)),
                  "broken": broken, "name": type(attack).name, "origin": ATTACKS.origin("uniform_noise")}))
"""


def test_the_plugin_attack_keeps_the_ball_and_its_seeding_contract(installed, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", INDEPENDENT], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert 0.29 < found["distance"] <= 0.3 + 1e-6 and found["low"] >= 0 and found["high"] <= 1
    assert found["same"] and found["broken"] > 0
    assert found["name"] == "uniform_noise" and found["origin"] == PLUGIN


def test_a_broken_plugin_breaks_only_its_own_entries(tmp_path):
    site = fake_distribution(tmp_path / "site", "broken-plugin", "0.3", {
        "advsuite.attacks": {"broken_attack": "broken_plugin_mod:Attack", "pgd_linf": "broken_plugin_mod:Attack"}},
        {"broken_plugin_mod": "import advsuite_no_such_dependency\n"})
    listed = advsuite("ls", "attacks", path=site, cwd=tmp_path)
    assert listed.returncode == 0
    assert "broken-plugin 0.3" in _row(listed.stdout, "broken_attack")
    assert _row(listed.stdout, "pgd_linf").split()[1] == BUILTIN  # the built-in keeps its name...
    assert "'pgd_linf' is built into advsuite" in listed.stderr and "broken-plugin 0.3" in listed.stderr  # ...said once
    used = advsuite("evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--attacks",
                    "broken_attack", "--output", str(tmp_path / "out"), path=site, cwd=tmp_path)
    assert used.returncode == 2
    error = used.stderr.splitlines()[-1]
    assert error.startswith("advsuite: error: attack 'broken_attack' of plugin broken-plugin 0.3"), used.stderr
    assert "ModuleNotFoundError" in error and "pip uninstall broken-plugin" in error
    assert "Traceback" not in used.stderr and not (tmp_path / "out").exists()


# -- the registry's entry points, in process ---------------------------------------------------

OBJECTS = '''
class Thing:
    """A plugin thing."""
'''


def test_plugins_are_read_on_first_use_and_imported_only_when_got(tmp_path, monkeypatch):
    registry: Registry = Registry("thing", list_command="advsuite ls things")
    registry.add("own", "json:dumps", help="built in")
    registry.use_entry_points("test.things")
    # Installed after use_entry_points: the group is read on first use, not when it is named.
    monkeypatch.syspath_prepend(str(fake_distribution(tmp_path, "fake-things", "1.2", {
        "test.things": {"theirs": "fake_things_first:Thing"}}, {"fake_things_first": OBJECTS})))
    assert registry.names() == ["own", "theirs"] and "theirs" in registry
    assert registry.origin("own") == BUILTIN and registry.origin("theirs") == "fake-things 1.2"
    assert registry.describe("theirs") == "A fake plugin"  # the distribution's summary: nothing imported
    assert "fake_things_first" not in sys.modules
    thing = registry.get("theirs")
    assert thing.__name__ == "Thing" and registry.describe("theirs") == "A plugin thing."


def test_a_plugin_cannot_take_a_built_in_name(tmp_path, monkeypatch, caplog):
    monkeypatch.syspath_prepend(str(fake_distribution(tmp_path, "fake-shadow", "2.0", {
        "test.shadow": {"own": "fake_shadow:Thing", "bad/name": "fake_shadow:Thing"}}, {"fake_shadow": OBJECTS})))
    registry: Registry = Registry("thing")
    registry.add("own", "json:dumps")
    registry.use_entry_points("test.shadow")
    with caplog.at_level(logging.WARNING, logger="suite.registry"):
        assert registry.names() == ["own"]
    import json as json_module

    assert registry.get("own") is json_module.dumps and registry.origin("own") == BUILTIN
    assert "thing 'own' is built into advsuite; the plugin's fake_shadow:Thing is skipped" in caplog.text
    assert "fake-shadow 2.0" in caplog.text and "'bad/name' is not a plain name" in caplog.text


def test_two_plugins_on_one_name_are_refused_when_used(tmp_path, monkeypatch):
    for name in ("fake-one", "fake-two"):
        monkeypatch.syspath_prepend(str(fake_distribution(tmp_path / name, name, "1.0", {
            "test.twice": {"same": f"{name.replace('-', '_')}:Thing"}}, {name.replace("-", "_"): OBJECTS})))
    registry: Registry = Registry("thing")
    registry.use_entry_points("test.twice")
    assert registry.names() == ["same"] and registry.origin("same") == "fake-one 1.0, fake-two 1.0"
    with pytest.raises(PluginError) as caught:
        registry.get("same")
    assert str(caught.value) == ("thing 'same' is registered by more than one plugin (fake-one 1.0, fake-two 1.0); "
                                 "uninstall all but one")


def test_the_attack_group_takes_attack_classes_and_names_them(tmp_path, monkeypatch):
    from suite.attacks import _plugin_attack

    source = OBJECTS + '''
from typing import ClassVar
from suite.attacks import Attack

class Good(Attack):
    """A good attack."""
    modality: ClassVar[str] = "image"

class NoModality(Attack):
    """No modality."""
'''
    monkeypatch.syspath_prepend(str(fake_distribution(tmp_path, "fake-attacks", "0.1", {"test.attacks": {
        "good": "fake_attacks_mod:Good", "plain": "fake_attacks_mod:Thing",
        "bare": "fake_attacks_mod:NoModality"}}, {"fake_attacks_mod": source})))
    registry: Registry = Registry("attack")
    registry.use_entry_points("test.attacks", check=_plugin_attack)
    assert registry.get("good").name == "good"
    with pytest.raises(PluginError, match=r"^attack 'plain' of plugin fake-attacks 0.1 \(fake_attacks_mod:Thing\) is "
                                          r"refused: .*Thing'> is not a subclass of suite.attacks.Attack; fix or "
                                          r"uninstall it: pip uninstall fake-attacks$"):
        registry.get("plain")
    with pytest.raises(PluginError, match="NoModality sets no modality"):
        registry.get("bare")


def test_the_model_group_takes_loaders_and_checks_what_they_return():
    from suite.models.registry import _plugin_loader

    with pytest.raises(TypeError, match="is not callable"):
        _plugin_loader("mine", "not a function")
    load = _plugin_loader("mine", lambda name, config: f"a model called {name}")
    with pytest.raises(PluginError, match="^model scheme 'mine' of plugin .*: its loader returned str, not a "
                                          "suite.models.Classifier$"):
        load("x", None)


# -- an optional dependency that is missing -----------------------------------------------------

@pytest.fixture
def demo_scheme(monkeypatch):
    """The demo plugin's ``demo:`` scheme registered in this process (from its source tree), so
    an evaluation here needs no trained built-in."""
    from suite.models.registry import MODEL_SCHEMES

    monkeypatch.syspath_prepend(str(PLUGIN_SRC))
    from advsuite_demo_plugin.models import load_demo

    MODEL_SCHEMES.names()  # read the installed plugins first: this entry is the test's own
    MODEL_SCHEMES.add("demo", load_demo)
    yield
    MODEL_SCHEMES.remove("demo")


@pytest.mark.parametrize("attack", ["square", "autoattack", "fab_t"])
def test_a_missing_optional_dependency_is_one_line_naming_attack_and_command(attack, demo_scheme, tmp_path,
                                                                              monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torchattacks", None)  # `import torchattacks` fails
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as caught:
        main(["evaluate", "--model", "demo:centroid", "--dataset", "builtin:digits", "--attacks", attack,
              "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err == (f"advsuite: error: attack {attack!r} needs torchattacks, which is not installed: "
                   "pip install 'advsuite[baselines]' (or: pip install torchattacks==3.3.0)\n")
    assert list(tmp_path.iterdir()) == []


def test_an_optional_attack_with_a_missing_dependency_is_skipped_with_a_note(demo_scheme, tmp_path, monkeypatch,
                                                                            capsys, caplog):
    monkeypatch.setitem(sys.modules, "torchattacks", None)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\ntasks:\n  - name: t\n    model: demo:centroid\n"
                      "    dataset: {spec: builtin:digits, split: test, n: 8}\n"
                      "    attacks: [{name: square, optional: true}, {name: fgm_linf, eps: 0.1}]\n")
    with pytest.raises(SystemExit) as caught:
        main(["run", str(recipe), "--output", str(tmp_path / "out")])
    assert caught.value.code == 0, capsys.readouterr().err
    results = json.loads(next((tmp_path / "out").rglob("results.json")).read_text())
    assert list(results["attacks"]) == ["fgm_linf"]
    assert any(w.startswith("skipped attack 'square': attack 'square' needs torchattacks") for w in results["warnings"])
    assert "skipped attack 'square': attack 'square' needs torchattacks" in caplog.text
