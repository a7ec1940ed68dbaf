"""Per-example records: appended to ``records.jsonl`` as they finish; a rerun resumes.

Each line is one JSON object, either a clean result::

    {"kind": "clean", "id": "s0001", "label": 0, "prediction": 0, "correct": true}

or an attack result::

    {"kind": "attack", "attack": "pgd_linf", "id": "s0001", "success": true, "prediction": 3,
     "perturbation": 0.1, "queries": 7, "seconds": 0.002, "adversarial": "..."}

The run's identity lives in ``run.json`` beside it: a different configuration on the same
directory is refused (unless overwritten), so records of different runs never mix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.paths import atomic_write_text

RECORDS_FILE = "records.jsonl"
RUN_FILE = "run.json"
RESULTS_FILE = "results.json"
OWNED_FILES = (RECORDS_FILE, RUN_FILE, RESULTS_FILE)


def record_key(record: dict[str, Any]) -> tuple[str, str, str]:
    return (record["kind"], record.get("attack", ""), record["id"])


class RecordStore:
    """The records of one task in one output directory.

    Args:
        directory: Output directory (created by :meth:`open`).
        identity: What determines the results; must match an existing run's.
    """

    def __init__(self, directory: Path, identity: dict[str, Any]) -> None:
        self.directory = Path(directory)
        self.identity = identity
        self.path = self.directory / RECORDS_FILE
        self.records: dict[tuple[str, str, str], dict[str, Any]] = {}

    def check(self, overwrite: bool) -> None:
        """Refuse a directory holding a different run, before anything is written."""
        run_file = self.directory / RUN_FILE
        if not run_file.exists():
            if self.path.exists():
                raise ConfigError(f"{str(self.directory)!r} holds records of an unknown run; use --overwrite or another --output")
            return
        try:
            previous = json.loads(run_file.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ConfigError(f"cannot read {str(run_file)!r}: {error}; use --overwrite or another --output") from error
        if previous != self.identity and not overwrite:
            changed = sorted(key for key in set(previous) | set(self.identity) if previous.get(key) != self.identity.get(key))
            raise ConfigError(
                f"{str(self.directory)!r} holds a run with a different configuration (differs in: {', '.join(changed)}); "
                "use --overwrite to replace it or choose another --output"
            )

    def open(self, overwrite: bool) -> None:
        """Create the directory, clear it when overwriting, and load records to resume from."""
        self.directory.mkdir(parents=True, exist_ok=True)
        run_file = self.directory / RUN_FILE
        same_run = run_file.exists() and json.loads(run_file.read_text()) == self.identity
        if overwrite and not same_run:
            for name in OWNED_FILES:
                (self.directory / name).unlink(missing_ok=True)
        atomic_write_text(run_file, json.dumps(self.identity, indent=2, sort_keys=True) + "\n")
        self.records = {record_key(record): record for record in self._read()}

    def _read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        # A run killed mid-write leaves a partial last line: drop it so appends stay valid.
        end = data.rfind(b"\n") + 1
        if end < len(data):
            with open(self.path, "r+b") as handle:
                handle.truncate(end)
        records = []
        for number, line in enumerate(data[:end].splitlines(), start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ConfigError(f"{str(self.path)!r} line {number} is not JSON ({error.msg}); use --overwrite") from error
        return records

    def has(self, kind: str, example_id: str, attack: str = "") -> bool:
        return (kind, attack, example_id) in self.records

    def get(self, kind: str, example_id: str, attack: str = "") -> dict[str, Any] | None:
        return self.records.get((kind, attack, example_id))

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Append finished records and flush them to disk at once."""
        records = list(records)
        if not records:
            return
        with open(self.path, "a", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        for record in records:
            self.records[record_key(record)] = record
