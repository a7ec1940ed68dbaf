"""Records store: resume, partial last lines, refusing or replacing another run's files."""

from __future__ import annotations

import json
import re

import pytest

from suite.errors import ConfigError
from suite.evaluation.records import RecordStore
from suite.report.record_schema import run_digest


def _record(example_id: str) -> dict:
    return {"kind": "clean", "id": example_id, "label": 0, "prediction": 0, "correct": 1.0}


def test_partial_last_line_is_dropped_and_appends_stay_valid(tmp_path):
    store = RecordStore(tmp_path, {"seed": 0})
    store.open(overwrite=False)
    store.append([_record("a"), _record("b")])
    with open(tmp_path / "records.jsonl", "a") as handle:
        handle.write('{"kind": "clean", "id": "c", "lab')  # killed mid-write
    store.close()
    again = RecordStore(tmp_path, {"seed": 0})
    again.open(overwrite=False)
    assert again.has("clean", "a") and again.has("clean", "b") and not again.has("clean", "c")
    again.append([_record("c")])
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["run", "a", "b", "c"]  # the file opens with whose it is


def test_other_runs_are_refused_or_replaced(tmp_path):
    first = RecordStore(tmp_path, {"seed": 0})
    first.open(overwrite=False)
    first.append([_record("a")])
    first.close()
    with pytest.raises(ConfigError, match=r"holds another run: seed: 0 then, 1 now"):
        RecordStore(tmp_path, {"seed": 1}).check(overwrite=False)
    replaced = RecordStore(tmp_path, {"seed": 1})
    replaced.check(overwrite=True)
    replaced.open(overwrite=True)
    assert replaced.records == {}


def test_orphaned_records_are_not_mixed_in(tmp_path):
    (tmp_path / "records.jsonl").write_text(json.dumps(_record("x")) + "\n")
    with pytest.raises(ConfigError, match="unknown run"):
        RecordStore(tmp_path, {"seed": 0}).check(overwrite=False)
    store = RecordStore(tmp_path, {"seed": 0})
    store.open(overwrite=True)
    assert store.records == {}


def _attack(example_id: str, **changes) -> dict:
    record = {"kind": "attack", "attack": "pgd_linf", "id": example_id, "robust": 0.0, "prediction": 3,
              "perturbation": 0.03, "queries": 10, "seconds": 0.01}
    record.update(changes)
    return {key: value for key, value in record.items() if value is not ...}


@pytest.mark.parametrize(("record", "said"), [
    (_attack("a", robust=2.0), "its 'robust' is 2.0"),
    (_attack("a", robust=-1.0), "its 'robust' is -1.0"),
    (_attack("a", robust=float("nan")), "its 'robust' is NaN"),
    (_attack("a", robust="1"), "its 'robust' is \"1\""),
    (_attack("a", robust=...), "it has no 'robust'"),
    (_attack("a", queries=float("inf")), "its 'queries' is Infinity"),
    (_attack("a", queries=True), "its 'queries' is true"),
    (_attack("a", confidence=1.5), "its 'confidence' is 1.5"),
    ({**_record("a"), "correct": 2.0}, "its 'correct' is 2.0"),
    ({**_record("a"), "correct": True}, "its 'correct' is true"),
    ({**_record("a"), "label": -1}, "its 'label' is -1"),
    ({"kind": "clean", "id": "a", "label": 0, "prediction": 0}, "it has no 'correct'"),
])
def test_a_damaged_record_is_refused_in_one_line_before_anything_is_written(tmp_path, record, said):
    """A record whose values no run writes (correctness outside [0, 1], NaN, a missing field)
    would be summed into wrong numbers: the resume refuses it, naming the line."""
    store = RecordStore(tmp_path, {"seed": 0})
    store.open(overwrite=False)
    store.append([_record("a"), _record("b")])
    store.close()
    with open(tmp_path / "records.jsonl", "a") as handle:
        handle.write(json.dumps(record) + "\n")
    before = (tmp_path / "records.jsonl").read_bytes()
    with pytest.raises(ConfigError, match=r"line 4 is a damaged record \(" + re.escape(said) + r"\); use --overwrite"):
        RecordStore(tmp_path, {"seed": 0}).check(overwrite=False)
    with pytest.raises(ConfigError, match="damaged record"):
        RecordStore(tmp_path, {"seed": 0}).open(overwrite=False)
    assert (tmp_path / "records.jsonl").read_bytes() == before


def test_two_different_records_of_one_example_are_refused_and_repeated_ones_read(tmp_path):
    store = RecordStore(tmp_path, {"seed": 0})
    store.open(overwrite=False)
    store.append([_record("a"), _attack("a")])
    store.close()
    with open(tmp_path / "records.jsonl", "a") as handle:  # what a merge cut short leaves: the same records again
        handle.write(json.dumps(_record("a")) + "\n" + json.dumps(_attack("a")) + "\n")
    again = RecordStore(tmp_path, {"seed": 0})
    again.check(overwrite=False)
    again.open(overwrite=False)
    assert again.get("attack", "a", "pgd_linf") == _attack("a")
    again.close()
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    (tmp_path / "records.jsonl").write_text("\n".join([lines[0], json.dumps(_attack("a", robust=1.0)), *lines[1:]]) + "\n")
    with pytest.raises(ConfigError, match="holds two different attack records of example 'a' under 'pgd_linf'"):
        RecordStore(tmp_path, {"seed": 0}).check(overwrite=False)


def test_records_open_with_their_run_and_another_runs_are_not_resumed(tmp_path):
    """A record names no model: another run's run.json copied beside them (or their run's
    line removed) made a rerun resume them as that run's, another model's numbers under its
    name. Every record file opens with the digest of its run's identity, checked on resume."""
    first = RecordStore(tmp_path / "b", {"model": "builtin:digits-cnn"})
    first.open(overwrite=False)
    first.append([_record("a")])
    first.close()
    lines = (tmp_path / "b" / "records.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == {"kind": "run", "id": "run", "run": run_digest({"model": "builtin:digits-cnn"})}
    other = {"model": "builtin:digits-cnn-at"}
    (tmp_path / "b" / "run.json").write_text(json.dumps(other))  # what the run.json of another directory says
    for step in ("check", "open"):
        with pytest.raises(ConfigError, match="holds the records of another run .* they are not resumed"):
            getattr(RecordStore(tmp_path / "b", other), step)(overwrite=False)
    (tmp_path / "b" / "run.json").write_text(json.dumps({"model": "builtin:digits-cnn"}))
    (tmp_path / "b" / "records.jsonl").write_text("\n".join(lines[1:]) + "\n")  # the run's line removed
    with pytest.raises(ConfigError, match="holds records of no named run"):
        RecordStore(tmp_path / "b", {"model": "builtin:digits-cnn"}).check(overwrite=False)


def test_what_a_kill_left_mid_write_does_not_claim_the_directory_and_is_removed(tmp_path):
    """A kill between a staged write and its rename leaves ``.<name>.<pid>.tmp``: the rerun of
    the same command resumes (the file is the suite's), and removes such leftovers."""
    (tmp_path / ".run.json.2282.tmp").write_text('{"seed": 0')  # killed writing the first run.json
    store = RecordStore(tmp_path, {"seed": 0})
    store.check(overwrite=False)
    store.open(overwrite=False)
    store.append([_record("a")])
    store.close()
    (tmp_path / ".results.json.77.tmp").write_text("{")
    (tmp_path / "samples" / "pgd_linf").mkdir(parents=True)
    (tmp_path / "samples" / "pgd_linf" / ".a.png.77.tmp").write_bytes(b"\x89PNG")
    again = RecordStore(tmp_path, {"seed": 0})
    again.check(overwrite=False)
    again.open(overwrite=False)
    assert again.has("clean", "a")
    assert not [path for path in tmp_path.rglob("*.tmp")]


def test_overwriting_removes_only_what_the_suite_wrote_in_samples(tmp_path):
    store = RecordStore(tmp_path, {"seed": 0})
    store.open(overwrite=False)
    store.close()
    samples = tmp_path / "samples"
    (samples / "pgd_linf").mkdir(parents=True)
    (samples / "pgd_linf" / "s1.png").write_bytes(b"\x89PNG")
    (samples / "grid-pgd_linf.png").write_bytes(b"\x89PNG")
    (samples / "mydata.csv").write_text("precious")
    replaced = RecordStore(tmp_path, {"seed": 1})
    replaced.check(overwrite=True)
    replaced.open(overwrite=True)
    assert sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*")) == [
        "run.json", "samples", "samples/mydata.csv"]
    assert (samples / "mydata.csv").read_text() == "precious"


def test_an_output_on_a_read_only_file_system_says_so(tmp_path, monkeypatch):
    import os
    from types import SimpleNamespace

    monkeypatch.setattr(os, "access", lambda path, mode: False)
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_flag=os.ST_RDONLY))
    with pytest.raises(ConfigError, match=r"cannot write to .* \(read-only file system\): choose another --output"):
        RecordStore(tmp_path / "out", {"seed": 0}).check(overwrite=False)
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_flag=0))
    with pytest.raises(ConfigError, match=r"\(permission denied\)"):
        RecordStore(tmp_path / "out", {"seed": 0}).check(overwrite=False)


def test_a_changed_command_is_named_by_what_changed():
    """The refusal names the nested setting that changed, whole, and an attack added once."""
    from suite.paths import describe_change

    before = {"attacks": [{"name": "auto", "params": {"eps": 0.03}}], "attack_versions": {"auto": "auto/2"},
              "dataset": {"n": 40, "spec": "builtin:digits"}, "weights": "sha256-aaaa", "seed": 0}
    eps = {**before, "attacks": [{"name": "auto", "params": {"eps": 0.05}}]}
    assert describe_change(before, eps) == "attacks[0].params.eps: 0.03 then, 0.05 now"
    added = {**before, "attacks": [*before["attacks"], {"name": "pgd_linf", "params": {}}],
             "attack_versions": {"auto": "auto/2", "pgd_linf": "pgd_linf/3"}}
    assert describe_change(before, added) == "attacks: auto then, auto, pgd_linf now"
    several = {**before, "dataset": {"n": 50, "spec": "builtin:digits"}, "weights": "sha256-bbbb",
               "attack_versions": {"auto": "auto/3"}}
    assert describe_change(before, several) == (
        "an attack's implementation changed (attack_versions.auto: auto/2 then, auto/3 now); dataset.n: 40 then, "
        "50 now; the model's weights changed (sha256-aaaa then, sha256-bbbb now)")
    long = {**before, "dataset": {"n": 40, "spec": "x" * 100 + "\x1b[31m"}}
    said = describe_change(before, long)
    assert said.endswith("… now") and "\x1b" not in said and len(said) < 160


@pytest.mark.parametrize("damage", ["deleted", "empty", "cut short"])
def test_a_lost_run_file_is_written_again_from_the_records_own_header(tmp_path, damage):
    """Every record file opens with the SHA-256 of its run's identity: where ``run.json`` is lost
    or damaged, the same run resumes its records (``--overwrite`` would lose them); another
    run's records are still refused."""
    store = RecordStore(tmp_path, {"seed": 0})
    store.open(overwrite=False)
    store.append([_record("a"), _record("b")])
    store.close()
    run_file = tmp_path / "run.json"
    text = run_file.read_text()
    if damage == "deleted":
        run_file.unlink()
    else:
        run_file.write_text("" if damage == "empty" else text[: len(text) // 2])
    with pytest.raises(ConfigError, match="unknown run|cannot read"):
        RecordStore(tmp_path, {"seed": 1}).check(overwrite=False)
    again = RecordStore(tmp_path, {"seed": 0})
    again.check(overwrite=False)
    again.open(overwrite=False)
    assert again.has("clean", "a") and again.has("clean", "b")
    again.close()
    assert json.loads(run_file.read_text()) == {"seed": 0}


def test_only_the_processes_own_files_are_merged_or_cleared(tmp_path):
    """``records.rank<R>.jsonl`` exactly: a user's ``records.rank0.backup.jsonl`` or
    ``.notes.tmp`` is neither read as a process's records nor removed, even by --overwrite."""
    store = RecordStore(tmp_path, {"seed": 0})
    store.open(overwrite=False)
    store.append([_record("a")])
    store.close()
    backup = tmp_path / "records.rank0.backup.jsonl"
    backup.write_text((tmp_path / "records.jsonl").read_text() + json.dumps(_record("zz")) + "\n")
    (tmp_path / ".notes.tmp").write_text("mine")
    again = RecordStore(tmp_path, {"seed": 0})
    again.check(overwrite=False)
    again.open(overwrite=False)
    assert again.has("clean", "a") and not again.has("clean", "zz")
    again.merge([("clean", "", "a")])
    again.close()
    replaced = RecordStore(tmp_path, {"seed": 1})
    replaced.check(overwrite=True)
    replaced.open(overwrite=True)
    replaced.close()
    assert backup.exists() and (tmp_path / ".notes.tmp").read_text() == "mine"
