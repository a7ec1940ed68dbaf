"""The dataset a model names for itself, so ``advsuite evaluate --model ...`` needs no ``--dataset``.

Sources, first match wins:

- built-in models: the built-in dataset they were trained on;
- ``hf:`` and ``timm:`` models: the ``datasets:`` list in the model card's YAML front matter
  (``README.md`` of a local directory, or of the Hub repo: ``timm:<name>`` is ``timm/<name>``
  there). On the Hub only the card is read (from the local cache when offline).

Nothing is guessed beyond that: a model that names no dataset makes ``evaluate`` ask for
``--dataset`` in one line.
"""

from __future__ import annotations

import logging
from pathlib import Path

import yaml

logger = logging.getLogger(__name__)

BUILTIN_TRAINING_SETS = {"sentiment-tiny": "builtin:sentiment", "digits-cnn": "builtin:digits"}


def card_datasets(text: str) -> list[str]:
    """The ``datasets:`` entries of a model card's YAML front matter (``---`` ... ``---``)."""
    if not text.startswith("---"):
        return []
    end = text.find("\n---", 3)
    if end < 0:
        return []
    try:
        meta = yaml.safe_load(text[3:end]) or {}
    except yaml.YAMLError:
        return []
    datasets = meta.get("datasets") if isinstance(meta, dict) else None
    if isinstance(datasets, str):
        datasets = [datasets]
    return [str(item) for item in datasets or [] if isinstance(item, (str, int)) and str(item).strip()]


def _card_text(scheme: str, name: str, revision: str | None) -> str | None:
    from suite.models.weights import local_dir

    directory = local_dir(scheme, name)  # a missing local dir is an error here, not "no card"
    if directory is not None:
        readme = directory / "README.md"
        return readme.read_text(encoding="utf-8", errors="replace") if readme.is_file() else None
    repo = f"timm/{name}" if scheme == "timm" and "/" not in name else name
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo, "README.md", revision=revision)).read_text(encoding="utf-8", errors="replace")
    except Exception as error:  # offline, no card, gated, unknown repo: no default, the caller asks
        logger.debug("no model card for %s: %s", repo, error)
        return None


def default_dataset(spec: str, revision: str | None = None) -> tuple[str, str] | None:
    """``(dataset spec, where it came from)`` for the model ``spec``, or ``None``.

    Raises:
        ConfigError: ``spec`` names a local directory that does not exist.
    """
    scheme, _, name = spec.partition(":")
    if scheme == "builtin":
        dataset = BUILTIN_TRAINING_SETS.get(name)
        return (dataset, "the built-in model's training set") if dataset else None
    if scheme not in ("hf", "timm") or not name:
        return None
    text = _card_text(scheme, name, revision)
    datasets = card_datasets(text) if text else []
    return (f"hf:{datasets[0]}", "its model card") if datasets else None
