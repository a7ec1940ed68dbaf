"""Local model paths and weight files, read safely.

A pickle is a program: unpickling an untrusted ``pytorch_model.bin`` can run code, and
``torch.load(weights_only=True)`` narrows that risk without removing it. So every loader reads
safetensors only, and pickled weights (``.bin``, ``.pt``, ``.pth``, ``.ckpt``, ``.pkl``) only when the
user passes ``--allow-pickle`` (``allow_pickle: true`` in a recipe), and then with
``weights_only=True``.

Every problem with a path or a weights file is a :class:`~suite.errors.ConfigError`: one line
naming the file and what to do.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from suite.errors import ConfigError

if TYPE_CHECKING:  # torch is imported where tensors are read: path checks stay light
    import torch

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
ALLOW_PICKLE = "pass --allow-pickle only if you trust it (unsafe: unpickling runs arbitrary code)"


def local_dir(scheme: str, name: str) -> Path | None:
    """The local model directory ``<scheme>:<name>`` names, or ``None`` for a Hub id / model name.

    A name is a path when it starts with ``.``, ``/`` or ``~``, exists on disk, or has a ``/``
    that a Hub id (``hf:org/name``) or timm name (``timm:hf-hub:org/name``) would not have.

    Raises:
        ConfigError: The name is a path, but not of an existing directory.
    """
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ConfigError(f"{scheme}:{name} is a file, not a model directory: {_dir_hint(scheme)}")
    if _looks_like_path(scheme, name):
        where = "" if path.is_absolute() else f" (relative to {str(Path.cwd())!r})"
        raise ConfigError(f"model directory {name!r} does not exist{where}")
    return None


def _looks_like_path(scheme: str, name: str) -> bool:
    if name.startswith((".", "/", "~")):
        return True
    if scheme == "hf":
        return name.count("/") > 1  # Hub ids are 'name' or 'org/name'
    if scheme == "timm":
        return "/" in name and not name.startswith(("hf-hub:", "hf_hub:"))
    return False


def _dir_hint(scheme: str) -> str:
    if scheme == "timm":
        return "for a weights file use timm:<architecture> --checkpoint FILE"
    return "give the directory save_pretrained wrote"


def pickled_files(directory: Path) -> list[Path]:
    """Pickled weight files at the top of ``directory``, by name."""
    return sorted(path for path in directory.iterdir() if path.is_file() and path.suffix in PICKLE_SUFFIXES)


def refuse_pickle(path: Path, what: str) -> ConfigError:
    """The error for pickled weights read without ``allow_pickle`` (returned, for ``raise``)."""
    return ConfigError(f"{what} {str(path)!r} is a pickle, and only safetensors weights are loaded by default: "
                       f"convert it to safetensors, or {ALLOW_PICKLE}")


def check_safetensors(path: Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape in a safetensors file, from its header (no tensor is read).

    Raises:
        ConfigError: The file is truncated, not safetensors, or unreadable.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    except (SafetensorError, OSError) as error:
        raise ConfigError(f"weights file {str(path)!r} is not a valid safetensors file ({_first_line(error)}): "
                          "it may be truncated; save or download it again") from error


def read_state_dict(path: Path, allow_pickle: bool, what: str = "checkpoint") -> dict[str, torch.Tensor]:
    """The tensors of a weights file: safetensors, or (with ``allow_pickle``) a pickled state dict.

    A pickled training checkpoint holding ``{"state_dict": ...}`` or ``{"model": ...}`` gives that
    state dict, with a ``module.`` prefix (DataParallel) removed.

    Raises:
        ConfigError: The file is missing, a pickle without ``allow_pickle``, or unreadable.
    """
    if not path.is_file():
        raise ConfigError(f"{what} {str(path)!r} does not exist" + (" (it is a directory)" if path.is_dir() else ""))
    if path.suffix != ".safetensors":
        if not allow_pickle:
            raise refuse_pickle(path, what)
        return _read_pickle(path, what)
    check_safetensors(path)
    from safetensors.torch import load_file

    return load_file(str(path))


def _read_pickle(path: Path, what: str) -> dict[str, torch.Tensor]:
    import torch

    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols: noise beside the one error line
            warnings.simplefilter("ignore")
            content = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # any failure to parse an untrusted file is that file's fault
        raise ConfigError(f"cannot read {what} {str(path)!r} with torch.load(weights_only=True): "
                          f"{_unpickling_failure(error)}") from error
    if isinstance(content, dict):
        for key in ("state_dict", "model"):
            if isinstance(content.get(key), dict):
                content = content[key]
                break
    if not isinstance(content, dict) or not all(isinstance(v, torch.Tensor) for v in content.values()):
        raise ConfigError(f"{what} {str(path)!r} does not hold a state dict (a mapping of names to tensors)")
    return {key.removeprefix("module."): value for key, value in content.items()}


def _unpickling_failure(error: BaseException) -> str:
    """What torch's weights-only unpickler refused, without its advice to retry unsafely."""
    text = str(error)
    marker = "WeightsUnpickler error:"
    if marker not in text:
        return _first_line(error)
    refused = " ".join(text.split(marker, 1)[1].split("Check the documentation", 1)[0].split())
    return f"it holds more than tensors ({refused or 'objects the safe unpickler refuses'})"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
