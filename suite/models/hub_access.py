"""Whether the Hugging Face Hub can be reached, asked once before the libraries ask it.

Offline, huggingface_hub retries every request five times with backoff, printing a line per
try: ``advsuite evaluate --model hf:x`` printed about eleven lines over 30 seconds before its
one-line error. A model that is in the local cache loads from it at once instead
(``local_files_only``), and one that is not is refused in one line. The Hub is probed with one
TCP connection (3 s at most) to its endpoint (``HF_ENDPOINT``), once per process; not at all
in offline mode (``HF_HUB_OFFLINE``: the libraries then read the cache only) or behind a
proxy (``HTTPS_PROXY``, ``ALL_PROXY``: only the proxy knows whether the Hub answers). The probe
is :mod:`suite.hub_probe`'s, which datasets use too.
"""

from __future__ import annotations

from suite.hub_probe import PROBE_SECONDS, hub_unreachable

__all__ = ["PROBE_SECONDS", "cached", "cached_file", "hub_unreachable", "timm_weights_offline"]


def cached(repo_id: str, filename: str, revision: str | None = None) -> bool:
    """Whether ``filename`` of the Hub repo ``repo_id`` is in the local cache."""
    return cached_file(repo_id, filename, revision) is not None


def cached_file(repo_id: str, filename: str, revision: str | None = None) -> str | None:
    """The local cache's copy of ``filename`` of the Hub repo ``repo_id``, or ``None``."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, filename, revision=revision)
    except ValueError:  # not a repo id the Hub takes
        return None
    return found if isinstance(found, str) else None


#: The safetensors file timm tries before each pickle it would read from a Hub repo.
_SAFE_ALTERNATIVES = {"pytorch_model.bin": "model.safetensors",
                      "open_clip_pytorch_model.bin": "open_clip_model.safetensors"}


def timm_weights_offline(name: str, allow_pickle: bool) -> dict[str, str] | None:
    """Where the Hub cannot be reached: timm's ``pretrained_cfg_overlay`` that loads ``name``'s
    pretrained weights from the local Hugging Face cache, or ``None`` where the Hub answers
    (or the weights are not the Hub's: a URL, which torch.hub caches and fetches itself).

    Offline, timm asked huggingface_hub for the weights, which retried five times with backoff:
    51 s of retry lines before the error. Now a cached file loads at once, and an uncached one is
    one line. The file is the one timm would take: the repo's safetensors first, its pickle only
    with ``--allow-pickle``.

    Raises:
        ConfigError: the weights are not in the cache.
    """
    reason = hub_unreachable()
    if reason is None:
        return None
    from timm.models import get_pretrained_cfg

    config = get_pretrained_cfg(name)
    if config is None or not config.hf_hub_id:  # an unknown name: timm says so
        return None
    repo, _, revision = config.hf_hub_id.partition("@")
    filename = config.hf_hub_filename or "pytorch_model.bin"
    candidates = [_SAFE_ALTERNATIVES[filename]] if filename in _SAFE_ALTERNATIVES else []
    if allow_pickle or filename.endswith(".safetensors"):
        candidates.append(filename)
    for candidate in candidates:
        found = cached_file(repo, candidate, revision or None)
        if found is not None:
            # source "" (timm's own): a file overlay is read only there, not under source hf-hub.
            return {"file": found, "source": ""}
    from suite.errors import ConfigError

    raise ConfigError(f"cannot fetch pretrained weights for timm model {name!r}: {repo} "
                      f"({' or '.join(candidates) or filename}) is not in the local Hugging Face cache, and {reason}; "
                      "connect, or give --checkpoint (safetensors), or --no-pretrained for random weights")
