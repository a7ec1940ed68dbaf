"""The advsuite command end to end: evaluate, resume after a kill, refusals, bad input, demo."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.cli.main import main
from suite.models.builtin import SENTIMENT_VERSION

REPO = Path(__file__).resolve().parents[1]


def advsuite(*args: str) -> int:
    """Run the CLI in-process; return its exit status."""
    with pytest.raises(SystemExit) as caught:
        main(list(args))
    return caught.value.code


def read_records(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]


@pytest.mark.slow
def test_evaluate_text_model_with_deepwordbug(tmp_path, capsys):
    out = tmp_path / "text"
    assert advsuite("evaluate", "--model", "builtin:sentiment-tiny", "--dataset", "builtin:sentiment",
                    "--attacks", "deepwordbug", "--n", "20", "--output", str(out)) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["schema_version"] == 2 and results["seed"] == 0
    weights = results["model"].pop("weights")
    assert results["model"] == {"spec": "builtin:sentiment-tiny", "name": "builtin:sentiment-tiny",
                                "revision": SENTIMENT_VERSION, "temperature": 1.0, "members": None,
                                "randomized": None, "threat_model": None}
    assert weights.startswith("sha256-") and json.loads((out / "run.json").read_text())["weights"] == weights
    assert results["dataset"]["spec"] == "builtin:sentiment" and results["dataset"]["n"] == 20
    entry = results["attacks"]["deepwordbug"]
    assert 0.5 <= results["clean_accuracy"] <= 1.0
    assert entry["success_rate"] > 0 and entry["robust_accuracy"] < results["clean_accuracy"]
    # Text tasks run the calibrated adversary too by default; the worst case covers both.
    assert results["attacks"]["deepwordbug@cal"]["adversary"] == "cal"
    assert results["worst_case_robust_accuracy"] <= min(e["robust_accuracy"] for e in results["attacks"].values())
    assert entry["mean_queries"] > 1
    assert results["provenance"]["package_versions"]["textattack"]
    records = read_records(out)
    clean = [r for r in records if r["kind"] == "clean"]
    attacked = [r for r in records if r["kind"] == "attack" and r["attack"] == "deepwordbug"]
    assert len(clean) == 20 and len(attacked) == sum(r["correct"] for r in clean)
    assert results["clean_accuracy"] == pytest.approx(sum(r["correct"] for r in clean) / 20)
    low, high = results["clean_accuracy_ci"]
    assert 0 <= low < results["clean_accuracy"] < high <= 1 and high - low > 0.2  # n = 20: a wide interval
    assert all(isinstance(r["adversarial"], str) for r in attacked)
    table = capsys.readouterr().out
    assert "deepwordbug" in table and "builtin:sentiment-tiny" in table


def test_evaluate_vision_model_with_pgd(tmp_path):
    out = tmp_path / "vision"
    assert advsuite("evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits",
                    "--attacks", "pgd_linf,fgm_linf", "--eps", "0.1", "--n", "64", "--output", str(out)) == 0
    results = json.loads((out / "results.json").read_text())
    pgd, fgm = results["attacks"]["pgd_linf"], results["attacks"]["fgm_linf"]
    assert results["clean_accuracy"] >= 0.9
    assert pgd["params"]["eps"] == 0.1 and pgd["budget"]["steps"] == 20
    assert pgd["robust_accuracy"] <= fgm["robust_accuracy"] < results["clean_accuracy"]
    assert results["worst_case_robust_accuracy"] <= min(pgd["robust_accuracy"], fgm["robust_accuracy"])
    for record in read_records(out):
        if record["kind"] == "attack":
            assert record["perturbation"] <= 0.1 + 1e-6


def _metrics(results: dict) -> dict:
    return {key: results[key] for key in ("clean_accuracy", "worst_case_robust_accuracy", "config_hash")} | {
        name: {k: v for k, v in entry.items() if k != "seconds"} for name, entry in results["attacks"].items()
    }


def _stop_midway(args: list[str], out: Path, stop: int) -> tuple[subprocess.Popen, bytes, int]:
    """Start ``advsuite`` on ``out`` and send it ``stop`` once three attack records are written;
    the process, its stderr, and how many attack records were on disk when the signal was sent."""
    # The child gets the Ctrl-C a terminal gives: SIGINT at its default. (A child inherits an
    # ignored SIGINT, and something earlier in a full test session leaves this process's ignored.)
    process = subprocess.Popen([sys.executable, "-m", "suite", *args, "--output", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    records = out / "records.jsonl"
    deadline, seen = time.time() + 240, 0
    while time.time() < deadline and process.poll() is None:
        seen = records.read_text().count('"kind": "attack"') if records.exists() else 0
        if seen >= 3:
            os.killpg(process.pid, stop)
            break
        time.sleep(0.02)
    _, err = process.communicate()
    return process, err, seen


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM], ids=["kill-9", "ctrl-c", "sigterm"])
def test_killed_run_resumes_without_recomputing(tmp_path, stop):
    args = ["evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--attacks", "pgd_linf",
            "--eps", "0.004", "--n", "24", "--batch-size", "1", "--seed", "3"]
    for attempt in range(3):
        out = tmp_path / f"killed{attempt}"
        # Under SIGTERM the stopped command has --overwrite: its rerun would clear what it kept,
        # so its line says to rerun without it (and the rerun below does).
        process, err, seen = _stop_midway([*args, "--overwrite"] if stop == signal.SIGTERM else args, out, stop)
        # The signal is sent once 3 attack records are on disk. If all 24 already were when it
        # was sent, the run may have finished before it arrived, which proves nothing: try again
        # in a fresh directory. A run that finishes after a signal sent with attacks still
        # pending ignored it: that fails below.
        if not (process.returncode == 0 and seen == 24):
            break
    records = out / "records.jsonl"
    if stop == signal.SIGKILL:
        assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    else:  # Ctrl-C: exit 130 and one line, no traceback; SIGTERM (timeout, docker stop, a scheduler): 143
        said = "interrupted" if stop == signal.SIGINT else "stopped (SIGTERM)"
        lines = [line for line in err.decode().splitlines() if said in line or "Traceback" in line]
        assert process.returncode == 128 + stop, (process.returncode, err.decode()[-2000:])
        assert len(lines) == 1 and "Traceback" not in err.decode(), err.decode()[-2000:]
        resume = "rerun the same command without --overwrite" if stop == signal.SIGTERM else "rerun the same command to"
        assert resume in lines[0], lines
        assert not list(out.rglob("*.tmp"))  # what it was writing is removed, or kept whole
    assert not (out / "results.json").exists()
    before = records.read_text()

    assert advsuite(*args, "--output", str(out)) == 0
    after = records.read_text()
    assert after.startswith(before.rstrip("\n").rsplit("\n", 1)[0])  # finished lines kept as they were
    keys = [(r["kind"], r.get("attack"), r["id"]) for r in read_records(out)]
    assert len(keys) == len(set(keys))  # nothing recomputed or duplicated

    fresh = tmp_path / "fresh"
    assert advsuite(*args, "--batch-size", "8", "--output", str(fresh)) == 0
    resumed = json.loads((out / "results.json").read_text())
    uninterrupted = json.loads((fresh / "results.json").read_text())
    assert _metrics(resumed) == _metrics(uninterrupted)


def test_rerun_resumes_and_different_config_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--attacks", "fgm_linf",
            "--n", "16", "--output", str(out)]
    assert advsuite(*base) == 0
    first = (out / "records.jsonl").read_text()
    assert advsuite(*base) == 0
    assert (out / "records.jsonl").read_text() == first  # everything was already recorded
    # The device the default resolves to is the same run (it is the run's, not the configuration's).
    assert advsuite(*base, "--device", "cpu") == 0
    assert (out / "records.jsonl").read_text() == first
    assert "device" not in json.loads((out / "run.json").read_text())  # the CPU's identity: no device type
    capsys.readouterr()
    assert advsuite(*base[:-2], "--eps", "0.2", "--output", str(out)) == 2
    err = capsys.readouterr().err
    assert "holds another run" in err and "--overwrite" in err and err.count("\n") == 1
    assert (out / "records.jsonl").read_text() == first
    assert advsuite(*base[:-2], "--eps", "0.2", "--output", str(out), "--overwrite") == 0
    results = json.loads((out / "results.json").read_text())
    assert results["attacks"]["fgm_linf"]["params"]["eps"] == 0.2


def test_a_bad_input_found_while_preparing_is_its_one_line(tmp_path):
    """The default radius's warning is logged while the task is prepared, before the dataset is
    read: it is held until every task is prepared, so a dataset that does not exist is the one
    line on stderr (it came after the warning); a good run still says the warning. In a fresh
    process, as a user runs it: the CLI's log handler writes to the real stderr."""
    import os
    import subprocess
    import sys

    def run(dataset: str, output: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "suite", "evaluate", "--model", "builtin:digits-cnn", "--n", "4",
                               "--dataset", dataset, "--output", str(tmp_path / output)],
                              env={**os.environ, "TQDM_DISABLE": "1"}, capture_output=True, text=True, timeout=300)

    bad = run(f"hf:{tmp_path / 'missing.csv'}", "a")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "does not exist" in bad.stderr, bad.stderr
    good = run("builtin:digits", "b")
    assert good.returncode == 0 and "the attacks' default radius" in good.stderr, good.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "builtin:nope", "--dataset", "builtin:digits"], "unknown built-in model 'nope'. Available: digits-bat, digits-cnn, digits-cnn-at, digits-cnn-bat, digits-cnn-beta-at, sentiment-ascc-s0, sentiment-ascc-s1"),
        (["--model", "builtin:digits-cnn", "--dataset", "builtin:digitz"], "Did you mean: digits"),
        (["--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--attacks", "pgd"], "unknown attack 'pgd'"),
        (["--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--attacks", "pgd_linf", "--eps", "-0.1"],
         "a radius must be a finite number >= 0, got '-0.1'"),
        (["--model", "builtin:sentiment-tiny", "--dataset", "builtin:sentiment", "--attacks", "deepwordbug",
          "--eps", "0.1"], "--eps does not apply to deepwordbug: it takes no radius"),
        (["--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--attacks", "deepwordbug"],
         "attack 'deepwordbug' works on text"),
        (["--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--split", "dev"], "no split 'dev'"),
        (["--model", "hf:/nonexistent/model-dir", "--dataset", "builtin:sentiment"], "model directory '/nonexistent/model-dir' does not exist"),
        (["--model", "builtin:sentiment-tiny", "--dataset", "hf:{csv_missing_column}"], "columns are: body, label"),
        (["--model", "builtin:sentiment-tiny", "--dataset", "hf:{csv_bad_label}"], "out of range"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, args, message):
    (tmp_path / "missing.csv").write_text("body,label\nhi,0\n")
    (tmp_path / "badlabel.csv").write_text("text,label\nhi,7\n")
    args = [a.format(csv_missing_column=tmp_path / "missing.csv", csv_bad_label=tmp_path / "badlabel.csv") for a in args]
    out = tmp_path / "out"
    assert advsuite("evaluate", *args, "--output", str(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith("advsuite: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert message in err
    assert not out.exists()


def test_run_validate_and_bad_recipes(tmp_path, capsys):
    assert advsuite("validate", str(REPO / "recipes" / "quickstart.yaml")) == 0
    assert "ok (quickstart: 2 task(s)" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntasks:\n  - model: builtin:digits-cnn\n    dataset: builtin:digits\n    atacks: [fgm]\n")
    assert advsuite("validate", str(bad)) == 2
    assert "atacks: unknown parameter" in capsys.readouterr().err
    assert advsuite("run", str(bad), "--output", str(tmp_path / "o")) == 2
    assert advsuite("run", "quikstart") == 2
    assert "Did you mean: quickstart" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_ls_and_module_entry_point(capsys):
    assert advsuite("ls", "attacks") == 0
    listed = capsys.readouterr().out
    for name in ("fgm", "pgd_linf", "pgd_l2", "deepwordbug"):
        assert name in listed
    assert advsuite("ls", "models") == 0
    assert "builtin:digits-cnn" in capsys.readouterr().out
    completed = subprocess.run([sys.executable, "-m", "suite", "--help"], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0 and "evaluate" in completed.stdout


@pytest.mark.slow
def test_demo_prints_both_models_and_publishes_them(tmp_path, capsys, monkeypatch):
    # From a clone's top directory: the tracked leaderboard stays as committed, byte for byte.
    tracked = Path(__file__).resolve().parents[1] / "leaderboard" / "leaderboard.json"
    before = tracked.read_bytes()
    monkeypatch.chdir(tracked.parents[1])
    board = tmp_path / "demo" / "leaderboard" / "leaderboard.json"
    assert advsuite("demo", "--output", str(tmp_path / "demo")) == 0
    assert tracked.read_bytes() == before
    table = capsys.readouterr().out
    assert "builtin:sentiment-tiny" in table and "builtin:digits-cnn" in table
    assert "clean acc" in table and "robust acc" in table
    for task in ("text", "vision"):
        results = json.loads((tmp_path / "demo" / task / "results.json").read_text())
        assert 0 <= results["worst_case_robust_accuracy"] <= results["clean_accuracy"] <= 1
    entries = json.loads(board.read_text())["entries"]
    # DeepWordBug edits characters inside words: its threat is character-level.
    assert {(e["model"], e["threat_model"]) for e in entries} == {("builtin:sentiment-tiny", "character-level"),
                                                                 ("builtin:digits-cnn", "linf")}
    assert (board.parent / "index.html").is_file()
