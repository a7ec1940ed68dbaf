"""Weights the suite writes carry their sha256, and every load checks it (issue 38, item 1).

Damage is 4 KB of flipped bytes inside the tensor data of ``model.safetensors``: same length,
valid header, so only the recorded hash tells it from the real model. A damaged built-in is
trained again to the numbers it had; a damaged ``advsuite train`` output is refused in one line
(the bad-input table, ``bad_input_faults.py``); ``advsuite ls --verify`` names the damage.
Built-in entries are copied from the session's shared cache (conftest.py): nothing new is
trained here but ``sentiment-init`` (zero epochs: the cheapest built-in to train again).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from suite.errors import ConfigError
from suite.models import load_model
from tiny_models import flip_tensor_bytes

from suite.models.weights import (HASH_FILE, WeightsMismatchError, file_sha256, record_hashes, recorded_entry,
                                  verify_weights)

WEIGHTS = "model.safetensors"


def _enter_cache(tmp_path: Path, monkeypatch, *specs: str) -> list[Path]:
    """The shared cache entries of built-ins ``specs`` (trained once per session: conftest.py),
    copied into a cache of this test's own, which ``ADVSUITE_CACHE`` then names."""
    cache = tmp_path / "cache" / "models"
    copies = []
    for spec in specs:
        source = Path(load_model(spec).info.extra["path"])
        target = shutil.copytree(source, cache / source.name)
        if recorded_entry(target) != target.name:  # a shared cache filled before entries were recorded
            record_hashes(target, entry=target.name)
        copies.append(target)
    monkeypatch.setenv("ADVSUITE_CACHE", str(tmp_path / "cache"))
    return copies


def _numbers(results) -> dict:
    return {"clean": results.clean_accuracy,
            **{name: entry.robust_accuracy for name, entry in results.attacks.items()}}


def test_a_damaged_builtin_is_trained_again_to_the_numbers_it_had(tmp_path, monkeypatch, caplog):
    import suite

    [entry] = _enter_cache(tmp_path, monkeypatch, "builtin:sentiment-init")
    recorded = json.loads((entry / HASH_FILE).read_text())["sha256"][WEIGHTS]
    before = _numbers(suite.evaluate("builtin:sentiment-init", "builtin:sentiment", attacks=["deepwordbug"], n=16,
                                     output=tmp_path / "before"))
    flip_tensor_bytes(entry / WEIGHTS)
    assert file_sha256(entry / WEIGHTS) != recorded
    with caplog.at_level(logging.WARNING, logger="suite.models.builtin_cache"):
        after = _numbers(suite.evaluate("builtin:sentiment-init", "builtin:sentiment", attacks=["deepwordbug"], n=16,
                                        output=tmp_path / "after"))
    assert after == before
    warnings = [record.getMessage() for record in caplog.records if "recorded sha256" in record.getMessage()]
    assert warnings == [f"builtin:sentiment-init: cached entry {entry} has weights {WEIGHTS!r} that do not match their "
                        "recorded sha256 (damaged?): retraining"]
    # The retrained entry records its hash (and its name) when written: the same weights as before the damage.
    assert json.loads((entry / HASH_FILE).read_text()) == {"sha256": {WEIGHTS: recorded}, "entry": entry.name}
    assert file_sha256(entry / WEIGHTS) == recorded
    assert not [path for path in entry.parent.iterdir() if path.name.startswith(".")]  # nothing left behind


def test_a_damaged_digits_cnn_never_loads_under_another_name(tmp_path, monkeypatch):
    # The case: as timm:<dir>, the damaged copy gave 16 % clean accuracy under the
    # built-in's name; with its recorded hash it is refused, naming the file and both hashes.
    [entry] = _enter_cache(tmp_path, monkeypatch, "builtin:digits-cnn")
    recorded = file_sha256(entry / WEIGHTS)
    assert verify_weights(entry / WEIGHTS) is True
    flip_tensor_bytes(entry / WEIGHTS)
    with pytest.raises(WeightsMismatchError) as caught:
        load_model(f"timm:{entry}")
    message = str(caught.value)
    assert "\n" not in message and repr(str(entry / WEIGHTS)) in message
    assert recorded in message and file_sha256(entry / WEIGHTS) in message
    assert isinstance(caught.value, ConfigError)  # one line, exit 2 in the CLI


def test_directories_without_a_record_load_as_before(tmp_path):
    from tiny_models import save_tiny_timm

    save_tiny_timm(tmp_path / "m")
    assert verify_weights(tmp_path / "m" / WEIGHTS) is False
    flip_tensor_bytes(tmp_path / "m" / WEIGHTS)
    assert load_model(f"timm:{tmp_path / 'm'}").labels == ["c0", "c1", "c2"]  # nothing to check it against


def test_train_outputs_record_their_hash_last_and_best(tmp_path):
    from tiny_models import save_tiny_timm

    from suite.train.store import TrainStore

    store = TrainStore(tmp_path / "run", identity={})
    (tmp_path / "run").mkdir()
    store.save_model(lambda directory: save_tiny_timm(directory))
    store.save_model(lambda directory: save_tiny_timm(directory, seed=1), best=True)
    for directory in (tmp_path / "run", tmp_path / "run" / "best"):
        recorded = json.loads((directory / HASH_FILE).read_text())
        assert recorded == {"sha256": {WEIGHTS: file_sha256(directory / WEIGHTS)}}
        assert verify_weights(directory / WEIGHTS) is True
    assert file_sha256(tmp_path / "run" / WEIGHTS) != file_sha256(tmp_path / "run" / "best" / WEIGHTS)


def test_ls_verify_names_the_damaged_entry(tmp_path, monkeypatch, capsys):
    from suite.cli.main import main

    digits, text = _enter_cache(tmp_path, monkeypatch, "builtin:digits-cnn", "builtin:sentiment-init")
    with pytest.raises(SystemExit) as caught:
        main(["ls", "--verify"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.split() == [digits.name, "ok", text.name, "ok"]

    recorded = file_sha256(digits / WEIGHTS)
    flip_tensor_bytes(digits / WEIGHTS)
    (text / HASH_FILE).unlink()
    with pytest.raises(SystemExit) as caught:
        main(["ls", "--verify"])
    lines = capsys.readouterr().out.splitlines()
    assert caught.value.code == 1
    assert lines[0] == (f"{digits.name}      damaged: {str(digits / WEIGHTS)!r} expected sha256 {recorded}, actual "
                        f"{file_sha256(digits / WEIGHTS)} (its next load trains it again)")
    assert lines[1].startswith(f"{text.name}  no recorded hash") and len(lines) == 2


def test_another_builtins_entry_copied_in_is_trained_again_not_loaded(tmp_path, monkeypatch, caplog):
    """Another built-in's whole entry (weights and hash record, consistent with each other)
    copied in place of ``sentiment-init``'s: its record names the other entry, so the load
    trains ``sentiment-init`` again instead of evaluating the other model under its name."""
    init, tiny = _enter_cache(tmp_path, monkeypatch, "builtin:sentiment-init", "builtin:sentiment-tiny")
    own = file_sha256(init / WEIGHTS)
    shutil.rmtree(init)
    shutil.copytree(tiny, init)
    assert verify_weights(init / WEIGHTS) is True  # the copied record matches the copied weights
    with caplog.at_level(logging.WARNING, logger="suite.models.builtin_cache"):
        model = load_model("builtin:sentiment-init")
    assert f"cached entry {init} was recorded as {tiny.name!r}, not {init.name!r}: retraining" in caplog.text
    assert file_sha256(init / WEIGHTS) == own and recorded_entry(init) == init.name
    assert model.weights_hash() == load_model(f"hf:{init}").weights_hash()


def test_a_cache_entry_is_checked_for_whose_weights_it_holds(tmp_path, monkeypatch):
    """What makes a built-in's entry untrustworthy, each found before anything loads: no
    record, another entry's weights or record, weights cut short, weights the record omits."""
    from suite.models.builtin_cache import entry_problem

    digits, at = _enter_cache(tmp_path, monkeypatch, "builtin:digits-cnn", "builtin:digits-cnn-at")
    assert entry_problem(digits, digits.name) is None and entry_problem(at, at.name) is None
    assert entry_problem(digits, at.name) == f"was recorded as {digits.name!r}, not {at.name!r}"
    shutil.copy(at / WEIGHTS, digits / WEIGHTS)  # another built-in's weights, the record left as it was
    assert entry_problem(digits, digits.name) == (f"has weights {WEIGHTS!r} that do not match their recorded "
                                                  "sha256 (damaged?)")
    (digits / HASH_FILE).unlink()  # ... and the record deleted
    assert entry_problem(digits, digits.name) == f"has no {HASH_FILE} (cached by an older version, or deleted)"
    shutil.copy(at / HASH_FILE, digits / HASH_FILE)  # ... and the other entry's record copied in
    assert entry_problem(digits, digits.name) == f"was recorded as {at.name!r}, not {digits.name!r}"
    record_hashes(digits)  # a record written without the entry's name (as before it was recorded)
    assert entry_problem(digits, digits.name) == "was recorded without its name (an older version)"
    record_hashes(digits, entry=digits.name)
    with open(digits / WEIGHTS, "r+b") as handle:  # cut short: the header may still read
        handle.truncate(1_000_000)
    assert "do not match their recorded sha256" in entry_problem(digits, digits.name)
    (digits / "extra.safetensors").write_bytes(b"")
    assert entry_problem(digits, digits.name) == "holds weights its record does not list (extra.safetensors)"
    (digits / HASH_FILE).write_text("[1]")
    assert entry_problem(digits, digits.name) == f"has a damaged {HASH_FILE}"


def test_processes_that_find_one_old_entry_at_once_retrain_it_once(tmp_path, monkeypatch, caplog):
    """A cache filled by an older version (records without the entry's name): under ``accelerate
    launch`` every process finds the entry unfit at once. Each retrains under a lock on the
    cache, after looking again: one retrains, the others keep its new entry. Before, a late one
    discarded the entry another had just trained (and was loading), and trained it again."""
    import threading

    from suite.models.builtin_cache import _retrained, entry_problem

    [entry] = _enter_cache(tmp_path, monkeypatch, "builtin:sentiment-init")
    own = file_sha256(entry / WEIGHTS)
    record_hashes(entry)  # as an older version recorded it: no entry name
    recipe = "suite.train.builtin_text:train_init"
    found = []
    with caplog.at_level(logging.WARNING, logger="suite.models.builtin_cache"):
        workers = [threading.Thread(target=lambda: found.append(
            _retrained("builtin:sentiment-init", entry.name, recipe, entry))) for _ in range(3)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=300)
        retrained = [record.getMessage() for record in caplog.records if "retraining" in record.getMessage()]
        inode = (entry / WEIGHTS).stat().st_ino
        # A process that judged the old entry before the first retrained it looks again, and keeps it.
        assert _retrained("builtin:sentiment-init", entry.name, recipe, entry) == entry
    assert retrained == [f"builtin:sentiment-init: cached entry {entry} was recorded without its name (an older "
                         "version): retraining"]
    assert found == [entry] * 3 and entry_problem(entry, entry.name) is None
    assert (entry / WEIGHTS).stat().st_ino == inode and file_sha256(entry / WEIGHTS) == own
    assert not [path for path in entry.parent.iterdir() if path.name.startswith(".")]  # nothing left behind


def test_ls_verify_of_no_cache_makes_none_and_prints_its_path_escaped(tmp_path, monkeypatch, capsys):
    """A check makes nothing: ``ls --verify`` on a cache that does not exist leaves it so, and
    names it with its control characters escaped."""
    from suite.cli.main import main

    cache = tmp_path / "cache\x1b[31m" / "deep"
    monkeypatch.setenv("ADVSUITE_CACHE", str(cache))
    with pytest.raises(SystemExit) as caught:
        main(["ls", "--verify"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "cache\\x1b[31m/deep/models" in out
    assert not (tmp_path / "cache\x1b[31m").exists()
