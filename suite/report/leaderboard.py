"""The published leaderboard: entries built from ``results.json`` files, merged into
``leaderboard/leaderboard.json`` and rendered by the static ``leaderboard/index.html``.

One entry per (task, threat model, model, revision), where a task is a dataset split and a
threat model is the typed threat of the point-wise attacks (:class:`suite.threat.Threat`): a norm
and its budget ε (``linf`` at ε = 0.03 and at ε = 0.1 are two entries), or a text edit level
(``word-level``, ``character-level``). Distributional attacks never enter an entry's robust
accuracy. Results files of schema version 1 are read through
:func:`suite.report.results.upgrade`. A model served at a design temperature is its own model
(``builtin:sentiment-tiny@T=0.005``). Numbers are JSON numbers, never strings (RobustBench's
``model_info`` files store "89.69"); accuracies are fractions in [0, 1].

The file's schema is :class:`Leaderboard`; ``leaderboard/schema.json`` is its JSON Schema
(``advsuite leaderboard schema`` writes it, a test checks the two agree). Adding the same entry
again replaces it, so merging is idempotent; writes are atomic and serialised by a lock file.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from suite.errors import ConfigError, format_validation_error
from suite.paths import atomic_write_text

LEADERBOARD_VERSION = 1
DEFAULT_PATH = Path("leaderboard") / "leaderboard.json"
#: A source checkout first, then where a wheel installs the page and the schema.
PAGE_DIRS = (Path(__file__).resolve().parents[2] / "leaderboard", Path(sys.prefix) / "share" / "advsuite" / "leaderboard")
Fraction = Field(ge=0.0, le=1.0)


class _Strict(BaseModel):
    # strict: "0.5" is not a number; extra fields are refused (a typo is not silently kept).
    model_config = ConfigDict(extra="forbid", strict=True)


class Illusion(_Strict):
    flagged: bool = Field(description="an aware adversary (cal/opt) or a transfer attack beat the out-of-the-box attack")
    max_drop: float = Field(description="largest robust-accuracy drop it caused (fraction)")
    findings: list[str]


class Entry(_Strict):
    """One (task, threat model, model, revision) row of the leaderboard."""

    task: str = Field(description="dataset and split, e.g. builtin:digits/test")
    threat_model: str = Field(description="linf, l2, word-level, character-level...")
    eps: float | None = Field(ge=0, description="perturbation budget of the threat model (None for word-level)")
    norm: str | None = Field(description="norm of the ε-ball (None for word-level)")
    model: str = Field(description="model display name (a design temperature makes a distinct model)")
    model_spec: str
    revision: str | None
    temperature: float = Field(gt=0)
    clean_accuracy: float = Fraction
    robust_accuracy: dict[str, Annotated[float, Fraction]] = Field(description="per attack (and adversary temperature), fractions in [0, 1]")
    worst_case_robust_accuracy: float = Fraction
    distributional_accuracy: float | None = Field(
        None, ge=0.0, le=1.0, description="accuracy under a Wasserstein distributional attack, where computed")
    n: int = Field(ge=1, description="examples evaluated")
    seed: int
    suite_version: str
    recipe_hash: str = Field(min_length=8)
    date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}T", description="when the results were written (ISO 8601)")
    compute_seconds: float | None = Field(ge=0)
    illusion: Illusion | None
    warnings: list[str] = Field(description="sanity-check warnings of the run (possible gradient masking...)")
    dataset_fingerprint: str | None = None
    recipe_task: str = Field(description="task name in the recipe (evaluate for one-command runs)")

    def key(self) -> tuple[str, str, float | None, str, str]:
        return (self.task, self.threat_model, self.eps, self.model, self.revision or "")


class Leaderboard(_Strict):
    """Schema of ``leaderboard/leaderboard.json``."""

    leaderboard_version: int = Field(ge=1)
    entries: list[Entry]


def schema() -> dict[str, Any]:
    """The JSON Schema of leaderboard.json (what ``leaderboard/schema.json`` holds)."""
    document = Leaderboard.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **document}


def entries_from_results(results: Any) -> list[Entry]:
    """Leaderboard entries of one validated :class:`~suite.report.results.Results`."""
    if not results.threat_models:
        raise ConfigError(f"results of task {results.task!r} have no per-threat-model worst case (written by an "
                          "older advsuite): rerun the same command to refresh results.json (finished records are reused)")
    illusion = None
    if results.illusion is not None:
        illusion = Illusion(flagged=results.illusion.flagged, max_drop=results.illusion.max_drop,
                            findings=[str(item.get("message", item)) for item in results.illusion.findings])
    entries = []
    for group in results.threat_models.values():
        threat = group.threat
        entries.append(Entry(
            task=f"{results.dataset.spec}/{results.dataset.split}",
            threat_model=threat.norm if threat.level is None else f"{threat.level}-level",
            eps=threat.eps,
            norm=threat.norm,
            model=results.model.name,
            model_spec=results.model.spec,
            revision=results.model.revision,
            temperature=results.model.temperature,
            clean_accuracy=results.clean_accuracy,
            robust_accuracy={key: results.attacks[key].robust_accuracy for key in group.attacks},
            worst_case_robust_accuracy=group.worst_case_robust_accuracy,
            n=results.dataset.n,
            seed=results.seed,
            suite_version=results.suite_version,
            recipe_hash=results.config_hash,
            date=results.created,
            compute_seconds=results.compute_seconds,
            illusion=illusion,
            warnings=list(results.warnings),
            dataset_fingerprint=results.dataset.fingerprint,
            recipe_task=results.task,
        ))
    return entries


def read_results(path: Path) -> Any:
    """A results.json (schema version 1 or 2), validated (one-line error naming the file and the
    first problem); version 1 is upgraded to version 2."""
    from suite.report.results import Results, upgrade

    try:
        data = json.loads(Path(path).read_text())
    except OSError as error:
        raise ConfigError(f"cannot read results {str(path)!r}: {error.strerror or error}") from error
    except json.JSONDecodeError as error:
        raise ConfigError(f"{str(path)!r} is not JSON ({error.msg}, line {error.lineno})") from error
    try:
        return Results.model_validate(upgrade(data))
    except ValidationError as error:
        raise ConfigError(f"{str(path)!r} is not a valid advsuite results file: {_describe(error)}") from error


def load(path: Path) -> Leaderboard:
    """The leaderboard at ``path`` (empty when the file does not exist yet)."""
    path = Path(path)
    if not path.exists():
        return Leaderboard(leaderboard_version=LEADERBOARD_VERSION, entries=[])
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ConfigError(f"{str(path)!r} is not JSON ({error.msg}, line {error.lineno}); it was left untouched") from error
    try:
        return Leaderboard.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{str(path)!r} does not match leaderboard/schema.json: {_describe(error)}; "
                          "it was left untouched") from error


def merge(board: Leaderboard, new: Iterable[Entry]) -> tuple[Leaderboard, int, int]:
    """``board`` with ``new`` entries added; an entry with the same key replaces the old one.

    Returns the board and how many entries were added and replaced. Entries are sorted by key
    so the file's content depends only on the set of entries."""
    by_key = {entry.key(): entry for entry in board.entries}
    added = replaced = 0
    for entry in new:
        if entry.key() in by_key:
            replaced += 1
        else:
            added += 1
        by_key[entry.key()] = entry
    ordered = [by_key[key] for key in sorted(by_key, key=lambda k: (k[0], k[1], -1.0 if k[2] is None else k[2], k[3], k[4]))]
    return Leaderboard(leaderboard_version=LEADERBOARD_VERSION, entries=ordered), added, replaced


def dumps(board: Leaderboard) -> str:
    return json.dumps(board.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Serialise read-modify-write of one leaderboard between processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def add(results_paths: Iterable[Path], path: Path = DEFAULT_PATH) -> tuple[Leaderboard, int, int]:
    """Validate every results file first, then merge them into ``path`` atomically.

    Nothing is written when any input is invalid. The static page (``index.html``) and the
    schema are copied beside a new leaderboard so the directory can be published as is."""
    path = Path(path)
    new = [entry for results_path in results_paths for entry in entries_from_results(read_results(results_path))]
    with locked(path):
        board, added, replaced = merge(load(path), new)
        atomic_write_text(path, dumps(board))
    install_page(path.parent)
    return board, added, replaced


def install_page(directory: Path) -> list[Path]:
    """Copy ``index.html`` and ``schema.json`` into ``directory`` when they are not there."""
    source = next((d for d in PAGE_DIRS if (d / "index.html").is_file()), None)
    copied = []
    for name in ("index.html", "schema.json"):
        target = Path(directory) / name
        if source is not None and not target.exists() and (source / name).resolve() != target.resolve():
            shutil.copyfile(source / name, target)
            copied.append(target)
    return copied


def _describe(error: ValidationError) -> str:
    return format_validation_error(error, unknown="unknown field")


def rows(board: Leaderboard, task: str | None = None, threat_model: str | None = None,
         sort: str = "worst_case_robust_accuracy") -> list[dict[str, Any]]:
    """Table rows of the entries matching the filters, best first by ``sort``."""
    selected = [e for e in board.entries if (task is None or e.task == task)
                and (threat_model is None or e.threat_model == threat_model)]

    def value(entry: Entry) -> float:
        if sort in ("worst_case_robust_accuracy", "clean_accuracy"):
            return getattr(entry, sort)
        return entry.robust_accuracy.get(sort, -1.0)

    selected.sort(key=value, reverse=True)
    return [
        {
            "task": e.task,
            "threat model": e.threat_model if e.eps is None else f"{e.threat_model} eps={e.eps:g}",
            "model": e.model,
            "revision": e.revision or "-",
            "clean": f"{100 * e.clean_accuracy:.1f}",
            "worst case": f"{100 * e.worst_case_robust_accuracy:.1f}",
            "attacks": ", ".join(f"{k} {100 * v:.1f}" for k, v in e.robust_accuracy.items()),
            "n": str(e.n),
            "illusion": "-" if e.illusion is None or not e.illusion.flagged else f"YES (-{100 * e.illusion.max_drop:.1f} pp)",
        }
        for e in selected
    ]
