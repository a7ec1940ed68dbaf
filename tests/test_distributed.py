"""Multi-process runs: sharding, per-process records and their merge, and a real 2-process
``accelerate launch`` on the CPU (gloo) compared with one process, including a killed process
and a resume with a different number of processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.evaluation.distributed import Processes
from suite.evaluation.records import RecordStore

from helpers import without_keys

RECIPE = """
name: dist
seed: 0
batch_size: 4
tasks:
  - name: text
    model: builtin:sentiment-tiny
    dataset: {spec: builtin:sentiment, split: test, n: 24}
    attacks: [deepwordbug]
    adversary: {kinds: [none, cal, opt], split: validation, n: 40, opt_n: 10, maxiter: 3}
  - name: vision
    model: builtin:digits-cnn
    dataset: {spec: builtin:digits, split: test, n: 48}
    attacks: [{name: pgd_linf, eps: 0.03, steps: 10}]
"""
#: Timing and provenance differ between any two runs; everything else must not.
VOLATILE = {"seconds", "clean_seconds", "compute_seconds", "created", "provenance"}


def _record(example_id: str, kind: str = "clean", **extra) -> dict:
    return {"kind": kind, "id": example_id, "label": 0, "prediction": 0, "correct": 1.0, **extra}


def test_shards_are_disjoint_round_robin_and_cover_everything():
    items = list(range(11))
    shards = [Processes(rank=r, world=3).shard(items) for r in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8]]
    assert Processes().shard(items) == items


def test_per_process_files_resume_with_any_process_count_and_merge_in_run_order(tmp_path):
    # What a killed 2-process run leaves: one file per process, the last line of one cut short.
    for rank, ids in ((0, ["a", "c"]), (1, ["b"])):
        store = RecordStore(tmp_path, {"seed": 0}, Processes(rank=rank, world=2))
        assert store.path.name == f"records.rank{rank}.jsonl"
        store.path.parent.mkdir(exist_ok=True)
        (tmp_path / "run.json").write_text(json.dumps({"seed": 0}))
        store.append(_record(i) for i in ids)
    with open(tmp_path / "records.rank1.jsonl", "a") as handle:
        handle.write('{"kind": "clean", "id": "d", "la')
    single = RecordStore(tmp_path, {"seed": 0})
    single.check(overwrite=False)
    single.open(overwrite=False)
    assert sorted(key[2] for key in single.records) == ["a", "b", "c"]
    single.append([_record("d")])
    single.merge([("clean", "", i) for i in "dcba"])
    assert not list(tmp_path.glob("records.rank*.jsonl"))
    merged = [json.loads(line)["id"] for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert merged == ["run", "d", "c", "b", "a"]  # whose records, then the records in run order


def test_unknown_per_process_records_are_refused(tmp_path):
    (tmp_path / "records.rank0.jsonl").write_text(json.dumps(_record("a")) + "\n")
    from suite.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown run"):
        RecordStore(tmp_path, {"seed": 0}).check(overwrite=False)


# --------------------------------------------------------------------------- real launches


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env() -> dict[str, str]:
    # One thread per process in both runs, as accelerate sets for several processes (CPU
    # kernels may sum in another order with another thread count).
    return {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1"}


#: Two processes of a world started by hand: the second handler registered (the check) runs
#: first, after the module's own, so it sees whether the process group is closed at exit.
_AT_EXIT = """
import atexit, torch.distributed as dist
atexit.register(lambda: print("closed at exit:", not dist.is_initialized(), flush=True))
from suite.evaluation import distributed
assert distributed.current().world == 2 and dist.is_initialized()
distributed.current().barrier()
"""


def test_a_launched_process_closes_its_process_group_before_the_interpreter_ends():
    # Left open, gloo's threads outlived the interpreter: 2 of 80 two-process runs ended in
    # "terminate called without an active exception" (SIGABRT) after finishing their work.
    env = {**_env(), "MASTER_PORT": str(_free_port()), "WORLD_SIZE": "2"}
    runs = [subprocess.Popen([sys.executable, "-c", _AT_EXIT], env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    for run in runs:
        out = run.communicate(timeout=120)[0]
        assert run.returncode == 0 and "closed at exit: True" in out, out


def _launch(recipe: Path | None, output: Path, processes: int, *command_args: str) -> subprocess.Popen:
    """``advsuite run RECIPE`` (or ``advsuite COMMAND_ARGS``) in 1 process or under accelerate launch."""
    suite_args = ["-m", "suite", *(command_args or ("run", str(recipe))), "--output", str(output)]
    if processes == 1:
        command = [sys.executable, *suite_args]
    else:  # the invocation docs/distributed.md documents for CPU-only machines
        command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
                   str(processes), "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                   "--main_process_ip", "127.0.0.1", "--main_process_port", str(_free_port()), *suite_args]
    return subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out + err


def _strip(value):
    return without_keys(value, VOLATILE)


def _outputs(directory: Path) -> dict[str, tuple[dict, list[dict]]]:
    found = {}
    for task in ("text", "vision"):
        results = json.loads((directory / task / "results.json").read_text())
        lines = (directory / task / "records.jsonl").read_text().splitlines()
        found[task] = (results, [json.loads(line) for line in lines])
    return found


@pytest.fixture(scope="module")
def single_run(tmp_path_factory, sentiment_model, digits_model):
    # The built-in models are trained in this process first (as every other test has them):
    # trained under OMP_NUM_THREADS=1 they would round differently and differ slightly.
    root = tmp_path_factory.mktemp("dist")
    recipe = root / "dist.yaml"
    recipe.write_text(RECIPE)
    code, log = _finish(_launch(recipe, root / "one", 1))
    assert code == 0, log
    return recipe, _outputs(root / "one")


@pytest.mark.slow
def test_two_process_launch_matches_one_process(single_run, tmp_path):
    recipe, expected = single_run
    code, log = _finish(_launch(recipe, tmp_path / "two", 2))
    assert code == 0, log
    got = _outputs(tmp_path / "two")
    assert not list((tmp_path / "two").glob("*/records.rank*.jsonl"))
    for task, (results, records) in got.items():
        want_results, want_records = expected[task]
        assert results["provenance"]["num_processes"] == 2 and want_results["provenance"]["num_processes"] == 1
        assert _strip(results) == _strip(want_results)
        # The same records in the same order (the merge writes a one-process run's order).
        assert _strip(records) == _strip(want_records)
        assert results["compute_seconds"] > 0
    assert got["text"][0]["adversary"]["opt"]["deepwordbug"]["attack_runs"] >= 2
    assert got["vision"][0]["attacks"]["pgd_linf"]["n_attacked"] > 0
    # Only the main process prints the table.
    assert log.count("results:") == 1


def _rank_pid(launcher: int, rank: int) -> int | None:
    """The pid of the launched process with ``RANK=rank`` (a descendant of ``launcher``)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        parent = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        if f"RANK={rank}".encode() in environ and b"WORLD_SIZE=2" in environ and _descends(parent, launcher):
            return int(entry.name)
    return None


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False
        pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
    return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc to find a launched process")
def test_killed_process_stops_the_run_keeps_records_and_resumes_with_one_process(single_run, tmp_path):
    recipe, expected = single_run
    output = tmp_path / "killed"
    launcher = _launch(recipe, output, 2)
    shard = output / "text" / "records.rank1.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and launcher.poll() is None:
        if shard.exists() and '"kind": "attack"' in shard.read_text():
            break
        time.sleep(0.2)
    victim = _rank_pid(launcher.pid, 1)
    assert victim is not None and launcher.poll() is None, "the run ended before process 2 attacked anything"
    os.kill(victim, signal.SIGKILL)
    code, log = _finish(launcher)
    assert code != 0
    # The surviving process says, in one line, that the run stopped and how to resume.
    assert "advsuite (process 1 of 2)" in log and "rerun the same command" in log
    kept = [json.loads(line) for line in shard.read_text().splitlines() if line.strip()]
    assert any(record["kind"] == "attack" for record in kept)
    assert not (output / "text" / "results.json").exists()
    # Resume with ONE process: what process 2 finished is reused, not redone.
    code, log = _finish(_launch(recipe, output, 1))
    assert code == 0, log
    got = _outputs(output)
    merged = {(r["kind"], r.get("attack", ""), r["id"]): r for r in got["text"][1]}
    for record in kept:
        assert merged[(record["kind"], record.get("attack", ""), record["id"])] == record
    for task, (results, records) in got.items():
        assert _strip(results) == _strip(expected[task][0])
        assert _strip(records) == _strip(expected[task][1])


@pytest.mark.slow
def test_two_process_evaluate_matches_one_process(tmp_path, digits_model):
    args = ("evaluate", "--model", "builtin:digits-cnn", "--attacks", "fgm_linf,pgd_linf", "--eps", "0.05",
            "--limit", "30", "--batch-size", "4")
    runs = {}
    for processes in (1, 2):
        code, log = _finish(_launch(None, tmp_path / str(processes), processes, *args))
        assert code == 0, log
        results = json.loads((tmp_path / str(processes) / "results.json").read_text())
        records = [json.loads(line) for line in (tmp_path / str(processes) / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
        assert results["provenance"]["num_processes"] == processes
        runs[processes] = (_strip(results), _strip(records))
    assert runs[1] == runs[2]
    assert runs[1][0]["attacks"]["pgd_linf"]["n_attacked"] > 0


#: Test-only ``sitecustomize`` for launched processes: the tests' netguard, then ENOSPC at the
#: ADVSUITE_TEST_FAULT_AT-th write (:func:`suite.paths.sync`) of the process with that RANK.
FAULT_HOOK = '''
import errno, importlib.util, os

_spec = importlib.util.spec_from_file_location("advsuite_netguard", {netguard!r})
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))
if os.environ.get("RANK") is not None and os.environ.get("RANK") == os.environ.get("ADVSUITE_TEST_FAULT_RANK"):
    import suite.paths

    _real, _calls = suite.paths.sync, []

    def _sync(handle):
        _calls.append(handle.name)
        if len(_calls) == int(os.environ["ADVSUITE_TEST_FAULT_AT"]):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), handle.name)
        _real(handle)

    suite.paths.sync = _sync
'''


def test_a_refused_write_under_launch_is_said_once_and_the_run_resumes(tmp_path, monkeypatch, digits_model):
    """ENOSPC at process 2's second write (its records file) under a 2-process launch: process 2
    says it in one line, once, with no traceback; the other process stops as it does when a
    worker dies; nothing half-written is left, and one process resumes to the reference numbers."""
    args = ("evaluate", "--model", "builtin:digits-cnn", "--attacks", "fgm_linf", "--eps", "0.05",
            "--limit", "16", "--batch-size", "4")
    code, log = _finish(_launch(None, tmp_path / "reference", 1, *args))
    assert code == 0, log
    expected = [_strip(json.loads((tmp_path / "reference" / name).read_text())) if name.endswith(".json") else
                _strip([json.loads(line) for line in (tmp_path / "reference" / name).read_text().splitlines()
                        if '"kind": "run"' not in line])
                for name in ("results.json", "records.jsonl")]
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FAULT_HOOK.format(netguard=str(Path(__file__).parent / "netguard"
                                                                          / "sitecustomize.py")))
    output = tmp_path / "two"
    with monkeypatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(hook), os.environ["PYTHONPATH"]]))
        patch.setenv("ADVSUITE_TEST_FAULT_RANK", "1")
        patch.setenv("ADVSUITE_TEST_FAULT_AT", "2")
        code, log = _finish(_launch(None, output, 2, *args))
    assert code != 0, log
    said = [line for line in log.splitlines() if "could not write" in line]
    assert said == [f"advsuite (process 2 of 2): could not write {output}/records.rank1.jsonl: No space left on "
                    "device (errno 28); finished records are kept: free space and rerun the same command to "
                    "resume"], log
    # No traceback of the write fault anywhere (process 2's own, or one the other process shows).
    assert not any(line.startswith("[rank1]:") for line in log.splitlines()), log
    assert "OSError" not in log and "WriteError" not in log and "suite/paths.py" not in log, log
    # The other process stops as it does when a worker dies: it says so once, and how to resume,
    # with no traceback of the lost connection (only the launcher's own report follows).
    other = [line for line in log.splitlines() if line.startswith("advsuite (process 1 of 2):") and "stop" in line]
    assert len(other) == 1 and "rerun the same command" in other[0], log
    assert "pair.cc" not in other[0] and "Error" not in other[0], log  # the cause, not gloo's source location
    assert not any(line.startswith("[rank0]:") for line in log.splitlines()), log
    assert not list(output.rglob("*.tmp")) and not (output / "results.json").exists()
    kept = [json.loads(line) for line in (output / "records.rank1.jsonl").read_text().splitlines()
            if '"kind": "run"' not in line]
    assert kept, "process 2's first records were not kept"
    code, log = _finish(_launch(None, output, 1, *args))
    assert code == 0, log
    records = [json.loads(line) for line in (output / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
    assert [_strip(json.loads((output / "results.json").read_text())), _strip(records)] == expected
    merged = {(record["kind"], record.get("attack", ""), record["id"]): record for record in records}
    assert all(merged[(record["kind"], record.get("attack", ""), record["id"])] == record for record in kept)
