"""What a model says about itself: the dataset it was trained on, so ``advsuite evaluate
--model ...`` needs no ``--dataset``, and the threat model it was trained for, so the default
attacks run at its radius.

Sources, first match wins:

- built-in models: the built-in dataset they were trained on;
- ``hf:`` and ``timm:`` models: the ``datasets:`` list in the model card's YAML front matter
  (``README.md`` of a local directory, or of the Hub repo: ``timm:<name>`` is ``timm/<name>``
  there). On the Hub only the card is read (from the local cache when offline).

Nothing is guessed beyond that: a model that names no dataset makes ``evaluate`` ask for
``--dataset`` in one line.

The threat model comes from the same places: :data:`BUILTIN_THREAT_MODELS` for the robust
built-ins (their training recipes read the radius from here), and a card's ``threat_model:``
key for ``hf:``/``timm:`` models, which ``advsuite train`` writes into its outputs::

    threat_model: {norm: linf, eps: 0.0313725}
"""

from __future__ import annotations

import logging
import reprlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from suite.errors import ConfigError
from suite.threat import Threat

logger = logging.getLogger(__name__)

#: The threat model each robust image built-in was trained for (RobustBench lists every model
#: with one). The training recipes of :mod:`suite.train.builtin` take their radius from here.
_DIGITS_AT = Threat(norm="linf", eps=0.15)
BUILTIN_THREAT_MODELS: dict[str, Threat] = {
    "digits-cnn-at": _DIGITS_AT,
    "digits-cnn-beta-at": _DIGITS_AT,
    "digits-cnn-bat": _DIGITS_AT,
    "digits-bat": _DIGITS_AT,
}


def card_metadata(text: str) -> dict[str, Any]:
    """The YAML front matter (``---`` ... ``---``) of a model card; ``{}`` when it has none."""
    if not text.startswith("---"):
        return {}
    end = text.find("\n---", 3)
    if end < 0:
        return {}
    try:
        meta = yaml.safe_load(text[3:end]) or {}
    except (yaml.YAMLError, RecursionError):  # a card's front matter advsuite cannot read: as if it had none
        return {}
    return meta if isinstance(meta, dict) else {}


def card_datasets(text: str) -> list[str]:
    """The ``datasets:`` entries of a model card's YAML front matter (``---`` ... ``---``)."""
    datasets = card_metadata(text).get("datasets")
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
    from suite.models.hub_access import cached, hub_unreachable

    if hub_unreachable() is not None and not cached(repo, "README.md", revision):
        logger.debug("no model card for %s: %s", repo, hub_unreachable())
        return None  # not minutes of retries for a card
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo, "README.md", revision=revision)).read_text(encoding="utf-8", errors="replace")
    except Exception as error:  # offline, no card, gated, unknown repo: no default, the caller asks
        logger.debug("no model card for %s: %s", repo, error)
        return None


def default_dataset(spec: str, revision: str | None = None) -> tuple[str, str] | None:
    """``(dataset spec, where it came from)`` for the model ``spec``, or ``None``.

    Raises:
        ConfigError: ``spec`` names a local directory that does not exist, or no built-in model.
    """
    scheme, _, name = spec.partition(":")
    if scheme == "builtin":
        from suite.errors import UnknownNameError
        from suite.models.registry import BUILTIN_MODELS, TEXT_BUILTINS

        if name not in BUILTIN_MODELS:  # said as such, not as a model that names no dataset
            raise UnknownNameError(BUILTIN_MODELS.unknown_message(name))

        # Every built-in is trained on a built-in set: the text ones on sentiment, the rest on digits.
        dataset = None if name not in BUILTIN_MODELS else "builtin:sentiment" if name in TEXT_BUILTINS else "builtin:digits"
        return (dataset, "the built-in model's training set") if dataset else None
    if scheme not in ("hf", "timm") or not name:
        return None
    text = _card_text(scheme, name, revision)
    datasets = card_datasets(text) if text else []
    return (f"hf:{datasets[0]}", "its model card") if datasets else None


def card_threat_model(text: str, where: str) -> Threat | None:
    """The ``threat_model: {norm, eps}`` a card declares, or ``None``.

    Raises:
        ConfigError: The card has the key, but not a norm among linf/l2 and a finite ε ≥ 0.
    """
    declared = card_metadata(text).get("threat_model")
    if declared is None:
        return None
    try:
        if not isinstance(declared, dict) or set(declared) != {"norm", "eps"} or declared["norm"] not in ("linf", "l2"):
            raise ValueError
        return Threat(norm=declared["norm"], eps=float(declared["eps"]))
    except (ValueError, TypeError, ValidationError):
        # A bounded repr: YAML aliases nest a few bytes into a value whose repr runs to gigabytes
        # (9 levels of 9 aliases: the message grew until memory ran out).
        bounded = reprlib.Repr()
        bounded.maxlevel, bounded.maxdict, bounded.maxlist, bounded.maxstring, bounded.maxother = 3, 4, 4, 60, 60
        shown = bounded.repr(declared)
        shown = shown if len(shown) <= 120 else shown[:120] + "..."
        raise ConfigError(f"the model card of {where} has a bad threat_model: {shown} (expected "
                          "{norm: linf or l2, eps: a number >= 0})") from None


def card_threat_text(threat: Threat) -> str:
    """The card line :func:`card_threat_model` reads back."""
    return f"threat_model: {{norm: {threat.norm}, eps: {threat.eps!r}}}"


def declared_threat_model(spec: str, revision: str | None = None) -> Threat | None:
    """The threat model the model ``spec`` says it was trained for (its card), or ``None``."""
    scheme, _, name = spec.partition(":")
    if scheme == "builtin":
        return BUILTIN_THREAT_MODELS.get(name)
    if scheme not in ("hf", "timm") or not name:
        return None
    text = _card_text(scheme, name, revision)
    return card_threat_model(text, spec) if text else None
