"""Per-example records: appended to ``records.jsonl`` as they finish; a rerun resumes.

Each line is one JSON object, either a clean result::

    {"kind": "clean", "id": "s0001", "label": 0, "prediction": 0, "correct": 1.0}

or an attack result::

    {"kind": "attack", "attack": "pgd_linf", "id": "s0001", "robust": 0.0, "prediction": 3,
     "confidence": 0.93, "perturbation": 0.1, "queries": 7, "seconds": 0.002, "adversarial": "..."}

``correct`` and ``robust`` are correctness in [0, 1] (:mod:`suite.evaluation.scoring`).
A store without a directory (the Python API without ``output``) keeps its records in memory.

The run's identity lives in ``run.json`` beside it: a different configuration on the same
directory is refused (unless overwritten), so records of different runs never mix.

Under ``accelerate launch`` every process appends to its own ``records.rank<R>.jsonl``; every
process resumes from all record files (whatever number of processes wrote them), and at the
end the main process merges them into ``records.jsonl`` in the order a one-process run writes
(:meth:`RecordStore.merge`) and removes the per-process files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.evaluation.distributed import Processes
from suite.paths import atomic_write_text

RECORDS_FILE = "records.jsonl"
RUN_FILE = "run.json"
RESULTS_FILE = "results.json"
SHARD_PATTERN = "records.rank*.jsonl"
OWNED_FILES = (RECORDS_FILE, RUN_FILE, RESULTS_FILE)


def record_key(record: dict[str, Any]) -> tuple[str, str, str]:
    return (record["kind"], record.get("attack", ""), record["id"])


class RecordStore:
    """The records of one task in one output directory.

    Args:
        directory: Output directory (created by :meth:`open`); ``None`` keeps records in memory.
        identity: What determines the results; must match an existing run's.
        processes: The launched processes; each appends to its own file when there are several.
    """

    def __init__(self, directory: Path | None, identity: dict[str, Any], processes: Processes | None = None) -> None:
        self.directory = None if directory is None else Path(directory)
        self.identity = identity
        self.processes = processes or Processes()
        name = f"records.rank{self.processes.rank}.jsonl" if self.processes.several else RECORDS_FILE
        self.path = None if self.directory is None else self.directory / name
        self.records: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._unshared: list[dict[str, Any]] = []

    def check(self, overwrite: bool) -> None:
        """Refuse a directory holding a different run, before anything is written."""
        if self.directory is None:
            return
        run_file = self.directory / RUN_FILE
        if not run_file.exists():
            if self._files():
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

    def _files(self) -> list[Path]:
        """Every record file in the directory: the merged one and any per-process ones."""
        merged = self.directory / RECORDS_FILE
        return ([merged] if merged.exists() else []) + sorted(self.directory.glob(SHARD_PATTERN))

    def open(self, overwrite: bool) -> None:
        """Create the directory, clear it when overwriting, and load records to resume from.

        With several processes the main process prepares the directory (and repairs record
        files cut short by a kill) while the others wait; then every process loads every file.
        """
        processes = self.processes
        if self.directory is None:
            self.records = {}
            return
        processes.barrier()  # nobody is still checking the directory the main process may clear
        if processes.is_main:
            self.directory.mkdir(parents=True, exist_ok=True)
            run_file = self.directory / RUN_FILE
            same_run = run_file.exists() and json.loads(run_file.read_text()) == self.identity
            if overwrite and not same_run:
                for path in [*(self.directory / name for name in OWNED_FILES), *self.directory.glob(SHARD_PATTERN)]:
                    path.unlink(missing_ok=True)
            atomic_write_text(run_file, json.dumps(self.identity, indent=2, sort_keys=True) + "\n")
            for path in self._files():
                _repair(path)
        processes.barrier()
        self.records = {}
        for path in self._files():
            for record in _read(path):
                self.records.setdefault(record_key(record), record)

    def has(self, kind: str, example_id: str, attack: str = "") -> bool:
        return (kind, attack, example_id) in self.records

    def get(self, kind: str, example_id: str, attack: str = "") -> dict[str, Any] | None:
        return self.records.get((kind, attack, example_id))

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Append finished records and flush them to disk at once."""
        records = list(records)
        if not records:
            return
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as handle:
                for record in records:
                    handle.write(json.dumps(record, sort_keys=True) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        for record in records:
            self.records[record_key(record)] = record
        if self.processes.several:
            self._unshared.extend(records)

    def share(self) -> None:
        """Give every process the records the others appended since the last call (a collective)."""
        if not self.processes.several:
            return
        for records in self.processes.gather(self._unshared):
            for record in records:
                self.records.setdefault(record_key(record), record)
        self._unshared = []

    def merge(self, order: Iterable[tuple[str, str, str]]) -> None:
        """Main process, at the end: write every record into ``records.jsonl`` (atomically), keys
        in ``order`` first (the order a one-process run appends them), then remove the
        per-process files. Nothing is lost if this is interrupted: a rerun reads all files."""
        if self.directory is None:
            return
        shards = sorted(self.directory.glob(SHARD_PATTERN))
        if not shards:
            return
        seen, lines = set(), []
        for key in [*order, *sorted(self.records)]:
            if key in self.records and key not in seen:
                seen.add(key)
                lines.append(json.dumps(self.records[key], sort_keys=True) + "\n")
        atomic_write_text(self.directory / RECORDS_FILE, "".join(lines))
        for path in shards:
            path.unlink(missing_ok=True)


def _repair(path: Path) -> None:
    """Drop the partial last line a run killed mid-write leaves, so appends stay valid."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with open(path, "r+b") as handle:
            handle.truncate(end)


def _read(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    records = []
    for number, line in enumerate(data[:end].splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ConfigError(f"{str(path)!r} line {number} is not JSON ({error.msg}); use --overwrite") from error
    return records
