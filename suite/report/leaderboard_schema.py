"""Schema of ``leaderboard/leaderboard.json``: its entries, what makes their numbers consistent,
and the upgrade of version 1 files (no intervals) to version 2.

Numbers are finite JSON numbers, never strings (RobustBench's ``model_info`` files store
"89.69"), never NaN; accuracies are fractions in [0, 1], each with its 95% confidence interval.
:func:`schema` is the JSON Schema ``leaderboard/schema.json`` holds (``advsuite leaderboard
schema`` writes it, a test checks the two agree). Pydantic checks more than the JSON Schema can
say: an interval holds its accuracy, a worst case is at most every attack's accuracy, a date
parses.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from suite.intervals import wilson_interval

LEADERBOARD_VERSION = 2
#: Versions :func:`suite.report.leaderboard.load` reads: 1 had no intervals (they are filled in by Wilson on load).
READABLE_VERSIONS = (1, 2)
Fraction = Field(ge=0.0, le=1.0)
#: A 95% confidence interval [low, high] of an accuracy.
Interval = Annotated[list[Annotated[float, Field(ge=0.0, le=1.0)]], Field(min_length=2, max_length=2)]
#: Bounds on what an entry holds. Fields come from results files anyone can write, and a
#: leaderboard is published whole: one results.json with a 190 MB warning went in whole, and
#: the page would fetch it. A real run's are far inside them (names of tens of characters, a
#: warning of a few hundred, a few per run).
LONGEST_NOTE, MOST_NOTES = 10_000, 200
Name = Annotated[str, Field(max_length=1_000)]
Note = Annotated[str, Field(max_length=LONGEST_NOTE)]
Notes = Annotated[list[Note], Field(max_length=MOST_NOTES)]
#: Rounding slack when checking that an interval holds its accuracy, or that a worst case is
#: at most each attack's accuracy (means of the same values summed in another order).
TOLERANCE = 1e-6


class _Strict(BaseModel):
    # strict: "0.5" is not a number; extra fields are refused (a typo is not silently kept);
    # allow_inf_nan: NaN is not JSON, and one NaN in leaderboard.json empties the page.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class Illusion(_Strict):
    flagged: bool = Field(description="an aware adversary (cal/opt) or a transfer attack beat the out-of-the-box attack")
    max_drop: float = Field(description="largest robust-accuracy drop it caused (fraction)")
    findings: Notes


class Member(_Strict):
    """One member of a randomized ensemble."""

    spec: Name
    revision: Name | None
    probability: float = Field(ge=0, le=1, description="the probability α_i that the member answers a query")


class Entry(_Strict):
    """One (task, threat model, model, revision) row of the leaderboard."""

    task: Name = Field(description="dataset and split, e.g. builtin:digits/test")
    threat_model: Name = Field(description="linf, l2, word-level, character-level...")
    eps: float | None = Field(ge=0, description="perturbation budget of the threat model (None for word-level)")
    norm: Name | None = Field(description="norm of the ε-ball (None for word-level)")
    model: Name = Field(description="model display name (a design temperature makes a distinct model)")
    model_spec: Name
    revision: Name | None
    trained_for: Name | None = Field(None, description="the threat model the model declares it was trained for (its "
                                    "card), e.g. 'linf eps=0.15'; None when it declares none")
    temperature: float = Field(gt=0)
    clean_accuracy: float = Fraction
    clean_accuracy_ci: Interval = Field(description="95% confidence interval [low, high] of clean_accuracy")
    robust_accuracy: dict[Name, Annotated[float, Fraction]] = Field(
        max_length=1_000, description="per attack (and adversary temperature), fractions in [0, 1]")
    robust_accuracy_ci: dict[Name, Interval] = Field(max_length=1_000, description="per attack, the 95% interval of its robust accuracy")
    worst_case_robust_accuracy: float = Fraction
    worst_case_robust_accuracy_ci: Interval = Field(description="95% confidence interval of worst_case_robust_accuracy")
    distributional_accuracy: float | None = Field(
        None, ge=0.0, le=1.0, description="the lowest accuracy a Wasserstein distributional attack of the run reached "
                                       "under the same cost norm and eps (its ball contains the point-wise one), "
                                       "where one ran")
    n: int = Field(ge=1, description="examples evaluated")
    seed: int
    suite_version: Name
    recipe_hash: str = Field(min_length=8, max_length=1_000)
    date: str = Field(max_length=100, pattern=r"^\d{4}-\d{2}-\d{2}T", description="when the results were written (ISO 8601)")
    compute_seconds: float | None = Field(ge=0)
    illusion: Illusion | None
    warnings: Notes = Field(description="sanity-check warnings of the run (possible gradient masking...)")
    dataset_fingerprint: Name | None = None
    recipe_task: Name = Field(description="task name in the recipe (evaluate for one-command runs)")
    members: Annotated[list[Member], Field(max_length=1_000)] | None = Field(
        None, description="a randomized ensemble's members; its accuracies are exact expectations over them")
    weights: Name | None = Field(
        None, description="content hash of the weights evaluated (sha256-...); null: not recorded (older results)")
    verified: bool | None = Field(
        None, description="true: the run's records.jsonl and run.json were beside its results and gave every number "
                          "(suite.report.verify); false: the results were added alone, checked only against "
                          "themselves; null: added before advsuite recorded this")

    @model_validator(mode="after")
    def _consistent(self) -> Entry:
        problem = _inconsistency(self)
        if problem is not None:
            # Through the context, so braces in a model name are not read as a template.
            raise PydanticCustomError("inconsistent_entry", "{problem}", {"problem": problem})
        return self

    def slot(self) -> tuple[str, str, float | None, str, str]:
        """What the entry is about: (task, threat model, ε, model, revision). One entry per slot."""
        return (self.task, self.threat_model, self.eps, self.model, self.revision or "")

    def key(self) -> tuple[str, str, float | None, str, str, int, str, int, str]:
        """The slot and the evaluation behind it (n, dataset fingerprint, seed, and the hash of the
        task's configuration: its attacks and their parameters, the adversary, the data): the
        same key is the same evaluation, which may replace itself. The seed draws the subsample
        and the attacks' randomness: another seed is another evaluation (``compare`` refuses two
        seeds' subsamples as different examples), never a silent replacement. So is another
        attack list: a run of FGM alone would otherwise replace a PGD entry with a higher worst
        case."""
        return (*self.slot(), self.n, self.dataset_fingerprint or "", self.seed, self.recipe_hash)

    def threat_label(self) -> str:
        return self.threat_model if self.eps is None else f"{self.threat_model} eps={self.eps:g}"


def _inconsistency(entry: Entry) -> str | None:
    """Why ``entry``'s numbers cannot all be true, or ``None``."""
    try:
        datetime.fromisoformat(entry.date)
    except ValueError:
        return f"date {entry.date!r} is not an ISO 8601 date and time"
    if set(entry.robust_accuracy_ci) != set(entry.robust_accuracy):
        return (f"robust_accuracy_ci has intervals for {sorted(entry.robust_accuracy_ci)!r} but robust_accuracy "
                f"has accuracies for {sorted(entry.robust_accuracy)!r}")
    pairs = [("clean_accuracy", entry.clean_accuracy, entry.clean_accuracy_ci),
             ("worst_case_robust_accuracy", entry.worst_case_robust_accuracy, entry.worst_case_robust_accuracy_ci),
             *((f"robust_accuracy[{name!r}]", value, entry.robust_accuracy_ci[name])
               for name, value in entry.robust_accuracy.items())]
    for name, value, (low, high) in pairs:
        if not low - TOLERANCE <= value <= high + TOLERANCE:
            return f"the 95% interval [{low:g}, {high:g}] of {name} does not hold its value {value:g}"
    # The worst case is a per-example minimum over the clean correctness and every attack.
    for name, value in [("clean_accuracy", entry.clean_accuracy), *((f"robust_accuracy[{k!r}]", v)
                                                                    for k, v in entry.robust_accuracy.items())]:
        if entry.worst_case_robust_accuracy > value + TOLERANCE:
            return f"worst_case_robust_accuracy {entry.worst_case_robust_accuracy:g} is above {name} {value:g}"
    return None


class Leaderboard(_Strict):
    """Schema of ``leaderboard/leaderboard.json``."""

    leaderboard_version: Literal[2]
    entries: list[Entry]


def schema() -> dict[str, Any]:
    """The JSON Schema of leaderboard.json (what ``leaderboard/schema.json`` holds)."""
    document = Leaderboard.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **document}


def empty() -> Leaderboard:
    """A leaderboard with no entries (what a missing file reads as)."""
    return Leaderboard(leaderboard_version=LEADERBOARD_VERSION, entries=[])


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """A version 1 leaderboard (as parsed JSON) in the version 2 layout; others unchanged.

    Version 1 entries had no intervals: each accuracy gets Wilson's 95% interval from the
    accuracy and n, which is what the suite records for the 0/1 correctness of those runs.
    Values that are not what they should be are left for validation to report.
    """
    if data.get("leaderboard_version") != 1 or not is_int(data.get("leaderboard_version")):
        return data
    entries = data.get("entries")
    if not isinstance(entries, list):
        return data
    return dict(data, leaderboard_version=LEADERBOARD_VERSION,
                entries=[_with_intervals(entry) for entry in entries])


def _with_intervals(entry: Any) -> Any:
    if not isinstance(entry, dict) or not is_int(entry.get("n")) or entry["n"] < 1:
        return entry
    n = entry["n"]

    def wilson(value: Any) -> Any:
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
        return list(wilson_interval(value * n, n)) if is_number else None

    entry = dict(entry)
    entry.setdefault("clean_accuracy_ci", wilson(entry.get("clean_accuracy")))
    entry.setdefault("worst_case_robust_accuracy_ci", wilson(entry.get("worst_case_robust_accuracy")))
    robust = entry.get("robust_accuracy")
    if isinstance(robust, dict):
        entry.setdefault("robust_accuracy_ci", {key: wilson(value) for key, value in robust.items()})
    return entry


def is_int(value: Any) -> bool:
    """An ``int`` that is not a ``bool`` (JSON's ``true`` is not a version or a count)."""
    return isinstance(value, int) and not isinstance(value, bool)
