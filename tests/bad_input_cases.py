"""The shape of one bad-input case (see ``test_bad_input.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Case:
    """One bad input.

    Attributes:
        id: Short unique name (the pytest id).
        argv: ``advsuite`` arguments; ``{tmp}`` is replaced by the case's working directory
            (also the current directory while it runs).
        message: A substring the one error line must hold.
        setup: Builds the case's input files under the working directory.
        patch: Changes the world the case runs in (a corpus made unavailable), through the
            test's ``monkeypatch``, undone after it.
    """

    id: str
    argv: tuple[str, ...]
    message: str
    setup: Callable[[Path], None] | None = None
    patch: Callable[[Any], None] | None = None
