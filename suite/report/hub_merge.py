"""Merging a run's results into a model card and ``.eval_results`` files that already hold some.

What advsuite wrote before is replaced *by evaluation*, not metric by metric: the results of one
model on one dataset split under one threat (and its clean accuracy) are one group, and a new
export replaces the whole group. Replacing metric by metric left a card that contradicted
itself: re-exported without PGD, its worst case rose to FGM's 62.5 % while the old PGD result
(0 %) stayed beside it. A group exported before from another evaluation (another n, seed,
dataset or recipe) is refused unless ``replace``, as the leaderboard refuses it. Results
advsuite did not write (no ``advsuite`` in their ``args``; another ``task_id``) are never
touched.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from suite.errors import ConfigError
from suite.text import printable

#: The metrics advsuite writes (the first part of a ``task_id`` after the split).
METRICS = ("accuracy", "robust_accuracy", "worst_case_robust_accuracy", "distributional_accuracy")
#: A result's threat, from its ``args`` (the typed threat; none for clean accuracy).
THREAT = ("norm", "eps", "level", "p", "kappa")
#: What makes an evaluation, from a result's ``args`` (older exports lack some: not compared).
EVALUATION = ("n", "seed", "dataset_fingerprint", "recipe")


def _args(result: Any) -> dict[str, Any]:
    return result.metric_args if isinstance(result.metric_args, dict) else {}


def card_group(result: Any) -> tuple | None:
    """A card result's group (model, task, dataset, config, split, threat), or ``None`` for one
    advsuite did not write."""
    args = _args(result)
    if "advsuite" not in args:
        return None
    return (str(args.get("model")), result.task_type, result.dataset_type, result.dataset_config,
            result.dataset_split, tuple(str(args.get(name)) for name in THREAT))


def _evaluation(result: Any) -> dict[str, Any]:
    args = _args(result)
    # Clean accuracy is shared by a recipe's tasks on one dataset, each with its own recipe hash.
    names = EVALUATION if any(args.get(name) is not None for name in THREAT) else EVALUATION[:3]
    return {name: args[name] for name in names if name in args}


def _key(result: Any) -> tuple:
    return (card_group(result), result.metric_type, result.metric_config)


def merge_card(old: list[Any], new: list[Any], replace: bool, source: str) -> list[Any]:
    """``old`` card results with the groups ``new`` covers replaced by ``new``'s (in the place
    of the first), refusing a group from another evaluation unless ``replace``."""
    groups: dict[tuple, dict[str, Any]] = {}
    for result in new:
        group, evaluation = card_group(result), _evaluation(result)
        if groups.setdefault(group, evaluation) != evaluation:  # a seed sweep's replicates, say
            raise ConfigError(f"two of the results give {_group_label(group)} ({_differ(groups[group], evaluation)}), "
                              "and a card holds one: export one of them")
    for result in old:
        group = card_group(result)
        if group in groups and not replace:
            mine, theirs = groups[group], _evaluation(result)
            if any(mine[name] != theirs[name] for name in set(mine) & set(theirs)):
                raise ConfigError(f"{source} already holds {_group_label(group)} from another evaluation "
                                  f"({_differ(theirs, mine)}); a different evaluation never replaces it silently: "
                                  "pass --replace to replace it, or export to another --to")
    fresh = list({_key(result): result for result in new}.values())
    return _replace_groups(old, fresh, lambda result: card_group(result) in groups)


def entry_group(entry: dict[str, Any]) -> tuple | None:
    """An ``.eval_results`` entry's group: (dataset id, the task_id up to its metric, its
    threat), or ``None`` where its task_id names no advsuite metric."""
    dataset = entry.get("dataset") if isinstance(entry, dict) else None
    task_id = dataset.get("task_id") if isinstance(dataset, dict) else None
    if not isinstance(task_id, str):
        return None
    parts = task_id.split("/")
    at = next((i for i, part in enumerate(parts) if part in METRICS), None)
    if at is None:
        return None
    return (dataset.get("id"), "/".join(parts[:at]), parts[at + 1] if len(parts) > at + 1 else None)


def merge_entries(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` ``.eval_results`` entries with the groups ``new`` covers replaced by ``new``'s (the
    card, written by the same export, refused another evaluation's groups already)."""
    groups = {entry_group(entry) for entry in new}
    return _replace_groups(old, new, lambda entry: entry_group(entry) in groups)


def _replace_groups(old: list[Any], new: list[Any], covered: Callable[[Any], bool]) -> list[Any]:
    merged: list[Any] = []
    placed = False
    for item in old:
        if covered(item):
            if not placed:
                merged.extend(new)
                placed = True
            continue
        merged.append(item)
    return merged if placed else merged + new


def _group_label(group: Hashable) -> str:
    model, _, dataset, config, split, threat = group  # type: ignore[misc]
    named = dict(zip(THREAT, threat))
    label = "clean accuracy" if all(value == "None" for value in threat) else " ".join(
        f"{name}={value}" for name, value in named.items() if value != "None")
    return printable(f"{model!r} on {dataset}{f'[{config}]' if config else ''}/{split} ({label})")


def _differ(old: dict[str, Any], new: dict[str, Any]) -> str:
    shown = [f"{name} {old.get(name)!r} there, {new.get(name)!r} here" for name in EVALUATION
             if name in old and name in new and old[name] != new[name]]
    return printable("; ".join(shown))
