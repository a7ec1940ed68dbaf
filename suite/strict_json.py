"""JSON that holds only finite numbers, read and written with errors that name the field.

Python's ``json`` reads ``NaN``, ``Infinity`` and ``-Infinity`` (and an overflowing ``1e999``)
as floats and writes them back bare, although none of them is JSON: a browser's
``response.json()`` then refuses the whole file, so one such value takes a page down. Results
and leaderboard files go through :func:`read_json` and :func:`dumps` instead, which refuse any
non-finite number and say where it is (``model.temperature``, ``calibration.ece``).

Bottom layer: imports only the standard library and :mod:`suite.errors`.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from suite.errors import ConfigError


def non_finite(value: Any) -> tuple[str, float] | None:
    """The first NaN or ±infinity in ``value`` (nested dicts and lists), as ``(field, number)``.

    ``field`` is dotted like pydantic's error locations (``attacks.pgd_linf.params.eps``,
    ``entries.0.clean_accuracy``). Iterative, so any depth ``json`` parsed is walked.
    """
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where or "value", item
        if isinstance(item, dict):
            children = item.items()
        elif isinstance(item, (list, tuple)):
            children = enumerate(item)
        else:
            continue
        # Reversed onto the stack, so the first offending field in document order is reported.
        stack.extend((f"{where}.{key}" if where else str(key), child) for key, child in reversed(list(children)))
    return None


def spelled(number: float) -> str:
    """How a non-finite number is written in (non-standard) JSON: ``NaN``, ``Infinity``, ``-Infinity``."""
    if math.isnan(number):
        return "NaN"
    return "Infinity" if number > 0 else "-Infinity"


def loads(text: str) -> Any:
    """``json.loads`` that keeps ``NaN``/``Infinity`` as floats for :func:`non_finite` to find.

    ``parse_constant`` is spelled out on purpose: the literals are read (not rejected while
    parsing) so that the error can name the field that holds them, which a parse position
    cannot; an overflowing literal such as ``1e999`` becomes ``inf`` and is found the same way.
    """
    return json.loads(text, parse_constant=float, object_pairs_hook=_unique_keys)


class DuplicateKeyError(ValueError):
    """A JSON object that gives one key twice (Python's ``json`` keeps the last silently:
    ``"entries": [...], "entries": []`` read as an empty leaderboard)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise DuplicateKeyError(f"key {twice!r} is given twice in one object")
    return found


def read_json(path: Path, what: str) -> Any:
    """The JSON document at ``path``, finite numbers only, or a one-line :class:`ConfigError`.

    Args:
        path: File to read.
        what: What the file should be, for messages (``results``, ``leaderboard``).
    """
    try:
        # A regular file only, checked before it is opened: a FIFO would block the open until a
        # writer came, and /dev/zero would be read until memory ran out.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ConfigError(f"{str(path)!r} is not a regular file; give the {what} JSON file")
        raw = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read {what} {str(path)!r}: {error.strerror or error}") from error
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{str(path)!r} is not a JSON text file (byte {error.start} is not UTF-8); "
                          f"give the {what} JSON file") from error
    try:
        data = loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{str(path)!r} is not JSON ({error.msg}, line {error.lineno})") from error
    except DuplicateKeyError as error:
        raise ConfigError(f"{str(path)!r} is not a {what} file advsuite can read: {error}") from error
    except ValueError as error:  # an integer of more digits than Python converts (4,300)
        raise ConfigError(f"{str(path)!r} holds a number too long to read ({error}); give the {what} JSON "
                          "file") from error
    except RecursionError as error:
        raise ConfigError(f"{str(path)!r} is nested too deeply to be a {what} file") from error
    found = non_finite(data)
    if found is not None:
        field, number = found
        raise ConfigError(f"{str(path)!r}: {field} is {spelled(number)}; {what} files hold finite numbers only "
                          "(NaN and infinities are not JSON)")
    return data


def check_finite(value: Any, what: str) -> None:
    """Raise a :class:`ValueError` naming the field if ``value`` holds NaN or ±infinity.

    Writing one is a bug in the suite (inputs are checked on the way in), hence not a
    :class:`ConfigError`. Check a pydantic model's ``model_dump()``, not its
    ``model_dump(mode="json")``: the JSON mode silently turns NaN in ``Any`` fields into null.
    """
    found = non_finite(value)
    if found is not None:
        field, number = found
        raise ValueError(f"refusing to write {what} with {field} = {spelled(number)}: "
                         "NaN and infinities are not JSON")


def dumps(value: Any, what: str, **kwargs: Any) -> str:
    """``json.dumps`` that refuses NaN and ±infinity (:func:`check_finite`); ``allow_nan=False``
    stays on as the last line of defence."""
    check_finite(value, what)
    return json.dumps(value, allow_nan=False, **kwargs)
