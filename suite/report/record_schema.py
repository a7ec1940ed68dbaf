"""What a line of ``records.jsonl`` must hold (:mod:`suite.evaluation.records` writes and resumes
them; :mod:`suite.report.paired` reads them beside a run's results): one check for both."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

RECORDS_FILE = "records.jsonl"
#: The first line of every record file: whose records follow (:func:`run_header`).
RUN_KIND = "run"


def run_digest(identity: dict[str, Any]) -> str:
    """The SHA-256 of a run's identity (what ``run.json`` holds), as its record files name it."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def run_header(identity: dict[str, Any]) -> dict[str, str]:
    """The record that opens every record file: the run whose records follow. A record carries
    no model name, so without it another run's ``run.json`` copied beside them made a rerun
    resume them as that run's (another model's numbers under its name)."""
    return {"kind": RUN_KIND, "id": RUN_KIND, "run": run_digest(identity)}


def _fraction(value: Any) -> bool:
    return _number(value) and 0.0 <= value <= 1.0


def _number(value: Any) -> bool:
    """A finite JSON number (``true`` is not one; NaN and infinities never come from a run)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


#: What each field of a record must hold (a field not named here is not checked); ``None``
#: allowed where a run may write it.
_CLEAN_FIELDS = {"label": _count, "prediction": _count, "correct": _fraction}
_ATTACK_FIELDS = {"robust": _fraction, "prediction": _count, "perturbation": lambda v: _number(v) and v >= 0,
                  "queries": _count, "seconds": lambda v: _number(v) and v >= 0}
_ATTACK_OPTIONAL = {"forward_rows": _count, "confidence": _fraction, "temperature": lambda v: _number(v) and v > 0,
                    "adversarial": lambda v: isinstance(v, str), "extras": lambda v: isinstance(v, dict)}


def record_problem(record: dict[str, Any]) -> str | None:
    """What is wrong with a record's values (``None``: nothing). A run writes correctness in
    [0, 1], counts as whole numbers and no NaN, so a record that breaks this was damaged or
    written by hand, and the numbers summed from it would be wrong."""
    kind = record["kind"]
    if kind == "adversary":
        return None if _number(record.get("temperature")) and record["temperature"] > 0 else "its temperature"
    required = _CLEAN_FIELDS if kind == "clean" else _ATTACK_FIELDS
    for name, valid in required.items():
        if name not in record:
            return f"it has no {name!r}"
        if not valid(record[name]):
            return f"its {name!r} is {json.dumps(record[name])[:40]}"
    if kind == "attack":
        for name, valid in _ATTACK_OPTIONAL.items():
            if record.get(name) is not None and not valid(record[name]):
                return f"its {name!r} is {json.dumps(record[name])[:40]}"
    return None
