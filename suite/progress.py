"""Progress bars for long loops: one place that decides whether a bar is drawn.

A bar goes to stderr and disappears when its loop ends (``leave=False``), so the printed
tables stay clean. It is hidden:

- when stderr is not a terminal (tqdm's ``disable=None``; logs get one line per pass instead);
- when ``TQDM_DISABLE`` is set to anything but ``0``/``false``/``no``. tqdm reads that
  variable only as a default, once, when it is imported, and an explicit ``disable=None``
  overrides it; reading it here makes it work for every bar, whenever it is set;
- in every process but the main one of a multi-process launch (the bars would interleave).

While a bar is drawn, log lines to the terminal are written above it (``tqdm.write``) instead
of through it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

#: A log record's attribute (``logger.info(..., extra={SAY_NOW: True})``) that lets it through
#: at once while tasks are prepared, where other lines wait until every task is
#: (:func:`suite.evaluation.tasks.run_tasks`): it tells why a wait is long.
SAY_NOW = "advsuite_say_now"


def bars_disabled() -> bool | None:
    """``True`` when bars are off, ``None`` to let tqdm decide (drawn on a terminal only)."""
    if os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false", "no"):
        return True
    from suite.launch import launch

    if launch().rank != 0:
        return True
    return None


@contextlib.contextmanager
def progress_bar(total: int | None, desc: str, unit: str = "it", **kwargs: Any) -> Iterator[Any]:
    """A tqdm bar with an ETA on stderr, or a silent one (see the module docstring).

    Args:
        total: Steps the loop will take (``None`` if unknown: no ETA).
        desc: What the loop is doing (an attack, a component, a search).
        unit: What one step is (``ex``, ``call``, ``run``).
        **kwargs: More tqdm options (``postfix``...).

    Yields:
        The bar: call ``update(n)`` as the loop advances.
    """
    from tqdm.auto import tqdm  # looked up at call time, so tests can count updates

    with tqdm(total=total, desc=desc, unit=unit, disable=bars_disabled(), leave=False, dynamic_ncols=True,
              **kwargs) as bar:
        if bar.disable:
            yield bar
        else:
            with _logs_above(type(bar)):
                yield bar


class _AboveBars(logging.StreamHandler):
    """A terminal log handler's stand-in that writes each line above the bars (``tqdm.write``)."""

    def __init__(self, original: logging.StreamHandler, tqdm_class: type) -> None:
        super().__init__(original.stream)
        self.setLevel(original.level)
        self.setFormatter(original.formatter)
        for found in original.filters:
            self.addFilter(found)
        self.tqdm_class = tqdm_class

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.tqdm_class.write(self.format(record), file=self.stream)
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def _logs_above(tqdm_class: type) -> Iterator[None]:
    root = logging.getLogger()
    handlers = root.handlers[:]
    root.handlers = [
        _AboveBars(handler, tqdm_class)
        if type(handler) is logging.StreamHandler and handler.stream in (sys.stderr, sys.stdout) else handler
        for handler in handlers
    ]
    try:
        yield
    finally:
        root.handlers = handlers
