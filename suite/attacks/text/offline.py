"""Make TextAttack importable and quiet without a network.

``import textattack`` calls ``nltk.download`` for several corpora (a one-time post-install
hook) and then reads the NLTK English stopwords at import time. This module:

- puts the user cache (``$ADVSUITE_CACHE/nltk_data``, filled by ``advsuite prefetch``) and the
  project's own ``suite/resources/nltk_data`` (stopwords) first on ``nltk.data.path``;
- replaces ``nltk.download`` with a function that never touches the network: it returns True
  when the resource is already on disk and False otherwise, at once and silently (the
  original stays available as :data:`REAL_NLTK_DOWNLOAD` for ``advsuite prefetch``);
- sets ``HF_HUB_OFFLINE`` when the suite runs offline (``ADVSUITE_OFFLINE=1``), so a missing
  Hub model fails at once instead of after 20–45 s of retries.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

from suite.paths import cache_dir

PACKAGED_NLTK_DATA = Path(__file__).resolve().parents[2] / "resources" / "nltk_data"
logger = logging.getLogger(__name__)

REAL_NLTK_DOWNLOAD: Any = None


def offline() -> bool:
    """Whether the suite must not touch the network (``ADVSUITE_OFFLINE`` or ``HF_HUB_OFFLINE``)."""
    return any(os.environ.get(var, "").lower() in ("1", "true", "yes") for var in ("ADVSUITE_OFFLINE", "HF_HUB_OFFLINE"))


def nltk_data_dirs() -> list[Path]:
    """NLTK data directories the suite reads, in order."""
    return [cache_dir("nltk_data"), PACKAGED_NLTK_DATA]


def _local_only_download(info_or_id: Any = None, *args: Any, **kwargs: Any) -> bool:
    """Stand-in for ``nltk.download``: report whether the resource exists, never download."""
    import nltk

    names = info_or_id if isinstance(info_or_id, (list, tuple)) else [info_or_id]
    found = True
    for name in names:
        if not isinstance(name, str):
            return False
        try:
            nltk.data.find(_resource_path(name))
        except LookupError:
            logger.debug("NLTK resource %r is not cached; run `advsuite prefetch` online", name)
            found = False
    return found


def _resource_path(name: str) -> str:
    categories = {"punkt": "tokenizers", "punkt_tab": "tokenizers", "averaged_perceptron_tagger": "taggers",
                  "averaged_perceptron_tagger_eng": "taggers", "universal_tagset": "taggers"}
    return f"{categories.get(name, 'corpora')}/{name}"


def configure_nltk() -> None:
    """Point NLTK at the suite's data dirs and disable network downloads (idempotent)."""
    global REAL_NLTK_DOWNLOAD
    import nltk

    for directory in reversed(nltk_data_dirs()):
        if str(directory) in nltk.data.path:
            nltk.data.path.remove(str(directory))
        nltk.data.path.insert(0, str(directory))
    if nltk.download is not _local_only_download:
        REAL_NLTK_DOWNLOAD = nltk.download
        nltk.download = _local_only_download


def import_textattack() -> ModuleType:
    """``import textattack`` with local NLTK data, no download attempts, and quiet logs."""
    if offline():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # Do not set TA_CACHE_DIR: TextAttack then also redirects HF_HOME and XDG_CACHE_HOME.
    configure_nltk()
    previous_disable = logging.root.manager.disable
    logging.disable(logging.INFO)  # the post-install hook's INFO lines
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            import textattack
    finally:
        logging.disable(previous_disable)
    # TextAttack's logging.config.dictConfig disables every logger that existed before it.
    for name, existing in logging.root.manager.loggerDict.items():
        if name.startswith("suite") and isinstance(existing, logging.Logger):
            existing.disabled = False
    # TextAttack warns that it cannot vouch for any wrapper class it does not know (ours is
    # fine); its loggers carry their own levels and handlers, so quiet each one.
    for name, existing in list(logging.root.manager.loggerDict.items()):
        if name.startswith("textattack") and isinstance(existing, logging.Logger):
            existing.setLevel(logging.ERROR)
    return textattack
