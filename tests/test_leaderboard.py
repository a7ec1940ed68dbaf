"""Leaderboard: schema (pydantic and the published JSON Schema), keys (n and the dataset
fingerprint: a smaller evaluation never replaces an entry silently), 95% intervals, NaN refused
everywhere, the lock (no file left), the CLI (terminal-safe), and the static page in a real
headless Chromium (rows, intervals, sorting by click and by URL, XSS and bidi shown as text)."""

from __future__ import annotations

import functools
import html.parser
import http.server
import json
import math
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from suite.errors import ConfigError
from suite.intervals import wilson_interval
from suite.report import leaderboard
from suite.report.leaderboard import Entry, Leaderboard

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
XSS = '<script>alert(1)</script><img src=x onerror="document.body.dataset.pwned=1">'
#: Shown as "v1exe.txt" reversed if the right-to-left override were rendered, and ESC raw.
BIDI = "v1\u202etxt.exe\x1b[2J"


def _ci(value: float, n: int = 200) -> list[float]:
    return list(wilson_interval(value * n, n))


def _entry(model: str, clean: float, worst: float, **changes) -> dict:
    robust = changes.pop("robust_accuracy", {"pgd_linf": worst, "fgm_linf": min(1.0, worst + 0.1)})
    entry = {
        "task": "builtin:digits/test", "threat_model": "linf", "eps": 0.03, "norm": "linf", "model": model,
        "model_spec": model, "revision": "v1", "temperature": 1.0, "clean_accuracy": clean,
        "clean_accuracy_ci": _ci(clean), "robust_accuracy": robust,
        "robust_accuracy_ci": {key: _ci(value) for key, value in robust.items()},
        "worst_case_robust_accuracy": worst, "worst_case_robust_accuracy_ci": _ci(worst),
        "distributional_accuracy": None, "n": 200, "seed": 0,
        "suite_version": "0.1.0", "recipe_hash": "0123456789abcdef", "date": "2026-11-22T10:00:00+00:00",
        "compute_seconds": 12.5, "illusion": None, "warnings": [], "dataset_fingerprint": None,
        "recipe_task": "vision",
    }
    return {**entry, **changes}


def _board(*entries: dict) -> dict:
    return {"leaderboard_version": 2, "entries": list(entries)}


def _validators():
    import jsonschema

    published = json.loads((ROOT / "leaderboard" / "schema.json").read_text())
    checker = jsonschema.Draft202012Validator(published)

    def pydantic_ok(data):
        try:
            Leaderboard.model_validate(data)
            return True
        except Exception:
            return False

    return pydantic_ok, lambda data: checker.is_valid(data)


def test_published_schema_is_the_generated_one():
    assert json.loads((ROOT / "leaderboard" / "schema.json").read_text()) == leaderboard.schema()


@pytest.mark.parametrize("bad", [
    pytest.param(lambda e: e.pop("clean_accuracy"), id="missing field"),
    pytest.param(lambda e: e.update(clean_accuracy="0.9"), id="number as string"),
    pytest.param(lambda e: e.update(worst_case_robust_accuracy=1.2), id="accuracy above 1"),
    pytest.param(lambda e: e["robust_accuracy"].update(pgd_linf=-0.1), id="attack accuracy below 0"),
    pytest.param(lambda e: e.update(n="200"), id="count as string"),
    pytest.param(lambda e: e.update(surprise=1), id="unknown field"),
    pytest.param(lambda e: e.pop("clean_accuracy_ci"), id="missing interval"),
    pytest.param(lambda e: e.update(worst_case_robust_accuracy_ci=[0.1, 0.2, 0.3]), id="interval of three"),
    pytest.param(lambda e: e["robust_accuracy_ci"].update(pgd_linf=[0.1, 1.5]), id="interval above 1"),
])
def test_schema_rejects_bad_entries_in_pydantic_and_in_the_json_schema(bad):
    pydantic_ok, schema_ok = _validators()
    good = _entry("m", 0.9, 0.4)
    assert pydantic_ok(_board(good)) and schema_ok(_board(good))
    broken = json.loads(json.dumps(good))
    bad(broken)
    assert not pydantic_ok(_board(broken))
    assert not schema_ok(_board(broken))


def test_merge_is_idempotent_and_replaces_same_key():
    a, b = Entry(**_entry("a", 0.9, 0.4)), Entry(**_entry("b", 0.8, 0.5))
    board, added, replaced = leaderboard.merge(leaderboard.empty(), [a, b])
    assert (added, replaced, len(board.entries)) == (2, 0, 2)
    again, added, replaced = leaderboard.merge(board, [b, a])
    assert (added, replaced) == (0, 2) and leaderboard.dumps(again) == leaderboard.dumps(board)
    newer = Entry(**_entry("a", 0.95, 0.45, date="2026-11-23T10:00:00+00:00", suite_version="0.2.0"))
    updated, added, replaced = leaderboard.merge(board, [newer])
    assert (added, replaced, len(updated.entries)) == (0, 1, 2)
    assert next(e for e in updated.entries if e.model == "a").clean_accuracy == 0.95
    # The same evaluation by the same suite with other numbers: edited, refused unless replaced.
    edited = Entry(**_entry("a", 0.9, 0.5, robust_accuracy={"pgd_linf": 0.5, "fgm_linf": 0.5}))
    with pytest.raises(ConfigError, match=r"from the same evaluation with other numbers \(worst case 40.00% there, "
                                          r"50.00% here.*pass --replace"):
        leaderboard.merge(board, [edited])
    assert leaderboard.merge(board, [edited], replace=True)[2] == 1
    # Another revision, ε or temperature is another entry.
    other = [Entry(**_entry("a", 0.9, 0.4, revision="v2")), Entry(**_entry("a", 0.9, 0.3, eps=0.1))]
    assert len(leaderboard.merge(board, other)[0].entries) == 4


@pytest.mark.parametrize("change", [{"n": 10}, {"dataset_fingerprint": "another-split"}, {"seed": 3}],
                         ids=["smaller n", "other dataset", "another seed's subsample"])
def test_merge_refuses_another_evaluation_of_an_entry_unless_replace(change):
    board, _, _ = leaderboard.merge(leaderboard.empty(), [Entry(**_entry("a", 0.9, 0.4)), Entry(**_entry("b", 0.8, 0.5))])
    smoke = {**_entry("a", 1.0, 0.9), **change}
    smoke.update(clean_accuracy_ci=_ci(1.0, smoke["n"]), worst_case_robust_accuracy_ci=_ci(0.9, smoke["n"]),
                 robust_accuracy_ci={k: _ci(v, smoke["n"]) for k, v in smoke["robust_accuracy"].items()})
    with pytest.raises(ConfigError) as refused:
        leaderboard.merge(board, [Entry(**smoke)], source="smoke/results.json")
    message = str(refused.value)
    # It says what is there and what came, and how to replace it.
    assert "'smoke/results.json'" in message and "'a'" in message and "--replace" in message
    assert f"n=200, seed 0 and dataset fingerprint None; these results have n={smoke['n']}, seed {smoke['seed']} " \
           f"and fingerprint {smoke['dataset_fingerprint']!r}" in message
    replaced, added, count = leaderboard.merge(board, [Entry(**smoke)], replace=True)
    assert (added, count, len(replaced.entries)) == (0, 1, 2)
    entry = next(e for e in replaced.entries if e.model == "a")
    assert (entry.n, entry.dataset_fingerprint, entry.clean_accuracy) == (smoke["n"], smoke["dataset_fingerprint"], 1.0)
    # The key holds n, the fingerprint, the seed and the recipe; the slot does not.
    assert entry.key() == (*entry.slot(), smoke["n"], smoke["dataset_fingerprint"] or "", smoke["seed"],
                           smoke["recipe_hash"])


def test_merge_refuses_another_recipe_and_an_unverified_entry_over_a_verified_one():
    """FGM alone over a PGD entry (same n, seed and data, another recipe) would raise the worst
    case: refused. So is results added without their records over an entry that had them."""
    verified = Entry(**{**_entry("a", 0.9, 0.4), "verified": True})
    board, _, _ = leaderboard.merge(leaderboard.empty(), [verified])
    weaker = _entry("a", 0.9, 0.62, recipe_hash="fedcba9876543210")
    weaker.update(robust_accuracy={"fgm_linf": 0.62}, robust_accuracy_ci={"fgm_linf": _ci(0.62)},
                  worst_case_robust_accuracy_ci=_ci(0.62), verified=True)
    with pytest.raises(ConfigError, match=r"recipe 0123456789abcdef \(attacks pgd_linf, fgm_linf\); these results "
                                          r"come from recipe fedcba9876543210 \(attacks fgm_linf\)"):
        leaderboard.merge(board, [Entry(**weaker)])
    forged = Entry(**{**_entry("a", 0.9, 0.4), "verified": False})
    with pytest.raises(ConfigError, match="An unverified entry never replaces a verified one"):
        leaderboard.merge(board, [forged])
    assert leaderboard.merge(board, [verified])[2] == 1  # the same verified results again: idempotent
    unverified, _, _ = leaderboard.merge(leaderboard.empty(), [forged])
    assert leaderboard.merge(unverified, [verified])[0].entries[0].verified  # the run's records make it verified
    assert "8 (unverified)" not in str(leaderboard.rows(board)) and "(unverified)" in leaderboard.rows(unverified)[0]["n"]


@pytest.mark.parametrize("bad, message", [
    (lambda e: e.update(clean_accuracy_ci=[0.1, 0.2]), "interval [0.1, 0.2] of clean_accuracy does not hold its value 0.9"),
    (lambda e: e.update(worst_case_robust_accuracy=0.6, worst_case_robust_accuracy_ci=_ci(0.6)),
     "worst_case_robust_accuracy 0.6 is above robust_accuracy['pgd_linf'] 0.4"),
    (lambda e: e["robust_accuracy_ci"].pop("fgm_linf"), "robust_accuracy_ci has intervals for ['pgd_linf']"),
    (lambda e: e.update(date="2026-13-45T00:00:00"), "date '2026-13-45T00:00:00' is not an ISO 8601"),
])
def test_an_entry_whose_numbers_cannot_all_be_true_is_refused(bad, message, tmp_path):
    entry = _entry("m", 0.9, 0.4)
    bad(entry)
    path = tmp_path / "leaderboard.json"
    path.write_text(json.dumps(_board(entry)))
    with pytest.raises(ConfigError) as refused:
        leaderboard.load(path)
    assert message in str(refused.value) and "entries.0" in str(refused.value)


def test_version_1_leaderboard_loads_with_wilson_intervals(tmp_path):
    old = _entry("m", 0.9, 0.4, n=50)
    for field in ("clean_accuracy_ci", "robust_accuracy_ci", "worst_case_robust_accuracy_ci"):
        del old[field]
    path = tmp_path / "leaderboard.json"
    path.write_text(json.dumps({"leaderboard_version": 1, "entries": [old]}))
    entry = leaderboard.load(path).entries[0]
    assert entry.clean_accuracy_ci == list(wilson_interval(45, 50))
    assert entry.worst_case_robust_accuracy_ci == list(wilson_interval(20, 50))
    assert entry.robust_accuracy_ci["fgm_linf"] == pytest.approx(list(wilson_interval(25, 50)))
    # Written back as version 2, intervals included.
    assert json.loads(leaderboard.dumps(leaderboard.load(path)))["leaderboard_version"] == 2
    # The published leaderboard loads, whichever version it is at, with an interval per accuracy.
    published = leaderboard.load(ROOT / "leaderboard" / "leaderboard.json")
    assert published.entries and all(set(e.robust_accuracy_ci) == set(e.robust_accuracy) for e in published.entries)
    path.write_text(json.dumps({"leaderboard_version": 3, "entries": []}))
    with pytest.raises(ConfigError, match="leaderboard_version 3; this advsuite reads versions 1, 2"):
        leaderboard.load(path)


def test_entries_copy_recorded_intervals_and_compute_wilson_for_older_results(tmp_path):
    from suite.report.results import upgrade

    older = leaderboard.entries_from_results(leaderboard.read_results(DATA / "results_v1_vision.json"))[0]
    assert older.n == 200 and older.clean_accuracy == 1.0
    assert older.clean_accuracy_ci == list(wilson_interval(200, 200))
    assert older.robust_accuracy_ci["fgm_linf"] == list(wilson_interval(0.055 * 200, 200))
    assert older.worst_case_robust_accuracy_ci == list(wilson_interval(0, 200))
    assert older.worst_case_robust_accuracy_ci[1] == pytest.approx(0.01884, abs=1e-4)  # 0/200: up to 1.9%
    data = upgrade(json.loads((DATA / "results_v1_vision.json").read_text()))
    data["clean_accuracy_ci"] = [0.97, 1.0]
    data["attacks"]["fgm_linf"]["robust_accuracy_ci"] = [0.03, 0.09]
    data["threat_models"]["linf eps=0.03"]["worst_case_robust_accuracy_ci"] = [0.0, 0.02]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    recorded = leaderboard.entries_from_results(leaderboard.read_results(path))[0]
    assert recorded.clean_accuracy_ci == [0.97, 1.0] and recorded.worst_case_robust_accuracy_ci == [0.0, 0.02]
    assert recorded.robust_accuracy_ci == {"fgm_linf": [0.03, 0.09], "pgd_linf": list(wilson_interval(0, 200))}


# --------------------------------------------------------------------------- NaN and infinities


@pytest.mark.parametrize("where, literal", [
    ("model.temperature", "NaN"),
    ("compute_seconds", "Infinity"),
    ("calibration.ece", "NaN"),
    ("calibration.reliability.14.confidence", "-Infinity"),
    ("adversary.opt.grid", "NaN"),
    ("attacks.pgd_linf.params.eps", "1e999"),
])
def test_results_with_nan_or_infinity_anywhere_are_refused_naming_the_field(where, literal, tmp_path):
    data = json.loads((DATA / "results_v1_vision.json").read_text())
    *parents, last = where.split(".")
    target = data
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
    target[last] = "@@"
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data).replace('"@@"', literal))
    board = tmp_path / "leaderboard.json"
    with pytest.raises(ConfigError) as refused:
        leaderboard.add([path], board)
    spelled = {"1e999": "Infinity"}.get(literal, literal)
    assert f"{where} is {spelled}; results files hold finite numbers only" in str(refused.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_a_leaderboard_holding_nan_is_refused_and_none_is_ever_written(tmp_path):
    path = tmp_path / "leaderboard.json"
    path.write_text(json.dumps(_board(_entry("m", 0.9, 0.4, compute_seconds=math.nan))))
    assert "NaN" in path.read_text()
    with pytest.raises(ConfigError, match=r"entries\.0\.compute_seconds is NaN"):
        leaderboard.load(path)
    # Validation refuses non-finite numbers in typed fields...
    with pytest.raises(Exception, match="finite number"):
        Entry(**_entry("m", 0.9, 0.4, temperature=math.inf))
    # ...and the writer refuses them even when validation was bypassed.
    sneaked = Leaderboard.model_construct(leaderboard_version=2, entries=[
        Entry.model_construct(**_entry("m", 0.9, 0.4, compute_seconds=math.inf))])
    with pytest.raises(ValueError, match=r"entries\.0\.compute_seconds = Infinity"):
        leaderboard.dumps(sneaked)


def test_write_results_refuses_nan_naming_the_field(tmp_path):
    from suite.report.results import Results, write_results

    results = leaderboard.read_results(DATA / "results_v1_vision.json")
    broken = results.model_copy(update={"calibration": {**results.calibration, "nll": math.nan}})
    with pytest.raises(ValueError, match=r"calibration\.nll = NaN"):
        write_results(tmp_path / "results.json", broken)
    assert not list(tmp_path.iterdir())
    with pytest.raises(Exception, match=r"calibration\.nll is NaN"):
        Results.model_validate({**results.model_dump(mode="json"), "calibration": {"nll": math.nan}})
    write_results(tmp_path / "results.json", results)
    assert Results.model_validate_json((tmp_path / "results.json").read_text()) == results


# --------------------------------------------------------------------------- the lock


def test_concurrent_adds_lose_no_entry_and_leave_no_lock_file(tmp_path):
    data = json.loads((DATA / "results_v1_vision.json").read_text())
    files = []
    for index in range(4):
        data["model"].update(name=f"model-{index}", spec=f"model-{index}")
        files.append(tmp_path / f"results-{index}.json")
        files[-1].write_text(json.dumps(data))
    board = tmp_path / "site" / "leaderboard.json"
    script = "import sys; from suite.report import leaderboard; leaderboard.add([sys.argv[1]], sys.argv[2])"
    processes = [subprocess.Popen([sys.executable, "-c", script, str(path), str(board)], cwd=ROOT) for path in files]
    assert [process.wait(timeout=120) for process in processes] == [0] * 4
    assert sorted(e.model for e in leaderboard.load(board).entries) == [f"model-{i}" for i in range(4)]
    assert sorted(p.name for p in board.parent.iterdir()) == ["index.html", "leaderboard.json", "schema.json"]


@pytest.fixture(scope="module")
def demo_results(tmp_path_factory):
    """Real results of a small run of both built-in models (text with the cal adversary)."""
    from suite.cli.main import main

    root = tmp_path_factory.mktemp("board")
    recipe = root / "r.yaml"
    recipe.write_text("""
name: board
tasks:
  - name: text
    model: builtin:sentiment-tiny
    dataset: {spec: builtin:sentiment, split: test, n: 12}
    attacks: [deepwordbug]
  - name: vision
    model: builtin:digits-cnn
    dataset: {spec: builtin:digits, split: test, n: 24}
    attacks: [{name: fgm_linf, eps: 0.03}, {name: pgd_linf, eps: 0.03, steps: 5}, {name: pgd_linf, eps: 0.1, steps: 5, label: pgd_big}]
""")
    with pytest.raises(SystemExit) as done:
        main(["-q", "run", str(recipe), "--output", str(root / "runs")])
    assert done.value.code == 0
    return root / "runs"


def test_cli_add_validates_merges_idempotently_and_shows(demo_results, tmp_path, capsys):
    from suite.cli.main import main

    def advsuite(*args):
        with pytest.raises(SystemExit) as done:
            main(list(args))
        return done.value.code

    path = tmp_path / "site" / "leaderboard.json"
    files = [str(demo_results / "text" / "results.json"), str(demo_results / "vision")]
    assert advsuite("leaderboard", "add", *files, "--leaderboard", str(path)) == 0
    first = path.read_text()
    board = json.loads(first)
    _, schema_ok = _validators()
    assert schema_ok(board)
    keys = {(e["task"], e["threat_model"], e["eps"]) for e in board["entries"]}
    # One entry per threat model: linf at two budgets are two entries; DeepWordBug is character-level.
    assert keys == {("builtin:sentiment/test", "character-level", None), ("builtin:digits/test", "linf", 0.03),
                    ("builtin:digits/test", "linf", 0.1)}
    vision = next(e for e in board["entries"] if e["eps"] == 0.03)
    assert set(vision["robust_accuracy"]) == {"fgm_linf", "pgd_linf"}
    assert vision["worst_case_robust_accuracy"] <= min(vision["robust_accuracy"].values())
    text = next(e for e in board["entries"] if e["threat_model"] == "character-level")
    assert set(text["robust_accuracy"]) == {"deepwordbug", "deepwordbug@cal"}
    assert text["illusion"] is not None and text["compute_seconds"] > 0
    # The page and schema are published beside a new leaderboard.
    assert (path.parent / "index.html").exists() and (path.parent / "schema.json").exists()
    # Adding again changes nothing.
    assert advsuite("leaderboard", "add", *files, "--leaderboard", str(path)) == 0
    assert path.read_text() == first
    assert "0 added, 3 replaced, 3 entries" in capsys.readouterr().out
    # A recipe's output directory adds every task; an empty directory is a one-line error.
    assert advsuite("leaderboard", "add", str(demo_results), "--leaderboard", str(path)) == 0
    assert path.read_text() == first
    assert advsuite("leaderboard", "add", str(tmp_path), "--leaderboard", str(path)) == 2
    assert "holds no results.json" in capsys.readouterr().err
    assert advsuite("leaderboard", "show", "--leaderboard", str(path), "--threat-model", "linf") == 0
    shown = capsys.readouterr().out
    assert "builtin:digits-cnn" in shown and "character-level" not in shown
    # Another file name: the page beside it reads leaderboard.json unless told, so add says how.
    other = tmp_path / "site" / "robust 2026.json"
    assert advsuite("leaderboard", "add", files[1], "--leaderboard", str(other)) == 0
    assert f"page: {path.parent / 'index.html?board=robust%202026.json'} (served over HTTP)" in capsys.readouterr().out


def _advsuite(*args) -> int:
    from suite.cli.main import main

    with pytest.raises(SystemExit) as done:
        main(list(args))
    return done.value.code


def test_cli_refuses_a_smaller_evaluation_unless_replace(tmp_path, capsys):
    board = tmp_path / "leaderboard.json"
    full = tmp_path / "full.json"
    shutil.copy(DATA / "results_v1_vision.json", full)
    smoke = tmp_path / "smoke.json"
    data = json.loads(full.read_text())
    data["dataset"]["n"] = 10  # a --limit 10 run of the same model
    for entry in data["attacks"].values():
        entry["n_attacked"] = min(entry["n_attacked"], 10)
    smoke.write_text(json.dumps(data))
    assert _advsuite("leaderboard", "add", str(full), "--leaderboard", str(board)) == 0
    before, files = board.read_bytes(), sorted(tmp_path.iterdir())
    capsys.readouterr()
    assert _advsuite("leaderboard", "add", str(smoke), "--leaderboard", str(board)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("advsuite: error: ")
    assert "with n=200, seed 0 and dataset fingerprint 'sklearn-digits-32px-test'; these results have n=10" in err
    assert "pass --replace" in err
    assert board.read_bytes() == before and sorted(tmp_path.iterdir()) == files
    # Re-adding the same evaluation replaces it, byte for byte.
    assert _advsuite("leaderboard", "add", str(full), "--leaderboard", str(board)) == 0
    assert board.read_bytes() == before
    assert _advsuite("leaderboard", "add", str(smoke), "--leaderboard", str(board), "--replace") == 0
    assert "0 added, 1 replaced, 1 entries" in capsys.readouterr().out
    (entry,) = leaderboard.load(board).entries
    assert entry.n == 10 and entry.clean_accuracy_ci == list(wilson_interval(10, 10))
    assert sorted(tmp_path.iterdir()) == files  # no lock file, no temporary file


def test_cli_show_prints_intervals_and_no_terminal_controls(tmp_path, capsys):
    board = tmp_path / "leaderboard.json"
    hostile = "evil\x1b[2J\x1b]0;pwned\x07\u202etxt.exe\u2066"
    board.write_text(json.dumps(_board(_entry(hostile, 0.9, 0.4, task="t\x9b1m/test", warnings=["\x1b[31m"]))))
    assert _advsuite("leaderboard", "show", "--leaderboard", str(board)) == 0
    shown = capsys.readouterr().out
    assert "evil\\x1b[2J\\x1b]0;pwned\\x07\\u202etxt.exe\\u2066" in shown and "t\\x9b1m/test" in shown
    assert not any(char in shown for char in "\x1b\x07\x9b\u202e\u2066")
    low, high = wilson_interval(180, 200)
    assert f"90.0 [{100 * low:.1f}, {100 * high:.1f}]" in shown and "pgd_linf 40.0 [" in shown
    assert "clean [95% CI]" in shown


def test_bad_input_leaves_the_leaderboard_untouched(demo_results, tmp_path):
    path = tmp_path / "leaderboard.json"
    leaderboard.add([demo_results / "vision" / "results.json"], path)
    before = path.read_text()
    broken = tmp_path / "broken.json"
    data = json.loads((demo_results / "text" / "results.json").read_text())
    data["clean_accuracy"] = "0.9"
    broken.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"broken.json.*clean_accuracy"):
        leaderboard.add([demo_results / "text" / "results.json", broken], path)
    with pytest.raises(ConfigError, match="cannot read results"):
        leaderboard.add([tmp_path / "missing.json"], path)
    assert path.read_text() == before
    path.write_text('{"leaderboard_version": 1, "entries": [{"model": 3}]}')
    with pytest.raises(ConfigError, match="left untouched"):
        leaderboard.add([demo_results / "vision" / "results.json"], path)
    assert "model" in path.read_text()


# --------------------------------------------------------------------------- the page in Chromium

CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None)

#: Test-only page beside index.html (same origin): loads it in a frame, records the rows as
#: rendered, clicks the "Clean" header twice, and writes what it saw into #out.
HARNESS = """<!DOCTYPE html><html><body><iframe id="f" src="index.html?QUERY"></iframe><pre id="out"></pre>
<script>
const rows = (d) => [...d.querySelectorAll("#rows tr")].map((r) => r.dataset.model);
const f = document.getElementById("f");
f.addEventListener("load", () => {
  const poll = setInterval(() => {
    const d = f.contentDocument;
    if (!d.body.dataset.rendered) return;
    clearInterval(poll);
    const seen = {initial: rows(d), rendered: d.body.dataset.rendered, pwned: d.body.dataset.pwned || null,
                  cells: [...d.querySelectorAll("#rows tr td:nth-child(2)")].map((td) => td.textContent),
                  revisions: [...d.querySelectorAll("#rows tr td:nth-child(3)")].map((td) => td.textContent),
                  clean: [...d.querySelectorAll("#rows tr td:nth-child(6)")].map((td) => td.textContent),
                  attacks: [...d.querySelectorAll("#rows tr td:nth-child(8)")].map((td) => td.textContent),
                  options: [...d.querySelectorAll("#sort option")].map((o) => o.textContent),
                  injected: d.querySelectorAll("script").length - 1 + d.querySelectorAll("img").length,
                  illusion: [...d.querySelectorAll("#rows .illusion")].map((b) => b.textContent)};
    d.querySelector('th[data-key="clean_accuracy"]')?.click();
    seen.clickOnce = rows(d);
    d.querySelector('th[data-key="clean_accuracy"]')?.click();
    seen.clickTwice = rows(d);
    seen.url = f.contentWindow.location.search;
    seen.status = d.getElementById("status").textContent;
    document.getElementById("out").textContent = JSON.stringify(seen);
  }, 20);
});
</script></body></html>"""


class _Out(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.inside, self.text = False, ""

    def handle_starttag(self, tag, attrs):
        self.inside = tag == "pre" and ("id", "out") in attrs

    def handle_endtag(self, tag):
        self.inside = False

    def handle_data(self, data):
        if self.inside:
            self.text += data


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    shutil.copy(ROOT / "leaderboard" / "index.html", root / "index.html")
    board = _board(
        _entry("robust-net", 0.80, 0.50, revision=BIDI),
        _entry(XSS, 0.95, 0.10, illusion={"flagged": True, "max_drop": 0.123, "findings": [XSS]}, warnings=[XSS],
               robust_accuracy={"pgd_linf": 0.10, XSS: 0.2}),
        _entry("middle-net", 0.90, 0.30),
        _entry("text-model", 0.70, 0.20, task="builtin:sentiment/test", threat_model="word-level", eps=None, norm=None,
               robust_accuracy={"deepwordbug": 0.3, "deepwordbug@cal": 0.2}),
    )
    (root / "leaderboard.json").write_text(json.dumps(board))
    (root / "other board.json").write_text(json.dumps(_board(_entry("elsewhere-net", 0.5, 0.25))))
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_the_page_runs_only_its_own_script_and_style():
    """The page's Content-Security-Policy allows its one inline script and its one style block by
    hash, not every inline one ('unsafe-inline'): markup that got into the page could neither run
    nor restyle it (an injected style can hide or fake a row). Changing either means updating its
    hash (given here when they disagree)."""
    import base64
    import hashlib

    page = (Path(leaderboard.__file__).resolve().parents[2] / "leaderboard" / "index.html").read_text()
    script = page[page.index("<script>") + len("<script>"):page.index("</script>")]
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1)
    assert f"script-src 'sha256-{digest}';" in policy, f"set script-src 'sha256-{digest}' in index.html's policy"
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0] and page.count("<script") == 1
    style = page[page.index("<style>") + len("<style>"):page.index("</style>")]
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}';" in policy, f"set style-src 'sha256-{digest}' in index.html's policy"
    assert "unsafe-inline" not in policy and page.count("<style") == 1 and "style=" not in page


def test_the_page_and_schema_beside_a_leaderboard_are_kept_current_but_a_users_page_is_kept(tmp_path):
    """A schema.json from before a field was added no longer describes the entries: rewritten.
    A page the suite shipped is updated; a page of the user's own is never overwritten."""
    import hashlib

    from suite.report.leaderboard_page import PAGE_DIRS, SHIPPED_PAGES, install_page

    page = (PAGE_DIRS[0] / "index.html").read_bytes()
    assert hashlib.sha256(page).hexdigest() in SHIPPED_PAGES, "add the current page's sha256 to SHIPPED_PAGES"
    old_page = subprocess.run(["git", "show", "81ec376:leaderboard/index.html"], capture_output=True,
                              cwd=PAGE_DIRS[0].parent).stdout
    if not old_page:  # (a checkout without that commit)
        pytest.skip("the page shipped at 81ec376 is not in this checkout's history")
    for name, content in (("ours", old_page), ("theirs", b"<html>my own page</html>")):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "index.html").write_bytes(content)
        (directory / "schema.json").write_text('{"an": "older schema"}')
        install_page(directory)
        assert json.loads((directory / "schema.json").read_text()) == leaderboard.schema()
        assert (directory / "index.html").read_bytes() == (page if name == "ours" else content)


def _browse(root: Path, base: str, query: str = "") -> dict:
    # A fresh harness name and profile per visit: a cached harness would replay an older query.
    visit = len(list(root.glob("harness-*.html")))
    harness = f"harness-{visit}.html"
    (root / harness).write_text(HARNESS.replace("QUERY", query))
    completed = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
         f"--user-data-dir={root / f'profile-{visit}'}", "--virtual-time-budget=10000", "--dump-dom",
         f"{base}/{harness}"],
        capture_output=True, text=True, timeout=120,
    )
    parser = _Out()
    parser.feed(completed.stdout)
    assert parser.text, f"the page did not render (chromium exit {completed.returncode}): {completed.stderr[-2000:]}"
    return json.loads(parser.text)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (.ci/run installs Debian's chromium)")
def test_page_renders_sorts_and_shows_markup_as_text(served):
    root, base = served
    seen = _browse(root, base)
    assert seen["rendered"] == "4"
    # Default: worst-case robust accuracy, best first.
    assert seen["initial"] == ["robust-net", "middle-net", "text-model", XSS]
    # The hostile name is text: shown verbatim, nothing injected, nothing executed.
    assert XSS in seen["cells"] and seen["injected"] == 0 and seen["pwned"] is None
    assert f"robust accuracy: {XSS}" in seen["options"] and any(XSS in cell for cell in seen["attacks"])
    # Control and bidi characters are shown escaped, as `leaderboard show` prints them.
    assert "v1\\u202etxt.exe\\x1b[2J" in seen["revisions"] and not any("\u202e" in r for r in seen["revisions"])
    # Every accuracy with its 95% interval (Wilson, n = 200: 80% is [73.9, 84.9]).
    low, high = wilson_interval(160, 200)
    assert seen["clean"][0] == f"80.0 [{100 * low:.1f}, {100 * high:.1f}]"
    low, high = wilson_interval(100, 200)
    assert f"pgd_linf 50.0 [{100 * low:.1f}, {100 * high:.1f}]" in seen["attacks"][0]
    assert seen["illusion"] == ["ILLUSION −12.3 pp"]
    # Clicking "Clean" sorts by clean accuracy, high to low; a second click reverses it.
    assert seen["clickOnce"] == [XSS, "middle-net", "robust-net", "text-model"]
    assert seen["clickTwice"] == ["text-model", "robust-net", "middle-net", XSS]
    assert "sort=clean_accuracy" in seen["url"] and "dir=asc" in seen["url"]


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (.ci/run installs Debian's chromium)")
def test_page_filters_from_the_url(served):
    root, base = served
    seen = _browse(root, base, "threat=linf%20%CE%B5%3D0.03&sort=pgd_linf&dir=asc")
    assert seen["initial"] == [XSS, "middle-net", "robust-net"]
    seen = _browse(root, base, "task=builtin%3Asentiment%2Ftest")
    assert seen["initial"] == ["text-model"]


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium not installed (.ci/run installs Debian's chromium)")
def test_page_reads_another_leaderboard_file_beside_it_and_nothing_else(served):
    """A leaderboard saved under another name (``leaderboard add --leaderboard board/x.json``)
    is shown at ``index.html?board=x.json``; a path or another origin is refused."""
    root, base = served
    seen = _browse(root, base, "board=other%20board.json")
    assert seen["initial"] == ["elsewhere-net"] and "board=other+board.json" in seen["url"]
    for hostile in ("..%2Fsecret.json", "https%3A%2F%2Fevil.example%2Fx.json", "leaderboard.json%3Fx", "schema.js"):
        seen = _browse(root, base, f"board={hostile}")
        assert seen["rendered"] == "error" and "board must name a .json file beside this page" in seen["status"], hostile


def test_a_leaderboard_that_is_a_symbolic_link_is_written_through(demo_results, tmp_path):
    """Renaming the new file over a link replaced the link with a copy, and the board it named
    never got the entry. The link's file is written (and locked), the link stays."""
    shared = tmp_path / "shared" / "board.json"
    leaderboard.add([demo_results / "vision" / "results.json"], shared)
    site = tmp_path / "site"
    site.mkdir()
    (site / "lb.json").symlink_to(shared)
    board, added, _ = leaderboard.add([demo_results / "text" / "results.json"], site / "lb.json")
    assert added >= 1 and (site / "lb.json").is_symlink()
    assert len(leaderboard.load(shared).entries) == len(board.entries) > added
    assert (site / "index.html").exists()  # the page beside the name given


def test_a_write_keeps_the_boards_mode_clears_what_a_kill_left_and_refuses_a_looping_link(demo_results, tmp_path):
    """A shared board of mode 664 came back 644; a partial ``.board.json.<pid>.tmp`` a kill left
    in the published folder stayed there; re-adding the same results rewrote the file (and failed
    on a full disk); a link that loops was replaced by a regular file."""
    import os
    import subprocess

    board = tmp_path / "site" / "board.json"
    results = [demo_results / "vision" / "results.json"]
    leaderboard.add(results, board)
    os.chmod(board, 0o664)
    gone = subprocess.Popen(["true"])
    gone.wait()  # a process that has ended: its staged write is stale
    stale, live = board.with_name(f".board.json.{gone.pid}.tmp"), board.with_name(f".board.json.{os.getpid()}.tmp")
    stale.write_text('{"partial')
    live.write_text("mine")
    before = board.stat().st_mtime_ns
    _, added, replaced = leaderboard.add(results, board)
    assert (added, board.stat().st_mtime_ns) == (0, before) and replaced >= 1  # the same bytes: not rewritten
    assert not stale.exists() and live.exists()
    leaderboard.add([demo_results / "text" / "results.json"], board)
    assert board.stat().st_mode & 0o777 == 0o664
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    with pytest.raises(ConfigError, match="is a symbolic link that loops"):
        leaderboard.add(results, tmp_path / "a.json")
    assert (tmp_path / "a.json").is_symlink()


def test_one_add_that_gives_one_slot_twice_is_refused():
    """A seed sweep's replicates (one model, task and threat, another attack seed each) all fill
    one slot: adding the sweep's directory kept the last and said '1 added'."""
    first, second = Entry(**_entry("a", 0.9, 0.4)), Entry(**_entry("a", 0.9, 0.3))
    with pytest.raises(ConfigError, match="'o/v-s0/results.json' and 'o/v-s1/results.json' both give 'a'"):
        leaderboard.merge_all(leaderboard.empty(), [("o/v-s0/results.json", [first]), ("o/v-s1/results.json", [second])])
    board, added, replaced = leaderboard.merge_all(leaderboard.empty(), [("one", [first]), ("two", [Entry(**_entry("b", 0.8, 0.5))])])
    assert (added, replaced, len(board.entries)) == (2, 0, 2)
