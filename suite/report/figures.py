"""Writing a matplotlib figure the way every report file is written: atomically."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def save_figure(figure: Any, path: Path, dpi: float | None = None) -> Path:
    """Save ``figure`` to ``path`` through a temporary file in the same directory (``.<name>.<pid>.tmp``,
    which output-directory checks treat as the suite's), close it, and return ``path``."""
    import matplotlib.pyplot as plt

    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    figure.savefig(temporary, format=path.suffix.lstrip(".") or "png", **({"dpi": dpi} if dpi is not None else {}))
    plt.close(figure)
    os.replace(temporary, path)
    return path
