"""Where the suite keeps its cache (built-in models, offline resources).

``ADVSUITE_CACHE`` overrides the location; the default is the user cache dir
(``~/.cache/advsuite`` on Linux).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "ADVSUITE_CACHE"


def cache_dir(*parts: str) -> Path:
    """The suite's cache directory (or a sub-directory of it), created on demand."""
    root = os.environ.get(CACHE_ENV)
    if root:
        base = Path(root).expanduser()
    else:
        from platformdirs import user_cache_dir

        base = Path(user_cache_dir("advsuite"))
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` so that readers see either the old or the new file, never half."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path
