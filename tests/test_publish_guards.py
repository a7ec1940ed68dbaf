"""What ``leaderboard add``, ``export`` and a resume refuse, found by a hostile-input audit:

- records whose first line is not their run's header (deleted, or blank) are never read as the
  run's records: a blank first line hid another model's records from the resume's check;
- a results.json shared alone is checked against itself: no robust accuracy above the clean one,
  no worst case above one of its attacks, no n beyond the split, no number outside its interval;
- two radii the results' names cannot tell apart (equal to 6 significant digits) are refused;
- a leaderboard holding one slot twice is refused, not silently cut to one entry;
- a relative ``timm:./dir/`` model's genuine run can be published (its spec is kept as given).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from suite.cli.main import main

DIGITS = ("--dataset", "builtin:digits")


def advsuite(*args) -> int:
    with pytest.raises(SystemExit) as caught:
        main([str(arg) for arg in args])
    return caught.value.code


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("advsuite: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def command(model: str, out: Path, *extra: str) -> tuple:
    return ("evaluate", "--model", model, *DIGITS, "--attacks", "fgm_linf", "--eps", "0.05", "--n", "12",
            "--output", out, *extra)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    """Runs of two models on the same 12 digits: the robust built-in and the plain one."""
    root = tmp_path_factory.mktemp("guards")
    runs = root / "at", root / "plain"
    assert advsuite(*command("builtin:digits-cnn-at", runs[0])) == 0
    assert advsuite(*command("builtin:digits-cnn", runs[1])) == 0
    return runs


def test_records_without_their_header_are_neither_resumed_nor_published(two_runs, tmp_path, capsys):
    mine, theirs = two_runs
    lines = (theirs / "records.jsonl").read_text().splitlines(keepends=True)
    assert json.loads(lines[0])["kind"] == "run"
    for name, first in (("blank", "\n"), ("deleted", "")):  # the other model's records, under my run.json
        mixed = tmp_path / name
        mixed.mkdir()
        for file in ("run.json", "results.json"):
            shutil.copy(mine / file, mixed / file)
        (mixed / "records.jsonl").write_text(first + "".join(lines[1:]))
        records = (mixed / "records.jsonl").read_text()
        capsys.readouterr()
        assert advsuite("leaderboard", "add", mixed, "--leaderboard", tmp_path / "board.json") == 2
        assert "does not name its run on its first line" in one_error_line(capsys)
        assert not (tmp_path / "board.json").exists()
        (mixed / "results.json").unlink()
        assert advsuite(*command("builtin:digits-cnn-at", mixed)) == 2  # the resume: not its records
        assert "holds records of no named run" in one_error_line(capsys)
        assert (mixed / "records.jsonl").read_text() == records and not (mixed / "results.json").exists()


def _fgm(results: dict) -> float:
    return results["attacks"]["fgm_linf"]["robust_accuracy"]


@pytest.mark.parametrize("edit, says", [
    (lambda r: r.update(clean_accuracy=_fgm(r) - 1 / 12, clean_accuracy_ci=[0.0, 1.0]),
     "'fgm_linf''s robust accuracy {robust:g} is above its clean accuracy {clean:g}"),
    (lambda r: r["dataset"].update(n=5000), "its n = 5000 is more than its split's"),
    (lambda r: r.update(clean_accuracy_ci=[0.0, r["clean_accuracy"] / 2]), "clean accuracy {clean:g} is outside its 95%"),
    (lambda r: r["attacks"]["fgm_linf"].update(robust_accuracy=_fgm(r) - 1 / 12, robust_accuracy_ci=[0.0, 1.0]),
     "is above its clean accuracy {clean:g} or one of its attacks' (fgm_linf {robust:g})"),
])
def test_results_shared_alone_must_agree_with_themselves(two_runs, tmp_path, capsys, edit, says):
    robust = two_runs[0]  # the adversarially trained model: fgm leaves most digits right
    results = json.loads((robust / "results.json").read_text())
    assert _fgm(results) >= 2 / 12  # room for the edits above
    edit(results)
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "results.json").write_text(json.dumps(results))
    expected = says.format(robust=_fgm(results), clean=results["clean_accuracy"])
    for args in (("leaderboard", "add", alone, "--leaderboard", tmp_path / "board.json"),
                 ("export", alone, "--to", tmp_path / "card")):
        capsys.readouterr()
        assert advsuite(*args) == 2
        line = one_error_line(capsys)
        assert expected in line and "results.json was changed after the run" in line
    assert not (tmp_path / "board.json").exists() and not (tmp_path / "card").exists()


def test_radii_the_names_cannot_tell_apart_are_refused(tmp_path, capsys):
    out = tmp_path / "out"
    assert advsuite("evaluate", "--model", "builtin:digits-cnn", *DIGITS, "--attacks", "fgm_linf",
                    "--eps", "0.0313725,0.03137251", "--n", "4", "--output", out) == 2
    line = one_error_line(capsys)
    assert "two attacks are named 'fgm_linf-eps0.0313725' (0.0313725 and 0.03137251)" in line
    assert not out.exists()
    recipe = tmp_path / "recipe.yaml"  # two attacks of their own radii: one threat label, one worst case
    recipe.write_text("name: close\ntasks:\n  - name: t\n    model: builtin:digits-cnn\n"
                      "    dataset: {spec: builtin:digits, split: test, n: 4}\n    attacks:\n"
                      "      - {name: fgm_linf, eps: 0.0313725}\n      - {name: pgd_linf, eps: 0.03137251}\n")
    assert advsuite("run", recipe, "--output", tmp_path / "runs") == 2
    assert "two threats are labelled 'linf eps=0.0313725' (0.0313725 and 0.03137251)" in one_error_line(capsys)


def test_a_leaderboard_holding_one_slot_twice_is_refused_untouched(two_runs, tmp_path, capsys):
    mine, theirs = two_runs
    board = tmp_path / "leaderboard.json"
    assert advsuite("leaderboard", "add", mine, "--leaderboard", board) == 0
    data = json.loads(board.read_text())
    copy = json.loads(json.dumps(data["entries"][0]))
    copy["date"] = "2026-01-01T00:00:00+00:00"  # an edited duplicate: the next add kept the last one
    data["entries"].append(copy)
    board.write_text(json.dumps(data))
    before = board.read_bytes()
    capsys.readouterr()
    assert advsuite("leaderboard", "add", theirs, "--leaderboard", board) == 2
    assert "holds two entries for 'builtin:digits-cnn-at'" in one_error_line(capsys)
    assert board.read_bytes() == before


def test_a_relative_timm_directory_run_is_published(digits_model, tmp_path, monkeypatch):
    shutil.copytree(digits_model.info.extra["path"], tmp_path / "model", ignore=shutil.ignore_patterns("DONE"))
    monkeypatch.chdir(tmp_path)
    assert advsuite(*command("timm:./model/", Path("run"))) == 0
    assert json.loads(Path("run/results.json").read_text())["model"]["spec"] == "timm:./model/"
    assert advsuite("leaderboard", "add", "run", "--leaderboard", "board.json") == 0
    entries = json.loads(Path("board.json").read_text())["entries"]
    assert {entry["model"] for entry in entries} == {"timm:./model/"}
    assert all(entry["verified"] for entry in entries)


def test_a_device_or_pipe_is_never_replaced_by_a_written_file(two_runs, tmp_path, capsys):
    """The atomic write renamed its file over whatever the path held: ``leaderboard schema
    --output /dev/full`` turned the device into a regular file (``/dev/null`` as root would go
    the same way), and an export into a card directory whose README.md is a pipe waited forever."""
    import os
    import stat

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    capsys.readouterr()
    assert advsuite("leaderboard", "schema", "--output", pipe) == 2
    assert "is a device, pipe or socket, not a regular file: it was not replaced" in one_error_line(capsys)
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)
    link = tmp_path / "link.json"  # a link is replaced itself (paths.atomic_write), never what it names
    link.symlink_to(pipe)
    assert advsuite("leaderboard", "schema", "--output", link) == 0
    assert stat.S_ISFIFO(os.stat(pipe).st_mode) and json.loads(link.read_text())
    card = tmp_path / "card"
    card.mkdir()
    os.mkfifo(card / "README.md")
    assert advsuite("export", two_runs[0], "--to", card) == 2  # read first: it waited for a writer
    assert "README.md' is not a regular file" in one_error_line(capsys)
    assert stat.S_ISFIFO(os.stat(card / "README.md").st_mode)


def test_other_weights_never_replace_a_leaderboard_entry_silently(two_runs):
    """The same slot and evaluation with other weights (a ``timm:<name>`` has no revision, so a
    Hub model whose weights changed keeps its slot) was the same key, and replaced the entry
    with "1 replaced". Entries of older files name no weights, and are compared as before."""
    from suite.errors import ConfigError
    from suite.report.leaderboard import empty, entries_from_results, merge, read_results

    entries = entries_from_results(read_results(two_runs[0] / "results.json"), verified=True)
    assert entries[0].weights and entries[0].weights.startswith("sha256-")
    board, added, _ = merge(empty(), entries)
    other = [entry.model_copy(update={"weights": "sha256-0123456789abcdef"}) for entry in entries]
    with pytest.raises(ConfigError, match="already on the leaderboard from other weights of the model"):
        merge(board, other)
    assert merge(board, other, replace=True)[0].entries == other
    older = [entry.model_copy(update={"weights": None}) for entry in entries]
    assert merge(merge(empty(), older)[0], entries)[1:] == (0, len(entries))  # the same evaluation: replaced


def test_running_out_of_memory_is_one_line(monkeypatch, capsys):
    """A file of gigabytes read whole (``validate``, ``leaderboard add``, ``compare``) ran out of
    memory with a traceback of 30 lines; it is the machine's limit, not a bug: one line, exit 1."""
    import suite.cli.ls as ls

    def exhausted(args):
        raise MemoryError

    monkeypatch.setattr(ls, "handle", exhausted)
    capsys.readouterr()
    assert advsuite("ls", "attacks") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("advsuite: error: out of memory") and "Traceback" not in err
