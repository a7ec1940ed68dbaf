"""The declared results schema and its writer.

``results.json`` holds one model on one dataset: clean accuracy, per-attack metrics with their
budgets (one entry per attack and adversary temperature), the worst case over attacks per
example (and which attack alone broke what), clean calibration, the adversary temperatures and
the illusion-of-robustness flag, the sanity-check warnings, the resolved configuration and
full provenance. Accuracies are fractions in [0, 1], stored as numbers.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from suite.paths import atomic_write_text

SCHEMA_VERSION = 1
Fraction = Field(ge=0.0, le=1.0)
TRACKED_PACKAGES = ("torch", "transformers", "timm", "textattack", "datasets", "evaluate", "accelerate", "numpy")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ModelEntry(_Strict):
    spec: str
    name: str
    revision: str | None
    temperature: float = Field(gt=0)


class DatasetEntry(_Strict):
    spec: str
    split: str
    n: int = Field(ge=0)
    size: int = Field(ge=0)
    fingerprint: str | None
    columns: dict[str, str]


class AttackEntry(_Strict):
    threat_model: str
    params: dict[str, Any]
    budget: dict[str, Any]
    robust_accuracy: float = Fraction
    success_rate: float = Fraction
    n_attacked: int = Field(ge=0)
    mean_queries: float = Field(ge=0)
    mean_perturbation: float = Field(ge=0)
    seconds: float = Field(ge=0)
    #: Served-model confidence on the adversarial inputs (text attacks), else None.
    mean_confidence: float | None = Fraction
    #: ``none`` (out of the box), ``cal`` or ``opt`` adversary temperature, and its value.
    adversary: str = "none"
    base_attack: str | None = None
    adversary_temperature: float = Field(1.0, gt=0)


class ThreatModelEntry(_Strict):
    threat_model: str
    eps: float | None
    attacks: list[str]
    worst_case_robust_accuracy: float = Fraction


class IllusionEntry(_Strict):
    flagged: bool
    threshold: float = Fraction
    max_drop: float
    findings: list[dict[str, Any]]


class Provenance(_Strict):
    git_hash: str | None
    package_versions: dict[str, str | None]
    command: str
    python: str
    platform: str
    device: str
    num_processes: int = Field(ge=1)


class Results(_Strict):
    """Schema of ``results.json`` (``advsuite`` writes nothing that does not validate)."""

    schema_version: int
    suite_version: str
    created: str
    task: str
    model: ModelEntry
    dataset: DatasetEntry
    seed: int
    clean_accuracy: float = Fraction
    attacks: dict[str, AttackEntry]
    worst_case_robust_accuracy: float = Fraction
    #: Attacks grouped by threat model (norm and ε; text: word-level) with the worst case within
    #: each group, keyed ``linf eps=0.03`` / ``word-level`` (what a leaderboard entry reports).
    threat_models: dict[str, ThreatModelEntry] = Field(default_factory=dict)
    #: Per attack, the examples only it broke (the worst case would lose them without it).
    broken_only_by: dict[str, int]
    #: Batch size the run used (results do not depend on it; the mini-batch study reads it).
    batch_size: int = Field(ge=1)
    clean_seconds: float = Field(ge=0)
    #: Process-seconds the run took (every process's wall time, summed); None in older files.
    compute_seconds: float | None = Field(None, ge=0)
    warnings: list[str]
    #: Clean calibration of the served model: ECE, MCE (15 bins), NLL, mean confidence,
    #: reliability-diagram rows (:func:`suite.calibration.calibration_metrics`).
    calibration: dict[str, Any] | None = None
    #: Adversary temperatures: ``cal`` fit and every (T, Q) of each ``opt`` search.
    adversary: dict[str, Any] | None = None
    illusion: IllusionEntry | None = None
    #: Plot files written beside results.json.
    plots: list[str] = Field(default_factory=list)
    config: dict[str, Any]
    config_hash: str
    provenance: Provenance


def git_hash() -> str | None:
    """Commit of the suite's source checkout (``None`` for an installed wheel)."""
    source = Path(__file__).resolve().parents[2]
    try:
        completed = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip() or None


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def provenance(device: str, num_processes: int = 1, command: str | None = None) -> dict[str, Any]:
    return {
        "git_hash": git_hash(),
        "package_versions": package_versions(),
        "command": command if command is not None else " ".join(["advsuite", *sys.argv[1:]]),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device,
        "num_processes": num_processes,
    }


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_results(path: Path, results: dict[str, Any]) -> Results:
    """Validate ``results`` against the schema and write it atomically."""
    validated = Results.model_validate(results)
    atomic_write_text(Path(path), json.dumps(validated.model_dump(mode="json"), indent=2) + "\n")
    return validated

