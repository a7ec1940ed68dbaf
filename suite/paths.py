"""Where the suite keeps its cache (built-in models, offline resources), and how it writes files.

``ADVSUITE_CACHE`` overrides the location; the default is the user cache dir
(``~/.cache/advsuite`` on Linux).

Every file the suite writes goes through :func:`atomic_write` (a temporary ``.<name>.<pid>.tmp``
beside the target, renamed over it; removed on any failure) or :func:`append_text` (cut back
to its old length on any failure), and both commit through :func:`sync`. The system refusing a
write (no space, quota, read-only, permission, I/O error) becomes a one-line
:class:`~suite.errors.WriteError` naming the file and what is kept.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

#: What an atomic write keeps when it fails: the file it would have replaced.
UNCHANGED = "the previous file (if any) is unchanged"
#: What a failed write in a run directory keeps: a rerun resumes from the records.
KEPT_RECORDS = "finished records are kept"
RESUME = "rerun the same command to resume"

CACHE_ENV = "ADVSUITE_CACHE"


def cache_dir(*parts: str) -> Path:
    """The suite's cache directory (or a sub-directory of it), created on demand."""
    path = cache_path(*parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as error:  # a file where a directory should be
        from suite.errors import ConfigError

        root = cache_path()
        raise ConfigError(f"the cache {str(root)!r} ({CACHE_ENV} or the default) cannot hold {str(path)!r}: "
                          f"{error.strerror or error}; point {CACHE_ENV} at a directory") from error
    except OSError as error:
        from suite.errors import WriteError

        if error.errno == errno.ENOENT:  # e.g. under /proc: nothing can be made there
            raise WriteError(path, error, f"nothing was cached; point {CACHE_ENV} at a writable directory") from error
        raise
    return path


def cache_path(*parts: str) -> Path:
    """Where :func:`cache_dir` is (or a path inside it), without creating anything: a writer
    names it in its :class:`~suite.errors.WriteError` even when the directory cannot be made."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root).expanduser().joinpath(*parts)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("advsuite")).joinpath(*parts)


def file_sha256(path: Path) -> str:
    """The sha256 (hex) of a file's bytes (weights' records, local data's fingerprints)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def temporary_path(path: Path) -> Path:
    """Where a write to ``path`` is staged (``.<name>.<pid>.tmp``: output checks know the pattern)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the staged writes of ``path`` (:func:`temporary_path`) whose process is gone: a
    write killed mid-way left a partial ``.leaderboard.json.<pid>.tmp`` in a published folder,
    served as it was, and no later write removed it. Call it holding the file's lock."""
    removed = []
    for staged in Path(path).parent.glob(f".{Path(path).name}.*.tmp"):
        pid = staged.name[len(Path(path).name) + 2 : -len(".tmp")]
        if not (is_temporary(staged.name) and pid.isdigit()) or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive: its own write
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError, OSError):
            continue
        with contextlib.suppress(OSError):
            staged.unlink()
            removed.append(staged)
    return removed


def is_temporary(name: str) -> bool:
    """Whether a file name is a staged write's (:func:`temporary_path`): one a kill left behind
    belongs to the suite, and the next run of the directory removes it."""
    head, _, rest = name.rpartition(".tmp")
    stem, _, pid = head.rpartition(".")
    return not rest and name.startswith(".") and len(stem) > 1 and pid.isdigit()


def remove_temporaries(directory: Path) -> None:
    """Remove the staged writes (:func:`is_temporary`) a killed run left in ``directory`` and its
    subdirectories; call it while holding the directory's lock, so no live write is among them."""
    for path in Path(directory).rglob(".*.tmp"):
        if is_temporary(path.name) and path.is_file():
            with contextlib.suppress(OSError):
                path.unlink()


def sync(handle: BinaryIO) -> None:
    """Flush ``handle`` to the disk: every write of the suite commits here."""
    handle.flush()
    os.fsync(handle.fileno())


def sync_files(directory: Path) -> None:
    """Flush every file under ``directory`` to the disk through :func:`sync`: files another
    process wrote without fsync, before the directory is renamed into place (a full disk may
    only say so here)."""
    for path in sorted(path for path in Path(directory).rglob("*") if path.is_file()):
        with open(path, "rb") as handle:
            sync(handle)


@contextlib.contextmanager
def writing(path: Path, kept: str = UNCHANGED, then: str = "rerun the same command") -> Iterator[None]:
    """Turn the system refusing a write inside the block into a one-line
    :class:`~suite.errors.WriteError` about ``path`` (other errors pass unchanged)."""
    from suite.errors import WriteError, is_write_fault

    try:
        yield
    except OSError as error:
        if is_write_fault(error):
            raise WriteError(path, error, kept, then) from error
        raise


def atomic_write(path: Path, write: Callable[[BinaryIO], object], kept: str = UNCHANGED,
                 then: str = "rerun the same command") -> Path:
    """Write ``path`` with ``write(handle)`` (a binary file) so that readers see either the old or
    the new file, never half; on any failure the temporary file is removed. A symbolic link at
    ``path`` is replaced, not followed (a link planted among a run's files points nowhere it
    can write); a writer whose user named the file resolves it first (:func:`through_link`)."""
    path = Path(path)
    _refuse_special(path)
    tmp = temporary_path(path)
    with writing(path, kept, then):
        try:
            with open(tmp, "wb") as handle:
                write(handle)
                sync(handle)
            _keep_mode(path, tmp)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise
    return path


def _keep_mode(path: Path, tmp: Path) -> None:
    """Give the staged file the permissions (and, where allowed, the owner) of the regular file it
    replaces: a shared leaderboard of mode 664 came back 644, owned by whoever wrote it last."""
    import stat

    try:
        old = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISREG(old.st_mode):
        return
    os.chmod(tmp, stat.S_IMODE(old.st_mode))
    if hasattr(os, "chown"):
        with contextlib.suppress(OSError):  # only root may give a file away
            os.chown(tmp, old.st_uid, old.st_gid)


def _refuse_special(path: Path) -> None:
    """Refuse to replace what is not a file: the rename put a regular file in the place of a
    device (``--output /dev/full``, or ``/dev/null`` as root) or a named pipe. A link is not
    followed here (see :func:`atomic_write`), so it is replaced, never what it names."""
    import stat

    from suite.errors import ConfigError

    try:
        mode = os.lstat(path).st_mode
    except OSError:  # absent (or unreadable: the write says why)
        return
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        kind = "directory" if stat.S_ISDIR(mode) else "device, pipe or socket"
        raise ConfigError(f"{str(path)!r} is a {kind}, not a regular file: it was not replaced; name a file to write")


def atomic_write_text(path: Path, text: str, kept: str = UNCHANGED, then: str = "rerun the same command") -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_write`)."""
    data = text.encode("utf-8")
    return atomic_write(path, lambda handle: handle.write(data), kept, then)


def append_text(path: Path, text: str, kept: str = KEPT_RECORDS, then: str = RESUME) -> None:
    """Append ``text`` (whole lines) to ``path`` and flush it to disk; on any failure the file is
    cut back to its old length, so no partial line is left for a reader."""
    data = memoryview(text.encode("utf-8"))
    with writing(path, kept, then), open(path, "ab", buffering=0) as handle:  # unbuffered: nothing left to flush
        start = os.fstat(handle.fileno()).st_size
        try:
            while data:
                data = data[handle.write(data):]
            sync(handle)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(handle.fileno(), start)
            raise


def lock_directory(directory: Path, wait: bool, what: str = "advsuite run") -> int:
    """Hold an exclusive ``flock`` on ``directory`` itself (no lock file is left behind) and
    return its descriptor (``os.close`` releases it). Another holder makes this wait
    (``wait``) or raise a one-line :class:`~suite.errors.ConfigError`."""
    import fcntl

    from suite.errors import ConfigError

    handle = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(handle)
        raise ConfigError(f"another {what} is writing to {str(directory)!r}; wait for it to finish (--wait does), "
                          "or choose another --output") from None
    return handle


def through_link(path: Path) -> Path:
    """``path``, or the file it links to: for a file the user named (a leaderboard, a model
    card), which a write should update where it is rather than replace the link with a copy."""
    if not os.path.islink(path):
        return Path(path)
    if _loops(Path(path)):  # realpath gave the link back, and the write replaced it with a file
        from suite.errors import ConfigError

        raise ConfigError(f"{str(path)!r} is a symbolic link that loops: it names no file; remove it or name a file")
    return Path(os.path.realpath(path))


def _loops(path: Path) -> bool:
    try:
        os.path.realpath(path, strict=True)
    except OSError as error:
        return error.errno == errno.ELOOP
    return False


def writable_parent(directory: Path) -> Path:
    """The nearest existing directory at or above ``directory``, checked to be a writable
    directory (one-line :class:`~suite.errors.ConfigError` otherwise)."""
    from suite.errors import ConfigError

    for path in (directory, *directory.parents):
        if path.is_symlink() and not path.exists():  # mkdir would fail on it with a traceback
            why = "loops" if _loops(path) else f"points to {os.readlink(path)!r}, which does not exist"
            raise ConfigError(f"output {str(path)!r} is a symbolic link that {why}: choose another --output")
    existing = next((parent for parent in (directory, *directory.parents) if parent.exists()), Path("."))
    if not existing.is_dir():
        raise ConfigError(f"output {str(existing)!r} is a file, not a directory: choose another --output")
    if not os.access(existing, os.W_OK | os.X_OK):
        why = "permission denied"
        with contextlib.suppress(OSError):
            if os.statvfs(existing).f_flag & os.ST_RDONLY:
                why = "read-only file system"
        raise ConfigError(f"cannot write to {str(existing)!r} ({why}): choose another --output")
    probe = existing / f".advsuite-probe.{os.getpid()}.tmp"  # a staged write's name: a kill leaves nothing foreign
    try:  # what the permission bits allow, the file system may not (root in /sys, a FUSE mount)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600))
        probe.unlink()
    except OSError as error:
        why = "no new file can be made there" if error.errno == errno.ENOENT else (error.strerror or str(error)).lower()
        raise ConfigError(f"cannot write to {str(existing)!r} ({why}): choose another --output") from error
    return existing


def listing(directory: Path, shown: int = 3) -> str:
    """The first entries of ``directory``, quoted (``'a', 'b', 'c', ...``); ``""`` when empty.
    Staged writes a kill left behind (:func:`is_temporary`) are the suite's, and not listed."""
    names = sorted(path.name for path in directory.iterdir() if not is_temporary(path.name))
    return ", ".join(repr(name) for name in names[:shown]) + (", ..." if len(names) > shown else "")


def read_run_description(path: Path) -> dict:
    """A run's identity file (JSON mapping), or a one-line error that says how to start over."""
    import json

    from suite.errors import ConfigError

    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:  # unreadable, not UTF-8 or JSON, a number too long
        raise ConfigError(f"cannot read {str(path)!r} ({error}); use --overwrite to start over") from error
    if not isinstance(found, dict):
        raise ConfigError(f"{str(path)!r} is not a run description; use --overwrite to start over")
    return found


def check_run_directory(directory: Path, run_file: Path, identity: dict, *, foreign: str, replaces: str,
                        another: str) -> None:
    """Refuse an output ``directory`` that holds files but no ``run_file`` (``foreign`` says whose
    files, ``replaces`` what --overwrite would replace), or another run's identity (``another``
    names it). Evaluation and training runs both check their output this way."""
    from suite.errors import ConfigError

    if not run_file.exists():
        listed = listing(directory)
        if listed:
            raise ConfigError(f"{str(directory)!r} holds {foreign} ({listed}); choose an empty or new --output, "
                              f"or pass --overwrite (it replaces only {replaces})")
        return
    previous = read_run_description(run_file)
    if previous != identity:
        raise ConfigError(f"{str(directory)!r} holds {another}: {describe_change(previous, identity)}; "
                          "use --overwrite to replace it or choose another --output")


def describe_change(previous: dict, current: dict, shown: int = 3) -> str:
    """What differs between two run identities, in words (the model's weights, the examples...):
    evaluation runs and training runs both say it this way. A nested setting is named by its
    path (``attacks[0].params.eps: 0.03 then, 0.05 now``); an attack's version change that
    only follows from an attack added or removed is not said twice."""
    words = {"weights": "the model's weights changed", "examples": "the evaluated examples changed",
             "fit_examples": "the adversary's fitting examples changed", "scoring": "the suite's scoring changed",
             "attack_versions": "an attack's implementation changed",
             "calibration": "the suite's fits of the aware adversaries (cal, opt, platt) changed"}
    changed = sorted(key for key in set(previous) | set(current) if previous.get(key) != current.get(key))
    versions = [previous.get("attack_versions"), current.get("attack_versions")]
    if "attacks" in changed and "attack_versions" in changed and all(isinstance(v, dict) for v in versions) \
            and set(versions[0]) != set(versions[1]):
        changed.remove("attack_versions")  # an attack added or removed: said once, under attacks
    parts = []
    for key in changed:
        leaves = _differing_leaves(previous.get(key), current.get(key), key)
        said = "; ".join(f"{'' if path == key and key in words else path + ': '}{_short(old)} then, {_short(new)} now"
                         for path, old, new in leaves[:shown])
        if len(leaves) > shown:
            said += f" (and {len(leaves) - shown} more)"
        parts.append(f"{words[key]} ({said})" if key in words else said)
    return "; ".join(parts) or "it differs"


def _differing_leaves(old: object, new: object, path: str) -> list[tuple[str, object, object]]:
    """The paths at which two JSON values differ, with both values there (absent: ``None``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [leaf for key in sorted(set(old) | set(new), key=str) if old.get(key) != new.get(key)
                for leaf in _differing_leaves(old.get(key), new.get(key), f"{path}.{key}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [leaf for index, (a, b) in enumerate(zip(old, new)) if a != b
                for leaf in _differing_leaves(a, b, f"{path}[{index}]")]
    if isinstance(old, list) and isinstance(new, list) and all(isinstance(item, dict) for item in old + new):
        names = [[item.get("name", "?") for item in items] for items in (old, new)]
        return [(path, ", ".join(map(str, names[0])) or "none", ", ".join(map(str, names[1])) or "none")]
    return [(path, old, new)]


def _short(value: object, width: int = 60) -> str:
    """A value as a message shows it: whole when short, else cut with an ellipsis (printable)."""
    from suite.text import printable

    text = printable(str(value))
    return text if len(text) <= width else text[: width - 1] + "…"
