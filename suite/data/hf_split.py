"""A split of a local file, a local directory or a Hub dataset as a ``datasets.Dataset``, with
local files checked first (empty, binary, several files for one split) and every failure one
line. :mod:`.load` turns its rows into examples."""

from __future__ import annotations

import codecs
import os
import re
from pathlib import Path
from typing import Any

from suite.data.config import DatasetConfig
from suite.data.local import check_class_folders, content_fingerprint
from suite.errors import DataError
from suite.hub_probe import offline_datasets

FILE_BUILDERS = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def looks_like_a_path(spec: str) -> bool:
    """Whether a spec with no scheme was meant as a local path (not a Hub name given without hf:)."""
    return spec.startswith((".", "/", "~")) or Path(spec).suffix.lower() in FILE_BUILDERS


def split_fingerprint(name: str, split: str) -> str | None:
    """The fingerprint of a local split by its bytes: a file's (:func:`content_fingerprint`), or
    the table files a folder holds for ``split``, each by name and bytes; ``None`` for anything
    else (an image folder, a Hub dataset: `datasets`' own fingerprint, which follows paths, sizes
    and modification times)."""
    import hashlib

    from suite.paths import file_sha256

    path = Path(name).expanduser()
    if path.is_file():
        return content_fingerprint(path)
    files = sorted(_split_files(path, split)) if path.is_dir() else []
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        # datasets resolves the files to absolute paths: a relative folder (hf:data/reviews) raised
        # ValueError from relative_to, a traceback for valid input.
        relative = os.path.relpath(os.path.abspath(file), os.path.abspath(path))
        digest.update(f"{relative}\0{file_sha256(file)}\0".encode())
    return "sha256-" + digest.hexdigest()[:16]


def check_other_split(spec: str, split: str, other: str | None, flag: str) -> None:
    """Refuse a second split (``flag``: ``--adversary-split``, ``--val-split``) of a dataset that is
    one local file: a file is one split under any name, so ``other`` would read the very rows of
    ``split`` while the results named it another split."""
    name = spec[3:] if spec.startswith("hf:") else spec
    if other is None or other == split or not Path(name).expanduser().is_file():
        return
    raise DataError(f"{flag} {other!r}: dataset {spec!r} is one file, which is one split whatever its name, so it "
                    f"would read the same rows as {split!r}; give a folder holding a file per split (e.g. "
                    f"{split}.csv and {other}.csv)")


def hf_split(name: str, config: DatasetConfig, datasets: Any) -> Any:
    """The split ``config.split`` of a local file, a local directory or a Hub dataset, as a
    ``datasets.Dataset``; local files are checked first (empty, binary, several per split)."""
    path = Path(name).expanduser()
    # Parse failures are logged at ERROR before they are raised; the raised error is reported
    # once, in one line (:func:`_loading`).
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    if path.exists():
        # For local files `datasets` draws "Generating split" bars and says "Downloading data"
        # while it reads them: no progress a user can act on. (A Hub download keeps its bars.)
        datasets.disable_progress_bars()
    if path.is_file():
        builder = FILE_BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise DataError(f"cannot read {name!r}: unsupported file type (use {', '.join(FILE_BUILDERS)})")
        _check_data_file(path)
        extra = {"delimiter": "\t"} if path.suffix.lower() == ".tsv" else {}
        # Read afresh each time: `datasets` keys its cache on the path, size and modification
        # time, so a file edited in place that keeps them (cp -p, rsync -a, tar x) gave its old
        # rows, and the same fingerprint (:func:`~suite.data.local.content_fingerprint` records the bytes').
        return _loading(name, config, lambda: datasets.load_dataset(
            builder, data_files={config.split: str(path)}, split=config.split, download_mode="force_redownload",
            **extra), local=True)
    if path.is_dir():
        files = _split_files(path, config.split)
        for file in files:
            _check_data_file(file)
        if not files:
            check_class_folders(path / config.split, name)
        # Read afresh, as a single file is (above): a file edited in place inside the folder
        # that kept its size and time gave the old rows.
        return _loading(name, config, lambda: datasets.load_dataset(str(path), split=config.split,
                                                                    download_mode="force_redownload"), local=True)
    if looks_like_a_path(name):
        raise DataError(f"dataset path {name!r} does not exist")
    with offline_datasets(datasets) as offline:
        try:
            return _loading(name, config, lambda: datasets.load_dataset(name, config.config, split=config.split,
                                                                        revision=config.revision), local=False)
        except DataError as error:
            if offline is None or "OfflineModeIsEnabled" not in str(error):
                raise
            raise DataError(f"cannot load dataset {name!r} (split {config.split!r}): {offline}, and it is not in "
                            "the local datasets cache") from None


def _loading(name: str, config: DatasetConfig, load: Any, local: bool):
    """Run ``load``; a failure is one line naming the dataset and the first line of its cause."""
    from datasets.exceptions import DatasetGenerationError

    try:
        return load()
    except DataError:
        raise
    except (OSError, ValueError, KeyError, TypeError, DatasetGenerationError) as error:
        # A local file that cannot be parsed fails in pyarrow or json deep inside `datasets`;
        # its innermost cause says what is wrong with the file.
        cause = error
        while local and cause.__cause__ is not None:
            cause = cause.__cause__
        message = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        if "corresponds to no data" in message:  # a table with a header and no rows
            raise DataError(f"dataset {name!r} has no rows in split {config.split!r}") from None
        raise DataError(f"cannot load dataset {name!r} (split {config.split!r}): {message[:300]}") from error


def _check_data_file(path: Path) -> None:
    """An empty or binary table file is one clear line, not a parser's traceback."""
    if path.suffix.lower() not in FILE_BUILDERS:
        return
    if path.stat().st_size == 0:
        raise DataError(f"data file {str(path)!r} is empty")
    if path.suffix.lower() != ".parquet":
        # The whole file, in chunks (the table reader takes bytes that are not UTF-8 and fails
        # only when a row holding them is read): a first look at 64 KiB, then the rest.
        decoder = codecs.getincrementaldecoder("utf-8")()
        offset = 0
        with open(path, "rb") as handle:
            while chunk := handle.read(65536 if offset == 0 else 1 << 22):
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError as error:
                    raise DataError(f"data file {str(path)!r} is not UTF-8 text (byte {offset + max(0, error.start)}); "
                                    "is it binary, or in another encoding?") from None
                if b"\x00" in chunk:
                    raise DataError(f"data file {str(path)!r} holds NUL bytes (byte {offset + chunk.index(0)}); "
                                    "is it binary?")
                offset += len(chunk)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise DataError(f"data file {str(path)!r} is not UTF-8 text (it ends inside a character)") from None


SHARD = re.compile(r"-\d{5}-of-\d{5}$")


def _split_files(directory: Path, split: str) -> list[Path]:
    """The table files of ``directory`` that `datasets` reads as ``split``; several unrelated
    ones (``test.csv``, ``test_str.csv``) are refused rather than silently concatenated."""
    from datasets.data_files import get_data_patterns, resolve_pattern

    try:
        patterns = get_data_patterns(str(directory))
    except Exception:  # noqa: BLE001 - no data files: load_dataset says so in its own words
        return []
    files = set()
    for pattern in patterns.get(split, []):
        try:
            files.update(Path(file) for file in resolve_pattern(pattern, base_path=str(directory)))
        except FileNotFoundError:  # a pattern that matches nothing
            continue
    files = sorted(files)
    tables = [file for file in files if file.suffix.lower() in FILE_BUILDERS]
    if len(tables) > 1 and not all(SHARD.search(file.stem) for file in tables):
        listed = ", ".join(repr(file.name) for file in tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise DataError(f"{len(tables)} files in {str(directory)!r} match split {split!r} ({listed}); "
                        f"point the dataset at one of them, e.g. hf:{directory / tables[0].name}")
    return tables
