"""The garbage collector around a run (suite/collector.py): long-lived objects out of its scans
while a run lasts and given back after; the console script skips the scans at exit; a library
call never leaves the caller's collector changed."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

import suite
from suite.collector import hold_made_since, long_lived_frozen
from suite.evaluation import runner

from test_core import _linear_net  # a linear net and the 4x4 images it classifies


@pytest.fixture
def seen_frozen(monkeypatch):
    """The collector's freeze count while each run's body (runner._execute) runs."""
    counts = []
    inner = runner._execute

    def spy(prepared):
        counts.append(gc.get_freeze_count())
        return inner(prepared)

    monkeypatch.setattr(runner, "_execute", spy)
    return counts


def test_a_run_freezes_what_lives_before_it_and_gives_it_back(seen_frozen):
    net, images, labels = _linear_net()
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    results = suite.evaluate(net, (images, labels), attacks=["fgm_linf"], eps=0.05)
    assert results.clean_accuracy == 1.0
    # Everything alive at the start (this test's objects, torch's modules) was frozen during the run ...
    assert seen_frozen and seen_frozen[0] > 1000
    # ... and is back in the collector's care after it.
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def test_a_failed_run_gives_the_frozen_objects_back(seen_frozen, monkeypatch):
    net, images, labels = _linear_net()

    def broken(prepared):
        raise RuntimeError("a bug in the middle of a run")

    monkeypatch.setattr(runner, "_execute", broken)
    with pytest.raises(RuntimeError, match="a bug in the middle"):
        suite.evaluate(net, (images, labels), attacks=["fgm_linf"], eps=0.05)
    assert gc.get_freeze_count() == 0


def test_a_cycle_that_became_garbage_during_the_block_is_collected_after_it():
    class Node:
        pass

    first, second = Node(), Node()
    first.other, second.other = second, first
    import weakref

    gone = weakref.ref(first)
    with long_lived_frozen():
        del first, second
        gc.collect()
        assert gone() is not None  # frozen: a collection inside the block leaves the cycle
    gc.collect()
    assert gone() is None  # given back: the next collection frees it


def test_a_block_inside_a_run_freezes_what_was_made_since_and_the_run_gives_all_back():
    with long_lived_frozen():
        outer = gc.get_freeze_count()
        made = [[] for _ in range(5000)]  # containers the collector tracks, made inside the run
        with long_lived_frozen():
            assert gc.get_freeze_count() >= outer + len(made)
        # the inner block gives nothing back (the run does): what it froze is frozen still
        assert gc.get_freeze_count() >= outer + len(made)
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    with long_lived_frozen():  # a block alone (a recipe run outside an evaluation) gives back its own
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_holding_what_was_made_since_freezes_it_inside_a_run_only():
    """A text stream freezes what its finished searches left every window (hold_made_since):
    inside a run's block that is frozen until the run gives it all back; outside, nothing."""
    made = [[] for _ in range(5000)]
    hold_made_since()
    assert gc.get_freeze_count() == 0
    with long_lived_frozen():
        outer = gc.get_freeze_count()
        made += [[] for _ in range(5000)]
        hold_made_since()
        assert gc.get_freeze_count() >= outer + 5000
    assert gc.get_freeze_count() == 0 and len(made) == 10000


def test_a_text_recipes_searches_run_with_the_recipe_frozen_too(sentiment_model, monkeypatch):
    """The recipe and WordNet's index are made inside the run (when the recipe is first built):
    its searches run with them out of the collector's scans, and the run gives them back."""
    from suite.attacks.text import cooperative
    from suite.data.builtin import sentiment

    counts = []
    inner = cooperative.Driver.stream

    def spy(self, searches):
        counts.append((gc.get_freeze_count(), len(gc.get_objects())))
        yield from inner(self, searches)

    monkeypatch.setattr(cooperative.Driver, "stream", spy)
    split = sentiment("test")
    texts = list(split.inputs[:3])
    labels = sentiment_model.predict(texts).tolist()  # every example attacked
    suite.evaluate(sentiment_model, (texts, labels), attacks=["pwws"], adversary=["none"])
    frozen, unfrozen = counts[0]
    # what the run made before its searches began (the recipe, WordNet) is frozen as well
    assert frozen > 1000 and unfrozen < 1000, counts
    assert gc.get_freeze_count() == 0


def test_a_caller_that_manages_the_collector_is_left_alone(seen_frozen):
    net, images, labels = _linear_net()
    gc.disable()
    try:
        suite.evaluate(net, (images, labels), attacks=["fgm_linf"], eps=0.05)
        assert seen_frozen[-1] == 0 and not gc.isenabled()
    finally:
        gc.enable()
    gc.freeze()  # a server that froze its objects before forking, say
    try:
        suite.evaluate(net, (images, labels), attacks=["fgm_linf"], eps=0.05)
        assert gc.get_freeze_count() > 1000  # still frozen: not given back by the run
    finally:
        gc.unfreeze()


def test_the_console_script_skips_the_scans_at_exit_and_main_in_process_does_not():
    from test_cli import advsuite

    assert advsuite("ls", "attacks") == 0
    assert gc.get_freeze_count() == 0  # main() called in a process that goes on
    probe = ("import atexit, gc, sys\n"
             "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
             "sys.argv = ['advsuite', 'evaluate', '--model', 'builtin:nope']\n"
             "from suite.cli.main import entry\n"
             "entry()\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    # The exit status and the one-line error are main()'s; the objects are frozen before shutdown.
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "unknown built-in model 'nope'" in done.stderr
    assert done.stdout.strip() == "frozen at exit: True"


def test_a_command_starts_with_rare_collections_and_runs_with_the_usual_ones(monkeypatch, tmp_path):
    """``advsuite`` raises the youngest generation's threshold while a command imports and loads,
    gives the collector its own thresholds back when the run begins, and leaves them as it found
    them when it returns, whether the command succeeded or failed."""
    from test_cli import advsuite

    from suite.collector import STARTUP_THRESHOLD
    from suite.evaluation import prepare as prepare_module

    own = gc.get_threshold()
    seen = {}
    preparing = prepare_module.prepare

    def spy_prepare(*args, **kwargs):
        seen["loading"] = gc.get_threshold()
        return preparing(*args, **kwargs)

    inner = runner._execute

    def spy_execute(prepared):
        seen["running"] = gc.get_threshold()
        return inner(prepared)

    import suite.evaluation.tasks as tasks

    monkeypatch.setattr(tasks, "prepare", spy_prepare)  # the CLI prepares its tasks there
    monkeypatch.setattr(runner, "_execute", spy_execute)
    assert advsuite("evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--attacks", "fgm_linf",
                    "--eps", "0.05", "--n", "4", "--output", str(tmp_path / "run")) == 0
    assert seen["loading"] == (STARTUP_THRESHOLD, *own[1:])
    assert seen["running"] == own
    assert gc.get_threshold() == own
    # A command refused before any run gives the thresholds back too.
    assert advsuite("evaluate", "--model", "builtin:nope") == 2
    assert gc.get_threshold() == own


def test_loading_a_model_collects_rarely_and_gives_the_thresholds_back(monkeypatch):
    """``load_model`` in a library call: the raised threshold while the model loads, the caller's
    own thresholds when it returns or fails; within the console script's start it changes nothing."""
    from suite.collector import STARTUP_THRESHOLD, quick_start
    from suite.models import MODEL_SCHEMES, load_model
    from suite.models.config import ModelConfig

    own = gc.get_threshold()
    seen = []
    builtin = MODEL_SCHEMES.get("builtin")

    def spy(name, config):
        seen.append(gc.get_threshold())
        if name == "broken":
            raise RuntimeError("a loader that fails")
        return builtin(name, config)

    monkeypatch.setitem(MODEL_SCHEMES._entries, "builtin", spy)
    model = load_model(ModelConfig(spec="builtin:digits-cnn"))
    assert model.num_classes == 10
    assert seen == [(STARTUP_THRESHOLD, *own[1:])] and gc.get_threshold() == own
    with pytest.raises(RuntimeError, match="a loader that fails"):
        load_model(ModelConfig(spec="builtin:broken"))
    assert gc.get_threshold() == own
    with quick_start():  # a command's start: loading inside it leaves the start to the command
        gc.set_threshold(STARTUP_THRESHOLD + 1, *own[1:])
        load_model(ModelConfig(spec="builtin:digits-cnn"))
        assert seen[-1] == (STARTUP_THRESHOLD + 1, *own[1:]) and gc.get_threshold() == seen[-1]
    assert gc.get_threshold() == own
