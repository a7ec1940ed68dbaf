"""Per-example records: appended to ``records.jsonl`` as they finish; a rerun resumes.

Each line is one JSON object, either a clean result::

    {"kind": "clean", "id": "s0001", "label": 0, "prediction": 0, "correct": 1.0}

or an attack result::

    {"kind": "attack", "attack": "pgd_linf", "id": "s0001", "robust": 0.0, "prediction": 3,
     "confidence": 0.93, "perturbation": 0.1, "queries": 7, "seconds": 0.002, "adversarial": "..."}

``correct`` and ``robust`` are correctness in [0, 1] (:mod:`suite.evaluation.scoring`).
A store without a directory (the Python API without ``output``) keeps its records in memory.

The run's identity lives in ``run.json`` beside it: the configuration, a content hash of the
model's weights and of the evaluated examples, and the versions of the scoring and of every
attack. A run whose identity differs is refused on the same directory (unless overwritten,
which clears everything the suite wrote there), so records of different runs never mix.

Under ``accelerate launch`` every process appends to its own ``records.rank<R>.jsonl``; every
process resumes from all record files (whatever number of processes wrote them), and at the
end the main process merges them into ``records.jsonl`` in the order of the task's examples
(:meth:`RecordStore.merge`; one process's file is put in that order too) and removes the
per-process files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.evaluation.distributed import Processes
from suite.report.record_schema import RECORDS_FILE, RUN_KIND, record_problem, run_header
from suite.paths import (KEPT_RECORDS, RESUME, append_text, atomic_write_text, check_run_directory, is_temporary,
                         lock_directory, remove_temporaries, writable_parent, writing)

RUN_FILE = "run.json"
RESULTS_FILE = "results.json"
SHARD_PATTERN = "records.rank*.jsonl"
#: A process's own file exactly (``records.rank0.backup.jsonl`` is a user's copy, never merged or removed).
SHARD_NAME = re.compile(r"records\.rank\d+\.jsonl")
#: Everything a run writes into its directory: ``--overwrite`` clears exactly these (never a
#: file the suite did not write), and a directory holding only these belongs to the suite.
SUITE_FILES = (RUN_FILE, RECORDS_FILE, RESULTS_FILE, "samples.md", "summary.png", "reliability.png",
               "opt_search.png", "robustness_curve.png", "certificate.json", "certificate.png")
#: ``samples/`` holds the sample images and the per-attack grids (``samples/grid-<attack>.png``).
SUITE_DIRS = ("samples",)
RECORD_KINDS = ("clean", "attack", "adversary")
#: Longest name a run writes inside its directory (``records.rank<R>.jsonl``, sample images
#: ``samples/<attack label>/<id>.png``): the directory path leaves room for them.
NAME_MAX = 255
PATH_MAX = 4096 - 300


def record_key(record: dict[str, Any]) -> tuple[str, str, str]:
    return (record["kind"], record.get("attack", ""), record["id"])


def _shards(directory: Path) -> list[Path]:
    """The per-process record files in ``directory`` (:data:`SHARD_NAME`), in name order."""
    return sorted(path for path in directory.glob(SHARD_PATTERN) if SHARD_NAME.fullmatch(path.name))


def check_output_path(directory: Path) -> Path:
    """Refuse an output directory no run can write (too long a path, under a file, unwritable)
    in one line; the nearest existing directory at or above it otherwise."""
    if len(os.fsencode(directory.absolute())) > PATH_MAX or any(len(os.fsencode(part)) > NAME_MAX - 40
                                                                for part in directory.absolute().parts):
        raise ConfigError(f"output directory {repr(str(directory))[:120]}... is too long a path (names over "
                          f"{NAME_MAX - 40} bytes or a path over 3800): choose a shorter --output or task name")
    return writable_parent(directory)


class RecordStore:
    """The records of one task in one output directory.

    While a run writes, its main process holds an exclusive lock on the directory (``flock`` on
    the directory itself, so no lock file is left behind): a second run on the same directory
    is refused in one line, or waits for the first with ``wait``.

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
        self._lock: int | None = None
        self._created = False
        self._wrote_run = False
        self._run = run_header(identity)
        self._header = json.dumps(self._run, sort_keys=True) + "\n"
        self._headed = False  # this process's record file opens with the header

    # ----------------------------------------------------------------------------------------
    # Checks: nothing is written before they pass.

    def check(self, overwrite: bool) -> None:
        """Refuse, before anything is written, an output directory this run cannot use: a path
        that is a file, unwritable or too long; one holding another run, corrupt records, or
        files the suite did not write (unless ``overwrite``, which clears what the suite wrote)."""
        if self.directory is None:
            return
        directory = self.directory
        existing = check_output_path(directory)
        if existing != directory or overwrite:
            return  # a new directory, or one whose suite files are cleared
        self._verify()
        _load(directory, self._files(), self._run)

    def _verify(self) -> None:
        """The directory holds this run (or nothing at all); one clear line otherwise.

        A ``run.json`` deleted or damaged (empty, cut short) is written again when every record
        file opens with this run's digest (:func:`~suite.report.record_schema.run_header`, the
        SHA-256 of the identity ``run.json`` holds): those records are this run's, and a rerun of
        the same command resumes them rather than asking for ``--overwrite``, which loses them."""
        directory, run_file = self.directory, self.directory / RUN_FILE
        files = self._files()
        if files and not _names_a_run(run_file) and all(_first_record(path) == self._run for path in files):
            return
        if not run_file.exists():
            if self._files():
                raise ConfigError(f"{str(directory)!r} holds records of an unknown run (no {RUN_FILE}); "
                                  "use --overwrite to start over or choose another --output")
        check_run_directory(directory, run_file, self.identity, foreign="files advsuite did not write",
                            replaces="the files advsuite writes", another="another run")

    def _files(self) -> list[Path]:
        """Every record file in the directory: the merged one and any per-process ones."""
        merged = self.directory / RECORDS_FILE
        return ([merged] if merged.exists() else []) + _shards(self.directory)

    # ----------------------------------------------------------------------------------------
    # Opening, locking, closing.

    def open(self, overwrite: bool, wait: bool = False) -> None:
        """Create and lock the directory, clear it when overwriting, and load records to resume from.

        With several processes the main process prepares the directory (and repairs record
        files cut short by a kill) while the others wait; then every process loads every file.
        """
        processes = self.processes
        if self.directory is None:
            self.records = {}
            return
        processes.barrier()  # nobody is still checking the directory the main process may clear
        if processes.is_main:
            self._created = not self.directory.exists()
            self.directory.mkdir(parents=True, exist_ok=True)
            self._acquire(wait)
            try:
                remove_temporaries(self.directory)  # what a kill left mid-write (the lock is ours)
                if overwrite:
                    self._clear()
                else:
                    self._verify()  # again, under the lock: another run may have written meanwhile
                atomic_write_text(self.directory / RUN_FILE, json.dumps(self.identity, indent=2, sort_keys=True) + "\n",
                                  KEPT_RECORDS, RESUME)
                self._wrote_run = True
                for path in self._files():
                    _repair(path)
            except BaseException:
                self.close(failed=True)
                raise
        processes.barrier()
        self.records = _load(self.directory, self._files(), self._run)
        self._headed = self.path.exists() and self.path.stat().st_size > 0

    def _acquire(self, wait: bool) -> None:
        self._lock = lock_directory(self.directory, wait)

    def _clear(self) -> None:
        """Remove everything the suite wrote here (and only that)."""
        for name in SUITE_FILES:
            (self.directory / name).unlink(missing_ok=True)
        for path in [*_shards(self.directory), *self.directory.glob(".*.tmp")]:
            if path.name.endswith(".jsonl") or is_temporary(path.name):  # a staged write's name exactly
                path.unlink(missing_ok=True)
        for name in SUITE_DIRS:  # the images it wrote (samples/grid-<attack>.png, samples/<attack>/<id>.png)
            folder = self.directory / name
            if not folder.is_dir() or folder.is_symlink():
                continue
            for path in [*folder.glob("*.png"), *folder.glob("*/*.png")]:
                if path.is_file() and not path.is_symlink():
                    path.unlink(missing_ok=True)
            for path in sorted((path for path in folder.iterdir() if path.is_dir() and not path.is_symlink()),
                               reverse=True):
                with contextlib.suppress(OSError):
                    path.rmdir()  # only once empty: a file of someone else's stays, and its folder
            with contextlib.suppress(OSError):
                folder.rmdir()

    def close(self, failed: bool = False) -> None:
        """Release the directory. After a failure that left no record, remove what this run
        created (its ``run.json``, and the directory if it made it and it is empty), so a run
        that failed early does not claim the directory."""
        if self.directory is None or self._lock is None:
            return
        try:
            if failed and not any(path.stat().st_size for path in self._files()):
                if self._wrote_run:
                    for path in self._files():
                        path.unlink(missing_ok=True)
                    (self.directory / RUN_FILE).unlink(missing_ok=True)
                # Also where its run.json could not be written (a full disk): the empty directory
                # it made would otherwise be left.
                if self._created and not any(self.directory.iterdir()):
                    self.directory.rmdir()
        finally:
            os.close(self._lock)
            self._lock = None

    # ----------------------------------------------------------------------------------------
    # Records.

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
            header = "" if self._headed else self._header  # a file's first records: whose they are
            append_text(self.path, header + "".join(json.dumps(record, sort_keys=True) + "\n" for record in records))
            self._headed = True
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
        in ``order`` first (the order of the task's examples), then remove the per-process files.
        One process rewrites its file only where it appended out of that order (text searches
        are recorded as they finish; a resumed run appends after what it found). Nothing is
        lost if this is interrupted: a rerun reads all files."""
        if self.directory is None:
            return
        shards = _shards(self.directory)
        keys = [key for key in dict.fromkeys([*order, *sorted(self.records)]) if key in self.records]
        if not shards and keys == list(self.records):
            return
        lines = [self._header, *(json.dumps(self.records[key], sort_keys=True) + "\n" for key in keys)]
        atomic_write_text(self.directory / RECORDS_FILE, "".join(lines), KEPT_RECORDS, RESUME)
        for path in shards:
            path.unlink(missing_ok=True)


def _repair(path: Path) -> None:
    """Drop the partial last line a run killed mid-write leaves, so appends stay valid."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        with writing(path, KEPT_RECORDS, RESUME), open(path, "r+b") as handle:
            handle.truncate(end)


def _names_a_run(run_file: Path) -> bool:
    """Whether ``run_file`` holds a run's identity (a JSON mapping), whichever run's."""
    try:
        return isinstance(json.loads(run_file.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError, RecursionError):
        return False


def _first_record(path: Path) -> Any:
    """The first complete, non-blank line of a record file, parsed (``None`` if there is none)."""
    try:
        with open(path, "rb") as handle:
            for line in handle:
                if line.strip():
                    return json.loads(line) if line.endswith(b"\n") else None
    except (OSError, ValueError, RecursionError):
        return None
    return None


def _load(directory: Path, files: list[Path], header: dict[str, str]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every record of ``files`` by key; one line for a file of another run's records (its
    first line, ``header``, names the run), a damaged record or two different records of one key
    (a merge cut short repeats records whole, and those are the same)."""
    records: dict[tuple[str, str, str], dict[str, Any]] = {}
    for path in files:
        for record in _read(path, header):
            key = record_key(record)
            if records.setdefault(key, record) != record:
                kind, attack, example = key
                raise ConfigError(f"{str(directory)!r} holds two different {kind} records of example {example!r}"
                                  f"{f' under {attack!r}' if attack else ''}: its records are damaged; use "
                                  "--overwrite to start over")
    return records


def _read(path: Path, header: dict[str, str]) -> list[dict[str, Any]]:
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    records, first = [], None
    for number, line in enumerate(data[:end].splitlines(), start=1):
        if line.strip():
            first = number if first is None else first  # the header is the first line that is not blank
            try:
                record = json.loads(line)
            except (ValueError, RecursionError) as error:  # not JSON, not UTF-8, a number too long, too deep
                raise ConfigError(f"{str(path)!r} line {number} is not JSON ({getattr(error, 'msg', error)}); "
                                  "use --overwrite to start over") from error
            names_a_run = isinstance(record, dict) and record.get("kind") == RUN_KIND
            if number == first and record == header:
                continue
            if number == first or names_a_run:
                whose = ("the records of another run (its first line names a run other than run.json's)"
                         if number == first and names_a_run else
                         "records of no named run (its first line does not name their run: written before record "
                         "files did, or edited)")
                raise ConfigError(f"{str(path)!r} holds {whose}; they are not resumed: use --overwrite to start "
                                  "over, or choose another --output")
            if not _is_record(record):
                raise ConfigError(f"{str(path)!r} line {number} is not an advsuite record; use --overwrite to start over")
            problem = record_problem(record)
            if problem is not None:
                raise ConfigError(f"{str(path)!r} line {number} is a damaged record ({problem}); "
                                  "use --overwrite to start over")
            records.append(record)
    return records


def _is_record(record: Any) -> bool:
    return (isinstance(record, dict) and record.get("kind") in RECORD_KINDS and isinstance(record.get("id"), str)
            and isinstance(record.get("attack", ""), str))
