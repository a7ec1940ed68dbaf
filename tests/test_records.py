"""Records store: resume, partial last lines, refusing or replacing another run's files."""

from __future__ import annotations

import json

import pytest

from suite.errors import ConfigError
from suite.evaluation.records import RecordStore


def _record(example_id: str) -> dict:
    return {"kind": "clean", "id": example_id, "label": 0, "prediction": 0, "correct": True}


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
    assert [json.loads(line)["id"] for line in lines] == ["a", "b", "c"]


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
