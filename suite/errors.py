"""Error types.

A :class:`SuiteError` is a problem with what the user asked for (unknown name, bad file, bad
value). The CLI prints it as one line and exits with status 2. A :class:`WriteError` is the
system refusing to store a file (no space, quota, read-only file system, permission, I/O error):
one line and status 1, the input was fine. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import errno


class SuiteError(Exception):
    """A user-facing error: one line, exit code 2."""

    exit_code = 2

    def __str__(self) -> str:
        # One line, whatever the message was built from (and unquoted, though KeyError quotes).
        # Control characters from user input (a file name with ESC in it) are shown escaped.
        from suite.text import printable

        message = str(self.args[0]) if self.args else ""
        return printable(" ".join(message.split()))


class UnknownNameError(SuiteError, KeyError):
    """A registry lookup for a name that is not registered."""


class ConfigError(SuiteError, ValueError):
    """A recipe, flag or option value that is not valid."""


class DataError(SuiteError, ValueError):
    """A dataset that cannot be read or does not fit the model."""


class AttackOutputError(SuiteError):
    """An attack returned an input outside its threat model (not finite, outside [0, 1], or
    beyond its radius): it would be counted as broken though no valid input was found. Nothing
    of that batch is recorded."""


class ResourceMissingError(SuiteError):
    """An offline resource (corpus, weights) that is not in the local cache."""


class ModelUnavailableError(ResourceMissingError):
    """A model that cannot be built here for want of an offline resource (a built-in that must
    be trained on first use with WordNet): a recipe skips its tasks, a single run is refused."""


#: errno values that mean the system could not store a write: what to do about each.
WRITE_REMEDIES = {errno.ENOSPC: "free space", errno.EDQUOT: "free space or raise the quota",
                  errno.EROFS: "make the file system writable", errno.EACCES: "make it writable",
                  errno.EPERM: "make it writable", errno.EIO: "check the disk",
                  errno.EFBIG: "raise the file-size limit (ulimit -f)"}


#: Whether the running command clears its output first (``--overwrite``; set by the CLI): its
#: rerun would clear what a stopped run kept, so the way to resume is to rerun it without.
OVERWRITING = [False]


def rerun(text: str) -> str:
    """``text``, its "rerun the same command" made "... without --overwrite" while the running
    command has ``--overwrite`` (:data:`OVERWRITING`)."""
    if not OVERWRITING[0]:
        return text
    return text.replace("rerun the same command", "rerun the same command without --overwrite")


class WriteError(Exception):
    """The system refused a write (``error.errno`` in :data:`WRITE_REMEDIES`): one line, exit code 1.

    Says what could not be written (``path``), why, what is kept (``kept``) and what to do;
    ``then`` is the step after the remedy (``rerun the same command to resume``).
    """

    exit_code = 1

    def __init__(self, path: object, error: OSError, kept: str, then: str = "rerun the same command") -> None:
        super().__init__(str(path), error, kept, then)
        self.path, self.error, self.kept, self.then = str(path), error, kept, then

    def __str__(self) -> str:
        from suite.text import printable

        reason = self.error.strerror or str(self.error)
        remedy = WRITE_REMEDIES.get(self.error.errno, "fix that")
        return printable(" ".join(f"could not write {self.path}: {reason} (errno {self.error.errno}); "
                                  f"{self.kept}: {remedy} and {rerun(self.then)}".split()))


def is_write_fault(error: BaseException) -> bool:
    """Whether ``error`` is the system refusing to store data (not a bug, not bad input)."""
    return isinstance(error, OSError) and error.errno in WRITE_REMEDIES


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (its type's name where the message is empty): the
    part a one-line error quotes from a library's own (which may run to a traceback's length)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def format_validation_error(error, unknown: str = "unknown parameter") -> str:
    """One line from a pydantic ValidationError: 'field: message; field: message'.

    ``unknown`` names what an extra (forbidden) key is: a parameter of an attack, a field of a file.
    """
    parts = []
    items = error.errors()
    for item in items:
        # A list whose items all failed is also "too short" after validation: said once, by the items.
        if item["type"] == "too_short" and any(len(other["loc"]) > len(item["loc"]) and
                                               other["loc"][:len(item["loc"])] == item["loc"] for other in items):
            continue
        where = ".".join(str(part) for part in item["loc"])
        message = unknown if item["type"] == "extra_forbidden" else item["msg"]
        if item["type"] == "value_error":
            message = message.removeprefix("Value error, ")  # our own validators' words, as written
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)
