"""Local model paths and weight files, read safely.

A pickle is a program: unpickling an untrusted ``pytorch_model.bin`` can run code, and
``torch.load(weights_only=True)`` narrows that risk without removing it. So every loader reads
safetensors only, and pickled weights (``.bin``, ``.pt``, ``.pth``, ``.ckpt``, ``.pkl``) only when the
user passes ``--allow-pickle`` (``allow_pickle: true`` in a recipe), and then with
``weights_only=True``.

Every problem with a path or a weights file is a :class:`~suite.errors.ConfigError`: one line
naming the file and what to do.

Weights the suite writes (the built-in cache, ``advsuite train``'s model directories) are
recorded with their sha256 in :data:`HASH_FILE` beside them (:func:`record_hashes`), and every
load of such a directory checks it (:func:`verify_weights`): flipped bytes in a valid file would
otherwise load as another model under the same name. A directory without that file (a
third-party ``save_pretrained`` dir) loads unverified, as before.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.errors import ConfigError, first_line
from suite.paths import file_sha256

if TYPE_CHECKING:  # torch is imported where tensors are read: path checks stay light
    import torch

#: The sidecar recording the sha256 of each safetensors file of a directory the suite wrote.
HASH_FILE = "weights.sha256.json"
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


class PickleRefused(ConfigError):
    """Pickled weights met without ``allow_pickle``. ``subject`` says which ("... is a pickle"):
    a caller that has no ``--allow-pickle`` (``advsuite train``) says its own remedy after it."""

    def __init__(self, subject: str, remedy: str = f"convert it to safetensors, or {ALLOW_PICKLE}"):
        self.subject = subject
        super().__init__(f"{subject}, and only safetensors weights are loaded by default: {remedy}")


def refuse_pickle(path: Path | str, what: str) -> PickleRefused:
    """The error for pickled weights read without ``allow_pickle`` (returned, for ``raise``)."""
    return PickleRefused(f"{what} {str(path)!r} is a pickle")


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
        raise ConfigError(f"weights file {str(path)!r} is not a valid safetensors file ({first_line(error)}): "
                          "it may be truncated; save or download it again") from error


def read_state_dict(path: Path, allow_pickle: bool, what: str = "checkpoint") -> dict[str, torch.Tensor]:
    """The tensors of a weights file: safetensors, or (with ``allow_pickle``) a pickled state dict.

    A pickled training checkpoint holding ``{"state_dict": ...}`` or ``{"model": ...}`` gives that
    state dict, with a ``module.`` prefix (DataParallel) removed.

    Raises:
        ConfigError: The file is missing, a pickle without ``allow_pickle``, or unreadable.
        WeightsMismatchError: Its bytes do not match the sha256 recorded beside it.
    """
    if not path.is_file():
        problem = ("is a directory" if path.is_dir() else "is not a regular file (a device, pipe or socket)"
                   if path.exists() else "does not exist")
        raise ConfigError(f"{what} {str(path)!r} {problem}: give a weights file")
    if path.suffix != ".safetensors":
        if not allow_pickle:
            raise refuse_pickle(path, what)
        return _read_pickle(path, what)
    check_safetensors(path)
    verify_weights(path)
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
        return first_line(error)
    refused = " ".join(text.split(marker, 1)[1].split("Check the documentation", 1)[0].split())
    return f"it holds more than tensors ({refused or 'objects the safe unpickler refuses'})"




# --------------------------------------------------------------------------- recorded hashes


class WeightsMismatchError(ConfigError):
    """Weights whose bytes no longer match the sha256 recorded when the suite wrote them."""

    def __init__(self, path: Path, expected: str, actual: str) -> None:
        super().__init__(f"weights {str(path)!r} do not match the sha256 recorded in {HASH_FILE} when they were "
                         f"written (damaged or changed since?): recorded {expected}, found {actual}; write them "
                         f"again, or delete {str(path.parent / HASH_FILE)!r} to load them unverified")
        self.path, self.expected, self.actual = path, expected, actual


def record_hashes(directory: Path, entry: str | None = None) -> dict[str, str]:
    """Record the sha256 of every ``*.safetensors`` at the top of ``directory`` in
    :data:`HASH_FILE` (written atomically, after the weights); returns the record. ``entry``
    names what the weights are (a built-in's cache entry, ``digits-cnn-v2``): a record copied
    with its weights into another entry then says whose they are (:func:`recorded_entry`)."""
    from suite.paths import atomic_write_text

    directory = Path(directory)
    hashes = {path.name: file_sha256(path) for path in sorted(directory.glob("*.safetensors")) if path.is_file()}
    record = {"sha256": hashes} if entry is None else {"sha256": hashes, "entry": entry}
    atomic_write_text(directory / HASH_FILE, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return hashes


def recorded_entry(directory: Path) -> str | None:
    """The name :func:`record_hashes` recorded with the hashes of ``directory``, if any."""
    try:
        entry = json.loads((Path(directory) / HASH_FILE).read_text(encoding="utf-8")).get("entry")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None
    return entry if isinstance(entry, str) else None


def recorded_hashes(directory: Path) -> dict[str, str] | None:
    """The sha256 recorded for each weights file of ``directory``, or ``None`` when none is.

    Raises:
        ConfigError: The record exists but is not what :func:`record_hashes` writes.
    """
    path = Path(directory) / HASH_FILE
    if not path.is_file():
        return None
    try:
        hashes = json.loads(path.read_text(encoding="utf-8"))["sha256"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{str(path)!r} is not a weights hash record ({first_line(error)}): delete it to load "
                          "the weights unverified") from error
    if not isinstance(hashes, dict) or not all(isinstance(value, str) for value in hashes.values()):
        raise ConfigError(f"{str(path)!r} is not a weights hash record (no file → sha256 mapping): delete it to load "
                          "the weights unverified")
    return hashes


def verify_weights(path: Path) -> bool:
    """Check a weights file against the sha256 recorded beside it (hashing it once).

    Returns:
        Whether a hash was recorded for it (``False``: it loads unverified).

    Raises:
        WeightsMismatchError: A hash is recorded and the file's bytes do not match it.
    """
    path = Path(path)
    expected = (recorded_hashes(path.parent) or {}).get(path.name)
    if expected is None:
        return False
    actual = file_sha256(path)
    if actual != expected:
        raise WeightsMismatchError(path, expected, actual)
    return True


@contextlib.contextmanager
def timm_without_pickles(name: str) -> Iterator[None]:
    """While timm fetches ``name``'s pretrained weights, refuse any it would unpickle: a ``url``
    (a ``.pth``, read by ``torch.hub.load_state_dict_from_url``) or a Hub repo without
    safetensors (timm falls back to ``pytorch_model.bin`` and ``torch.load``). timm reads those
    with ``weights_only=True``, a restricted unpickler, but advsuite loads safetensors only unless
    ``--allow-pickle`` (docs/security.md). Hub repos with ``model.safetensors`` (timm tries it
    first) and ``.npz`` weights (NumPy, no pickle) load as before."""
    from timm.models import _builder, _hub

    def refused(what: str):
        def refuse(location: Any, *args: Any, **kwargs: Any) -> None:
            raise refuse_pickle(str(location), f"timm:{name}'s pretrained weights ({what})")
        return refuse

    patched = [(module, attribute, getattr(module, attribute)) for module, attribute in
               ((_builder, "load_state_dict_from_url"), (_hub, "_torch_load")) if hasattr(module, attribute)]
    for module, attribute, _ in patched:
        setattr(module, attribute, refused("a .pth from a URL" if module is _builder else "a Hub repo's pickle"))
    try:
        yield
    finally:
        for module, attribute, original in patched:
            setattr(module, attribute, original)
