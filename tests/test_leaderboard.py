"""Leaderboard: schema (pydantic and the published JSON Schema), idempotent merge, the CLI, and
the static page in a real headless Chromium (rows, sorting by click and by URL, XSS as text)."""

from __future__ import annotations

import functools
import html.parser
import http.server
import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from suite.errors import ConfigError
from suite.report import leaderboard
from suite.report.leaderboard import Entry, Leaderboard

ROOT = Path(__file__).resolve().parents[1]
XSS = '<script>alert(1)</script><img src=x onerror="document.body.dataset.pwned=1">'


def _entry(model: str, clean: float, worst: float, **changes) -> dict:
    entry = {
        "task": "builtin:digits/test", "threat_model": "linf", "eps": 0.03, "norm": "linf", "model": model,
        "model_spec": model, "revision": "v1", "temperature": 1.0, "clean_accuracy": clean,
        "robust_accuracy": {"pgd_linf": worst, "fgm_linf": min(1.0, worst + 0.1)},
        "worst_case_robust_accuracy": worst, "distributional_accuracy": None, "n": 200, "seed": 0,
        "suite_version": "0.1.0", "recipe_hash": "0123456789abcdef", "date": "2026-11-22T10:00:00+00:00",
        "compute_seconds": 12.5, "illusion": None, "warnings": [], "dataset_fingerprint": None,
        "recipe_task": "vision",
    }
    return {**entry, **changes}


def _board(*entries: dict) -> dict:
    return {"leaderboard_version": 1, "entries": list(entries)}


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
    board, added, replaced = leaderboard.merge(Leaderboard(leaderboard_version=1, entries=[]), [a, b])
    assert (added, replaced, len(board.entries)) == (2, 0, 2)
    again, added, replaced = leaderboard.merge(board, [b, a])
    assert (added, replaced) == (0, 2) and leaderboard.dumps(again) == leaderboard.dumps(board)
    newer = Entry(**_entry("a", 0.95, 0.45, date="2026-11-23T10:00:00+00:00"))
    updated, added, replaced = leaderboard.merge(board, [newer])
    assert (added, replaced, len(updated.entries)) == (0, 1, 2)
    assert next(e for e in updated.entries if e.model == "a").clean_accuracy == 0.95
    # Another revision, ε or temperature is another entry.
    other = [Entry(**_entry("a", 0.9, 0.4, revision="v2")), Entry(**_entry("a", 0.9, 0.3, eps=0.1))]
    assert len(leaderboard.merge(board, other)[0].entries) == 4


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
                  injected: d.querySelectorAll("#rows script, #rows img").length,
                  illusion: [...d.querySelectorAll("#rows .illusion")].map((b) => b.textContent)};
    d.querySelector('th[data-key="clean_accuracy"]').click();
    seen.clickOnce = rows(d);
    d.querySelector('th[data-key="clean_accuracy"]').click();
    seen.clickTwice = rows(d);
    seen.url = f.contentWindow.location.search;
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
        _entry("robust-net", 0.80, 0.50),
        _entry(XSS, 0.95, 0.10, illusion={"flagged": True, "max_drop": 0.123, "findings": [XSS]}, warnings=[XSS]),
        _entry("middle-net", 0.90, 0.30),
        _entry("text-model", 0.70, 0.20, task="builtin:sentiment/test", threat_model="word-level", eps=None, norm=None,
               robust_accuracy={"deepwordbug": 0.3, "deepwordbug@cal": 0.2}),
    )
    (root / "leaderboard.json").write_text(json.dumps(board))
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


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
