"""Per-class results and ``advsuite compare``.

Three real evaluations on the same 16 digits (module fixtures, a few seconds): the plain and the
adversarially trained built-in CNN under FGM and 5-step PGD at ε = 0.15, and the trained one at
ε = 0.15 and 0.3 (keys ``fgm_linf-eps0.15``...). Per-class numbers are checked against the
records; the comparison's numbers against results.json.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

import suite
from suite.cli.main import main
from suite.evaluation.per_class import class_names, per_class
from suite.intervals import accuracy_interval
from suite.report.paired import SIGN_DRAWS, paired_test
from suite.report.leaderboard import read_results
from suite.report.results import upgrade
from suite.report.table import percent

ATTACKS = ["fgm_linf", {"name": "pgd_linf", "steps": 5}]
V1_RESULTS = Path(__file__).resolve().parent / "data" / "results_v1_vision.json"


def _evaluate(model: str, eps, out: Path) -> Path:
    suite.evaluate(model, "builtin:digits", attacks=ATTACKS, eps=eps, n=16, output=out)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare")
    return {"plain": _evaluate("builtin:digits-cnn", 0.15, root / "plain"),
            "at": _evaluate("builtin:digits-cnn-at", 0.15, root / "at"),
            "at-two-eps": _evaluate("builtin:digits-cnn-at", [0.15, 0.3], root / "at-two-eps")}


def records(run: Path) -> tuple[list[dict], dict[str, dict[str, dict]]]:
    """Clean records in order, and attack records by attack key and example id."""
    lines = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
    attacked: dict[str, dict[str, dict]] = {}
    for line in lines:
        if line["kind"] == "attack":
            attacked.setdefault(line["attack"], {})[line["id"]] = line
    return [line for line in lines if line["kind"] == "clean"], attacked


def compare(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(["compare", *map(str, argv)])
    captured = capsys.readouterr()
    return done.value.code, captured.out, captured.err


def cells(line: str) -> list[str]:
    """The cells of a table line (columns are two spaces apart or more)."""
    return re.split(r"\s{2,}", line.strip())


def line_of(out: str, name: str, threat: str = "", group: str = "") -> str:
    """The table line of row ``name`` under ``threat`` (and class ``group``)."""
    found = [line for line in out.splitlines() if line.startswith(group) and
             re.search(rf"(^|\s){re.escape(name)}\s{{2,}}{re.escape(threat)}", line[len(group):])]
    assert len(found) == 1, (name, threat, group, out)
    return found[0]


@pytest.mark.parametrize("name", ["plain", "at", "at-two-eps"])
def test_per_class_matches_the_records(runs, name):
    results = read_results(runs[name] / "results.json")
    clean, attacked = records(runs[name])
    assert sum(entry.n for entry in results.per_class.values()) == results.dataset.n == len(clean) == 16
    assert list(results.per_class) == [str(entry.index) for entry in results.per_class.values()]  # digits: "0".."9"
    assert {entry.index for entry in results.per_class.values()} == {record["label"] for record in clean}
    weighted = sum(entry.n * entry.clean_accuracy for entry in results.per_class.values()) / results.dataset.n
    assert weighted == pytest.approx(results.clean_accuracy, abs=1e-12)
    for entry in results.per_class.values():
        mine = [record for record in clean if record["label"] == entry.index]
        correct = [record["correct"] for record in mine]
        assert entry.n == len(mine) >= 1
        assert entry.clean_accuracy == sum(correct) / len(mine)
        assert entry.clean_accuracy_ci == list(accuracy_interval(correct))
        assert set(entry.attacks) == set(results.attacks)
        for key, item in entry.attacks.items():
            robust = [attacked[key][r["id"]]["robust"] if r["correct"] > 0 else 0.0 for r in mine]
            assert item.robust_accuracy == sum(robust) / len(mine)
            assert item.robust_accuracy_ci == list(accuracy_interval(robust))
        assert set(entry.threat_models) == set(results.threat_models)
        for label, item in entry.threat_models.items():
            keys = results.threat_models[label].attacks
            worst = [min([r["correct"], *(attacked[k][r["id"]]["robust"] for k in keys)]) if r["correct"] > 0 else 0.0
                     for r in mine]
            assert item.worst_case_robust_accuracy == sum(worst) / len(mine)


def test_per_class_with_fractional_correctness_duplicate_names_and_absent_classes():
    clean = [{"id": "a", "correct": 0.5}, {"id": "b", "correct": 1.0}, {"id": "c", "correct": 0.0},
             {"id": "d", "correct": 1.0}]
    attacked = {"x": {"a": {"robust": 0.25}, "b": {"robust": 1.0}, "d": {"robust": 0.0}},
                "y": {"a": {"robust": 0.5}, "b": {"robust": 0.5}, "d": {"robust": 1.0}}}
    found = per_class(clean, [0, 0, 2, 3], attacked, {"t": ["x", "y"]}, ["crane", "cat", "crane", "dog"])
    assert list(found) == ["crane (0)", "crane (2)", "dog"]  # class 1 has no example: left out
    first = found["crane (0)"]
    assert (first.index, first.n, first.clean_accuracy) == (0, 2, 0.75)
    assert first.attacks["x"].robust_accuracy == (0.25 + 1.0) / 2 and first.attacks["y"].robust_accuracy == 0.5
    assert first.threat_models["t"].worst_case_robust_accuracy == (0.25 + 0.5) / 2
    assert first.clean_accuracy_ci == list(accuracy_interval([0.5, 1.0]))  # the bootstrap: values are fractional
    assert found["crane (2)"].clean_accuracy == 0.0 and found["crane (2)"].attacks["x"].robust_accuracy == 0.0
    assert found["dog"].threat_models["t"].worst_case_robust_accuracy == 0.0


def test_class_names_prefer_the_datasets_only_when_classes_were_matched_by_position():
    assert class_names(["LABEL_0", "LABEL_1"], ["neg", "pos"]) == ["neg", "pos"]
    assert class_names(["negative", "positive"], ["positive", "negative"]) == ["negative", "positive"]
    assert class_names(["zero", "one"], ["0", "1"]) == ["zero", "one"]
    assert class_names(["a", "b"], None) == ["a", "b"] and class_names(["a", "b"], ["x"]) == ["a", "b"]


def test_results_without_per_class_still_validate(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(V1_RESULTS.read_text())
    assert read_results(path).per_class == {}  # version 1, upgraded
    path.write_text(json.dumps(upgrade(json.loads(V1_RESULTS.read_text()))))
    assert read_results(path).per_class == {}  # version 2 written before per_class


def test_compare_prints_both_runs_and_their_difference(runs, capsys):
    code, out, err = compare(capsys, runs["plain"], runs["at"] / "results.json")
    assert code == 0 and err == ""
    assert out.isascii() and all(char.isprintable() for line in out.splitlines() for char in line)
    a, b = (read_results(runs[name] / "results.json") for name in ("plain", "at"))
    assert f"A: {runs['plain']}  (model builtin:digits-cnn" in out and f"B: {runs['at'] / 'results.json'}" in out
    measured = [("clean", "", a.clean_accuracy, a.clean_accuracy_ci, b.clean_accuracy, b.clean_accuracy_ci)]
    for key in ("fgm_linf", "pgd_linf"):
        measured.append((key, "linf eps=0.15", a.attacks[key].robust_accuracy, a.attacks[key].robust_accuracy_ci,
                         b.attacks[key].robust_accuracy, b.attacks[key].robust_accuracy_ci))
    wa, wb = a.threat_models["linf eps=0.15"], b.threat_models["linf eps=0.15"]
    measured.append(("worst case", "linf eps=0.15", wa.worst_case_robust_accuracy, wa.worst_case_robust_accuracy_ci,
                     wb.worst_case_robust_accuracy, wb.worst_case_robust_accuracy_ci))
    outcomes = {name: outcomes_by_row(runs[name]) for name in ("plain", "at")}
    tested = 0
    for name, threat, va, ca, vb, cb in measured:
        line = line_of(out, name, threat)
        difference = f"{100 * (vb - va):+.1f} pp".replace("-0.0", "+0.0")
        first, other = outcomes["plain"][name], outcomes["at"][name]
        gained = sum(other[i] > first[i] for i in first)
        lost = sum(other[i] < first[i] for i in first)
        # McNemar's exact test, written out: the two tails of Binomial(gained + lost, 1/2).
        n = gained + lost
        p = min(1.0, 2 * sum(math.comb(n, k) for k in range(min(gained, lost) + 1)) / 2 ** n)
        shown = "p<0.001" if p < 0.001 else f"p={p:.2g}"
        assert cells(line)[-3:] == [percent(va, ca), percent(vb, cb),
                                    f"{difference} ({'' if p < 0.05 else 'n.s., '}{shown})"]
        tested += p < 0.05
    assert tested >= 1  # a difference the paired test finds (the intervals overlap on 16 examples)
    assert a.clean_accuracy == 1.0 and b.clean_accuracy == 0.875  # the runs differ: the table shows real numbers
    assert wb.worst_case_robust_accuracy > wa.worst_case_robust_accuracy
    assert "McNemar exact" in out and "(within CIs)" not in out and "note:" not in out


def outcomes_by_row(run: Path) -> dict[str, dict[str, float]]:
    """Per row of a one-radius run (clean, each attack, worst case), each example's correctness."""
    clean, attacked = records(run)
    rows = {"clean": {r["id"]: r["correct"] for r in clean}}
    for key, by_id in attacked.items():
        rows[key] = {r["id"]: by_id[r["id"]]["robust"] if r["correct"] > 0 else 0.0 for r in clean}
    rows["worst case"] = {r["id"]: min(rows[key][r["id"]] for key in ("clean", *attacked)) for r in clean}
    return rows


def test_the_paired_test_against_worked_values():
    ids = [f"e{i}" for i in range(40)]
    first = dict.fromkeys(ids, 1.0)
    assert paired_test(first, {i: 0.0 if k < 8 else 1.0 for k, i in enumerate(ids)}) == (2 / 2 ** 8, "McNemar exact")
    # 3 gained, 1 lost: P(X <= 1 or X >= 3), X ~ B(4, 1/2) = (1 + 4 + 4 + 1) / 16.
    mixed = {i: float(k % 2) for k, i in enumerate(ids)}
    moved = dict(mixed, e1=0.0, e0=1.0, e2=1.0, e4=1.0)
    assert paired_test(mixed, moved) == (10 / 16, "McNemar exact")
    assert paired_test(first, first) == (1.0, "McNemar exact")
    assert paired_test(first, {"other": 1.0}) is None  # not the same examples
    # Large n, in logs: against the normal approximation of the sign test (z = 200 / sqrt(20000)).
    big = {f"b{i}": 0.0 for i in range(20_000)}
    shifted = {key: 1.0 if k < 10_100 else 0.0 for k, key in enumerate(big)}
    mirrored = {key: 1.0 if k >= 10_100 else 0.0 for k, key in enumerate(big)}
    p, _ = paired_test(mirrored, shifted)  # 10,100 gained, 9,900 lost
    assert p == pytest.approx(math.erfc(200 / math.sqrt(20_000) / math.sqrt(2)), rel=0.02)
    # Fractional (a randomized model): 4 positive differences, exact: only the two all-same-sign
    # patterns of 16 reach the observed sum.
    base = {"a": 0.5, "b": 0.25, "c": 0.0, "d": 0.75, "e": 1.0}
    up = {"a": 0.75, "b": 0.5, "c": 0.125, "d": 1.0, "e": 1.0}
    assert paired_test(base, up) == (2 / 16, "sign-flip exact")
    # 30 equal differences: beyond the exact limit, seeded draws; none reaches the observed
    # sum, which counts itself.
    half = {f"h{i}": 0.5 for i in range(30)}
    more = {key: 0.75 for key in half}
    assert paired_test(half, more) == (1 / (SIGN_DRAWS + 1), f"sign-flip over {SIGN_DRAWS} draws")
    assert paired_test(half, more) == paired_test(half, more)  # seeded


def test_without_usable_records_a_difference_falls_back_to_the_intervals(runs, tmp_path, capsys):
    bare = tmp_path / "bare"
    shutil.copytree(runs["at"], bare)
    (bare / "records.jsonl").unlink()
    code, out, err = compare(capsys, runs["plain"], bare)
    assert (code, err) == (0, "")
    assert f"note: B ({bare}): no records.jsonl beside its results" in out and "McNemar" not in out
    assert "(within CIs)" in out and "p=" not in out
    header = (runs["at"] / "records.jsonl").read_bytes().splitlines(keepends=True)[0]
    for garbage, says in ((b"\x89PNG\r\n\x1a\n\x00", "cannot be read as advsuite records"),
                          (header + b'{"kind": "clean", "id": "x", "correct": NaN, "label": 0}\n',
                           "cannot be read as advsuite records"),
                          (b'{"kind": "clean", "id": "x", "correct": 1.0, "label": 0}\n',
                           "does not name its run on its first line")):
        (bare / "records.jsonl").write_bytes(garbage)
        code, out, err = compare(capsys, runs["plain"], bare)
        assert (code, err) == (0, "") and f"records.jsonl {says}" in out


def _edited(source: Path, target: Path, change) -> Path:
    shutil.copytree(source, target)
    data = json.loads((target / "results.json").read_text())
    change(data)
    (target / "results.json").write_text(json.dumps(data))
    return target


def test_results_their_records_do_not_give_are_refused(runs, tmp_path, capsys):
    """A results.json changed after its run is refused as ``leaderboard add`` and ``export``
    refuse it, where its records are there to say so: compared, it gave a difference (with a
    p-value) against numbers the run never measured."""
    # Records whose one example's outcome changed no longer give the results' numbers.
    edited = tmp_path / "edited"
    shutil.copytree(runs["at"], edited)
    lines = (edited / "records.jsonl").read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if '"attack": "fgm_linf"' in line)
    record = json.loads(lines[index])
    record["robust"] = 1.0 - record["robust"]
    lines[index] = json.dumps(record)
    (edited / "records.jsonl").write_text("\n".join(lines) + "\n")
    code, out, err = compare(capsys, runs["plain"], edited)
    assert (code, out) == (2, "") and err.count("\n") == 1 and "results.json was changed after the run" in err

    # An attack dropped, and the worst case set to what the remaining attack gives: the records
    # give every number left, but hold the dropped attack (it was +42 pp, p < 0.001, against its own run).
    def drop_pgd(data):
        data["attacks"].pop("pgd_linf")
        for group in data["threat_models"].values():
            group["attacks"] = ["fgm_linf"]
    dropped = _edited(runs["at"], tmp_path / "dropped", drop_pgd)
    code, out, err = compare(capsys, runs["at"], dropped)
    assert (code, out) == (2, "") and "holds records of attack 'pgd_linf' that results.json does not report" in err

    # A number moved inside its own interval.
    def nudge(data):
        entry = data["attacks"]["fgm_linf"]
        entry["robust_accuracy"] = min(entry["robust_accuracy"] + 1 / 16, entry["robust_accuracy_ci"][1])
    assert read_results(runs["at"] / "results.json").attacks["fgm_linf"].robust_accuracy < 0.9
    nudged = _edited(runs["at"], tmp_path / "nudged", nudge)
    code, out, err = compare(capsys, runs["plain"], nudged)
    assert (code, out) == (2, "") and "does not give its fgm_linf" in err


def test_compare_json_holds_the_numbers_of_results_json(runs, capsys):
    code, out, _ = compare(capsys, runs["plain"], runs["at"], "--json")
    assert code == 0
    data = json.loads(out)
    a, b = (read_results(runs[name] / "results.json") for name in ("plain", "at"))
    assert [run["fingerprint"] for run in data["runs"]] == [a.dataset.fingerprint] * 2
    rows = {(row["row"], row["threat"]): row for row in data["rows"]}
    assert list(rows) == [("clean", None), ("fgm_linf", "linf eps=0.15"), ("pgd_linf", "linf eps=0.15"),
                          ("worst case", "linf eps=0.15")]
    pgd = rows["pgd_linf", "linf eps=0.15"]
    assert pgd["accuracy"] == [a.attacks["pgd_linf"].robust_accuracy, b.attacks["pgd_linf"].robust_accuracy]
    assert pgd["interval"] == [a.attacks["pgd_linf"].robust_accuracy_ci, b.attacks["pgd_linf"].robust_accuracy_ci]
    assert pgd["difference"] == [None, pgd["accuracy"][1] - pgd["accuracy"][0]] and pgd["n"] == [16, 16]
    first, other = (outcomes_by_row(runs[name])["pgd_linf"] for name in ("plain", "at"))
    assert pgd["p_value"] == [None, paired_test(first, other)[0]] and pgd["test"] == [None, "McNemar exact"]
    assert data["notes"] == []


def test_other_threat_models_are_shown_apart_never_subtracted(runs, capsys):
    code, out, _ = compare(capsys, runs["plain"], runs["at-two-eps"], "--json")
    assert code == 0
    b = read_results(runs["at-two-eps"] / "results.json")
    rows = {(row["row"], row["threat"]): row for row in json.loads(out)["rows"]}
    # The same attack under another key (one radius vs several) is one row; ε = 0.3 has no partner.
    fgm = rows["fgm_linf", "linf eps=0.15"]
    assert fgm["accuracy"][1] == b.attacks["fgm_linf-eps0.15"].robust_accuracy and fgm["difference"][1] is not None
    for key in ("fgm_linf-eps0.3", "pgd_linf-eps0.3", "worst case"):
        row = rows[key, "linf eps=0.3"]
        assert row["accuracy"][0] is None and row["difference"] == [None, None]
    code, out, _ = compare(capsys, runs["plain"], runs["at-two-eps"])
    assert cells(line_of(out, "pgd_linf-eps0.3", "linf eps=0.3"))[-3:] == [
        "-", percent(b.attacks["pgd_linf-eps0.3"].robust_accuracy, b.attacks["pgd_linf-eps0.3"].robust_accuracy_ci), "-"]


def test_runs_on_other_examples_are_refused(runs, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(runs["at"], other)
    data = json.loads((other / "results.json").read_text())
    data["dataset"]["fingerprint"] = "sklearn-digits-32px-train"
    (other / "results.json").write_text(json.dumps(data))
    code, out, err = compare(capsys, runs["plain"], other)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "dataset fingerprints 'sklearn-digits-32px-test' and 'sklearn-digits-32px-train'" in err


def test_runs_on_other_examples_are_refused_by_their_run_json(runs, tmp_path, capsys):
    """A training-split run whose results.json says the test split's fingerprint: the examples
    each run.json recorded differ, so the runs are not paired."""
    train = tmp_path / "train"
    suite.evaluate("builtin:digits-cnn-at", "builtin:digits", split="train", attacks=ATTACKS, eps=0.15, n=16,
                   output=train)
    test = read_results(runs["at"] / "results.json").dataset.fingerprint
    disguised = _edited(train, tmp_path / "disguised", lambda data: data["dataset"].update(fingerprint=test))
    code, out, err = compare(capsys, runs["at"], disguised)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "not evaluated on the same examples (their run.json record other examples: sha256-" in err


def test_per_class_lists_every_class(runs, capsys):
    code, out, _ = compare(capsys, runs["plain"], runs["at"], "--per-class")
    assert code == 0
    a, b = (read_results(runs[name] / "results.json") for name in ("plain", "at"))
    assert list(a.per_class) == list(b.per_class)
    for name, entry in a.per_class.items():
        group = f"{name} (n={entry.n})"
        other = b.per_class[name]
        line = cells(line_of(out, "clean", "", group))
        assert line[-3:-1] == [percent(entry.clean_accuracy, entry.clean_accuracy_ci),
                               percent(other.clean_accuracy, other.clean_accuracy_ci)]
        pgd, other_pgd = entry.attacks["pgd_linf"], other.attacks["pgd_linf"]
        line = cells(line_of(out, "pgd_linf", "linf eps=0.15", group))
        assert line[-3:-1] == [percent(pgd.robust_accuracy, pgd.robust_accuracy_ci),
                               percent(other_pgd.robust_accuracy, other_pgd.robust_accuracy_ci)]
        difference = f"{100 * (other_pgd.robust_accuracy - pgd.robust_accuracy):+.1f} pp".replace("-0.0", "+0.0")
        assert line[-1].startswith(difference)
        line_of(out, "worst case", "linf eps=0.15", group)


def test_a_reader_that_leaves_early_gets_no_traceback(runs):
    # `advsuite compare A B --json | head -1`: the pipe closes before the output is written.
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-m", "suite", "compare", str(runs["plain"]), str(runs["at"]), "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()
    _, err = child.communicate(timeout=120)
    assert (child.returncode, err.decode()) == (141, "")  # 128 + SIGPIPE, as a shell tool that stops


def test_an_attack_run_with_other_settings_is_noted_not_shown_as_a_model_difference(tmp_path, capsys):
    """Two runs identical but for PGD's steps (20 in A, 1 in B): the pgd_linf row's difference
    is between two attacks. It showed as a model difference with nothing said."""
    data = upgrade(json.loads(V1_RESULTS.read_text()))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_text(json.dumps(data))
    data["attacks"]["pgd_linf"]["params"]["steps"] = 1
    next(item for item in data["config"]["attacks"] if item["name"] == "pgd_linf")["params"]["steps"] = 1
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.json").write_text(json.dumps(data))
    code, out, err = compare(capsys, tmp_path / "a", tmp_path / "b")
    assert (code, err) == (0, "")
    assert ("note: 'pgd_linf' (linf eps=0.03) ran with other settings (steps 20 in A, 1 in B): its row compares two "
            "attacks, not only the models") in out
    assert "'fgm_linf'" not in out.split("differences in percentage points")[0].split("note:", 1)[-1]
    code, out, err = compare(capsys, tmp_path / "a", tmp_path / "b", "--json")
    assert any("ran with other settings (steps 20 in A, 1 in B)" in note for note in json.loads(out)["notes"])


def test_image_models_of_other_input_sizes_on_the_same_examples_are_compared(runs, tmp_path, capsys):
    """run.json's examples hash is of the inputs as each model took them, resized to its input
    size: two image models of other sizes on the same digits hashed apart, and compare refused
    them (the common case: ImageNet models at 224² and 288²). Their results' dataset decides."""
    from tiny_models import edit_json, save_tiny_timm

    save_tiny_timm(tmp_path / "m24", num_classes=10, input_size=(3, 24, 24))
    edit_json(tmp_path / "m24" / "config.json", label_names=[str(i) for i in range(10)])
    small = _evaluate(f"timm:{tmp_path / 'm24'}", 0.15, tmp_path / "small")
    digests = [json.loads((run / "run.json").read_text())["examples"] for run in (runs["plain"], small)]
    assert digests[0] != digests[1]
    code, out, err = compare(capsys, runs["plain"], small)
    assert code == 0 and not err and "worst case" in out
