"""Long loops report progress, and ``--limit`` bounds the ``opt`` search.

Bars are counted through a recording tqdm (drawn to a buffer, never hidden) put where
:func:`suite.progress.progress_bar` looks it up; whether a bar is drawn at all is tested on
:func:`suite.progress.bars_disabled`.
"""

from __future__ import annotations

import io
import logging
import math
import re
import sys
from pathlib import Path

import pytest
import torch
import tqdm.auto
from tqdm import tqdm as std_tqdm

from suite.attacks import build_attack
from suite.calibration.temperature import max_attack_runs, optimise_temperature
from suite.cli.main import main
from suite.progress import bars_disabled, progress_bar
from suite.text import PrintableFilter


class RecordingBar(std_tqdm):
    """A tqdm bar that is always drawn (to a buffer) and remembered."""

    bars: list[RecordingBar] = []

    def __init__(self, *args, **kwargs) -> None:
        self.leave_asked = kwargs.get("leave")
        kwargs.update(disable=False, file=io.StringIO(), mininterval=0, miniters=1)
        super().__init__(*args, **kwargs)
        RecordingBar.bars.append(self)

    @property
    def drawn(self) -> str:
        return self.fp.getvalue()


@pytest.fixture
def bars(monkeypatch) -> list[RecordingBar]:
    RecordingBar.bars = []
    monkeypatch.setattr(tqdm.auto, "tqdm", RecordingBar)
    return RecordingBar.bars


def test_the_opt_search_draws_a_bar_over_attack_runs_with_an_eta(bars):
    evaluated = []

    def q(temperature: float) -> float:  # a bumpy Q(T), so the search does not stop early
        evaluated.append(temperature)
        return abs(math.sin(math.log(temperature)))

    search = optimise_temperature(q, maxiter=3, initial=(0.5, 1.0), desc="pwws@opt: search T (10 ex)")
    assert len(bars) == 1
    bar = bars[0]
    assert bar.desc == "pwws@opt: search T (10 ex)"
    assert bar.total == max_attack_runs(3, (0.5, 1.0)) == 5
    assert bar.n == len(evaluated) == search.attack_runs == 5  # one update per attack run
    assert bar.leave_asked is False
    assert re.search(r"5/5 \[\d\d:\d\d<\d\d:\d\d", bar.drawn)  # elapsed<remaining: the ETA
    assert "T=" in bar.drawn and "Q=" in bar.drawn


def test_the_opt_search_bar_total_bounds_its_attack_runs():
    for maxiter in (1, 2, 5, 12):
        for initial in ((1.0,), (0.01, 1.0), (1.0, 1.0)):
            runs = optimise_temperature(lambda t: abs(math.sin(3 * math.log(t))), maxiter=maxiter, initial=initial)
            assert runs.attack_runs <= max_attack_runs(maxiter, initial)
    assert max_attack_runs(12, (1.0, 1.0)) == 13  # repeated initial temperatures run once


def _two_correct(model, examples) -> list:
    images = torch.stack([ex.input for ex in examples[:20]])
    predictions = model.predict(images)
    return [ex for ex, p in zip(examples, predictions) if int(p) == ex.label][:2]


def test_autoattack_draws_a_bar_per_component(bars, digits_model, digits_examples):
    examples = _two_correct(digits_model, digits_examples)
    # A radius too small to break anything: every component runs its whole budget.
    attack = build_attack("autoattack", {"eps": 1e-4, "steps": 2, "targets": 1, "queries": 3})
    attack.run(digits_model, examples, seed=0)
    assert [bar.desc for bar in bars] == [f"autoattack: {name} (2 ex)" for name in ("ta_apgd_ce", "ta_apgd_t", "fab_t", "square")]
    # Model calls torchattacks 3.5.1 makes: 1 + restarts·(steps+1); 1 + targets·restarts·(steps+2);
    # 1 + targets·restarts·(2·steps+3); queries + 3.
    assert [bar.total for bar in bars] == [1 + 3, 1 + 4, 1 + 7, 3 + 3]
    assert [bar.n for bar in bars] == [bar.total for bar in bars]
    assert all(bar.unit == "call" and re.search(r"\[\d\d:\d\d<\d\d:\d\d", bar.drawn) for bar in bars)


def test_square_alone_draws_one_bar(bars, digits_model, digits_examples):
    examples = _two_correct(digits_model, digits_examples)
    build_attack("square", {"eps": 1e-4, "queries": 4}).run(digits_model, examples, seed=0)
    assert [(bar.desc, bar.total, bar.n) for bar in bars] == [("square (2 ex)", 7, 7)]


def test_log_lines_go_above_a_drawn_bar_through_the_same_filters(bars, capsys):
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(PrintableFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with progress_bar(2, "search"):
            assert handler not in root.handlers  # stood in for while the bar is drawn
            logging.getLogger("suite.test").warning("T=%s \x1b[2J", 1)
        assert handler in root.handlers
    finally:
        root.removeHandler(handler)
    assert capsys.readouterr().err == "T=1 \\x1b[2J\n"


@pytest.mark.parametrize(("environ", "disabled"), [
    ({}, None),  # tqdm decides: drawn on a terminal only
    ({"TQDM_DISABLE": "1"}, True),
    ({"TQDM_DISABLE": "0"}, None),
    ({"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1"}, True),  # not the main process
    ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"}, None),
])
def test_bars_respect_tqdm_disable_and_show_on_the_main_process_only(monkeypatch, environ, disabled):
    for name in ("TQDM_DISABLE", "WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert bars_disabled() is disabled


RECIPE = """
name: limited
tasks:
  - name: own-split
    model: builtin:sentiment-tiny
    dataset: {spec: builtin:sentiment, split: test, n: 60}
    attacks: [deepwordbug]
    adversary: {kinds: [none, cal, opt], split: validation, opt_n: 30}
  - name: small
    model: builtin:sentiment-tiny
    dataset: {spec: builtin:sentiment, split: test}
    attacks: [deepwordbug]
    adversary: {kinds: [none, opt], split: validation, n: 5, opt_n: 4}
  - name: evaluated-examples
    model: builtin:sentiment-tiny
    dataset: builtin:sentiment
    attacks: [deepwordbug]
    adversary: {kinds: [none, opt], opt_n: 30}
"""


def _tasks_run_with(argv: list[str], monkeypatch, tmp_path: Path) -> list:
    """The tasks ``advsuite run`` hands to the runner (which is not run)."""
    import suite.evaluation.recipe_run

    handed = []
    monkeypatch.setattr(suite.evaluation.recipe_run, "run_tasks", lambda tasks, options, **_: handed.extend(tasks) or [])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 0
    return handed


def test_limit_caps_the_opt_search_and_the_fitting_split(monkeypatch, tmp_path):
    recipe = tmp_path / "limited.yaml"
    recipe.write_text(RECIPE)
    tasks = {task.name: task for task in _tasks_run_with(["run", str(recipe), "--limit", "7"], monkeypatch, tmp_path)}
    own, small, evaluated = tasks["own-split"], tasks["small"], tasks["evaluated-examples"]
    assert (own.dataset.n, own.adversary.n, own.adversary.opt_n) == (7, 7, 7)
    assert (small.dataset.n, small.adversary.n, small.adversary.opt_n) == (7, 5, 4)  # already below the limit
    # Fitted on the evaluated examples (capped at 7), so the search runs on at most 7 of them.
    assert (evaluated.dataset.n, evaluated.adversary.n, evaluated.adversary.opt_n) == (7, None, 7)

    unlimited = {task.name: task for task in _tasks_run_with(["run", str(recipe)], monkeypatch, tmp_path)}
    assert (unlimited["own-split"].adversary.n, unlimited["own-split"].adversary.opt_n) == (None, 30)
    assert not any(tmp_path.joinpath("runs").glob("*/*"))  # nothing ran, nothing was written
