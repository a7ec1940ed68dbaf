"""Is a ``results.json`` the run's own? What ``leaderboard add`` and ``export`` check before they
publish a number.

A results file is only a summary: the run's numbers are in its per-example ``records.jsonl``
and what the run was is in its ``run.json`` (the identity a resume checks), both beside it. So:

- **always**, the file must agree with itself: the model's display name follows from its spec;
  each attack's numeric parameters are those the task's configuration gave it, and its threat's
  ε is its ``eps``; the illusion flag and its largest drop are what the attacks' accuracies give
  at the recorded threshold, the task's own (:func:`~suite.report.illusion.illusion_findings`);
- **with ``run.json`` beside it**, the task configuration, seed and configuration hash must be
  the ones the run recorded (another ε, another attack list or another dataset is refused), as
  must the model's weights and the dataset;
- **with ``records.jsonl`` beside it**, every number of the file must be the mean of its
  records (clean, each attack, each worst case), and every attack the records hold must be in
  the file: dropping an attack that broke examples would raise the worst case
  (:func:`~suite.report.compare.check_reproduced`, which runs all of these).

A file with both beside it is *verified*; one shared alone can only be checked against itself,
and the leaderboard marks its entries unverified. None of this is a signature: whoever rewrites
the records, the identity and the summary together, consistently, is not caught.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.report.results import Results
from suite.text import printable

#: What :func:`suite.evaluation.prepare.run_identity` adds to the task's identity in ``run.json``.
RUN_ONLY = ("batch_size", "device", "weights", "examples", "fit_examples", "scoring", "attack_versions",
            "calibration")
#: Rounding slack for recomputed drops.
TOLERANCE = 1e-9
#: The drop that flags an illusion when the task configured no adversary (AdversaryConfig's default).
DEFAULT_THRESHOLD = 0.05


def check_consistent(path: Path, run: Results) -> None:
    """The checks a results file must pass against itself (module docstring)."""
    model = run.model
    # ModelInfo.name's rule (suite.models.base), written out: that module imports torch, which
    # reading results does not need.
    shown = model.spec if model.temperature == 1.0 else f"{model.spec}@T={model.temperature:g}"
    if model.name != shown:
        _changed(path, f"its model name {printable(repr(model.name))} is not its spec's ({printable(repr(shown))})")
    configured = {(item.get("label") or item.get("name")): item.get("params") or {}
                  for item in (run.config.get("attacks") or []) if isinstance(item, dict)}
    for key, entry in run.attacks.items():
        eps = entry.params.get("eps")
        if isinstance(eps, (int, float)) and entry.threat.eps is not None and float(eps) != entry.threat.eps:
            _changed(path, f"attack {printable(repr(key))} has eps {eps:g} but its threat {entry.threat.eps:g}")
        given = configured.get(entry.base_attack or key, {})
        for name, value in given.items():
            # Numbers only: an attack may normalise a name it was given (a loss, a norm's alias).
            if _number(value) and _number(entry.params.get(name)) and entry.params[name] != value:
                _changed(path, f"attack {printable(repr(key))} ran with {printable(name)} = "
                               f"{printable(json.dumps(entry.params[name]))}, not the {printable(json.dumps(value))} "
                               "its task's configuration gives")
    if run.illusion is not None:
        _check_illusion(path, run)
    _check_bounds(path, run)


def _check_bounds(path: Path, run: Results) -> None:
    """What every run's numbers satisfy by construction: n within the split, each example's
    robust correctness at most its clean one (so every robust accuracy and worst case at most the
    clean accuracy, and a worst case at most each of its attacks), at most n examples attacked,
    and each interval holding its number."""
    n, clean = run.dataset.n, run.clean_accuracy
    if n < 1:  # no examples: the leaderboard says so in its own words (check_enterable)
        return
    if n > run.dataset.size:
        _changed(path, f"its n = {n} is more than its split's {run.dataset.size} examples")
    numbers = [("clean accuracy", clean, run.clean_accuracy_ci)]
    for key, entry in run.attacks.items():
        name = f"{printable(repr(key))}'s robust accuracy"
        numbers.append((name, entry.robust_accuracy, entry.robust_accuracy_ci))
        if entry.robust_accuracy > clean + TOLERANCE:
            _changed(path, f"{name} {entry.robust_accuracy:g} is above its clean accuracy {clean:g}")
        if entry.n_attacked > n:
            _changed(path, f"attack {printable(repr(key))} attacked {entry.n_attacked} examples of its n = {n}")
    for label, group in run.threat_models.items():
        worst = group.worst_case_robust_accuracy
        name = f"the worst case under {printable(repr(label))}"
        numbers.append((name, worst, group.worst_case_robust_accuracy_ci))
        above = [(key, run.attacks[key].robust_accuracy) for key in group.attacks if key in run.attacks]
        if any(worst > value + TOLERANCE for _, value in above) or worst > clean + TOLERANCE:
            _changed(path, f"{name} {worst:g} is above its clean accuracy {clean:g} or one of its attacks' "
                           f"({', '.join(f'{printable(key)} {value:g}' for key, value in above)})")
    if run.worst_case_robust_accuracy is not None:
        numbers.append(("its worst-case robust accuracy", run.worst_case_robust_accuracy,
                        run.worst_case_robust_accuracy_ci))
        if run.worst_case_robust_accuracy > clean + TOLERANCE:
            _changed(path, f"its worst-case robust accuracy {run.worst_case_robust_accuracy:g} is above its clean "
                           f"accuracy {clean:g}")
    for name, value, interval in numbers:
        if interval is not None and not interval[0] - TOLERANCE <= value <= interval[1] + TOLERANCE:
            _changed(path, f"{name} {value:g} is outside its 95% interval [{interval[0]:g}, {interval[1]:g}]")


def _check_illusion(path: Path, run: Results) -> None:
    from suite.report.illusion import illusion_findings

    adversary = run.config.get("adversary")
    threshold = adversary.get("threshold", DEFAULT_THRESHOLD) if isinstance(adversary, dict) else DEFAULT_THRESHOLD
    recorded = run.illusion
    if recorded.threshold != threshold:
        _changed(path, f"its illusion threshold {recorded.threshold:g} is not its task's {threshold:g}")
    found = illusion_findings(run.attacks, threshold)
    if found.flagged != recorded.flagged or abs(found.max_drop - recorded.max_drop) > TOLERANCE:
        said = "flagged" if recorded.flagged else "not flagged"
        _changed(path, f"its illusion of robustness is {said} with a largest drop of {recorded.max_drop:g}, but its "
                       f"attacks' accuracies give {found.max_drop:g} at the threshold {threshold:g}")


def check_identity(path: Path, run: Results) -> bool:
    """The model, data and task configuration the results name are those ``run.json`` (beside
    them) recorded; a renamed model would publish another model's numbers under its name, and
    an edited ε or attack list another evaluation's. False when there is no ``run.json``."""
    from suite.paths import read_run_description

    run_file = (path.parent if path.is_file() else path) / "run.json"
    if not run_file.is_file():
        return False
    identity = read_run_description(run_file)
    model = run.model
    recorded = {"model.spec": (identity.get("model") or {}).get("spec"), "model.weights": identity.get("weights"),
                "dataset.spec": (identity.get("dataset") or {}).get("spec"),
                "dataset.split": (identity.get("dataset") or {}).get("split"), "seed": identity.get("seed")}
    given = {"model.spec": model.spec, "model.weights": model.weights, "dataset.spec": run.dataset.spec,
             "dataset.split": run.dataset.split, "seed": run.seed}
    for field, value in given.items():
        if recorded[field] is not None and value != recorded[field]:
            _changed(path, f"its {field} {printable(repr(value))} is not the one its run.json recorded "
                           f"({printable(repr(recorded[field]))})")
    task = {key: value for key, value in identity.items() if key not in RUN_ONLY}
    for key, value in task.items():
        if key in ("seed", "model"):
            continue
        if run.config.get(key) != value:
            _changed(path, f"its task's {printable(key)} {printable(json.dumps(run.config.get(key)))[:200]} is not "
                           f"the one its run.json recorded ({printable(json.dumps(value))[:200]})")
    configured = run.config.get("model") or {}
    for key, value in (task.get("model") or {}).items():
        given = configured.get(key)
        if key == "device":  # the identity holds none (TaskConfig.identity): the device is the run's
            continue
        if key == "members" and isinstance(given, list):  # the identity leaves out what only decides loading
            given = _members(given, ("allow_pickle", "members", "device"))
            value = _members(value, ("device",)) if isinstance(value, list) else value
        if given != value:
            _changed(path, f"its task's model.{printable(key)} is not the one its run.json recorded")
    digest = hashlib.sha256(json.dumps(task, sort_keys=True).encode()).hexdigest()[:16]
    if digest != run.config_hash:
        _changed(path, f"its config_hash {printable(repr(run.config_hash))} is not its run.json's ({digest})")
    return True


def _members(members: list[Any], dropped: tuple[str, ...]) -> list[Any]:
    return [{k: v for k, v in member.items() if k not in dropped} if isinstance(member, dict) else member
            for member in members]


def check_enterable(results: Any, source: str) -> None:
    """What the results schema cannot say but a leaderboard entry needs: examples, a date, known attacks."""
    if results.dataset.n < 1:
        raise ConfigError(f"{source!r}: dataset.n is {results.dataset.n}: results of no examples cannot enter the "
                          "leaderboard; evaluate at least one example")
    try:
        datetime.fromisoformat(results.created)
    except ValueError:
        raise ConfigError(f"{source!r}: created {results.created!r} is not an ISO 8601 date and time "
                          "(e.g. 2026-11-23T10:00:00+00:00)") from None
    if not results.attacks:
        ran = ", ".join(results.distributional) or "none"
        raise ConfigError(f"{source!r}: task {results.task!r} ran no point-wise attack (distributional: {ran}), so it "
                          "has no worst-case robust accuracy to enter: evaluate a point-wise attack too "
                          "(e.g. --attacks pgd_linf,wda_pp)")
    if not results.threat_models:
        raise ConfigError(f"results of task {results.task!r} have no per-threat-model worst case (written by an "
                          "older advsuite): rerun the same command to refresh results.json (finished records are reused)")
    for label, group in results.threat_models.items():
        unknown = [name for name in group.attacks if name not in results.attacks]
        if unknown:
            raise ConfigError(f"{source!r}: threat model {label!r} names attack(s) {unknown!r} that are not in "
                              f"attacks ({sorted(results.attacks)!r})")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _changed(path: Path, what: str) -> None:
    raise ConfigError(f"{str(path)!r}: {what}: results.json was changed after the run; rerun the same command to "
                      "write it again from the records")
