"""Error types.

A :class:`SuiteError` is a problem with what the user asked for (unknown name, bad file, bad
value). The CLI prints it as one line and exits with status 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations


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


class ResourceMissingError(SuiteError):
    """An offline resource (corpus, weights) that is not in the local cache."""


class ModelUnavailableError(ResourceMissingError):
    """A model that cannot be built here for want of an offline resource (a built-in that must
    be trained on first use with WordNet): a recipe skips its tasks, a single run is refused."""


def format_validation_error(error, unknown: str = "unknown parameter") -> str:
    """One line from a pydantic ValidationError: 'field: message; field: message'.

    ``unknown`` names what an extra (forbidden) key is: a parameter of an attack, a field of a file.
    """
    parts = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"])
        message = unknown if item["type"] == "extra_forbidden" else item["msg"]
        if item["type"] == "value_error":
            message = message.removeprefix("Value error, ")  # our own validators' words, as written
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)
