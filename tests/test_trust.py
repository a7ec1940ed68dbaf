"""No silent wrong numbers, no lost files: run identity, the output directory, intervals, ε sweeps.

- a model retrained in place, or a data file edited in place, is refused, never mixed;
- two runs on one directory: one refuses (or waits), and no record is written twice;
- ``--overwrite`` recovers a directory with corrupt records and clears only what the suite wrote;
- a directory holding files the suite did not write is refused;
- a run that fails before recording anything leaves nothing behind;
- ``--eps`` with several radii: a worst case per radius, never across radii, and the curve;
- every accuracy carries its 95% interval; printed names are stripped of terminal controls.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from suite.cli.main import main
from suite.intervals import accuracy_interval, bootstrap_interval, wilson_interval

REPO = Path(__file__).resolve().parents[1]
DIGITS = ("--dataset", "builtin:digits")


def advsuite(*args: str) -> int:
    with pytest.raises(SystemExit) as caught:
        main([str(arg) for arg in args])
    return caught.value.code


def records_of(directory: Path) -> list[dict]:
    return [json.loads(line) for line in (directory / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("advsuite: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def digits_dir(tmp_path, digits_model) -> Path:
    """A private copy of the built-in digits CNN as a ``timm:<dir>`` model (free to retrain)."""
    target = tmp_path / "digits-model"
    shutil.copytree(digits_model.info.extra["path"], target, ignore=shutil.ignore_patterns("DONE"))
    return target


def test_model_retrained_in_place_is_refused_never_mixed(tmp_path, digits_dir, capsys):
    from safetensors.torch import load_file, save_file

    from suite.models.weights import HASH_FILE, record_hashes

    out = tmp_path / "out"
    command = ("evaluate", "--model", f"timm:{digits_dir}", *DIGITS, "--attacks", "fgm_linf", "--eps", "0.05",
               "--n", "24", "--output", out)
    assert advsuite(*command) == 0
    first = json.loads((out / "results.json").read_text())
    records = (out / "records.jsonl").read_text()
    # "Retrain" in place: the same files, other weights (the head's bias shifted toward class 0).
    weights = digits_dir / "model.safetensors"
    tensors = load_file(weights)
    bias = next(name for name in tensors if name.endswith("bias") and tensors[name].shape == (10,))
    tensors[bias] = tensors[bias] + 10.0 * torch.nn.functional.one_hot(torch.tensor(0), 10)
    save_file(tensors, weights)
    if (digits_dir / HASH_FILE).exists():  # a retrain records the new weights' hash (a damaged file would not)
        record_hashes(digits_dir)
    capsys.readouterr()
    assert advsuite(*command) == 2
    assert "the model's weights changed" in one_error_line(capsys)
    assert (out / "records.jsonl").read_text() == records  # nothing mixed in
    assert advsuite(*command, "--overwrite") == 0
    second = json.loads((out / "results.json").read_text())
    assert second["model"]["weights"] != first["model"]["weights"]
    clean = [record for record in records_of(out) if record["kind"] == "clean"]
    assert second["clean_accuracy"] == pytest.approx(sum(record["correct"] for record in clean) / len(clean))
    # Every number of the new results comes from the new weights: the clean pass agrees with calibration.
    assert second["calibration"]["accuracy"] == pytest.approx(second["clean_accuracy"])
    assert second["clean_accuracy"] < first["clean_accuracy"]  # the shifted head predicts 0 far too often


def test_records_under_another_runs_run_file_are_refused_never_reported(tmp_path, capsys):
    """Another model's records under a ``run.json`` copied from this run's would be reported as
    this model's. Their file's first line names their own run, so the rerun refuses them in one
    line (it also checks its clean pass against the recorded clean records, which catches only
    models whose clean predictions differ: on 4 digits both models agreed, and were reported)."""
    def command(model: str, out: Path) -> tuple:
        return ("evaluate", "--model", model, *DIGITS, "--attacks", "fgm_linf", "--eps", "0.05", "--n", "24",
                "--output", out)

    mine, theirs = tmp_path / "at", tmp_path / "plain"
    assert advsuite(*command("builtin:digits-cnn-at", mine)) == 0
    assert advsuite(*command("builtin:digits-cnn", theirs)) == 0
    shutil.copy(mine / "run.json", theirs / "run.json")
    (theirs / "results.json").unlink()
    records = (theirs / "records.jsonl").read_text()
    capsys.readouterr()
    assert advsuite(*command("builtin:digits-cnn-at", theirs)) == 2
    line = one_error_line(capsys)
    assert "records.jsonl' holds the records of another run (its first line names a run other than run.json's)" in line
    assert (theirs / "records.jsonl").read_text() == records and not (theirs / "results.json").exists()
    assert advsuite(*command("builtin:digits-cnn-at", mine)) == 0  # its own records resume


def test_results_changed_after_the_run_are_neither_published_nor_exported(tmp_path, capsys):
    """A number of results.json changed after the run (here inside its own interval, where only
    the records can tell) is refused by `leaderboard add` and `export`, naming the number."""
    out = tmp_path / "run"
    assert advsuite("evaluate", "--model", "builtin:digits-cnn-at", *DIGITS, "--attacks", "fgm_linf", "--eps", "0.05",
                    "--n", "24", "--output", out) == 0
    results = json.loads((out / "results.json").read_text())
    value = results["attacks"]["fgm_linf"]["robust_accuracy"]
    low, high = results["attacks"]["fgm_linf"]["robust_accuracy_ci"]
    changed = value - 1 / 24  # down, with its worst case: up would pass the clean accuracy (refused by itself)
    assert low <= changed <= high
    results["attacks"]["fgm_linf"]["robust_accuracy"] = changed
    for group in results["threat_models"].values():
        group["worst_case_robust_accuracy"] = min(group["worst_case_robust_accuracy"], changed)
    if results.get("worst_case_robust_accuracy") is not None:
        results["worst_case_robust_accuracy"] = min(results["worst_case_robust_accuracy"], changed)
    (out / "results.json").write_text(json.dumps(results))
    board = tmp_path / "board" / "leaderboard.json"
    capsys.readouterr()
    assert advsuite("leaderboard", "add", out, "--leaderboard", board) == 2
    assert f"its records.jsonl does not give its fgm_linf (linf eps=0.05) of {changed:g}" in one_error_line(capsys)
    assert not board.exists()
    assert advsuite("export", out, "--to", tmp_path / "card") == 2
    assert "results.json was changed after the run" in one_error_line(capsys)
    assert not (tmp_path / "card").exists()


def test_data_file_edited_in_place_is_refused(tmp_path, capsys):
    data = tmp_path / "reviews.csv"
    rows = ["a wonderful, moving film", "dull and far too long", "great acting and a clever plot",
            "a boring mess", "i loved every minute", "awful script"]
    data.write_text("text,label\n" + "".join(f'"{row}",{i % 2 == 0 and 1 or 0}\n' for i, row in enumerate(rows)))
    out = tmp_path / "out"
    command = ("evaluate", "--model", "builtin:sentiment-tiny", "--dataset", f"hf:{data}", "--attacks", "deepwordbug",
               "--adversary", "none", "--output", out)
    assert advsuite(*command) == 0
    data.write_text(data.read_text().replace("dull", "lively"))
    capsys.readouterr()
    assert advsuite(*command) == 2
    assert "the evaluated examples changed" in one_error_line(capsys)


SLOW_RECIPE = """
name: slow
batch_size: 8
tasks:
  - name: vision
    model: builtin:digits-cnn
    dataset: {spec: builtin:digits, n: 48}
    attacks: [{name: pgd_linf, eps: 0.01, steps: 300}]
"""


def _run_process(recipe: Path, out: Path, *extra: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "suite", "run", str(recipe), "--output", str(out), *extra]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.slow
def test_two_runs_on_one_directory_one_refuses_one_waits_no_record_twice(tmp_path, digits_model):
    recipe = tmp_path / "slow.yaml"
    recipe.write_text(SLOW_RECIPE)
    out = tmp_path / "out"
    first = _run_process(recipe, out)
    deadline = time.monotonic() + 120
    while not (out / "vision" / "records.jsonl").exists():  # the first run holds the lock once it records
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.05)
    second = _run_process(recipe, out)
    waiting = _run_process(recipe, out, "--wait")
    _, second_err = second.communicate(timeout=300)
    assert first.poll() is None, "the first run finished too soon for this test to mean anything"
    assert second.returncode == 2, second_err
    assert second_err.count("\n") == 1 and "another advsuite run is writing to" in second_err
    assert first.wait(timeout=600) == 0
    assert waiting.wait(timeout=600) == 0, waiting.communicate()
    records = records_of(out / "vision")
    keys = [(record["kind"], record.get("attack", ""), record["id"]) for record in records]
    clean = [record for record in records if record["kind"] == "clean"]
    assert len(keys) == len(set(keys)) == 48 + sum(record["correct"] > 0 for record in clean)


def test_overwrite_recovers_corrupt_records_and_run_file(tmp_path, capsys):
    out = tmp_path / "out"
    command = ("evaluate", "--model", "builtin:digits-cnn", *DIGITS, "--attacks", "fgm_linf", "--n", "12",
               "--output", out)
    assert advsuite(*command) == 0
    good = (out / "records.jsonl").read_text()
    for garbage, message in (("not json at all\n", "line 13 is not JSON"),
                             ('{"valid": "json", "but": "no record"}\n', "line 13 is not an advsuite record"),
                             ("[1, 2, 3]\n", "line 13 is not an advsuite record")):
        lines = good.splitlines(keepends=True)
        (out / "records.jsonl").write_text("".join([*lines[:12], garbage, *lines[12:]]))
        capsys.readouterr()
        assert advsuite(*command) == 2
        err = one_error_line(capsys)
        assert message in err and "--overwrite" in err
        assert advsuite(*command, "--overwrite") == 0
        assert len(records_of(out)) == len(good.splitlines()) - 1  # all but the line naming the run
        good = (out / "records.jsonl").read_text()
    # A damaged run.json beside records that open with this run's digest: the same command
    # resumes them and writes run.json again. Beside another run's records: refused.
    identity = (out / "run.json").read_text()
    (out / "run.json").write_bytes(b"\x00\xff garbage")
    assert advsuite(*command) == 0
    assert (out / "run.json").read_text() == identity and (out / "records.jsonl").read_text() == good
    (out / "run.json").write_bytes(b"\x00\xff garbage")
    header, rest = good.split("\n", 1)
    (out / "records.jsonl").write_text(header.replace('"run": "', '"run": "0') + "\n" + rest)
    capsys.readouterr()
    assert advsuite(*command) == 2
    assert "cannot read" in one_error_line(capsys)
    assert advsuite(*command, "--overwrite") == 0
    assert json.loads((out / "run.json").read_text())["weights"].startswith("sha256-")


def test_foreign_directory_is_refused_and_overwrite_keeps_foreign_files(tmp_path, capsys):
    out = tmp_path / "theirs"
    out.mkdir()
    (out / "results.json").write_text('{"their": "numbers"}')
    (out / "samples.md").write_text("their notes\n")
    (out / "notes.txt").write_text("keep me\n")
    command = ("evaluate", "--model", "builtin:digits-cnn", *DIGITS, "--attacks", "fgm_linf", "--n", "8",
               "--output", out)
    assert advsuite(*command) == 2
    err = one_error_line(capsys)
    assert "holds files advsuite did not write" in err and "'notes.txt'" in err
    assert (out / "results.json").read_text() == '{"their": "numbers"}' and not (out / "run.json").exists()
    assert advsuite(*command, "--overwrite") == 0
    assert (out / "notes.txt").read_text() == "keep me\n"
    assert not (out / "samples.md").exists()  # a file of the name advsuite writes: replaced (asked for)
    assert json.loads((out / "results.json").read_text())["schema_version"] == 2


def test_overwrite_with_another_configuration_clears_old_samples(tmp_path):
    out = tmp_path / "out"
    assert advsuite("evaluate", "--model", "builtin:digits-cnn", *DIGITS, "--attacks", "fgm_linf", "--n", "6",
                    "--output", out, "--log-samples") == 0
    assert (out / "samples.md").exists() and list((out / "samples").rglob("*.png"))
    assert advsuite("evaluate", "--model", "builtin:digits-cnn", *DIGITS, "--attacks", "pgd_linf", "--n", "6",
                    "--output", out, "--overwrite") == 0
    assert not (out / "samples.md").exists() and not (out / "samples").exists()
    assert {record.get("attack") for record in records_of(out)} == {None, "pgd_linf"}


def test_a_run_failing_before_any_record_leaves_nothing(tmp_path):
    import suite

    class Flaky(torch.nn.Module):
        """Answers the one probe that reads its class count, then fails (a broken model)."""

        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            if self.calls > 1:
                raise RuntimeError("device lost")
            return self.linear(x.flatten(1))

    out = tmp_path / "new" / "out"
    with pytest.raises(RuntimeError, match="device lost"):
        suite.evaluate(Flaky(), (torch.rand(4, 1, 2, 2), torch.tensor([0, 1, 2, 0])), attacks=["fgm_linf"],
                       output=out)
    assert not out.exists()


def test_eps_list_gives_a_worst_case_per_radius_and_the_curve(tmp_path, capsys):
    out = tmp_path / "out"
    assert advsuite("evaluate", "--model", "builtin:digits-cnn", *DIGITS, "--attacks", "fgm_linf,pgd_linf",
                    "--eps", "0.01,0.03", "--n", "24", "--output", out) == 0
    table = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert sorted(results["attacks"]) == ["fgm_linf-eps0.01", "fgm_linf-eps0.03", "pgd_linf-eps0.01",
                                          "pgd_linf-eps0.03"]
    assert {entry["attack"] for entry in results["attacks"].values()} == {"fgm_linf", "pgd_linf"}
    assert sorted(results["threat_models"]) == ["linf eps=0.01", "linf eps=0.03"]
    assert results["worst_case_robust_accuracy"] is None  # never across radii
    for group in results["threat_models"].values():
        members = [results["attacks"][key] for key in group["attacks"]]
        assert {entry["threat"]["eps"] for entry in members} == {group["threat"]["eps"]}
        assert group["worst_case_robust_accuracy"] <= min(entry["robust_accuracy"] for entry in members)
    assert "robustness_curve.png" in results["plots"] and (out / "robustness_curve.png").stat().st_size > 1000
    assert "linf eps=0.01" in table and "linf eps=0.03" in table and table.count("worst case") == 2


def test_wilson_and_bootstrap_intervals():
    # Wilson (1927) for 24/40, as tabulated (e.g. statsmodels' proportion_confint(method="wilson")).
    low, high = wilson_interval(24, 40)
    assert low == pytest.approx(0.44596, abs=1e-5) and high == pytest.approx(0.73652, abs=1e-5)
    assert wilson_interval(0, 40)[0] == 0.0 and 0.08 < wilson_interval(0, 40)[1] < 0.09
    assert accuracy_interval([1.0] * 24 + [0.0] * 16) == (low, high)
    # Fractional correctness: a seeded bootstrap, the same every time, around the mean.
    values = [0.5, 0.25, 1.0, 0.0] * 10
    interval = accuracy_interval(values)
    assert interval == bootstrap_interval(values) and interval[0] < sum(values) / 40 < interval[1]
    # ±~15 pp at n = 40, as docs/evaluate.md says.
    assert 0.25 < high - low < 0.32


def test_results_carry_intervals_that_contain_the_accuracy(tmp_path):
    import suite

    results = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf"], eps=0.03, n=30)
    assert results.clean_accuracy_ci[0] <= results.clean_accuracy <= results.clean_accuracy_ci[1]
    entry = results.attacks["fgm_linf"]
    assert entry.robust_accuracy_ci[0] <= entry.robust_accuracy <= entry.robust_accuracy_ci[1]
    assert list(entry.robust_accuracy_ci) == list(wilson_interval(round(entry.robust_accuracy * 30), 30))
    assert results.worst_case_robust_accuracy_ci == entry.robust_accuracy_ci


def test_printed_names_carry_no_terminal_controls(tmp_path, capsys):
    import suite
    from suite.cli.common import print_report
    from suite.evaluation.options import RunOptions
    from suite.models.wrap import from_module

    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
    model = from_module(net, input_size=(1, 2, 2), name="evil\x1b[2J\x1b]0;pwned\x07\u202etxt.exe")
    results = suite.evaluate(model, (torch.rand(6, 1, 2, 2), torch.tensor([0, 1] * 3)), attacks=["fgm_linf"])
    print_report([results], RunOptions(output=tmp_path / "o\x1b[31m"))
    printed = capsys.readouterr().out
    assert "evil\\x1b[2J" in printed and "\\u202etxt.exe" in printed
    assert not any(char in printed for char in "\x1b\x07\u202e")


def test_library_warnings_are_printed_once_and_escaped():
    """huggingface_hub and transformers give their loggers handlers of their own: under the CLI
    their warnings (the Hub's retries, a load's unused weights) were printed twice, and their
    copy raw. In a fresh process, as the command runs: one line each, through the suite's handler."""
    pytest.importorskip("transformers")
    script = (
        "import logging, sys\n"
        "from suite.cli.main import _configure_logging\n"
        "import huggingface_hub.utils.logging\n"  # imported before: taken at once
        "_configure_logging(False, '')\n"
        # torch's exit hook logs at INFO; stopped before torch set its logging up, it was printed
        "logging.getLogger('torch._subclasses.fake_tensor').info('FakeTensor cache stats:')\n"
        "logging.getLogger('huggingface_hub.utils._http').warning('Retrying \\x1b[31m in 1s')\n"
        "from transformers.utils import logging as tl\n"  # imported after: taken on import
        "tl.get_logger('transformers.modeling_utils').warning('unused \\x1b]0;pwned\\x07 weights')\n"
        "print(logging.getLogger('transformers').handlers, logging.getLogger('huggingface_hub').handlers)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["advsuite: Retrying \\x1b[31m in 1s", "advsuite: unused \\x1b]0;pwned\\x07 weights"]
    assert done.stdout.strip() == "[] []"


def _register_spoiled(name: str, spoil):
    """An FGM whose outputs ``spoil`` rewrites (what a plugin that skips its projection returns)."""
    from dataclasses import replace

    from suite.attacks.base import register_attack
    from suite.attacks.image.fgm import FGMLinf

    class Spoiled(FGMLinf):
        def run(self, model, examples, seed):
            return [replace(out, adversarial=spoil(out.adversarial)) for out in super().run(model, examples, seed)]

    register_attack(name)(Spoiled)


@pytest.mark.parametrize("spoil, says", [
    (lambda adv: (adv + 0.2).clamp(0, 1), "from its example in linf, beyond the radius 0.05"),
    (lambda adv: adv.masked_fill(torch.zeros_like(adv, dtype=torch.bool).index_fill_(0, torch.tensor([0]), True),
                                 float("nan")), "holds NaN or infinite pixels"),
    (lambda adv: adv - 0.01, "leaves [0, 1]"),
    (lambda adv: adv[:, :2], "is not an image of the model's input size (1, 4, 4) (it is (1, 2, 4))"),
    (lambda adv: (adv * 255).to(torch.uint8), "is not a float image tensor (it is torch.uint8)"),
], ids=["beyond-the-radius", "nan", "outside-the-box", "wrong-shape", "uint8"])
def test_an_attack_output_outside_its_threat_model_is_refused_not_counted(tmp_path, spoil, says):
    """An adversarial image outside the threat model (beyond ε, NaN, outside [0, 1], not the
    model's shape) would be scored, and counted as broken, though the attack found no valid
    input. The runner checks every one before it is scored: one line naming the attack and the
    example, and no record of the batch."""
    import suite
    from suite.attacks.base import ATTACKS
    from suite.errors import AttackOutputError
    from test_core import _linear_net

    net, images, labels = _linear_net()
    _register_spoiled("spoiled_fgm", spoil)
    try:
        with pytest.raises(AttackOutputError, match="attack 'spoiled_fgm' returned, for example") as caught:
            suite.evaluate(net, (images, labels), attacks=["spoiled_fgm"], eps=0.05, output=tmp_path / "run")
        assert says in str(caught.value)
        records = tmp_path / "run" / "records.jsonl"
        kinds = {json.loads(line)["kind"] for line in records.read_text().splitlines()} if records.exists() else set()
        assert "attack" not in kinds
    finally:
        ATTACKS.remove("spoiled_fgm")


def test_nan_logits_are_refused_on_clean_inputs_and_never_count_as_correct(tmp_path):
    """A model that gives NaN logits: on clean inputs nothing fitted on them would mean anything,
    so the run is refused in one line; on an adversarial input the row is misclassified (argmax
    would pick the NaN, which is class 0 for a row of NaNs: a correct answer for label 0)."""
    import suite
    from suite.errors import ConfigError
    from suite.evaluation.scoring import score_batch
    from suite.attacks.base import AttackOutput
    from suite.data.base import Example
    from suite.models.wrap import from_module

    class Gate(torch.nn.Module):
        """Class 0 everywhere (bias), NaN logits where the first pixel is above ``threshold``."""

        def __init__(self, threshold: float):
            super().__init__()
            self.threshold = threshold
            self.linear = torch.nn.Linear(4, 3)
            with torch.no_grad():
                self.linear.weight.zero_()
                self.linear.bias.copy_(torch.tensor([1.0, 0.0, 0.0]))

        def forward(self, x):
            out = self.linear(x.flatten(1))
            return torch.where(x.flatten(1)[:, :1] > self.threshold, torch.full_like(out, float("nan")), out)

    images = torch.full((4, 1, 2, 2), 0.2)
    images[3, 0, 0, 0] = 0.9
    labels = torch.zeros(4, dtype=torch.long)
    with pytest.raises(ConfigError, match=r"gives no valid logits \(a NaN, or an infinite largest logit\) on 1 of 4 "
                                          r"clean example\(s\) \(the first: '3'\)"):
        suite.evaluate(from_module(Gate(0.5), input_size=(1, 2, 2)), (images, labels), attacks=["fgm_linf"],
                       eps=0.05, output=tmp_path / "clean-nan")
    model = from_module(Gate(0.5), input_size=(1, 2, 2))
    examples = [Example(str(i), images[i], 0) for i in range(3)]
    poisoned = images[0].clone()
    poisoned[0, 0, 0] = 0.9  # NaN logits: argmax 0, the label
    outputs = [AttackOutput(adversarial=poisoned, perturbation=0.7, queries=1, seconds=0.0),
               AttackOutput(adversarial=images[1], perturbation=0.0, queries=1, seconds=0.0),
               AttackOutput(adversarial=None, perturbation=0.0, queries=1, seconds=0.0)]
    scores = score_batch(model, examples, outputs, [1.0] * 3)
    assert [score["robust"] for score in scores] == [0.0, 1.0, 1.0]
    assert scores[0]["confidence"] == 0.0
    assert float(model.correctness(poisoned.unsqueeze(0), torch.tensor([0]))[0]) == 0.0
    # A −inf beside finite logits is a class ruled out, an answer; a +inf, or every logit −inf, is none.
    from suite.models.base import answered

    rows = torch.tensor([[0.0, -float("inf"), 1.0], [float("inf"), 0.0, 0.0], [-float("inf")] * 3,
                         [float("nan"), 5.0, 0.0], [2.0, 1.0, 0.0]])
    assert answered(rows).tolist() == [True, False, False, False, True]


def test_a_tie_for_the_top_is_never_a_decision_for_the_label(tmp_path):
    """``argmax`` picks the first of tied logits, so a model whose logits saturate at a ceiling
    would leave every class-0 example unbreakable: an attack can lift a rival to the ceiling,
    never above. The suite decides for the label only where its logit wins outright, in
    scoring, in the searches' early exit, and in a randomized ensemble's members."""
    import suite
    from suite.models.base import decide
    from suite.models.ensemble import expected_accuracy
    from suite.models.wrap import from_module

    rows = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [2.0, 1.0, 1.0], [0.0, 1.0, 1.0],
                         [1.0, float("nan"), 0.0], [0.0, 3.0, 1.0]])
    labels = torch.tensor([0, 1, 0, 2, 0, 1])
    assert decide(rows, labels).tolist() == [1, 0, 0, 1, 1, 1]
    assert expected_accuracy(rows[None, :2], labels[:2], [1.0], [0]).tolist() == [0.0, 0.0]

    class Ceiling(torch.nn.Module):
        """Class 0's logit is 1; class 1's rises with the mean pixel and is clamped at 1."""

        def forward(self, x):
            rival = (100 * x.flatten(1).mean(dim=1, keepdim=True) - 50).clamp(max=1.0)
            return torch.cat([torch.ones_like(rival), rival], dim=1)

    model = from_module(Ceiling(), input_size=(1, 2, 2), labels=["zero", "one"])
    images, targets = torch.full((3, 1, 2, 2), 0.2), torch.zeros(3, dtype=torch.long)
    assert model.correctness(torch.full((1, 1, 2, 2), 0.6), torch.tensor([0])).tolist() == [0.0]
    results = suite.evaluate(model, (images, targets), attacks=["fgm_linf", "auto"], eps=0.4, output=tmp_path / "tie")
    assert results.clean_accuracy == 1.0
    assert {name: metrics.robust_accuracy for name, metrics in results.attacks.items()} == {"fgm_linf": 0.0, "auto": 0.0}


def test_a_nan_gradient_takes_no_step_and_is_warned_about():
    """Where the model's input gradient is NaN, the search steps only along its finite part: a
    NaN step would make a NaN input, which is in no threat model. The clean-point check says
    so, as it does of zero gradients."""
    from suite.attacks import build_attack
    from suite.data.base import Example
    from suite.evaluation.checks import check_zero_gradients
    from suite.models.wrap import from_module

    class HalfNaN(torch.nn.Module):
        """A linear model whose input gradient is NaN on the first pixel (sqrt at 0)."""

        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 2)

        def forward(self, x):
            flat = x.flatten(1)
            return self.linear(torch.cat([(flat[:, :1] - flat[:, :1].detach()).sqrt() * 0, flat[:, 1:]], dim=1)
                               + 0 * flat)

    torch.manual_seed(0)
    model = from_module(HalfNaN(), input_size=(1, 2, 2))
    x = torch.rand(6, 1, 2, 2, generator=torch.Generator().manual_seed(0))
    labels = model.logits(x).argmax(dim=1)
    examples = [Example(str(i), x[i], int(labels[i])) for i in range(6)]
    # Under L∞ torch.sign already maps NaN to 0; an L2 step divides by the gradient's norm, NaN.
    for attack, params in (("fgm_l2", {"eps": 0.05}), ("pgd_l2", {"eps": 0.05, "steps": 5}),
                           ("apgd_ce", {"eps": 0.05, "steps": 5, "norm": "l2"}), ("fgm_linf", {"eps": 0.05})):
        outputs = build_attack(attack, params).run(model, examples, 0)
        for example, output in zip(examples, outputs):
            assert torch.isfinite(output.adversarial).all(), attack
            moved = (output.adversarial - example.input).flatten()
            assert float(moved.norm() if "l2" in attack or "norm" in params else moved.abs().max()) <= 0.05 + 1e-6
            if attack.startswith("fgm"):  # one step from the input: none on the NaN pixel
                assert float(moved[0]) == 0.0 and bool((moved[1:] != 0).any()), attack
    (warning,) = check_zero_gradients(model, examples)
    assert "NaN or infinite for 6 of 6 examples" in warning


def test_a_renamed_model_is_not_published_and_hostile_names_are_written_escaped(tmp_path, capsys):
    """A results.json renamed after the run (its run.json says whose it is) is refused; one
    shared alone is exported, its name escaped in the card's Markdown (control and bidi
    characters, HTML); samples.md escapes the data's control characters."""
    out = tmp_path / "run"
    assert advsuite("evaluate", "--model", "builtin:digits-cnn", *DIGITS, "--attacks", "fgm_linf", "--eps", "0.05",
                    "--n", "8", "--output", out) == 0
    results = json.loads((out / "results.json").read_text())
    hostile = "<script>alert(1)</script>\x1b[2J\u202eevil\r\nFAKE"
    results["model"].update(name=hostile, spec=hostile)
    (out / "results.json").write_text(json.dumps(results))
    capsys.readouterr()
    assert advsuite("leaderboard", "add", out, "--leaderboard", tmp_path / "board" / "leaderboard.json") == 2
    line = one_error_line(capsys)
    assert "its model.spec" in line and "is not the one its run.json recorded ('builtin:digits-cnn')" in line
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(out / "results.json", alone / "results.json")
    assert advsuite("export", alone, "--to", tmp_path / "card") == 0
    card = (tmp_path / "card" / "README.md").read_text()
    heading = next(line for line in card.splitlines() if line.startswith("# "))
    # Escaped for a terminal, then HTML, then Markdown (a backslash shows as one, \( as a parenthesis).
    assert heading == r"# &lt;script&gt;alert\(1\)&lt;/script&gt;\\x1b\[2J\\u202eevil\\x0d\\x0aFAKE"
    assert not any(char in card for char in "\x1b\u202e\r")
    from huggingface_hub import ModelCard  # the front matter escapes in YAML's way, and reads back as the name

    assert ModelCard(card).data.model_name == hostile

    data = tmp_path / "texts.jsonl"
    data.write_text(json.dumps({"text": "a fine \x1b[31mfilm\x1b[0m <script>x</script> indeed", "label": 1}) + "\n"
                    + json.dumps({"text": "a dull film", "label": 0}) + "\n")
    assert advsuite("evaluate", "--model", "builtin:sentiment-tiny", "--dataset", f"hf:{data}", "--split", "train",
                    "--attacks", "deepwordbug", "--adversary", "none", "--log-samples", "--output", tmp_path / "t") == 0
    samples = (tmp_path / "t" / "samples.md").read_text()
    assert "\x1b" not in samples and "a fine \\x1b[31mfilm" in samples
    assert "<script>" not in samples and "&lt;script&gt;x&lt;/script&gt;" in samples  # shown, not run, where rendered


def test_a_model_with_no_gradient_path_refuses_white_box_attacks_and_runs_black_box_ones():
    """A model that binarises its input has no autograd path from logits to pixels: every
    gradient attack (the default included) ended in torch's RuntimeError. White-box attacks
    are refused in one line before anything runs; a black-box one runs, and the checks say
    what they could not look at."""
    import suite
    from suite.errors import ConfigError
    from suite.models.wrap import from_module

    class Binarised(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.linear((x > 0.5).float().flatten(1))

    torch.manual_seed(0)
    model = from_module(Binarised(), input_size=(1, 2, 2), name="binarised")
    data = (torch.rand(8, 1, 2, 2, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1] * 4))
    with pytest.raises(ConfigError, match="no gradient path to its input .* white-box attacks auto cannot run"):
        suite.evaluate(model, data, eps=0.3)
    results = suite.evaluate(model, data, eps=0.3, attacks=["square"])
    assert results.attacks["square"].robust_accuracy <= results.clean_accuracy
    assert any("no gradient path" in warning for warning in results.warnings)


def test_figures_draw_names_escaped_and_warn_no_control_characters(tmp_path, recwarn):
    """A model name with ESC and CR in a plot's title: matplotlib printed them raw in its
    "Glyph missing" warnings and drew boxes. Figures now draw them escaped; line breaks stay."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from suite.report.figures import save_figure

    figure, axis = plt.subplots()
    axis.set_title("model\x1b[31mX\r\nsecond line")
    axis.plot([0, 1], label="a\u202eb")
    legend = axis.legend()
    save_figure(figure, tmp_path / "f.png")
    assert axis.title.get_text() == "model\\x1b[31mX\\x0d\nsecond line"
    assert legend.get_texts()[0].get_text() == "a\\u202eb"
    assert (tmp_path / "f.png").stat().st_size > 0
    assert not [str(w.message) for w in recwarn if any(char in str(w.message) for char in "\x1b\r\u202e")]


def test_every_figure_escapes_names_before_its_layout_renders_them(tmp_path, recwarn):
    """The summary plot laid itself out (``tight_layout`` renders the texts) before the save
    escaped them: a dataset path with ESC put a raw ESC on the terminal in matplotlib's warning.
    Every figure's layout now goes through :func:`suite.report.figures.tight_layout`."""
    from suite.report.summary_plot import write_summary_plot

    results = {"model": {"name": "m\x1b[2J\rx"}, "dataset": {"spec": "hf:/data/d\x1b[2J\rx.csv", "split": "test",
                                                             "n": 2},
               "clean_accuracy": 1.0, "clean_accuracy_ci": [0.3, 1.0],
               "attacks": {"fgm_linf": {"robust_accuracy": 0.5, "robust_accuracy_ci": [0.1, 0.9]}},
               "threat_models": {}}
    write_summary_plot(results, tmp_path)
    assert (tmp_path / "summary.png").stat().st_size > 0
    assert not [str(w.message) for w in recwarn if any(char in str(w.message) for char in "\x1b\r")]
    sources = [path for path in (REPO / "suite").rglob("*.py") if ".tight_layout(" in path.read_text()]
    assert [path.name for path in sources] == ["figures.py"]
