"""Reading a run's ``results.json``: validated, version 1 upgraded, every problem one line.

Shared by everything that reads results (the leaderboard, ``compare``, ``export``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import suite.strict_json as strict_json
from suite.errors import ConfigError
from suite.report.leaderboard_schema import is_int
from suite.text import printable

#: Schema versions of results.json this advsuite reads (version 1 is upgraded on read).
RESULTS_VERSIONS = (1, 2)


def read_results(path: Path) -> Any:
    """A results.json (schema version 1 or 2), validated (one-line error naming the file and the
    first problem); version 1 is upgraded to version 2."""
    from suite.report.results import Results, upgrade

    data = strict_json.read_json(path, "results")
    if not isinstance(data, dict):
        raise ConfigError(f"{str(path)!r} holds a JSON {json_kind(data)}, not an advsuite results object")
    try:  # a lone surrogate ("\ud800" in the JSON) is no character: nothing could print or write it
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{str(path)!r} holds a lone UTF-16 surrogate escape (such as \\ud800), which is no "
                          "character: it was not written by advsuite") from None
    version = data.get("schema_version")
    if not is_int(version) or version not in RESULTS_VERSIONS:
        raise ConfigError(f"{str(path)!r} has schema_version {version!r}; this advsuite reads results of schema "
                          f"versions {', '.join(map(str, RESULTS_VERSIONS))} (a newer file needs a newer advsuite)")
    try:
        upgraded = upgrade(data)
    except (AttributeError, TypeError) as error:
        # upgrade() reads the version 1 layout; a file claiming version 1 may hold anything.
        raise ConfigError(f"{str(path)!r} is not a valid version 1 results file: its layout does not match "
                          f"({type(error).__name__}: {error})") from error
    try:
        return Results.model_validate(upgraded)
    except ValidationError as error:
        raise ConfigError(f"{str(path)!r} is not a valid advsuite results file: {describe_validation(error)}") from error


def describe_validation(error: ValidationError, shown: int = 3) -> str:
    """One line: 'field: message; ...' for the first ``shown`` problems, printable (field names
    come from the file)."""
    parts = []
    for item in error.errors()[:shown]:
        where = ".".join(str(part) for part in item["loc"])
        message = "unknown field" if item["type"] == "extra_forbidden" else item["msg"]
        parts.append(printable(f"{where}: {message}" if where else message))
    more = error.error_count() - shown
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def json_kind(value: Any) -> str:
    return {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")
