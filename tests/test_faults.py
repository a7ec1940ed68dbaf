"""I/O fault sweep: the system refusing a write at any point of a run (no space, quota, read-only...).

Every write of the suite commits through :func:`suite.paths.sync` (atomic writes and record
appends alike), so counting its calls counts the run's write points. For every write point k
of a small ``evaluate`` (and of a ``leaderboard add``) an ``OSError(ENOSPC)`` is raised at the
k-th one, the way a full disk raises it, and the test checks what a user sees and what is left:

* one line on stderr naming the file and what is kept, no traceback, exit status 1;
* no temporary file anywhere under the output directory;
* the same command without the fault ends with exactly the uninterrupted run's records and
  numbers (timing fields aside); a failed ``leaderboard add`` leaves the leaderboard byte for byte.

Where the tests run as root, one real case fills a small tmpfs while ``records.jsonl`` grows.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import suite.errors
import suite.paths
from suite.cli.main import main
from suite.errors import WriteError, is_write_fault

from helpers import without_keys

EVALUATE = ("-q", "evaluate", "--model", "builtin:digits-cnn", "--n", "8", "--attacks", "fgm_linf",
            "--batch-size", "4", "--log-samples")
#: Fields that differ between two runs of the same evaluation (when and how long, not what).
TIMING = {"seconds", "clean_seconds", "compute_seconds", "created"}


def advsuite(*args: str) -> int:
    with pytest.raises(SystemExit) as caught:
        main(list(args))
    return caught.value.code


class Faults:
    """A :func:`suite.paths.sync` that counts its calls and fails the ``fail_at``-th (from 1);
    with ``under``, only the calls for files under that directory count (and can fail)."""

    def __init__(self, fail_at: int | None = None, under: Path | None = None) -> None:
        self.fail_at, self.calls, self.failed, self.under = fail_at, 0, None, under
        self.real = suite.paths.sync

    def __call__(self, handle) -> None:
        if self.under is not None and not Path(handle.name).is_relative_to(self.under):
            return self.real(handle)
        self.calls += 1
        if self.calls == self.fail_at:
            self.failed = handle.name
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), handle.name)
        self.real(handle)


def without_timing(value):
    return without_keys(value, TIMING)


def outcome(directory: Path) -> tuple[list, dict]:
    """The run's records (in file order) and results, timing fields aside."""
    records = [without_timing(json.loads(line)) for line in (directory / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
    return records, without_timing(json.loads((directory / "results.json").read_text()))


def temporaries(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.name.endswith(".tmp")]


def target_of(written: str) -> Path:
    """The file a write was for: ``dir/.name.<pid>.tmp`` stages ``dir/name``; an append writes the file itself."""
    path = Path(written)
    return path.parent / path.name[1:].rsplit(".", 2)[0] if path.name.endswith(".tmp") else path


def assert_one_line(err: str, where: Path) -> None:
    """The failure is the last line of stderr, said once (a warning of the run may come before it)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert lines and lines[-1].startswith("advsuite: could not write "), err
    assert sum("could not write" in line for line in lines) == 1, err
    assert "No space left on device (errno 28)" in lines[-1] and "free space and rerun the same command" in lines[-1], err
    assert str(where) in lines[-1], err


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny convolutions run faster on one thread (and the sweep runs the model ~40 times)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, digits_model):
    """The uninterrupted run: its outcome and how many write points it has."""
    directory = tmp_path_factory.mktemp("faults") / "reference"
    counter = Faults()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(suite.paths, "sync", counter)
        assert advsuite(*EVALUATE, "--output", str(directory)) == 0
    return directory, counter.calls, outcome(directory)


def test_write_error_is_one_line_with_escaped_path():
    error = WriteError("runs/x\x1b[2J/records.jsonl", OSError(errno.ENOSPC, "No space left on device"),
                       "finished records are kept", "rerun the same command to resume")
    assert str(error) == ("could not write runs/x\\x1b[2J/records.jsonl: No space left on device (errno 28); "
                          "finished records are kept: free space and rerun the same command to resume")
    assert error.exit_code == 1
    with pytest.MonkeyPatch.context() as patch:  # a command with --overwrite: its rerun would clear what is kept
        patch.setattr(suite.errors, "OVERWRITING", [True])
        assert str(error).endswith("free space and rerun the same command without --overwrite to resume")
    assert all(is_write_fault(OSError(number, "x")) for number in
               (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO))
    assert not is_write_fault(OSError(errno.ENOENT, "x")) and not is_write_fault(ValueError())


@pytest.mark.parametrize("fault", [errno.ENOSPC, errno.EIO])
def test_atomic_write_and_append_leave_no_debris(tmp_path, fault):
    target, log = tmp_path / "file.json", tmp_path / "log.jsonl"
    suite.paths.atomic_write_text(target, "old")
    suite.paths.append_text(log, "one\n")

    def fail(handle):
        raise OSError(fault, os.strerror(fault), handle.name)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(suite.paths, "sync", fail)
        with pytest.raises(WriteError, match="could not write .*file.json"):
            suite.paths.atomic_write_text(target, "new")
        with pytest.raises(WriteError, match="could not write .*log.jsonl.*finished records are kept"):
            suite.paths.append_text(log, "two\n")
    assert target.read_text() == "old" and log.read_text() == "one\n"  # the old file, no partial line
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file.json", "log.jsonl"]


def test_evaluate_fault_sweep(reference, tmp_path, capsys):
    """ENOSPC at every write point of an evaluation: one line, exit 1, no debris, the rerun
    ends with the uninterrupted run's records and numbers."""
    _, points, expected = reference
    assert points >= 20, f"only {points} write points: the sweep would not cover the run"
    capsys.readouterr()
    for k in range(1, points + 1):
        directory = tmp_path / f"k{k}"
        faults = Faults(fail_at=k)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(suite.paths, "sync", faults)
            code = advsuite(*EVALUATE, "--output", str(directory))
        err = capsys.readouterr().err
        assert code == 1, f"write point {k} ({faults.failed}): exit {code}\n{err}"
        assert_one_line(err, target_of(faults.failed))
        assert temporaries(tmp_path) == [], f"write point {k}: debris {temporaries(tmp_path)}"
        if k == 1:  # its run.json: the directory it would have made is not left behind, empty
            assert ".run.json." in faults.failed and not directory.exists(), faults.failed
        assert advsuite(*EVALUATE, "--output", str(directory)) == 0, capsys.readouterr().err
        capsys.readouterr()
        assert outcome(directory) == expected, f"write point {k} ({faults.failed}): the rerun differs"
        assert temporaries(tmp_path) == []
        shutil.rmtree(directory)
    print(f"evaluate fault sweep: {points} write points, each failed once and resumed")


def test_leaderboard_add_fault_sweep(reference, tmp_path, capsys):
    """ENOSPC at every write of a first ``leaderboard add`` (the board, then the page beside it)
    and of an add to an existing board: one line, exit 1, the board byte for byte as before
    (or absent), no temporary file; the same command then succeeds."""
    run, _, _ = reference
    add = ("-q", "leaderboard", "add", str(run / "results.json"), "--leaderboard")
    counter = Faults()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(suite.paths, "sync", counter)
        assert advsuite(*add, str(tmp_path / "clean" / "leaderboard.json")) == 0
    points, expected = counter.calls, (tmp_path / "clean").iterdir()
    expected = {path.name: path.read_bytes() for path in expected}
    assert points >= 3, f"only {points} write points in a first add (leaderboard, page, schema)"
    capsys.readouterr()
    for k in range(1, points + 1):
        board = tmp_path / f"k{k}" / "leaderboard.json"
        faults = Faults(fail_at=k)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(suite.paths, "sync", faults)
            code = advsuite(*add, str(board))
        err = capsys.readouterr().err
        assert code == 1, err
        assert_one_line(err, target_of(faults.failed))
        assert ("the leaderboard is unchanged" in err) == (k == 1) and (k == 1) != board.exists(), err
        assert temporaries(tmp_path) == []
        assert advsuite(*add, str(board)) == 0
        written = {path.name: path.read_bytes() for path in board.parent.iterdir()}
        assert written.keys() == expected.keys() and written["index.html"] == expected["index.html"]
    board = tmp_path / "k1" / "leaderboard.json"
    before = board.read_bytes()
    with pytest.MonkeyPatch.context() as patch:  # the same results again: nothing to write, a full disk is no matter
        patch.setattr(suite.paths, "sync", Faults(fail_at=1))
        assert advsuite(*add, str(board)) == 0
    assert board.read_bytes() == before
    from suite.report import leaderboard

    board.write_text(leaderboard.dumps(leaderboard.empty()))  # an add to an existing board that writes it
    before = board.read_bytes()
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(suite.paths, "sync", Faults(fail_at=1))
        assert advsuite(*add, str(board)) == 1
    assert board.read_bytes() == before and "the leaderboard is unchanged" in capsys.readouterr().err
    assert temporaries(tmp_path) == []
    print(f"leaderboard add fault sweep: {points} write points")


@pytest.mark.parametrize("fault", [errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EIO])
def test_every_refused_write_is_one_line_with_status_1(tmp_path, capsys, fault):
    """Another command, each errno the system refuses a write with: one line naming the file and
    the errno, no traceback, status 1, nothing left behind."""
    output = tmp_path / "schema\x1b.json"

    def refuse(handle):
        raise OSError(fault, os.strerror(fault), handle.name)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(suite.paths, "sync", refuse)
        assert advsuite("leaderboard", "schema", "--output", str(output)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"advsuite: could not write {tmp_path}/schema\\x1b.json: {os.strerror(fault)} (errno {fault}); ")
    assert list(tmp_path.iterdir()) == []


def test_a_refused_directory_write_is_one_line(tmp_path, capsys, monkeypatch):
    """A write outside the suite's writers (here: creating the output directory) is one line too."""
    from pathlib import Path as RealPath

    real = RealPath.mkdir

    def full(self, *args, **kwargs):  # only the output directory's file system is full
        if not str(self).startswith(str(tmp_path)):
            return real(self, *args, **kwargs)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))

    monkeypatch.setattr(RealPath, "mkdir", full)
    code = advsuite(*EVALUATE, "--output", str(tmp_path / "run"))
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith(f"advsuite: could not write {tmp_path}/run: No space left on device (errno 28)")


def test_records_on_a_full_tmpfs(tmp_path, capsys):
    """A real full disk: a tmpfs with two pages free, so ``records.jsonl`` fills it mid-run.
    One line, exit 1, whole lines only; with space freed the same command resumes to the numbers
    of an uninterrupted run."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    command = ("-q", "evaluate", "--model", "builtin:digits-cnn", "--n", "24", "--attacks", "fgm_linf", "--batch-size", "4")
    try:
        assert advsuite(*command, "--output", str(tmp_path / "reference")) == 0
        page = os.sysconf("SC_PAGE_SIZE")
        filler = mount / "filler"
        stat = os.statvfs(mount)
        filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 2 * page))  # run.json and one page of records
        directory = mount / "run"
        capsys.readouterr()
        assert advsuite(*command, "--output", str(directory)) == 1
        err = capsys.readouterr().err
        assert_one_line(err, directory / "records.jsonl")
        assert "finished records are kept" in err
        assert temporaries(mount) == []
        data = (directory / "records.jsonl").read_bytes()
        assert data and data.endswith(b"\n"), "no record was kept, or a partial line was left"
        [json.loads(line) for line in data.splitlines()]
        filler.unlink()  # space freed: the same command resumes
        assert advsuite(*command, "--output", str(directory)) == 0, capsys.readouterr().err
        assert outcome(directory) == outcome(tmp_path / "reference")
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def remedy(fault: int) -> str:
    from suite.errors import WRITE_REMEDIES

    return f"{WRITE_REMEDIES[fault]} and rerun the same command"


@pytest.mark.parametrize("fault", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_refused_export_says_what_was_written(reference, tmp_path, capsys, fault):
    """``export --to``: a directory that cannot be made (nothing was written), or a card that
    cannot be (each file whole or as it was): one line, status 1, no temporary file; the same
    command then writes the card."""
    run, _, _ = reference
    card = tmp_path / "card"
    real = Path.mkdir

    def refused(self, *args, **kwargs):
        if self == card:
            raise OSError(fault, os.strerror(fault), str(self))
        return real(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "mkdir", refused)
        assert advsuite("export", str(run), "--to", str(card)) == 1
    assert capsys.readouterr().err == (f"advsuite: could not write {card}: {os.strerror(fault)} (errno {fault}); "
                                       f"nothing was written: {remedy(fault)}\n")
    assert list(tmp_path.iterdir()) == []
    card.mkdir()
    (card / "README.md").write_text("the old card\n")

    def refuse(handle):
        raise OSError(fault, os.strerror(fault), handle.name)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(suite.paths, "sync", refuse)
        assert advsuite("export", str(run), "--to", str(card)) == 1
    assert capsys.readouterr().err == (
        f"advsuite: could not write {card}/README.md: {os.strerror(fault)} (errno {fault}); the files written before "
        f"it are whole and the others are as they were: {remedy(fault)}\n")
    assert [path.name for path in card.iterdir()] == ["README.md"]
    assert (card / "README.md").read_text() == "the old card\n"
    assert advsuite("export", str(run), "--to", str(card)) == 0
    assert "model-index" in (card / "README.md").read_text() and "the old card" in (card / "README.md").read_text()


@pytest.mark.parametrize("fault", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_refused_wordnet_install_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch, fault):
    """``prefetch --wordnet-from``: the disk refuses the third file mid-copy. One line, status 1,
    nothing left in the cache (no staging directory, no partial file); the same command then
    installs WordNet."""
    from suite.attacks.text.resources import WORDNET_FILES

    source = tmp_path / "dict"
    source.mkdir()
    for name in WORDNET_FILES:  # install_wordnet copies these files as they are
        (source / name).write_text(f"{name}\n")
    # ... once they read as WordNet: 'dog' in the noun index, at an offset of the noun data
    (source / "index.noun").write_text("dog n 1 0 1 0 00000000\n")
    (source / "data.noun").write_text("00000000 05 n 01 dog 0 000 | a dog\n")
    cache = tmp_path / "cache"
    monkeypatch.setenv(suite.paths.CACHE_ENV, str(cache))
    real, copied = shutil.copyfile, []

    def copy_then_refuse(source, target, **kwargs):
        copied.append(target)
        if len(copied) == 3:
            Path(target).write_text("half")
            raise OSError(fault, os.strerror(fault))
        return real(source, target, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shutil, "copyfile", copy_then_refuse)
        assert advsuite("prefetch", "--wordnet-from", str(source)) == 1
    wordnet = cache / "nltk_data" / "corpora" / "wordnet"
    assert capsys.readouterr().err == (f"advsuite: could not write {wordnet}: {os.strerror(fault)} (errno {fault}); "
                                       f"WordNet is not installed and nothing was left in the cache: {remedy(fault)}\n")
    assert list(wordnet.parent.iterdir()) == []
    assert advsuite("prefetch", "--wordnet-from", str(source)) == 0
    assert (wordnet / "lexnames").is_file() and (wordnet / "data.noun").read_text() == (source / "data.noun").read_text()


def test_a_refused_download_in_prefetch_is_one_line(tmp_path, capsys, monkeypatch):
    """``prefetch --attacks``: a resource fetched but refused by the cache's disk is one line,
    status 1 (not "could not be fetched", which would send the user to the network)."""
    import suite.attacks.text.offline
    import suite.attacks.text.resources as resources

    cache = tmp_path / "cache"
    monkeypatch.setenv(suite.paths.CACHE_ENV, str(cache))
    monkeypatch.setattr(resources.Resource, "available", lambda self: False)
    monkeypatch.setattr(suite.attacks.text.offline, "offline", lambda: False)

    def full(resource):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(cache / "nltk_data" / f"{resource.name}.zip"))

    monkeypatch.setattr(resources, "_fetch_nltk", full)
    assert advsuite("prefetch", "--attacks", "pwws") == 1
    err = capsys.readouterr().err
    assert err.startswith(f"advsuite: could not write {cache}/nltk_data/") and err.count("\n") == 1, err
    assert err.endswith("(errno 28); the resources fetched before it are cached: free space and rerun the same "
                        "command\n"), err


def test_a_full_disk_at_the_first_epochs_state_keeps_the_run_and_the_rerun_finishes_it(tmp_path, capsys, monkeypatch):
    """The first epoch wrote its model, log and card, then its state write was refused: the run
    file stays, so the rerun claims what it left (training that epoch again) instead of refusing a
    directory of "no training run"; it ends with the uninterrupted run's weights."""
    from safetensors.torch import load_file

    def argv(output: Path) -> list[str]:
        return ["train", "--model", "timm:test_resnet", "--dataset", "builtin:digits", "--method", "standard",
                "--epochs", "1", "--batch-size", "64", "--val-n", "8", "--output", str(output)]

    assert advsuite(*argv(tmp_path / "whole")) == 0
    out = tmp_path / "full"

    class StateRefused(Faults):
        def __call__(self, handle) -> None:
            if target_of(handle.name).name == "state.safetensors":
                self.failed = handle.name
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), handle.name)
            self.real(handle)

    with monkeypatch.context() as patch:
        patch.setattr(suite.paths, "sync", StateRefused())
        capsys.readouterr()
        assert advsuite(*argv(out)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "No space left on device" in err.splitlines()[-1], err
    assert (out / "train_run.json").is_file() and (out / "model.safetensors").is_file()
    assert advsuite(*argv(out)) == 0, capsys.readouterr().err
    whole, again = load_file(str(tmp_path / "whole" / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert whole.keys() == again.keys() and all(torch.equal(whole[key], again[key]) for key in whole)


def test_a_damaged_training_log_or_state_is_refused_not_misread(tmp_path, capsys):
    """The summary reads the best epoch's line by its number: with the first line deleted it named
    epoch 3's numbers as the best epoch's, and with the log deleted it raised an IndexError. The
    log of a finished run must hold each finished epoch once, in order, or the rerun is refused."""
    out = tmp_path / "tr"
    argv = ["train", "--model", "timm:test_resnet", "--dataset", "builtin:digits", "--method", "standard",
            "--epochs", "2", "--batch-size", "64", "--val-n", "8", "--output", str(out)]
    assert advsuite(*argv) == 0
    log = out / "train_log.jsonl"
    lines = log.read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2]
    for damaged in ([lines[1]], [lines[1], lines[0]], None):
        if damaged is None:
            log.unlink()
        else:
            log.write_text("".join(line + "\n" for line in damaged))
        capsys.readouterr()
        assert advsuite(*argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.count("\n") == 1, err
        assert "does not hold one line for each of the 2 finished epochs" in err and "--overwrite" in err, err
    log.write_text("".join(line + "\n" for line in lines))  # put back: the run is whole again
    assert advsuite(*argv) == 0
    # The resume state, readable but edited: its progress, or a tensor of another shape.
    from safetensors import safe_open
    from safetensors.torch import save_file

    state = out / "state.safetensors"
    whole = state.read_bytes()
    with safe_open(str(state), framework="pt") as handle:
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}
        progress = json.loads(handle.metadata()["progress"])
    weight = next(key for key in tensors if key.startswith("model.") and tensors[key].ndim == 4)
    for edited, metadata in (
        (tensors, {"progress": json.dumps([1, 2])}),
        (tensors, {"progress": json.dumps({key: v for key, v in progress.items() if key != "optimiser"})}),
        ({**tensors, weight: tensors[weight][:1].clone()}, {"progress": json.dumps(progress)}),
    ):
        save_file(edited, str(state), metadata=metadata)
        capsys.readouterr()
        assert advsuite(*argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.count("\n") == 1, err
        assert "cannot resume from" in err and "edited or damaged; use --overwrite" in err, err
    # The state deleted: the rerun started over and cut the log of 2 epochs to nothing, without a word.
    state.unlink()
    log_text = log.read_text()
    capsys.readouterr()
    assert advsuite(*argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds a training log of 2 epochs but no state.safetensors" in err, err
    assert log.read_text() == log_text
    state.write_bytes(whole)
    assert advsuite(*argv) == 0


def test_a_kill_between_the_commit_and_best_leaves_best_to_the_resume(tmp_path, capsys):
    """``best/`` is written after an epoch's commit (before it, a kill left ``best/`` holding an
    epoch the rerun trains again, which differs where training is not bit-reproducible). A kill
    right after the commit leaves ``best/`` behind or absent; the rerun, whose loaded weights are
    the best epoch's, writes it again."""
    from safetensors.torch import load_file

    out = tmp_path / "tr"
    argv = ["train", "--model", "timm:test_resnet", "--dataset", "builtin:digits", "--method", "standard",
            "--epochs", "1", "--batch-size", "64", "--val-n", "8", "--output", str(out)]
    assert advsuite(*argv) == 0
    shutil.rmtree(out / "best")  # killed inside best's swap, after the commit
    assert advsuite(*argv) == 0, capsys.readouterr().err
    model, best = load_file(str(out / "model.safetensors")), load_file(str(out / "best" / "model.safetensors"))
    assert model.keys() == best.keys() and all(torch.equal(model[key], best[key]) for key in model)


@pytest.mark.parametrize("refused", ["certificate.json", "certificate.png"])
def test_a_refused_certificate_write_leaves_the_old_pair_whole(tmp_path, capsys, monkeypatch, refused):
    """``certificate.json`` and ``certificate.png`` change together or not at all: the JSON's
    write refused after the plot was drawn left the new certificate's plot beside the old one's
    numbers before (or, the other way round, the old plot beside the new numbers)."""
    out = tmp_path / "cert"
    base = ["certify", "--model", "builtin:digits-cnn", "--n", "4", "--no-attacks", "--output", str(out)]
    assert advsuite(*base, "--eps", "0.1") == 0
    before = {name: (out / name).read_bytes() for name in ("certificate.json", "certificate.png")}

    class Refused(Faults):
        def __call__(self, handle) -> None:
            if refused in Path(handle.name).name:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), handle.name)
            self.real(handle)

    with monkeypatch.context() as patch:
        patch.setattr(suite.paths, "sync", Refused())
        capsys.readouterr()
        assert advsuite(*base, "--eps", "0.1,0.5") == 1
    assert "No space left on device" in capsys.readouterr().err
    assert {name: (out / name).read_bytes() for name in before} == before
    assert not temporaries(out)
    assert advsuite(*base, "--eps", "0.1,0.5") == 0
    assert json.loads((out / "certificate.json").read_text())["rows"][1]["eps"] == 0.5
    assert (out / "certificate.png").read_bytes() != before["certificate.png"]
