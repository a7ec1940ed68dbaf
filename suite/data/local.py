"""Checks of local data: a data file's fingerprint by its bytes, and an image folder's layout."""

from __future__ import annotations

import os
from pathlib import Path

from suite.errors import DataError
from suite.paths import file_sha256


#: What `datasets`' image folder reads as images (the common ones).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


def check_class_folders(split: Path, name: str) -> None:
    """Refuse, naming the file, an image folder's split that is not ``<split>/<class>/<image>``
    throughout (without a metadata file giving the labels): `datasets` then infers no labels
    at all, and said only that it could not find the label column."""
    if not split.is_dir() or any((split / f"metadata.{kind}").exists() for kind in ("csv", "jsonl", "parquet")):
        return
    for path in sorted(split.rglob("*")):
        if path.suffix.lower() in IMAGE_SUFFIXES and path.is_symlink() and not path.exists():  # was dropped silently
            raise DataError(f"{str(path.relative_to(split.parent))!r} of dataset {name!r} is a link to a file that does "
                            f"not exist ({os.readlink(path)!r}): mend or remove it")
        if path.suffix.lower() in IMAGE_SUFFIXES and len(path.relative_to(split).parts) != 2:
            where = str(path.relative_to(split.parent))
            raise DataError(f"{where!r} of dataset {name!r} is not directly inside a class folder: an image folder "
                            f"holds {split.name}/<class>/<image> (move it, or remove it)")


def content_fingerprint(path: Path) -> str | None:
    """A local data file's fingerprint: a hash of its bytes (``None`` for anything else, whose
    fingerprint is `datasets`'). `datasets`' own follows the path, size and modification time."""
    if not path.is_file():
        return None
    return "sha256-" + file_sha256(path)[:16]
