"""The built-in models' cache: each trained once, in a process of its own with pinned CPU
kernels, staged beside its entry, hash-recorded, and renamed into place.

A built-in trains in a fresh process (:func:`training_env`, :func:`pinned_training`), so one
torch version gives the same weights on every machine. It is saved under
``$ADVSUITE_CACHE/models/<name>-<version>``; the directory appears atomically, so concurrent
processes never read a half-written model. The sha256 of its weights is recorded beside them
(:data:`~suite.models.weights.HASH_FILE`) and checked on every load: a built-in whose cached
weights no longer match is trained again (:func:`load_cached`), never evaluated under its name.

The system refusing a write while an entry is staged (no space, quota, read-only, permission,
I/O error), in the training process or in this one, is a one-line
:class:`~suite.errors.WriteError` (``nothing was cached``); the staging directory is removed, so
the cache holds the whole entry or none of it. Ctrl-C while a built-in trains is the parent's
to say: the training process ignores it and is stopped by the parent. A staging directory
left by a process killed outright is removed by the next process that stages that entry.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import torch

from suite.errors import ConfigError, WriteError, is_write_fault
from suite.models.base import Classifier
from suite.models.weights import (HASH_FILE, WeightsMismatchError, file_sha256, record_hashes, recorded_entry,
                                  recorded_hashes, verify_weights)
from suite.models.word_bert import TRAIN_SEED
from suite.paths import atomic_write_text, cache_dir, cache_path, lock_directory, sync_files, writing
from suite.progress import SAY_NOW

logger = logging.getLogger(__name__)

TRAIN_THREADS = 1  # see training_env()
#: What a failed write while staging a cache entry keeps (the staging directory is removed).
NOTHING_CACHED = "nothing was cached"


def is_cached(name: str) -> bool:
    """Whether the built-in cache holds the trained model ``name`` (no training needed)."""
    return (cache_dir("models") / name / "DONE").exists()


def cached_model(name: str, recipe: str) -> Path:
    """The cache dir of a built-in model, training it into a temp dir and renaming on first use.

    ``recipe`` is ``module:function``, a function training into the directory it is given
    (:mod:`suite.models.builtin`'s own, or the robust built-ins of :mod:`suite.train.builtin`).
    One process trains an entry while the others that need it wait for it (:func:`_entry_lock`).
    """
    target = cache_path("models", name)
    if (target / "DONE").exists():
        return target
    return _ensure(name, recipe, target)


def _ensure(name: str, recipe: str, target: Path, spec: str | None = None) -> Path:
    """``target``, trained unless a fit entry is there, under the entry's lock: a process that
    waited for another's training finds its entry and keeps it. With ``spec`` (the built-in
    found unfit), an entry still unfit under the lock is discarded first (:func:`entry_problem`)."""
    try:
        with writing(target, NOTHING_CACHED):
            cache_dir(*target.parent.relative_to(cache_path()).parts)  # a cache that is a file: one line
            with _entry_lock(target, name):
                if spec is not None and (target / "DONE").exists():
                    problem = entry_problem(target, name)
                    if problem is not None:
                        logger.warning("%s: cached entry %s %s: retraining", spec, target, problem)
                        discard_cached(target)
                if not (target / "DONE").exists():
                    _stage(name, recipe, target)
    except WriteError as error:  # an atomic write inside (hash record, DONE): the entry is what was not cached
        raise WriteError(target, error.error, NOTHING_CACHED) from error
    return target


@contextmanager
def _entry_lock(target: Path, name: str) -> Iterator[None]:
    """Hold the lock of the cache entry ``target``: an exclusive ``flock`` on ``.<entry>.lock``
    beside it, removed by its holder before it lets go, so nothing is left behind.

    One lock per entry, not one on the cache: a robust built-in's training process loads the
    built-in it starts from (``digits-cnn-bat`` loads ``digits-cnn-at``), which may itself need
    training, while its parent holds its own entry's lock. A waiter that gets the lock of a
    file its holder has just removed takes the lock again, on the file now there.
    """
    import fcntl

    path = target.parent / f".{target.name}.lock"
    while True:
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                logger.info("waiting for another process training %s", name, extra={SAY_NOW: True})
                fcntl.flock(handle, fcntl.LOCK_EX)
            if os.stat(path).st_ino == os.fstat(handle).st_ino:
                break
        except FileNotFoundError:
            pass
        except BaseException:  # Ctrl-C while waiting
            os.close(handle)
            raise
        os.close(handle)  # the lock of a removed file: take the one now there
    try:
        yield
    finally:
        with suppress(OSError):  # a lock file left behind is taken by the next holder: never an error
            os.unlink(path)
        os.close(handle)


def _stage(name: str, recipe: str, target: Path) -> None:
    """Train ``recipe`` into a staging directory beside ``target``, flush every file it wrote
    (through :func:`suite.paths.sync`), record the hashes, and rename it into place."""
    logger.info("training %s (first use; cached in %s)", name, target, extra={SAY_NOW: True})
    _sweep_stale(target.parent, name)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    held = None
    try:
        held = lock_directory(staging, wait=False)  # while held, no other process's sweep removes it
        # The entry is trained in a folder of its own inside: a training run (the robust
        # built-ins are `advsuite train` runs) locks its output folder itself.
        entry = staging / "entry"
        entry.mkdir()
        _train_pinned(recipe, entry)
        sync_files(entry)  # the training process wrote without fsync
        record_hashes(entry, entry=name)  # the entry's own name: a record copied elsewhere says whose it is
        atomic_write_text(entry / "DONE", "ok\n")
        try:
            os.replace(entry, target)
        except OSError:  # another process won the race (target exists and is not empty)
            if not (target / "DONE").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if held is not None:
            os.close(held)


#: A staging directory younger than this is never swept: its stager may not have locked it yet.
STALE_SECONDS = 60.0


def _sweep_stale(parent: Path, name: str) -> None:
    """Remove the staging directories of ``name`` that no process holds: left by a stager that
    was killed outright (SIGKILL, a power cut), whose ``finally`` never ran. A live stager holds
    its directory's lock from its first moment (:func:`_stage`); the age check covers the
    instant between the directory's creation and its lock."""
    import fcntl

    for path in parent.glob(f".{name}-*"):
        if "-discarded-" in path.name or not path.is_dir() or path.is_symlink():
            continue  # a discarded entry is its discarder's to remove (it holds no lock)
        try:
            handle = os.open(path, os.O_RDONLY)
        except OSError:
            continue  # gone already, or not ours to open
        try:
            if time.time() - os.fstat(handle).st_mtime < STALE_SECONDS:
                continue
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # being staged now
        else:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(handle)


def load_cached(spec: str, name: str, recipe: str, load: Callable[[str], Classifier]) -> tuple[Classifier, Path]:
    """The built-in ``spec``, loaded by ``load(directory)`` from its cache dir (:func:`cached_model`),
    and that dir.

    Its weights are checked against their recorded sha256 as they load; cached weights that no
    longer match are thrown away and trained again (one warning naming the file), so a damaged
    cache never reports another model's numbers under the built-in's name. So is an entry
    whose record is missing or names another entry (another built-in's weights, or its whole
    entry, copied in), or whose weights no longer read (:func:`entry_problem`).
    """
    directory = cached_model(name, recipe)
    if entry_problem(directory, name) is not None:
        directory = _retrained(spec, name, recipe, directory)
    try:
        return load(str(directory)), directory
    except WeightsMismatchError as error:
        if error.path.resolve().parent != directory.resolve():
            raise  # another model's weights (a member, a source): not this cache entry
        directory = _retrained(spec, name, recipe, directory)
        return load(str(directory)), directory


def _retrained(spec: str, name: str, recipe: str, directory: Path) -> Path:
    """The entry ``directory``, found unfit to be ``name``, discarded and trained again.

    Under ``accelerate launch`` every process may find the same unfit entry at once (a cache
    filled by an older version). Each then takes the entry's lock and looks again under it:
    the first discards and retrains while the others wait, and they find its new entry fit and
    keep it (before, a late process could discard the entry another had just trained, and was
    loading)."""
    return _ensure(name, recipe, directory, spec=spec)


def entry_problem(directory: Path, name: str) -> str | None:
    """Why the cache entry ``directory`` cannot be the built-in ``name`` it is filed under
    (``None``: it can): no hash record, a record of another entry (or of an older version,
    which recorded no name), weights the record does not cover, or weights that no longer
    match it (flipped bytes, a truncated file)."""
    try:
        hashes = recorded_hashes(directory)
    except ConfigError:
        return f"has a damaged {HASH_FILE}"
    if not hashes:
        return f"has no {HASH_FILE} (cached by an older version, or deleted)"
    entry = recorded_entry(directory)
    if entry != name:
        return (f"was recorded as {entry!r}, not {name!r}" if entry is not None
                else "was recorded without its name (an older version)")
    files = {path.name for path in Path(directory).glob("*.safetensors")}
    if files != set(hashes):
        return f"holds weights its record does not list ({', '.join(sorted(files ^ set(hashes)))})"
    for file, expected in sorted(hashes.items()):
        if file_sha256(Path(directory) / file) != expected:
            return f"has weights {file!r} that do not match their recorded sha256 (damaged?)"
    return None


def discard_cached(directory: Path) -> None:
    """Remove a cache entry (renamed first, so no reader sees it half-deleted)."""
    trash = Path(tempfile.mkdtemp(prefix=f".{directory.name}-discarded-", dir=directory.parent))
    try:
        os.replace(directory, trash / directory.name)
    except FileNotFoundError:
        pass  # another process discarded it first
    shutil.rmtree(trash, ignore_errors=True)


def verify_cache() -> list[tuple[str, str]]:
    """Every trained entry of the built-in cache, checked against its recorded hashes:
    ``(entry, finding)`` with finding ``ok``, ``damaged: ...`` or ``no recorded hash ...``."""
    root = cache_path("models")  # a check: it makes no cache where there is none
    findings = []
    entries = sorted(root.iterdir()) if root.is_dir() else []
    for directory in (path for path in entries if (path / "DONE").is_file()):
        try:
            hashes = recorded_hashes(directory)
        except ConfigError as error:
            # The record's own advice (delete it to load unverified) is for a directory of weights;
            # a built-in's entry without a record is trained again.
            said = str(error).split(": delete it to load")[0]
            findings.append((directory.name, f"damaged: {said} (its next load trains it again)"))
            continue
        if not hashes:
            findings.append((directory.name, f"no recorded hash ({HASH_FILE} missing: cached by an older version, "
                                             "or deleted; its next load trains it again)"))
            continue
        entry = recorded_entry(directory)
        if entry != directory.name:
            recorded = f"recorded as {entry!r}" if entry is not None else "recorded without its name (an older version)"
            findings.append((directory.name, f"damaged: {recorded} (its next load trains it again)"))
            continue
        damaged = []
        for file in sorted(hashes):
            try:
                verify_weights(directory / file)
            except WeightsMismatchError as error:
                damaged.append(f"{str(error.path)!r} expected sha256 {error.expected}, actual {error.actual}")
            except FileNotFoundError:
                damaged.append(f"{str(directory / file)!r} is missing")
        findings.append((directory.name, "damaged: " + "; ".join(damaged) + " (its next load trains it again)"
                         if damaged else "ok"))
    return findings


def training_env() -> dict[str, str]:
    """Environment that fixes the CPU kernels a training process uses.

    One thread: a float sum's order, hence the weights, depends on how many threads split it
    (under ``OMP_NUM_THREADS=1`` and ``=2`` the same recipe gave two models). On x86-64, the
    AVX2 code paths of ATen, MKL (conditional numerical reproducibility) and oneDNN, whatever
    the CPU offers beyond them: with torch's default, an AVX-512 host and an AVX2 laptop train
    different weights. These are read when the libraries load, hence a fresh process.
    """
    env = {"OMP_NUM_THREADS": str(TRAIN_THREADS), "MKL_NUM_THREADS": str(TRAIN_THREADS), "CUDA_VISIBLE_DEVICES": ""}
    if platform.machine().lower() in ("x86_64", "amd64"):
        env |= {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    return env


def _train_pinned(recipe: str, directory: Path) -> None:
    """Run a training recipe in a fresh process under :func:`training_env` and :func:`pinned_training`.

    Raises:
        OSError: The system refused one of the training process's writes (it reports the errno
            and file on a pipe, not as a traceback).
    """
    root = str(Path(__file__).resolve().parents[2])  # the directory holding the suite package
    env = {**os.environ, **training_env()}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    report, report_to = os.pipe()
    # Ctrl-C reaches the whole process group: this process says it, once, and stops the
    # training process (subprocess.run kills it), which ignores it from its first line (it
    # printed an import's traceback when the key came while torch loaded).
    code = (f"import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            f"from suite.models.builtin_cache import train_recipe; "
            f"train_recipe({recipe!r}, {str(directory)!r}, report_to={report_to})")
    with open(report, encoding="utf-8") as pipe:
        try:
            result = subprocess.run([sys.executable, "-c", code], env=env, check=False, pass_fds=(report_to,))
        finally:
            os.close(report_to)
        fault = json.loads(pipe.read() or "null")
    if fault is not None:
        raise OSError(fault["errno"], os.strerror(fault["errno"]), fault["filename"])
    if result.returncode != 0:
        raise RuntimeError(f"training built-in recipe {recipe!r} failed (exit {result.returncode}); "
                           "see its output above")


def train_recipe(recipe: str, directory: str, report_to: int | None = None) -> None:
    """Entry point of the training process: the recipe ``module:function`` into ``directory``.

    With ``report_to`` (a pipe's descriptor), the system refusing a write is reported there as
    JSON (errno, file) and the process exits with status 1, so the parent says it in one line.
    """
    import importlib

    module, _, function = recipe.partition(":")
    run = getattr(importlib.import_module(module), function)
    try:
        with pinned_training():
            run(Path(directory))
    except Exception as error:
        fault = _write_fault(error)
        if fault is None or report_to is None:
            raise
        with os.fdopen(report_to, "w", encoding="utf-8") as pipe:
            json.dump({"errno": fault.errno, "filename": fault.filename or directory}, pipe)
        sys.exit(1)


def _write_fault(error: BaseException) -> OSError | None:
    """The system's refusal of a write in ``error``, if it is one: an ``OSError`` (or one a
    safetensors ``SafetensorError`` wraps, ``... (os error 28)``), else ``None``."""
    if isinstance(error, OSError):
        return error if is_write_fault(error) else None
    found = re.search(r"\(os error (\d+)\)", str(error)) if type(error).__name__ == "SafetensorError" else None
    fault = OSError(int(found.group(1)), os.strerror(int(found.group(1)))) if found else None
    return fault if fault is not None and is_write_fault(fault) else None


@contextmanager
def pinned_training() -> Iterator[None]:
    """Fix what decides trained weights inside the process, and restore it afterwards.

    Training runs on the CPU (the recipes never move a tensor), in :data:`TRAIN_THREADS`
    threads, with deterministic algorithms and a fixed seed.
    """
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.set_num_threads(TRAIN_THREADS)
    torch.use_deterministic_algorithms(True)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(TRAIN_SEED)
            yield
    finally:
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_num_threads(threads)


# --------------------------------------------------------------------------- sentiment-tiny
