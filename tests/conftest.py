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
# Under pytest-xdist (``make test`` runs ``-n 2``) every worker inherits the main process's
# environment, so the workers share its cache (each built-in is trained once: its entry's lock).
os.environ.setdefault("ADVSUITE_CACHE", str(_SESSION_DIR / "cache"))
if os.environ.get("PYTEST_XDIST_WORKER"):
    # One torch thread per worker, set before torch is imported (subprocesses inherit it, so a
    # test's own process and the ones it starts compute alike): two workers of two threads each
    # on two cores spun against each other.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
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


#: The built-ins the tests train on first use, in the order a whole run first needs them: about
#: 40-130 s each on one thread. ``--prefetch-builtins`` (what ``make test`` passes) trains them
#: in a process beside the tests, on the core the tests leave idle while they wait on Python or
#: a child process; a test that needs one before it is ready waits for it (each cache entry has
#: a lock) or trains it itself.
PREFETCHED_BUILTINS = ("builtin:digits-cnn-at", "builtin:digits-bat", "builtin:sentiment-base-s0",
                       "builtin:sentiment-ddi-at-s0", "builtin:sentiment-base-s1", "builtin:digits-cnn-beta-at")


def pytest_addoption(parser):
    parser.addoption("--prefetch-builtins", action="store_true",
                     help="train the built-in models the tests use in a process beside them (make test)")


def _idle(pid: int) -> None:
    """Run process ``pid`` only on a core nothing else wants (``SCHED_IDLE``; else nice 19). Its
    children inherit it. Set from here, not in the child before exec (``preexec_fn`` is unsafe
    where threads run), before the child has imported anything."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, pid, 19)


#: The ``advsuite prefetch`` process of this run (the main pytest process only).
_PREFETCH: dict[str, object] = {}


def pytest_configure(config):
    """With ``--prefetch-builtins``: ``advsuite prefetch --models ...`` in the background for the
    run, started once by the main process (under ``-n``, not by each worker)."""
    import subprocess
    import sys

    if not config.getoption("--prefetch-builtins") or not PREFETCHED_BUILTINS or hasattr(config, "workerinput"):
        return
    log = _SESSION_DIR / "prefetch.log"
    with open(log, "w") as out:
        # Only on a core the tests leave idle (SCHED_IDLE; else the lowest priority): at normal
        # priority it slowed the tests' two-thread torch kernels 3-5x, and the run gained nothing.
        process = subprocess.Popen([sys.executable, "-m", "suite", "prefetch", "--models", *PREFETCHED_BUILTINS],
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    _idle(process.pid)
    _PREFETCH.update(process=process, log=log)


def _stop_prefetch(say) -> None:
    import signal

    process = _PREFETCH.pop("process", None)
    if process is None:
        return
    if process.poll() is None:  # a part of the tests ran, which did not need them all
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    elif process.returncode != 0 and say is not None:
        say(f"`advsuite prefetch --models` beside the tests failed (exit {process.returncode}; the tests trained "
            f"what they needed themselves):\n{_PREFETCH['log'].read_text()}")


def pytest_terminal_summary(terminalreporter):
    _stop_prefetch(terminalreporter.write_line)


def pytest_sessionfinish(session, exitstatus):
    """Under ``-n``, the main process's own log of network attempts (its prefetch process writes
    there; each worker checks its own in :func:`no_network_attempts`) fails the run too."""
    if hasattr(session.config, "workerinput") or not getattr(session.config.option, "numprocesses", None):
        return
    attempts = NETLOG.read_text() if NETLOG.exists() else ""
    if attempts:
        print(f"\nnetwork attempts during tests (outside the workers):\n{attempts}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config):
    _stop_prefetch(None)
