"""The declared results schema (version 2), its writer, and the upgrade of version 1 files.

``results.json`` holds one model on one dataset: clean accuracy, per-attack metrics with their
typed threat, access and budgets (one entry per point-wise attack and adversary temperature),
the worst case over point-wise attacks per example (and what each attack alone removed),
the same accuracies per class, distributional attacks in their own section, certificates
(empty until the certify command fills them), clean calibration, the adversary temperatures and
the illusion-of-robustness flag, the sanity-check warnings, the resolved configuration and full
provenance. Accuracies are means of per-example correctness in [0, 1], stored as numbers.

Version 2 (this schema) differs from version 1 in: records hold ``correct`` and ``robust`` in
[0, 1] instead of booleans; every attack entry carries ``threat`` (norm and ε, text level,
Wasserstein order and budget), ``access`` and ``metric`` instead of a ``threat_model`` string;
``broken_only_by`` holds the worst-case accuracy mass (in examples) each attack alone removed;
``distributional`` and ``certificates`` are new. :func:`upgrade` reads a version 1 file into
version 2 (the leaderboard still accepts them). ``per_class`` (the accuracies restricted to each
class) was added within version 2: files written before it read as ``{}``.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

import suite.strict_json as strict_json
from suite.paths import KEPT_RECORDS, RESUME, atomic_write_text
from suite.threat import Access, Metric, Threat

SCHEMA_VERSION = 2
Fraction = Field(ge=0.0, le=1.0)
#: A 95% confidence interval [low, high] of an accuracy (:mod:`suite.intervals`); ``None`` in
#: files written before intervals were recorded.
Interval = Annotated[list[Annotated[float, Field(ge=0.0, le=1.0)]], Field(min_length=2, max_length=2)]
TRACKED_PACKAGES = ("torch", "transformers", "timm", "textattack", "datasets", "accelerate", "numpy")


class _Strict(BaseModel):
    # allow_inf_nan: NaN and ±infinity are not JSON numbers, and one of them takes the page down.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class MemberEntry(_Strict):
    """One member of a randomized ensemble: its spec, revision and probability α_i."""

    spec: str
    revision: str | None
    probability: float = Field(ge=0, le=1)


class RandomizedEntry(_Strict):
    """How a randomized model (not an ensemble) was evaluated (:mod:`suite.models.randomized`)."""

    #: Draws each attack query is averaged over (EOT).
    eot_draws: int = Field(ge=1)
    #: Fresh draws each example's expected accuracy is estimated from.
    score_draws: int = Field(ge=1)


class ModelEntry(_Strict):
    spec: str
    name: str
    revision: str | None
    temperature: float = Field(gt=0)
    #: Content hash of the weights evaluated (``None`` in older files).
    weights: str | None = None
    #: A randomized ensemble's members (``None`` for any other model).
    members: list[MemberEntry] | None = None
    #: A randomized model that is not an ensemble: its accuracies are expected accuracies, each
    #: example's estimated from draws (``None`` for any other model).
    randomized: RandomizedEntry | None = None
    #: The threat model the model declares it was trained for (its card); ``None``: none.
    threat_model: Threat | None = None


class DatasetEntry(_Strict):
    spec: str
    split: str
    n: int = Field(ge=0)
    size: int = Field(ge=0)
    fingerprint: str | None
    columns: dict[str, str]


class AttackEntry(_Strict):
    """One point-wise attack (under one adversary temperature)."""

    threat: Threat
    access: Access
    metric: Metric = "pointwise"
    params: dict[str, Any]
    budget: dict[str, Any]
    robust_accuracy: float = Fraction
    robust_accuracy_ci: Interval | None = None
    success_rate: float = Fraction
    n_attacked: int = Field(ge=0)
    mean_queries: float = Field(ge=0)
    mean_perturbation: float = Field(ge=0)
    seconds: float = Field(ge=0)
    #: Served-model confidence on the adversarial inputs (text attacks), else None.
    mean_confidence: float | None = Fraction
    #: ``none`` (out of the box), ``cal`` or ``opt`` adversary temperature, and its value; or
    #: ``platt`` (vector scaling, no single temperature: ``None``; its fit is in ``adversary``).
    adversary: str = "none"
    base_attack: str | None = None
    adversary_temperature: float | None = Field(1.0, gt=0)
    #: Registered name of the attack (``pgd_linf``); the key may be a label (``pgd_linf-eps0.03``).
    attack: str | None = None
    #: The key of an earlier entry whose search this one repeats exactly (the same attack and
    #: seed at the same adversary temperature, as when ``opt`` keeps T_cal): its records were
    #: reused rather than recomputed, so the two entries agree by construction.
    same_search_as: str | None = None


class DistributionalEntry(_Strict):
    """One distributional attack: its aggregate over all examples, never in the worst case."""

    threat: Threat
    access: Access
    metric: Metric = "distributional"
    #: Registered name of the attack (the key may be a label).
    attack: str | None = None
    params: dict[str, Any]
    budget: dict[str, Any]
    #: Accuracy of the model on the adversarial distribution (the attack's aggregate).
    accuracy: float = Fraction
    n_attacked: int = Field(ge=0)
    mean_queries: float = Field(ge=0)
    seconds: float = Field(ge=0)
    #: Everything else the attack's aggregate returned (allocations, budget spent...).
    details: dict[str, Any] = Field(default_factory=dict)


class ThreatModelEntry(_Strict):
    """The point-wise attacks of one threat (same norm and ε, or same text level)."""

    threat: Threat
    #: At least one: a worst case over no point-wise attack is undefined, so no group without one.
    attacks: list[str] = Field(min_length=1)
    worst_case_robust_accuracy: float = Fraction
    worst_case_robust_accuracy_ci: Interval | None = None


class ClassAttackEntry(_Strict):
    """One point-wise attack's robust accuracy on the examples of one class."""

    robust_accuracy: float = Fraction
    robust_accuracy_ci: Interval


class ClassThreatEntry(_Strict):
    """The worst case within one threat on the examples of one class."""

    worst_case_robust_accuracy: float = Fraction
    worst_case_robust_accuracy_ci: Interval


class PerClassEntry(_Strict):
    """The run's accuracies restricted to the examples of one class: the same numbers, with the
    same names and semantics, as the top level (``attacks`` point-wise only)."""

    #: The class index (into the model's labels).
    index: int = Field(ge=0)
    #: Examples of this class in the run (classes with none are left out).
    n: int = Field(ge=1)
    clean_accuracy: float = Fraction
    clean_accuracy_ci: Interval
    #: Keyed as the top-level ``attacks``.
    attacks: dict[str, ClassAttackEntry]
    #: Keyed as the top-level ``threat_models``.
    threat_models: dict[str, ClassThreatEntry]


class RadiusEntry(_Strict):
    """Where the radius of the attacks that set none came from (:mod:`suite.evaluation.radius`)."""

    #: ``requested`` (``--eps``, ``eps=``, a task's ``eps:``), ``model`` (the threat model its
    #: card declares) or ``attack defaults`` (the model declares none: a warning says so).
    source: Literal["requested", "model", "attack defaults"]
    #: ``<attack>: <threat>`` for every attack that took its radius from ``source``.
    threats: list[str]
    detail: str


class IllusionEntry(_Strict):
    flagged: bool
    threshold: float = Fraction
    max_drop: float
    findings: list[dict[str, Any]]
    #: What makes the out-of-the-box number too high, when the run can tell: ``design
    #: temperature`` (the model is served at T ≠ 1) or ``training-induced overconfidence``
    #: (its own logits are overconfident: T_cal > 1), with the evidence in ``mechanism_detail``.
    mechanism: str | None = None
    mechanism_detail: str | None = None


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
    clean_accuracy_ci: Interval | None = None
    #: Point-wise attacks (each example in its own ball), keyed by label (and ``@cal``/``@opt``).
    attacks: dict[str, AttackEntry]
    #: Per example, the minimum over point-wise attacks (and the clean correctness); averaged.
    #: ``None`` when the attacks span more than one threat (norms, radii or text levels): a
    #: worst case is only ever taken within one threat (see ``threat_models``); ``None`` too
    #: when there is no point-wise attack (distributional attacks only).
    worst_case_robust_accuracy: float | None = Fraction
    worst_case_robust_accuracy_ci: Interval | None = None
    #: Point-wise attacks grouped by threat (:attr:`Threat.label`: ``linf eps=0.03``,
    #: ``character-level``...) with the worst case within each group: what a leaderboard entry
    #: reports.
    threat_models: dict[str, ThreatModelEntry] = Field(default_factory=dict)
    #: The accuracies above per class, keyed by class name (``{}`` in files written before).
    per_class: dict[str, PerClassEntry] = Field(default_factory=dict)
    #: Where the radius of the attacks that set none came from (``None``: each set its own).
    radius: RadiusEntry | None = None
    #: Distributional attacks (WDA++...): their own metric, never in the worst case above.
    distributional: dict[str, DistributionalEntry] = Field(default_factory=dict)
    #: Certified bounds (filled by the certify command).
    certificates: dict[str, Any] = Field(default_factory=dict)
    #: Per attack, the worst-case accuracy mass (in examples) only it removed: how many examples
    #: the worst case would lose without it (exactly that count for a deterministic model).
    broken_only_by: dict[str, float]
    #: Batch size asked for: examples per attack batch, or ``auto`` (results do not depend on it,
    #: except under ``reduction: mean``; the mini-batch study reads it).
    batch_size: Annotated[int, Field(ge=1)] | Literal["auto"]
    #: Per attack, the examples per batch it ran at in the last invocation: ``auto``'s choice,
    #: or a smaller size after an out-of-memory error (:mod:`suite.evaluation.batching`).
    #: ``{}`` in files written before.
    batch_sizes: dict[str, int] = Field(default_factory=dict)
    clean_seconds: float = Field(ge=0)
    #: Process-seconds the run took (every process's wall time, summed); None in older files.
    compute_seconds: float | None = Field(None, ge=0)
    warnings: list[str]
    #: Clean calibration of the served model: ECE, MCE (15 bins), NLL, mean confidence,
    #: reliability-diagram rows (:func:`suite.calibration.calibration_metrics`).
    calibration: dict[str, Any] | None = None
    #: The same metrics after each fitted adversary's rescaling (``cal``: logits / T_cal;
    #: ``opt``: logits / T_opt; ``platt``: a ⊙ logits + b), on the evaluated examples: how well
    #: calibrated the model the aware adversary attacks is (the IoR paper's Table 11).
    calibration_after: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: Adversary temperatures: ``cal`` fit and every (T, Q) of each ``opt`` search.
    adversary: dict[str, Any] | None = None
    illusion: IllusionEntry | None = None
    #: Plot files written beside results.json.
    plots: list[str] = Field(default_factory=list)
    config: dict[str, Any]
    config_hash: str
    provenance: Provenance

    def dataset_setting(self, name: str) -> str | None:
        """A dataset setting the task was configured with (``config``: ``sst2`` of ``glue``;
        ``revision``), or ``None`` where it set none."""
        dataset = self.config.get("dataset")
        value = dataset.get(name) if isinstance(dataset, dict) else None
        return value if isinstance(value, str) and value else None

    @model_validator(mode="before")
    @classmethod
    def _finite(cls, data: Any) -> Any:
        # The free-form sections (calibration, adversary, params...) hold numbers too.
        found = strict_json.non_finite(data) if isinstance(data, dict) else None
        if found is not None:
            raise ValueError(f"{found[0]} is {strict_json.spelled(found[1])}: results hold finite numbers only")
        return data

    @model_validator(mode="before")
    @classmethod
    def _no_worst_case_without_attacks(cls, data: Any) -> Any:
        # Earlier files of runs with distributional attacks only hold the clean accuracy as the
        # worst case (a minimum over no attack); it is no robust accuracy: read it as null.
        if isinstance(data, dict) and data.get("attacks") == {} and data.get("worst_case_robust_accuracy") is not None:
            data = dict(data, worst_case_robust_accuracy=None, worst_case_robust_accuracy_ci=None)
        return data


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


def write_results(path: Path, results: Results) -> Results:
    """Write validated ``results`` atomically (a NaN or infinity anywhere: ValueError naming it)."""
    # The Python dump: the JSON one would already have turned NaN in free-form dicts into null.
    strict_json.check_finite(results.model_dump(), f"results {str(path)!r}")
    text = strict_json.dumps(results.model_dump(mode="json"), f"results {str(path)!r}", indent=2)
    atomic_write_text(Path(path), text + "\n", KEPT_RECORDS, RESUME)
    return results


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A version 1 ``results.json`` (as parsed JSON) in the version 2 layout; others unchanged.

    Version 1 recorded threats as strings (``linf``, ``l2``, ``word-level``, ``word-level
    (transfer)``) and did not record access; they are read as the typed threat they name (text:
    ``word``, as version 1 called every text attack) and the access of the attack that wrote them
    (``square`` black-box; text attacks black-box; transfer; the rest white-box). Its numbers
    are kept as they are.
    """
    if not isinstance(data, dict) or data.get("schema_version") != 1:
        return data
    data = dict(data, schema_version=SCHEMA_VERSION, distributional={}, certificates={})
    attacks = {}
    for key, entry in (data.get("attacks") or {}).items():
        if not isinstance(entry, dict):
            return data  # not a version 1 file after all: validation reports it
        entry = dict(entry)
        name = str(entry.pop("threat_model", ""))
        base = entry.get("base_attack") or key
        eps = (entry.get("params") or {}).get("eps")
        if name.startswith("word-level"):
            entry["threat"] = {"level": "word"}
            entry["access"] = "transfer" if "transfer" in name else "black-box"
        else:
            entry["threat"] = {"norm": name, "eps": eps}
            entry["access"] = "black-box" if base == "square" else "white-box"
        attacks[key] = entry
    data["attacks"] = attacks
    groups = {}
    for key, group in (data.get("threat_models") or {}).items():
        if not isinstance(group, dict):
            return data
        group = dict(group)
        name, eps = group.pop("threat_model", ""), group.pop("eps", None)
        group["threat"] = {"level": "word"} if str(name).startswith("word-level") else {"norm": name, "eps": eps}
        groups[key] = group
    data["threat_models"] = groups
    return data

