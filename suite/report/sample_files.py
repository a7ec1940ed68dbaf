"""Where ``--log-samples`` puts its files: ``samples.md`` beside ``results.json``, and one PNG
per example and attack under ``samples/<attack>/<id>.png`` (``samples/clean/<id>.png`` for the
clean image). Shared by :mod:`suite.report.samples` (the file) and
:mod:`suite.report.sample_grid` (the grids drawn from those PNGs).
"""

from __future__ import annotations

import re
from pathlib import Path

SAMPLES_FILE = "samples.md"
SAMPLES_DIR = "samples"


def safe_name(name: str) -> str:
    """A file-name-safe form of an example id or attack key."""
    return re.sub(r"[^A-Za-z0-9._@=-]+", "_", name)[:120] or "_"


def image_path(directory: Path, attack: str, example_id: str) -> Path:
    """Where the PNG of ``example_id`` under ``attack`` (or ``clean``) is saved."""
    return Path(directory) / SAMPLES_DIR / safe_name(attack) / f"{safe_name(example_id)}.png"
