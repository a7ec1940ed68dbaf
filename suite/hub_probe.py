"""Whether the Hugging Face Hub can be reached, asked once before the libraries ask it.

Offline, huggingface_hub retries every request five times with backoff, printing a line per
try: ``advsuite evaluate --model hf:x`` printed about eleven lines over 30 seconds before its
one-line error, and ``--dataset hf:rotten_tomatoes`` twelve over 40 s. The Hub is probed with
one TCP connection (3 s at most) to its endpoint (``HF_ENDPOINT``), once per process; not at all
in offline mode (``HF_HUB_OFFLINE``: the libraries then read the cache only) or behind a proxy
(``HTTPS_PROXY``, ``ALL_PROXY``: only the proxy knows whether the Hub answers). Where it cannot
be reached, models load from the local cache (:mod:`suite.models.hub_access`) and datasets are
loaded in offline mode (:func:`offline_datasets`): what is cached loads at once, and what is not
is one line.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlparse

PROBE_SECONDS = 3.0
_TRUE = ("1", "true", "yes", "on")
_PROXIES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


@functools.lru_cache(maxsize=1)
def hub_unreachable() -> str | None:
    """Why the Hub cannot be reached (``huggingface.co:443 cannot be reached (...)``), or
    ``None``: it answered, offline mode is set, or a proxy stands between."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in _TRUE or any(os.environ.get(name) for name in _PROXIES):
        return None
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except OSError as error:
        return f"the Hub ({host}:{port}) cannot be reached ({error.strerror or error})"
    return None


@contextmanager
def offline_datasets(datasets: Any) -> Iterator[str | None]:
    """``datasets`` and huggingface_hub in offline mode for the block where the Hub cannot be
    reached (yields why, or ``None`` where it can and nothing changes)."""
    reason = hub_unreachable()
    if reason is None:
        yield None
        return
    import huggingface_hub.constants as hub_constants

    saved = datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    try:
        yield reason
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved
