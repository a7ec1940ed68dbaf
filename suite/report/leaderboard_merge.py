"""Merging entries into a leaderboard: one entry per slot, and when a new entry may replace the
one there (the same evaluation of the same weights, or ``replace``). :mod:`.leaderboard` reads,
checks and writes the file around it."""

from __future__ import annotations

from collections.abc import Iterable

from suite.errors import ConfigError
from suite.report.leaderboard_schema import LEADERBOARD_VERSION, Entry, Leaderboard
from suite.text import printable


def merge(board: Leaderboard, new: Iterable[Entry], replace: bool = False,
          source: str = "results") -> tuple[Leaderboard, int, int]:
    """``board`` with ``new`` entries added.

    An entry with the same key (the same evaluation) replaces the old one. An entry for an
    occupied slot from another evaluation (another n or dataset fingerprint) is refused with a
    :class:`ConfigError` saying what is there, unless ``replace``.

    Returns the board and how many entries were added and replaced. Entries are sorted by slot
    so the file's content depends only on the set of entries.
    """
    by_slot = {entry.slot(): entry for entry in board.entries}
    added = replaced = 0
    for entry in new:
        old = by_slot.get(entry.slot())
        if old is None:
            added += 1
        elif (old.key() != entry.key() or _other_weights(old, entry) or (old.verified and not entry.verified)
              or _edited(old, entry)) and not replace:
            raise ConfigError(_conflict(old, entry, source))
        else:
            replaced += 1
        by_slot[entry.slot()] = entry
    ordered = [by_slot[slot] for slot in sorted(by_slot, key=lambda s: (s[0], s[1], -1.0 if s[2] is None else s[2], s[3], s[4]))]
    return Leaderboard(leaderboard_version=LEADERBOARD_VERSION, entries=ordered), added, replaced


def _other_weights(old: Entry, new: Entry) -> bool:
    """Both entries name the weights they evaluated, and they differ: a model retrained in place,
    or a Hub model whose weights changed under the same revision (a timm name has none)."""
    return old.weights is not None and new.weights is not None and old.weights != new.weights


def _numbers(entry: Entry) -> tuple:
    return (entry.clean_accuracy, sorted(entry.robust_accuracy.items()), entry.worst_case_robust_accuracy,
            entry.distributional_accuracy)


def _edited(old: Entry, new: Entry) -> bool:
    """The same evaluation by the same suite version with other numbers: the same evaluation of
    the same weights gives the same numbers (on the CPU), so these are results edited, or a run
    elsewhere (CUDA's arithmetic). A newer suite's numbers (its attacks changed) replace the old."""
    return old.suite_version == new.suite_version and _numbers(old) != _numbers(new)


def _conflict(old: Entry, new: Entry, source: str) -> str:
    where = f"{source!r}: {new.model!r} (revision {new.revision!r}) on {new.task!r} under {new.threat_label()!r} is "
    if old.key() == new.key() and not _other_weights(old, new) and _edited(old, new):
        return printable(where + f"already on the leaderboard from the same evaluation with other numbers (worst case "
                         f"{old.worst_case_robust_accuracy:.2%} there, {new.worst_case_robust_accuracy:.2%} here; clean "
                         f"{old.clean_accuracy:.2%} and {new.clean_accuracy:.2%}) by the same suite version: results edited, "
                         "or run on other hardware. Other numbers never replace an entry silently: pass --replace to replace it")
    if _other_weights(old, new):
        return printable(where + f"already on the leaderboard from other weights of the model ({old.weights} there, "
                         f"{new.weights} here: retrained, or its weights changed). Numbers of other weights never "
                         "replace an entry silently: pass --replace to replace it")
    if old.key() == new.key():
        return printable(where + "already on the leaderboard from results verified against their run's records, and "
                         "these were added without records.jsonl and run.json beside them. An unverified entry never "
                         "replaces a verified one silently: add the run's directory, or pass --replace")
    if (old.n, old.seed, old.dataset_fingerprint) != (new.n, new.seed, new.dataset_fingerprint):
        differs = (f"with n={old.n}, seed {old.seed} and dataset fingerprint {old.dataset_fingerprint!r}; these "
                   f"results have n={new.n}, seed {new.seed} and fingerprint {new.dataset_fingerprint!r}")
    else:
        attacks = ", ".join(old.robust_accuracy) or "none"
        differs = (f"with recipe {old.recipe_hash} (attacks {attacks}); these results come from recipe "
                   f"{new.recipe_hash} (attacks {', '.join(new.robust_accuracy) or 'none'})")
    return printable(where + f"already on the leaderboard from another evaluation, {differs}. "
                     "A different evaluation never replaces an entry silently: pass --replace to replace it")


def merge_all(board: Leaderboard, sourced: Iterable[tuple[str, list[Entry]]],
              replace: bool = False) -> tuple[Leaderboard, int, int]:
    """:func:`merge` of each results file's entries in turn; counts are against ``board``."""
    before = {entry.slot() for entry in board.entries}
    touched: dict[tuple[str, str, float | None, str, str], str] = {}
    for source, entries in sourced:
        for entry in entries:
            other = touched.get(entry.slot())
            if other is not None and other != source:  # one of them would be dropped without a word
                raise ConfigError(f"{other!r} and {source!r} both give {entry.model!r} (revision {entry.revision!r}) on "
                                  f"{entry.task!r} under {entry.threat_label()!r}, and the leaderboard holds one entry "
                                  "there (replicates of a seed sweep, say): add one of them")
            touched[entry.slot()] = source
        board, _, _ = merge(board, entries, replace, source)
    return board, len(set(touched) - before), len(set(touched) & before)
