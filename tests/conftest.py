"""Test set-up: offline, no network attempts, one shared cache of built-in models per session."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

NETGUARD = Path(__file__).parent / "netguard"
_SESSION_DIR = Path(tempfile.mkdtemp(prefix="advsuite-tests-"))
atexit.register(shutil.rmtree, _SESSION_DIR, True)  # the session's cache and logs go with it
NETLOG = _SESSION_DIR / "network-attempts.log"

# Before anything imports transformers/datasets: offline everywhere, in this process and in
# every subprocess the tests start (sitecustomize in tests/netguard records any attempt).
os.environ.update(
    {
        "ADVSUITE_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "ADVSUITE_NETLOG": str(NETLOG),
        "PYTHONPATH": os.pathsep.join([str(NETGUARD), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "TQDM_DISABLE": "1",
    }
)
os.environ.setdefault("ADVSUITE_CACHE", str(_SESSION_DIR / "cache"))
# Install the same guard in this process (load by path: another sitecustomize may be loaded).
_spec = importlib.util.spec_from_file_location("advsuite_netguard", NETGUARD / "sitecustomize.py")
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))


@pytest.fixture(scope="session", autouse=True)
def no_network_attempts():
    """Fail the session if any process tried to reach a non-loopback address."""
    yield
    attempts = NETLOG.read_text() if NETLOG.exists() else ""
    assert attempts == "", f"network attempts during tests:\n{attempts}"


@pytest.fixture(scope="session")
def sentiment_model():
    from suite.models import load_model

    return load_model("builtin:sentiment-tiny")


@pytest.fixture(scope="session")
def digits_model():
    from suite.models import load_model

    return load_model("builtin:digits-cnn")


@pytest.fixture(scope="session")
def digits_examples():
    from suite.data.builtin import digits
    from suite.data.base import Example

    split = digits("test")
    return [Example(i, x, y) for i, x, y in zip(split.ids, split.inputs, split.labels)]
