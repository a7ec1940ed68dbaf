"""Whether the Hugging Face Hub can be reached, asked once before the libraries ask it.

Offline, huggingface_hub retries every request five times with backoff, printing a line per
try: ``advsuite evaluate --model hf:x`` printed about eleven lines over 30 seconds before its
one-line error. A model that is in the local cache loads from it at once instead
(``local_files_only``), and one that is not is refused in one line. The Hub is probed with one
TCP connection (3 s at most) to its endpoint (``HF_ENDPOINT``), once per process; not at all
in offline mode (``HF_HUB_OFFLINE``: the libraries then read the cache only) or behind a
proxy (``HTTPS_PROXY``, ``ALL_PROXY``: only the proxy knows whether the Hub answers).
"""

from __future__ import annotations

import functools
import os
import socket
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


def cached(repo_id: str, filename: str, revision: str | None = None) -> bool:
    """Whether ``filename`` of the Hub repo ``repo_id`` is in the local cache."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, filename, revision=revision)
    except ValueError:  # not a repo id the Hub takes
        return False
    return isinstance(found, str)
