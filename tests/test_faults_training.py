"""I/O faults while a built-in trains into an empty cache (the third run of the fault sweep).

``builtin:digits-cnn`` is trained on first use in a process of its own, into a staging
directory beside its cache entry; this process then flushes each file the training wrote,
records the weights' hash and ``DONE`` (every one through :func:`suite.paths.sync`), and renames
the directory into place. A failure at any of those writes must say one line (``nothing was
cached``), exit 1, leave no staging directory or temporary file, and leave no entry a later run
would take for a whole one: the rerun trains again to the same weights and the same numbers.

Where the tests run as root, one real case trains into a tmpfs too small for the weights.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import suite.paths
from suite.errors import WriteError
from suite.models import builtin, builtin_cache

from test_faults import EVALUATE, Faults, advsuite, outcome, temporaries

ENTRY = f"digits-cnn-{builtin.DIGITS_VERSION}"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def replaying(trained: Path):
    """A ``_train_pinned`` that writes what the real training process wrote (no retraining)."""

    def train(recipe: str, staging: Path) -> None:
        assert recipe == "suite.models.builtin:_train_digits"
        shutil.copytree(trained, staging, dirs_exist_ok=True)

    return train


def assert_nothing_cached(cache: Path) -> None:
    """No entry, no staging directory, no temporary file: the next run trains from scratch."""
    assert not builtin_cache.is_cached(ENTRY)
    assert list((cache / "models").iterdir()) == [], list((cache / "models").iterdir())
    assert temporaries(cache) == []


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    """One uninterrupted ``evaluate`` into an empty cache, which trains digits-cnn for real
    (~20 s on one core): what the training process wrote, the cached weights' sha256, the
    run's outcome, and how many writes the caching step made (:class:`Faults` under the cache)."""
    root = tmp_path_factory.mktemp("training")
    cache, trained = root / "cache", root / "trained"
    real = builtin_cache._train_pinned

    def train_and_keep(recipe: str, staging: Path) -> None:
        real(recipe, staging)
        shutil.copytree(staging, trained)

    counter = Faults(under=cache)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(suite.paths.CACHE_ENV, str(cache))
        patch.setattr(builtin_cache, "_train_pinned", train_and_keep)
        patch.setattr(suite.paths, "sync", counter)
        assert advsuite(*EVALUATE, "--output", str(root / "run")) == 0
    weights = sha256(cache / "models" / ENTRY / "model.safetensors")
    assert weights == sha256(trained / "model.safetensors")
    return cache, trained, weights, outcome(root / "run"), counter.calls


def test_training_into_an_empty_cache_fault_sweep(training, tmp_path, capsys, monkeypatch):
    """ENOSPC at every write point k of caching a freshly trained built-in: one line, exit 1,
    nothing cached and no debris; the rerun gives the uninterrupted training's weights (sha256)
    and numbers.

    Training takes ~20 s, so it runs once (the ``training`` fixture, for real, through the CLI);
    each run here replays what the training process wrote into the staging directory, and
    everything after it (flushing the staged files, the hash record, ``DONE``, the rename) runs
    the CLI's own code. The training process's own writes are covered by
    :func:`test_a_write_refused_in_the_training_process_is_one_line`.
    """
    cache, trained, weights, expected, points = training
    staged = sorted(path.name for path in trained.iterdir())
    # digits-cnn: 4 write points (its config.json and model.safetensors flushed, the hash record, DONE)
    assert points == len(staged) + 2 and points >= 4, (points, staged)
    monkeypatch.setenv(suite.paths.CACHE_ENV, str(cache))  # the reference's path: results name the entry
    monkeypatch.setattr(builtin_cache, "_train_pinned", replaying(trained))
    capsys.readouterr()
    for k in range(1, points + 1):
        shutil.rmtree(cache)
        directory = tmp_path / f"k{k}"
        faults = Faults(fail_at=k, under=cache)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(suite.paths, "sync", faults)
            code = advsuite(*EVALUATE, "--output", str(directory))
        err = capsys.readouterr().err
        assert code == 1, f"write point {k} ({faults.failed}): exit {code}\n{err}"
        lines = [line for line in err.splitlines() if line.strip()]
        assert "Traceback" not in err and sum("could not write" in line for line in lines) == 1, err
        assert lines[-1] == (f"advsuite: could not write {cache}/models/{ENTRY}: No space left on device (errno 28); "
                             "nothing was cached: free space and rerun the same command"), err
        assert_nothing_cached(cache)
        assert advsuite(*EVALUATE, "--output", str(directory)) == 0, capsys.readouterr().err
        capsys.readouterr()
        assert sha256(cache / "models" / ENTRY / "model.safetensors") == weights
        assert outcome(directory) == expected, f"write point {k} ({faults.failed}): the rerun differs"
        assert temporaries(tmp_path) == [] and temporaries(cache) == []
    assert advsuite("ls", "--verify") == 0 and capsys.readouterr().out.split() == [ENTRY, "ok"]
    print(f"training into an empty cache fault sweep: {points} write points ({', '.join(staged)}, "
          "the hash record, DONE)")


@pytest.mark.parametrize("fault", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_refused_cache_write_is_one_line_with_status_1(training, tmp_path, capsys, monkeypatch, fault):
    """Each errno, at the first write of the staging and at the cache directory's creation:
    one line naming the entry and the errno, status 1, nothing cached."""
    _, trained, _, _, _ = training
    cache = tmp_path / "cache"
    monkeypatch.setenv(suite.paths.CACHE_ENV, str(cache))
    monkeypatch.setattr(builtin_cache, "_train_pinned", replaying(trained))

    def refuse(handle):
        raise OSError(fault, os.strerror(fault), handle.name)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(suite.paths, "sync", refuse)
        assert advsuite(*EVALUATE, "--output", str(tmp_path / "run")) == 1
    err = capsys.readouterr().err
    said = (f"advsuite: could not write {cache}/models/{ENTRY}: {os.strerror(fault)} (errno {fault}); "
            "nothing was cached: ")
    assert "Traceback" not in err and err.splitlines()[-1].startswith(said), err
    assert_nothing_cached(cache)

    shutil.rmtree(cache)
    real = Path.mkdir

    def refused(self, *args, **kwargs):  # the models directory cannot be made
        if self == cache / "models":
            raise OSError(fault, os.strerror(fault), str(self))
        return real(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "mkdir", refused)
        assert advsuite(*EVALUATE, "--output", str(tmp_path / "run")) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1].startswith(said), err
    assert not (cache / "models").exists() and temporaries(tmp_path) == []


RECIPE = '''
import errno, os
from pathlib import Path


def refused(directory: Path) -> None:
    (directory / "model.safetensors").write_bytes(b"half a file")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory / "model.safetensors"))


def refused_in_safetensors(directory: Path) -> None:
    from safetensors import SafetensorError

    (directory / "config.json").write_text("{}")
    # what safetensors' save_file raises on a full tmpfs (safetensors 0.8)
    raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
'''


@pytest.mark.parametrize("recipe", ["refused", "refused_in_safetensors"])
def test_a_write_refused_in_the_training_process_is_one_line(tmp_path, capfd, monkeypatch, recipe):
    """The training process hands its write fault to the CLI (no traceback of its own), which
    says it in one line (status 1); the staging directory, with its half-written file, is gone."""
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "faulty_recipes.py").write_text(RECIPE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "recipes"), os.environ["PYTHONPATH"]]))
    cache = tmp_path / "cache"
    monkeypatch.setenv(suite.paths.CACHE_ENV, str(cache))
    with pytest.raises(WriteError) as raised:
        builtin_cache.cached_model("faulty", f"faulty_recipes:{recipe}")
    assert str(raised.value) == (f"could not write {cache}/models/faulty: No space left on device (errno 28); "
                                 "nothing was cached: free space and rerun the same command")
    assert raised.value.exit_code == 1
    assert "Traceback" not in capfd.readouterr().err
    assert list((cache / "models").iterdir()) == []


def test_training_into_a_full_tmpfs(tmp_path, capfd, monkeypatch):
    """A real full disk: the cache on a 512 KB tmpfs, which digits-cnn's weights (1.5 MB) do not
    fit. The training process's safetensors write fails after ~20 s of training: one line,
    exit 1, nothing left on the tmpfs but the empty models directory."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        monkeypatch.setenv(suite.paths.CACHE_ENV, str(mount))
        assert advsuite(*EVALUATE, "--output", str(tmp_path / "run")) == 1
        err = capfd.readouterr().err  # this process's and the training process's
        assert "Traceback" not in err and err.splitlines()[-1] == (
            f"advsuite: could not write {mount}/models/{ENTRY}: No space left on device (errno 28); "
            "nothing was cached: free space and rerun the same command"), err
        assert [path.relative_to(mount) for path in mount.rglob("*")] == [Path("models")]
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_ctrl_c_while_a_builtin_trains_is_one_line_and_leaves_no_staging(tmp_path):
    """Ctrl-C from a terminal reaches the whole process group: the one the key came to while the
    training process loaded torch printed that import's traceback. Now the training process
    ignores it and this process says it once, stops it, and removes its staging directory."""
    import signal
    import sys

    env = {**os.environ, suite.paths.CACHE_ENV: str(tmp_path / "cache")}
    # SIGINT at its default, as under a terminal (a child inherits an ignored SIGINT: a CI run in
    # the background has it ignored, and the key then reached nothing).
    run = subprocess.Popen([sys.executable, "-m", "suite", *EVALUATE, "--output", str(tmp_path / "run")], env=env,
                           start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    models, start = tmp_path / "cache" / "models", time.monotonic()
    while not (models.is_dir() and any(models.iterdir())) and time.monotonic() - start < 120:
        time.sleep(0.02)
    time.sleep(0.3)  # the training process is loading torch
    os.killpg(run.pid, signal.SIGINT)
    out = run.communicate(timeout=120)[0]
    assert run.returncode == 130 and "Traceback" not in out and out.count("interrupted") == 1, out
    assert list(models.iterdir()) == []  # nothing cached, no staging left


def test_a_staging_directory_no_process_holds_is_swept_by_the_next_stager(tmp_path):
    """A stager killed outright (SIGKILL) leaves its staging directory: the next one removes it,
    and never one a live stager holds, nor one made an instant ago (not yet locked)."""
    from suite.paths import lock_directory

    dead, live, fresh = (tmp_path / f".{ENTRY}-{tag}" for tag in ("dead", "live", "fresh"))
    for path in (dead, live, fresh):
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"half")
    other = tmp_path / ".sentiment-tiny-v3-dead"
    other.mkdir()
    old = time.time() - 2 * builtin_cache.STALE_SECONDS
    for path in (dead, live, other):
        os.utime(path, (old, old))
    held = lock_directory(live, wait=False)
    try:
        builtin_cache._sweep_stale(tmp_path, ENTRY)
    finally:
        os.close(held)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (live, fresh, other))


COUNTED = '''
import os, time
from pathlib import Path


def train(directory: Path) -> None:
    with open(os.environ["TRAINED_LOG"], "a") as log:
        log.write(f"{directory.name} {os.getpid()}\\n")
    time.sleep(1.5)
    (directory / "model.safetensors").write_bytes(b"weights")


def outer(directory: Path) -> None:
    """Starts from another entry, as digits-cnn-bat starts from digits-cnn-at."""
    from suite.models.builtin_cache import load_cached

    load_cached("builtin:inner", "inner-v1", "counted_recipes:train", lambda path: path)
    train(directory)
'''


@pytest.fixture
def counted(tmp_path, monkeypatch):
    """Recipes that log each training (``TRAINED_LOG``), in a cache of their own."""
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "counted_recipes.py").write_text(COUNTED)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "recipes"), os.environ["PYTHONPATH"]]))
    monkeypatch.setenv("TRAINED_LOG", str(tmp_path / "trained.log"))
    monkeypatch.setenv(suite.paths.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / "models", tmp_path / "trained.log"


def test_processes_that_need_one_untrained_builtin_train_it_once(counted):
    """Under ``accelerate launch`` every process may need the same built-in before it is
    cached: one trains it, the others wait for it and load it (each trained its own copy
    before). No lock file or staging directory is left."""
    import sys

    models, log = counted
    code = "from suite.models.builtin_cache import cached_model; print(cached_model('x-v1', 'counted_recipes:train'))"
    processes = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    found = [process.communicate(timeout=120)[0].strip() for process in processes]
    assert [process.returncode for process in processes] == [0] * 3
    assert found == [str(models / "x-v1")] * 3
    assert len(log.read_text().splitlines()) == 1, log.read_text()
    assert sorted(path.name for path in models.iterdir()) == ["x-v1"]


def test_an_unfit_entry_retrained_from_another_unfit_entry_does_not_wait_on_itself(counted):
    """Retraining held a lock on the whole cache while the training process, which starts
    from another built-in, needed the same lock to retrain that one: it waited forever. Each
    entry has its own lock now."""
    import sys

    from suite.models.weights import record_hashes

    models, log = counted
    for name in ("inner-v1", "outer-v1"):
        (models / name).mkdir(parents=True)
        (models / name / "model.safetensors").write_bytes(b"old weights")
        record_hashes(models / name)  # as an older version recorded it: the entry's name missing
        (models / name / "DONE").write_text("ok\n")
    code = ("from suite.models.builtin_cache import load_cached; "
            "print(load_cached('builtin:outer', 'outer-v1', 'counted_recipes:outer', lambda path: path)[1])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == str(models / "outer-v1"), done.stderr
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["entry", "entry"]  # inner, then outer
    assert sorted(path.name for path in models.iterdir()) == ["inner-v1", "outer-v1"]
    for name in ("inner-v1", "outer-v1"):
        assert builtin_cache.entry_problem(models / name, name) is None


def test_prefetch_models_makes_a_builtin_ready_and_names_its_weights(digits_model, capsys):
    """``advsuite prefetch --models`` before ``accelerate launch``: the built-in is cached, and
    the line names the weights every process will then load."""
    assert advsuite("prefetch", "--models", "builtin:digits-cnn") == 0
    assert capsys.readouterr().out.strip() == f"builtin:digits-cnn: ready (weights {digits_model.weights_hash()})"
