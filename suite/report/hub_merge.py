"""Merging a run's results into a model card and ``.eval_results`` files that already hold some.

What advsuite wrote before is replaced *by evaluation*, not metric by metric: the results of one
model on one dataset split under one threat (and its clean accuracy) are one group, and a new
export replaces the whole group. Replacing metric by metric left a card that contradicted
itself: re-exported without PGD, its worst case rose to FGM's 62.5 % while the old PGD result
(0 %) stayed beside it. A group exported before from another evaluation (another n, seed,
dataset or recipe) is refused unless ``replace``, as the leaderboard refuses it. Results
advsuite did not write (no ``advsuite`` in their ``args``; another ``task_id``) are never
touched.

A card describes one model, and one set of its weights:

- advsuite results of another model (``args.model``) in the card are refused, always: merged,
  the Hub would show the second model's numbers under the first one's name;
- advsuite results of other weights of the model (``args.weights``, the content hash the run
  recorded; a model retrained in place or a Hub repo at a new commit) are refused unless
  ``replace``, and with it *every* one of them is removed, not only the groups the export
  writes: a card holding the new weights' clean accuracy beside the old weights' robust accuracy
  at another ε contradicts itself (robust above clean, measured). ``.eval_results`` entries name
  their weights in their ``notes`` and follow the same rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable
from typing import Any

from suite.errors import ConfigError
from suite.text import printable

#: The metrics advsuite writes (the first part of a ``task_id`` after the split).
METRICS = ("accuracy", "robust_accuracy", "worst_case_robust_accuracy", "distributional_accuracy")
#: A result's threat, from its ``args`` (the typed threat; none for clean accuracy).
THREAT = ("norm", "eps", "level", "p", "kappa")
#: What makes an evaluation, from a result's ``args`` (older exports lack some: not compared).
EVALUATION = ("n", "seed", "dataset_fingerprint", "weights", "recipe")
#: How an ``.eval_results`` entry's ``notes`` name the weights (:func:`suite.report.hub._entries`).
#: Last, so that no name before it can forge it.
NOTES_WEIGHTS = re.compile(r"; weights (sha256-[0-9a-f]+)$")
#: How an advsuite entry's ``notes`` name the model (``; model <name>; dataset fingerprint ...``).
NOTES_MODEL = re.compile(r"; model (.*?); dataset fingerprint ")


def entry_model(entry: Any) -> str | None:
    """The model an advsuite ``.eval_results`` entry's notes name, ``None`` for another's entry."""
    notes = entry.get("notes") if isinstance(entry, dict) else None
    named = NOTES_MODEL.search(notes) if isinstance(notes, str) and entry_group(entry) is not None else None
    return named.group(1) if named else None


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
    names = EVALUATION if any(args.get(name) is not None for name in THREAT) else EVALUATION[:-1]
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
    old = _one_model(old, new, replace, source)
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


def _one_model(old: list[Any], new: list[Any], replace: bool, source: str) -> list[Any]:
    """``old`` without the advsuite results of other weights of ``new``'s model (``replace``);
    refuses another model's, and other weights' without ``replace`` (module notes)."""
    models = {str(_args(result).get("model")) for result in new}
    weights = {_args(result).get("weights") for result in new} - {None}
    for result in old:
        args = _args(result)
        if "advsuite" in args and models and str(args.get("model")) not in models:
            raise ConfigError(printable(f"{source} holds advsuite results of the model {str(args.get('model'))!r}, and "
                                        f"these are of {sorted(models)[0]!r}: a card describes one model, and merged "
                                        "the Hub would show one's numbers under the other's name; export to another "
                                        "--to"))
    stale = [result for result in old if "advsuite" in _args(result) and len(weights) == 1
             and _args(result).get("weights") not in (None, *weights)]
    if stale and not replace:
        raise ConfigError(printable(f"{source} holds advsuite results of other weights of this model "
                                    f"({_args(stale[0]).get('weights')} there, {next(iter(weights))} here: retrained, "
                                    "or another revision); they are never mixed silently: pass --replace to remove "
                                    "every result of the other weights, or export to another --to"))
    gone = {id(result) for result in stale}
    return [result for result in old if id(result) not in gone]


def _stale_entries(old: list[dict[str, Any]], weights: str | None) -> list[dict[str, Any]]:
    """The advsuite ``.eval_results`` entries of ``old`` whose notes name weights other than ``weights``."""
    found = []
    for entry in old:
        notes = entry.get("notes") if isinstance(entry, dict) else None
        named = NOTES_WEIGHTS.search(notes) if isinstance(notes, str) else None
        if weights is not None and entry_group(entry) is not None and named and named.group(1) != weights:
            found.append(entry)
    return found


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


def merge_entries(old: list[dict[str, Any]], new: list[dict[str, Any]], weights: str | None = None,
                  replace: bool = False, source: str = "") -> list[dict[str, Any]]:
    """``old`` ``.eval_results`` entries with the groups ``new`` covers replaced by ``new``'s (the
    card, written by the same export, refused another evaluation's groups already), and those of
    other weights than ``weights`` removed (``replace``) or refused (module notes)."""
    # Another model's entries, refused always, as the card's are: the card is checked only where
    # it holds advsuite results, and a user's own card (or the Hub's) holds none.
    models = {model for entry in new if (model := entry_model(entry)) is not None}
    other = next((model for entry in old if (model := entry_model(entry)) is not None and model not in models), None)
    if other is not None and models:
        raise ConfigError(printable(f"{source} holds advsuite results of the model {other!r}, and these are of "
                                    f"{sorted(models)[0]!r}: one model's results, and merged the Hub would show one's "
                                    "numbers under the other's name; export to another --to"))
    stale = _stale_entries(old, weights)
    if stale and not replace:
        named = NOTES_WEIGHTS.search(stale[0]["notes"])
        raise ConfigError(printable(f"{source} holds advsuite results of other weights of this model "
                                    f"({named.group(1) if named else '?'} there, {weights} here); they are never mixed "
                                    "silently: pass --replace to remove every result of the other weights, or export "
                                    "to another --to"))
    gone = {id(entry) for entry in stale}
    old = [entry for entry in old if id(entry) not in gone]
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
