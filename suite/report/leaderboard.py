"""The published leaderboard: entries built from ``results.json`` files, merged into
``leaderboard/leaderboard.json`` and rendered by the static ``leaderboard/index.html``.

One entry per (task, threat model, model, revision), where a task is a dataset split and a
threat model is the typed threat of the point-wise attacks (:class:`suite.threat.Threat`): a norm
and its budget ε (``linf`` at ε = 0.03 and at ε = 0.1 are two entries), or a text edit level
(``word-level``, ``character-level``). Distributional attacks never enter an entry's robust
accuracy. Results files of schema version 1 are read through
:func:`suite.report.results.upgrade`. A model served at a design temperature is its own model
(``builtin:sentiment-tiny@T=0.005``). Each accuracy carries its 95% confidence interval,
copied from the results, or Wilson's from the accuracy and n for files written before results
recorded intervals.

An entry's key is its slot (task, threat model, ε, model, revision) and the evaluation behind
it: n, the dataset fingerprint, the seed and the hash of the task's configuration (its attacks
and their parameters). Adding an entry with the same key replaces it, so merging is idempotent;
an entry for an occupied slot from another evaluation (a ``--limit 10`` smoke test over a
200-example entry, FGM alone over a PGD entry) is refused unless ``replace`` is given.

Results are checked before they enter (:mod:`suite.report.verify`): against themselves always,
and against the run's records and identity where those are beside them. An entry says which
(``verified``), and an unverified entry never replaces a verified one unless ``replace``.

The file's schema is :class:`~suite.report.leaderboard_schema.Leaderboard` (re-exported here).
Everything is validated before anything is written; writes are atomic and serialised by a lock
on the leaderboard's directory.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import suite.strict_json as strict_json
from suite.errors import ConfigError, WriteError, is_write_fault
from suite.intervals import wilson_interval
from suite.paths import atomic_write_text, remove_stale_temporaries, through_link
from suite.report.leaderboard_merge import merge, merge_all
from suite.report.leaderboard_page import PAGE_FILES, PAGE_MISSING, install_page
from suite.report.leaderboard_schema import (
    LEADERBOARD_VERSION,
    READABLE_VERSIONS,
    Entry,
    Illusion,
    Leaderboard,
    empty,
    is_int,
    schema,
    upgrade,
)
from suite.report.results_file import describe_validation, json_kind, read_results
from suite.report.verify import check_enterable
from suite.text import printable

__all__ = ["DEFAULT_PATH", "LEADERBOARD_VERSION", "Entry", "Illusion", "Leaderboard", "add", "dumps", "empty",
           "entries_from_results", "install_page", "load", "merge", "merge_all", "read_results", "rows", "schema",
           "upgrade"]

DEFAULT_PATH = Path("leaderboard") / "leaderboard.json"


# --------------------------------------------------------------------------- results → entries


def _interval(recorded: list[float] | None, accuracy: float, n: int) -> list[float]:
    """The recorded 95% interval, or Wilson's from the accuracy and n (older results files hold
    0/1 correctness, for which Wilson's is the interval the suite records)."""
    if recorded is not None:
        return list(recorded)
    return list(wilson_interval(accuracy * n, n))


def entries_from_results(results: Any, source: str = "results", verified: bool | None = None) -> list[Entry]:
    """Leaderboard entries of one validated :class:`~suite.report.results.Results`.

    Args:
        results: The results.
        source: Where they came from, for messages (the file name).
        verified: Whether the run's records and identity gave its numbers
            (:func:`~suite.report.compare.check_reproduced`); ``None``: not checked.
    """
    check_enterable(results, source)
    illusion = None
    if results.illusion is not None:
        illusion = Illusion(flagged=results.illusion.flagged, max_drop=results.illusion.max_drop,
                            findings=[str(item.get("message", item)) for item in results.illusion.findings])
    n = results.dataset.n
    entries = []
    for group in results.threat_models.values():
        threat = group.threat
        attacks = {key: results.attacks[key] for key in group.attacks}
        fields = dict(
            task=task_name(results),
            threat_model=threat.norm if threat.level is None else f"{threat.level}-level",
            eps=threat.eps,
            norm=threat.norm,
            model=results.model.name,
            model_spec=results.model.spec,
            revision=results.model.revision,
            weights=results.model.weights,
            trained_for=None if results.model.threat_model is None else results.model.threat_model.label,
            temperature=results.model.temperature,
            members=None if results.model.members is None else [m.model_dump() for m in results.model.members],
            clean_accuracy=results.clean_accuracy,
            clean_accuracy_ci=_interval(results.clean_accuracy_ci, results.clean_accuracy, n),
            robust_accuracy={key: entry.robust_accuracy for key, entry in attacks.items()},
            robust_accuracy_ci={key: _interval(entry.robust_accuracy_ci, entry.robust_accuracy, n)
                                for key, entry in attacks.items()},
            worst_case_robust_accuracy=group.worst_case_robust_accuracy,
            worst_case_robust_accuracy_ci=_interval(group.worst_case_robust_accuracy_ci,
                                                    group.worst_case_robust_accuracy, n),
            distributional_accuracy=_distributional(results, threat),
            n=n,
            seed=results.seed,
            suite_version=results.suite_version,
            recipe_hash=results.config_hash,
            date=results.created,
            compute_seconds=results.compute_seconds,
            illusion=illusion,
            warnings=list(results.warnings),
            dataset_fingerprint=results.dataset.fingerprint,
            recipe_task=results.task,
            verified=verified,
        )
        try:
            entries.append(Entry(**fields))
        except ValidationError as error:
            raise ConfigError(f"{source!r} cannot make a leaderboard entry for {threat.label!r}: "
                              f"{describe_validation(error)}") from error
    return entries


def task_name(results: Any) -> str:
    """An entry's task: the dataset, its configuration where it has one (``glue`` ``sst2`` and
    ``cola`` are two tasks), and the split."""
    config = results.dataset_setting("config")
    spec = results.dataset.spec if not config else f"{results.dataset.spec}[{config}]"
    return f"{spec}/{results.dataset.split}"


def _distributional(results: Any, threat: Any) -> float | None:
    """The lowest accuracy any Wasserstein attack of the run reached with this cost norm and ε
    (a ball that contains the point-wise one), or None."""
    found = [entry.accuracy for entry in results.distributional.values()
             if entry.threat.norm == threat.norm and entry.threat.eps == threat.eps and threat.norm is not None]
    return min(found) if found else None


# --------------------------------------------------------------------------- the file


def load(path: Path) -> Leaderboard:
    """The leaderboard at ``path`` (empty when the file does not exist yet); version 1 files
    are upgraded."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"the leaderboard {str(path)!r} is a directory; name the leaderboard file, "
                          f"e.g. {str(path / 'leaderboard.json')!r}")
    if not path.exists():
        return empty()
    if not path.is_file():
        raise ConfigError(f"the leaderboard {str(path)!r} is not a regular file")
    data = strict_json.read_json(path, "leaderboard")
    if not isinstance(data, dict):
        raise ConfigError(f"{str(path)!r} holds a JSON {json_kind(data)}, not a leaderboard object; it was left untouched")
    version = data.get("leaderboard_version")
    if is_int(version) and version not in READABLE_VERSIONS:
        raise ConfigError(f"{str(path)!r} has leaderboard_version {version}; this advsuite reads versions "
                          f"{', '.join(map(str, READABLE_VERSIONS))} (a newer file needs a newer advsuite); "
                          "it was left untouched")
    try:
        board = Leaderboard.model_validate(upgrade(data))
    except ValidationError as error:
        raise ConfigError(f"{str(path)!r} does not match leaderboard/schema.json: {describe_validation(error)}; "
                          "it was left untouched") from error
    seen: set[tuple[str, str, float | None, str, str]] = set()
    for entry in board.entries:  # merge keeps one entry a slot: the next add would drop the other without a word
        if entry.slot() in seen:
            raise ConfigError(printable(f"{str(path)!r} holds two entries for {entry.model!r} (revision "
                                        f"{entry.revision!r}) on {entry.task!r} under {entry.threat_label()!r}; it "
                                        "holds one entry a slot (edited or joined by hand?): remove one; it was left "
                                        "untouched"))
        seen.add(entry.slot())
    return board


def dumps(board: Leaderboard) -> str:
    """The file's text: sorted entries, indented, UTF-8."""
    # Never a bare NaN (nor a silent null) in the file, whatever validation let through.
    strict_json.check_finite(board.model_dump(), "the leaderboard")
    return strict_json.dumps(board.model_dump(mode="json"), "the leaderboard", indent=2, ensure_ascii=False) + "\n"


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Serialise read-modify-write of the leaderboards in ``directory`` between processes.

    The lock is ``flock`` on the directory itself, so there is no lock file to leave behind.
    The alternatives fail: a lock file removed after use lets a process that waited on the
    removed file and one that created a fresh file both hold "the" lock; locking the
    leaderboard file itself fails because the atomic write replaces the file (a waiter wakes
    holding the old inode while a newcomer locks the new one). The directory outlives both.
    Output directories are locked the same way while a run writes, so a leaderboard kept in
    a run's output directory waits for that run.
    """
    handle = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # releases the lock


def check_target(path: Path) -> None:
    """Refuse a leaderboard path that cannot be written, before anything is read or written."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"the leaderboard {str(path)!r} is a directory; name the leaderboard file, "
                          f"e.g. {str(path / 'leaderboard.json')!r}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"cannot write the leaderboard {str(path)!r}: {str(parent)!r} is not a directory")
            break


def _entries(path: Path) -> list[Entry]:
    """A results file's entries, refused where the file disagrees with itself or with the run's
    records and identity beside it; marked verified where those were there."""
    from suite.report.compare import check_reproduced

    results = read_results(path)
    verified = check_reproduced(Path(path), results)
    return entries_from_results(results, str(path), verified)


def add(results_paths: Iterable[Path], path: Path = DEFAULT_PATH, replace: bool = False) -> tuple[Leaderboard, int, int]:
    """Validate every results file and the leaderboard first, then merge them into ``path``
    atomically.

    Nothing is written (no directory, no lock file) when any input is invalid or an entry would
    replace another evaluation without ``replace``. The static page (``index.html``) and the
    schema are copied beside a new leaderboard so the directory can be published as is.
    """
    page_dir = Path(path).parent  # the page goes beside the name given
    for name in (Path(path), through_link(path)):
        if name.name in PAGE_FILES:  # the page copied beside it would overwrite the entries just written
            raise ConfigError(f"the leaderboard {str(name)!r} has the name of the page's own {name.name}, which is "
                              "written beside every leaderboard: name it otherwise, e.g. "
                              f"{str(name.with_name('leaderboard.json'))!r}")
    path = through_link(path)  # a link: its file, written and locked where it is
    check_target(path)
    sourced = [(str(p), _entries(p)) for p in results_paths]
    merge_all(load(path), sourced, replace)  # every refusal before anything is written
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with locked(path.parent):
            # Again, under the lock: another add may have written meanwhile.
            remove_stale_temporaries(path)  # a write killed mid-way, left in the published folder
            board, added, replaced = merge_all(load(path), sourced, replace)
            text = dumps(board)
            if not (path.is_file() and path.read_bytes() == text.encode("utf-8")):  # a full disk refused a no-op
                atomic_write_text(path, text, UNCHANGED)
    except OSError as error:
        if is_write_fault(error):  # the system refused (no space, read-only...): one line, status 1
            raise WriteError(error.filename or path, error, UNCHANGED) from error
        raise ConfigError(f"cannot write the leaderboard {str(path)!r}: {error.strerror or error}") from error
    try:
        install_page(page_dir)
    except OSError as error:
        if is_write_fault(error):
            raise WriteError(error.filename or path.parent, error, PAGE_MISSING) from error
        raise ConfigError(f"the leaderboard {str(path)!r} was written, but the page could not be copied beside it: "
                          f"{error.strerror or error}") from error
    return board, added, replaced


#: What a failed leaderboard write keeps.
UNCHANGED = "the leaderboard is unchanged"


def page_address(path: Path) -> str:
    """Where the page beside the leaderboard ``path`` shows it: ``index.html`` reads
    ``leaderboard.json``, and ``index.html?board=<name>`` another file of its directory."""
    from urllib.parse import quote

    name = Path(path).name
    return "index.html" if name == DEFAULT_PATH.name else f"index.html?board={quote(name, safe='')}"


# --------------------------------------------------------------------------- the table


def _percent(value: float, interval: list[float]) -> str:
    """``61.0 [54.2, 67.5]``: percent with its 95% interval."""
    return f"{100 * value:.1f} [{100 * interval[0]:.1f}, {100 * interval[1]:.1f}]"


def rows(board: Leaderboard, task: str | None = None, threat_model: str | None = None,
         sort: str = "worst_case_robust_accuracy") -> list[dict[str, str]]:
    """Table rows of the entries matching the filters, best first by ``sort``; every cell
    printable (fields come from files anyone can write)."""
    selected = [e for e in board.entries if (task is None or e.task == task)
                and (threat_model is None or e.threat_model == threat_model)]
    known = {"worst_case_robust_accuracy", "clean_accuracy", *(name for e in board.entries for name in e.robust_accuracy)}
    if sort not in known:  # a typo would otherwise sort by nothing, silently
        attacks = sorted(known - {"worst_case_robust_accuracy", "clean_accuracy"})
        raise ConfigError(f"--sort {printable(repr(sort))} is neither worst_case_robust_accuracy, clean_accuracy nor "
                          f"an attack of the leaderboard ({', '.join(map(printable, attacks)) or 'none'})")

    def value(entry: Entry) -> float:
        if sort in ("worst_case_robust_accuracy", "clean_accuracy"):
            return getattr(entry, sort)
        return entry.robust_accuracy.get(sort, -1.0)

    selected.sort(key=value, reverse=True)
    table = [
        {
            "task": e.task,
            "threat model": e.threat_label(),
            "trained for": e.trained_for or "-",
            "model": e.model if not e.members else f"{e.model} ({members_label(e.members)})",
            "revision": e.revision or "-",
            "clean [95% CI]": _percent(e.clean_accuracy, e.clean_accuracy_ci),
            "worst case [95% CI]": _percent(e.worst_case_robust_accuracy, e.worst_case_robust_accuracy_ci),
            "wasserstein": "-" if e.distributional_accuracy is None else f"{100 * e.distributional_accuracy:.1f}%",
            "attacks [95% CI]": ", ".join(f"{k} {_percent(v, e.robust_accuracy_ci[k])}" for k, v in e.robust_accuracy.items()),
            "n": str(e.n) if e.verified is not False else f"{e.n} (unverified)",
            "illusion": "-" if e.illusion is None or not e.illusion.flagged else f"YES (-{100 * e.illusion.max_drop:.1f} pp)",
        }
        for e in selected
    ]
    return [{column: printable(cell) for column, cell in row.items()} for row in table]


def members_label(members) -> str:
    """``0.85×builtin:a + 0.15×builtin:b``: a randomized ensemble's members and probabilities."""
    return " + ".join(f"{member.probability:g}×{member.spec}" for member in members)
