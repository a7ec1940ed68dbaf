"""Writing a matplotlib figure the way every report file is written: atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from suite.paths import KEPT_RECORDS, RESUME, atomic_write
from suite.text import printable


def save_figure(figure: Any, path: Path, dpi: float | None = None, format: str | None = None) -> Path:
    """Save ``figure`` to ``path`` through a temporary file in the same directory (``.<name>.<pid>.tmp``,
    which output-directory checks treat as the suite's, removed if the write fails), close it, and
    return ``path``. Figures live in run directories: a failed write keeps the finished records."""
    import matplotlib.pyplot as plt

    escape_texts(figure)
    path = Path(path)
    options = {"format": format or path.suffix.lstrip(".") or "png", **({"dpi": dpi} if dpi is not None else {})}
    try:
        return atomic_write(path, lambda handle: figure.savefig(handle, **options), KEPT_RECORDS, RESUME)
    finally:
        plt.close(figure)


def escape_texts(figure: Any) -> None:
    """Names in titles, labels and legends come from users: control and bidi characters are drawn
    escaped, as a terminal shows them (matplotlib would print a raw ESC or CR in its "Glyph
    missing" warnings, and draw boxes). Line breaks stay. Before anything renders the figure:
    :func:`tight_layout` and :func:`save_figure` call it."""
    from matplotlib.text import Text

    for text in figure.findobj(Text):
        shown = text.get_text()
        if not shown.replace("\n", "").isprintable():
            text.set_text("\n".join(printable(line) for line in shown.split("\n")))


def tight_layout(figure: Any, **options: Any) -> None:
    """``figure.tight_layout(**options)`` with its texts escaped first (it renders them: a raw ESC
    in a model's name reached the terminal in matplotlib's warning, before the save escaped it)."""
    escape_texts(figure)
    figure.tight_layout(**options)
