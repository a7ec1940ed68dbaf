"""``advsuite export``: results.json as model card metadata and ``.eval_results`` files.

One real evaluation (the built-in digits model, two attacks, 16 examples) per module; every
test exports it and reads the files back with huggingface_hub's own readers, asserting the
numbers equal results.json's. The Hub is unreachable here: ``--push`` is tested up to the upload
call, with ``HfApi.upload_folder`` (and the download of the repo's current card) monkeypatched.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from huggingface_hub import HfApi, ModelCard
from huggingface_hub.errors import EntryNotFoundError
from huggingface_hub.repocard import metadata_load
from huggingface_hub.repocard_data import model_index_to_eval_results

import suite
from suite.cli.main import main
from suite.errors import ConfigError
from suite.report import hub
from suite.report.leaderboard import read_results

HUB_ID, HUB_REVISION = "ylecun/mnist", "77f3279092a1c1579b2250db8eafed0ad422088c"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run directory of a real evaluation: builtin:digits-cnn under fgm_linf and pgd_linf at ε = 0.03."""
    out = tmp_path_factory.mktemp("export") / "run"
    suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf", "pgd_linf"], eps=0.03, n=16, output=out)
    return out


@pytest.fixture(scope="module")
def hub_run_dir(run_dir, tmp_path_factory) -> Path:
    """The same results as if the digits had come from a Hub dataset at a pinned revision
    (``.eval_results`` entries are written for Hub datasets only)."""
    data = json.loads((run_dir / "results.json").read_text())
    data["dataset"]["spec"] = data["config"]["dataset"]["spec"] = f"hf:{HUB_ID}"
    data["config"]["dataset"].update(revision=HUB_REVISION, config="mnist")
    out = tmp_path_factory.mktemp("export-hub") / "run"
    out.mkdir()
    (out / "results.json").write_text(json.dumps(data))
    return out


def by_config(eval_results) -> dict[tuple[str, str], object]:
    return {(result.metric_type, result.metric_config): result for result in eval_results}


def test_card_model_index_holds_the_results(run_dir, tmp_path, capsys):
    results = read_results(run_dir / "results.json")
    with pytest.raises(SystemExit) as done:
        main(["export", str(run_dir), "--to", str(tmp_path / "card")])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "builtin:digits is not a Hub dataset" in out and "README.md" in out
    assert not (tmp_path / "card" / ".eval_results").exists()

    card = ModelCard.load(tmp_path / "card" / "README.md")
    name, parsed = model_index_to_eval_results(metadata_load(tmp_path / "card" / "README.md")["model-index"])
    assert name == card.data.model_name == "builtin:digits-cnn"
    assert [vars(r) for r in parsed] == [vars(r) for r in card.data.eval_results]
    found = by_config(parsed)
    assert len(found) == len(parsed) == 1 + len(results.attacks) + len(results.threat_models) == 4
    for result in parsed:
        assert result.task_type == "image-classification"
        assert (result.dataset_type, result.dataset_split) == ("builtin:digits", "test")
        # No revision recorded: none (the Hub's is a git revision); the data's fingerprint is in the args.
        assert result.dataset_revision is None
        assert result.metric_args["dataset_fingerprint"] == results.dataset.fingerprint
        assert result.metric_args["recipe"] == results.config_hash
        assert result.metric_args["advsuite"] == results.suite_version and result.metric_args["n"] == 16
    clean = found["accuracy", "clean"]
    assert clean.metric_value == results.clean_accuracy and clean.metric_args["ci95"] == results.clean_accuracy_ci
    for key, entry in results.attacks.items():
        metric = found["robust_accuracy", f"{key}, linf eps=0.03"]
        assert metric.metric_value == entry.robust_accuracy
        assert metric.metric_name == f"robust accuracy ({key}, linf eps=0.03)"
        args = metric.metric_args
        assert (args["norm"], args["eps"], args["attack"], args["access"]) == ("linf", 0.03, key, "white-box")
    worst = found["worst_case_robust_accuracy", "worst case, linf eps=0.03"]
    assert worst.metric_value == results.threat_models["linf eps=0.03"].worst_case_robust_accuracy
    assert worst.metric_value == results.worst_case_robust_accuracy
    assert worst.metric_args["attacks"] == ["fgm_linf", "pgd_linf"]
    assert "# builtin:digits-cnn" in card.text


def test_eval_results_files_parse_back(hub_run_dir, tmp_path):
    results = read_results(hub_run_dir / "results.json")
    done = hub.export(hub_run_dir, tmp_path / "card")
    path = ".eval_results/advsuite-ylecun-mnist-mnist-test.yaml"
    assert done.files == ["README.md", path] and done.skipped == []
    entries = yaml.safe_load((tmp_path / "card" / path).read_text())
    # The documented fields (hub-docs eval_results.yaml): dataset.id, dataset.task_id, value required.
    assert all(set(entry) <= {"dataset", "value", "verifyToken", "date", "source", "notes"} for entry in entries)
    assert all(set(entry["dataset"]) <= {"id", "task_id", "revision"} for entry in entries)
    values = {entry["dataset"]["task_id"]: entry["value"] for entry in entries}
    worst = results.threat_models["linf eps=0.03"].worst_case_robust_accuracy
    assert values == {
        "mnist/test/accuracy": results.clean_accuracy,
        "mnist/test/robust_accuracy/linf-eps0.03/fgm_linf": results.attacks["fgm_linf"].robust_accuracy,
        "mnist/test/robust_accuracy/linf-eps0.03/pgd_linf": results.attacks["pgd_linf"].robust_accuracy,
        "mnist/test/worst_case_robust_accuracy/linf-eps0.03": worst,
    }
    for entry in entries:
        assert entry["dataset"]["id"] == HUB_ID and entry["dataset"]["revision"] == HUB_REVISION
        assert entry["date"] == results.created and isinstance(entry["date"], str)
        assert "n=16 of 359" in entry["notes"] and results.config_hash in entry["notes"]
    assert "linf eps=0.03" in entries[1]["notes"] and "white-box" in entries[1]["notes"]
    parse = getattr(__import__("huggingface_hub"), "parse_eval_result_entries", None)
    if parse is not None:  # huggingface_hub >= 1.4 has the format's parser
        assert [entry.value for entry in parse(entries)] == list(values.values())
    card = ModelCard.load(tmp_path / "card" / "README.md")
    assert {(r.dataset_type, r.dataset_config, r.dataset_revision) for r in card.data.eval_results} == {
        (HUB_ID, "mnist", HUB_REVISION)}


def test_merge_keeps_metadata_body_and_other_results(run_dir, tmp_path):
    card_dir = tmp_path / "card"
    card_dir.mkdir()
    body = "\n# My digits model\n\nTrained by hand. Keep this text.\n"
    stale = {"type": "robust_accuracy", "value": 0.5, "name": "old", "config": "pgd_linf, linf eps=0.03",
             "args": {"advsuite": "0.0.1", "model": "builtin:digits-cnn"}}
    foreign = {"type": "robust_accuracy", "value": 0.7, "config": "pgd_linf, linf eps=0.03"}  # not advsuite's
    metadata = {"license": "mit", "tags": ["digits"], "custom_key": {"kept": True}, "model-index": [{
        "name": "my-digits", "results": [
            {"task": {"type": "image-classification"}, "dataset": {"type": "builtin:digits", "name": "digits",
                                                                  "split": "test"}, "metrics": [stale, foreign]},
            {"task": {"type": "image-classification"}, "dataset": {"type": "mnist", "name": "MNIST"},
             "metrics": [{"type": "accuracy", "value": 0.99}]}]}]}
    (card_dir / "README.md").write_text(f"---\n{yaml.safe_dump(metadata, sort_keys=False)}---\n{body}")
    hub.export(run_dir, card_dir)
    first = (card_dir / "README.md").read_text()
    hub.export(run_dir, card_dir)
    assert (card_dir / "README.md").read_text() == first  # exporting again changes nothing

    card = ModelCard.load(card_dir / "README.md")
    assert card.text == body
    assert (card.data.license, card.data.tags, card.data.custom_key) == ("mit", ["digits"], {"kept": True})
    assert card.data.model_name == "my-digits"
    results = read_results(run_dir / "results.json")
    pgd = [r for r in card.data.eval_results if r.metric_config == "pgd_linf, linf eps=0.03"]
    assert sorted(r.metric_value for r in pgd) == sorted([0.7, results.attacks["pgd_linf"].robust_accuracy])
    assert [r.metric_value for r in card.data.eval_results if r.dataset_type == "mnist"] == [0.99]
    assert len(card.data.eval_results) == 2 + 4  # the foreign two, and advsuite's four (the stale one replaced)


def test_eval_results_merge_keeps_other_entries(hub_run_dir, tmp_path):
    path = tmp_path / "card" / ".eval_results" / "advsuite-ylecun-mnist-mnist-test.yaml"
    path.parent.mkdir(parents=True)
    other = {"dataset": {"id": "ylecun/mnist", "task_id": "by-hand"}, "value": 0.9}
    ours = {"dataset": {"id": HUB_ID, "task_id": "mnist/test/accuracy"}, "value": 0.1}  # a stale export
    path.write_text(yaml.safe_dump([other, ours]))
    hub.export(hub_run_dir, tmp_path / "card")
    entries = yaml.safe_load(path.read_text())
    assert entries[0] == other and len(entries) == 1 + 4
    assert entries[1]["value"] == read_results(hub_run_dir / "results.json").clean_accuracy


def test_push_uploads_the_written_files_and_merges_the_repo_card(hub_run_dir, tmp_path, monkeypatch, capsys):
    # No Hub here: the two HfApi calls are replaced and their arguments checked.
    hub_card = tmp_path / "hub-README.md"
    hub_card.write_text("---\nlicense: apache-2.0\n---\n# On the Hub already\n")
    downloads, uploads = [], []

    def download(self, repo_id, filename, **kwargs):
        downloads.append((repo_id, filename))
        if filename == "README.md":
            return str(hub_card)
        raise EntryNotFoundError(f"404: {filename}")

    def upload(self, **kwargs):
        uploads.append(kwargs)
        return "https://huggingface.co/me/digits/commit/0123"

    monkeypatch.setattr(HfApi, "hf_hub_download", download)
    monkeypatch.setattr(HfApi, "upload_folder", upload)
    to = tmp_path / "card"
    with pytest.raises(SystemExit) as done:
        main(["export", str(hub_run_dir), "--to", str(to), "--push", "me/digits", "--pr"])
    assert done.value.code == 0
    files = ["README.md", ".eval_results/advsuite-ylecun-mnist-mnist-test.yaml"]
    assert downloads == [("me/digits", name) for name in files]
    assert len(uploads) == 1
    assert uploads[0]["repo_id"] == "me/digits" and uploads[0]["repo_type"] == "model"
    assert Path(uploads[0]["folder_path"]) == to and uploads[0]["allow_patterns"] == files
    assert uploads[0]["create_pr"] is True
    card = ModelCard.load(to / "README.md")
    assert (card.data.license, card.text, len(card.data.eval_results)) == ("apache-2.0", "# On the Hub already\n", 4)
    assert "pushed to me/digits: https://huggingface.co/me/digits/commit/0123" in capsys.readouterr().out


def test_recipe_dir_of_one_model_exports_every_task(run_dir, hub_run_dir, tmp_path):
    recipe = tmp_path / "recipe"
    for task, source in (("digits", run_dir), ("mnist", hub_run_dir)):
        (recipe / task).mkdir(parents=True)
        shutil.copy(source / "results.json", recipe / task / "results.json")
    done = hub.export(recipe, tmp_path / "card")
    assert len(done.files) == 2 and len(done.skipped) == 1
    card = ModelCard.load(tmp_path / "card" / "README.md")
    assert {r.dataset_type for r in card.data.eval_results} == {"builtin:digits", HUB_ID}
    data = json.loads((recipe / "mnist" / "results.json").read_text())
    data["model"].update(name="builtin:digits-cnn-at", spec="builtin:digits-cnn-at")
    (recipe / "mnist" / "results.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="holds results of 2 models"):
        hub.export(recipe, tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_warnings_and_illusion_flag_are_exported(hub_run_dir, tmp_path):
    data = json.loads((hub_run_dir / "results.json").read_text())
    data["warnings"] = ["black-box square beat white-box pgd_linf"]
    # A flag the file's own numbers give (export refuses one they do not): the calibrated adversary
    # 25 points below the out-of-the-box FGM. These results have no records beside them to check.
    fgm = data["attacks"]["fgm_linf"]
    fgm.update(robust_accuracy=0.5, robust_accuracy_ci=[0.3, 0.7])
    data["attacks"]["fgm_linf@cal"] = {**fgm, "adversary": "cal", "base_attack": "fgm_linf",
                                       "adversary_temperature": 10.0, "robust_accuracy": 0.25,
                                       "robust_accuracy_ci": [0.1, 0.5]}
    data["illusion"] = {"flagged": True, "threshold": 0.05, "max_drop": 0.25, "findings": [],
                        "mechanism": "design temperature", "mechanism_detail": "served at T=0.01"}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(json.dumps(data))
    done = hub.export(tmp_path / "run", tmp_path / "card")
    card = ModelCard.load(tmp_path / "card" / "README.md")
    for result in card.data.eval_results:  # shared without its records: the export says so
        assert result.metric_args["warnings"] == [*data["warnings"], hub.UNVERIFIED]
        assert result.metric_args["illusion_of_robustness"] == {"max_drop": 0.25, "mechanism": "design temperature"}
    for entry in yaml.safe_load((tmp_path / "card" / done.files[1]).read_text()):
        assert "ILLUSION OF ROBUSTNESS flagged: an aware adversary lowers it by up to 25.0 pp" in entry["notes"]
        assert "2 warning(s)" in entry["notes"]


def test_two_exports_into_one_card_at_once_keep_both(run_dir, hub_run_dir, tmp_path, monkeypatch):
    """Export reads the card, merges and writes it: two at once each wrote its own merge, and one
    run's results were lost (both exit 0). The second now waits for the first and merges into
    what it wrote. Here the second export starts while the first holds the card's lock, between
    its read and its write."""
    import threading

    from suite.paths import lock_directory

    to = tmp_path / "card"
    to.mkdir()
    entered, release = threading.Event(), threading.Event()
    write = hub.atomic_write_text

    def slow(path, text, *args):  # the first export, paused inside its lock before it writes
        if not entered.is_set():
            entered.set()
            release.wait(timeout=60)
        return write(path, text, *args)

    monkeypatch.setattr(hub, "atomic_write_text", slow)
    first = threading.Thread(target=hub.export, args=(run_dir, to))
    first.start()
    assert entered.wait(timeout=60)
    second = threading.Thread(target=hub.export, args=(hub_run_dir, to))
    second.start()
    second.join(timeout=2)
    assert second.is_alive()  # it waits for the lock
    release.set()
    first.join(timeout=60)
    second.join(timeout=60)
    card = ModelCard.load(to / "README.md")
    assert {r.dataset_type for r in card.data.eval_results} == {"builtin:digits", HUB_ID}
    os.close(lock_directory(to, wait=False))  # and the lock is released


def test_a_card_with_a_byte_order_mark_keeps_its_metadata(run_dir, tmp_path, capsys):
    """A BOM before the front matter hid it: a second block was written on top and the card's
    license and tags became text. Without any metadata, the card is merged without the
    library's log line."""
    to = tmp_path / "card"
    to.mkdir()
    (to / "README.md").write_bytes("\ufeff---\nlicense: mit\ntags: [a]\n---\n\n# My model\n".encode())
    hub.export(run_dir, to)
    card = ModelCard.load(to / "README.md")
    assert card.data.license == "mit" and card.data.tags == ["a"] and card.text.strip() == "# My model"
    assert card.content.count("\n---\n") == 1 and card.data.eval_results
    (to / "README.md").write_text("# Just text\n")
    hub.export(run_dir, to)
    card = ModelCard.load(to / "README.md")
    assert card.text.strip() == "# Just text" and card.data.eval_results


def _copy_of(run_dir: Path, where: Path, **model) -> Path:
    """``run_dir``'s results.json alone in ``where``, its ``model`` fields updated."""
    data = json.loads((run_dir / "results.json").read_text())
    data["model"].update(model)
    where.mkdir()
    (where / "results.json").write_text(json.dumps(data))
    return where


def test_a_card_holds_one_model_and_one_set_of_weights(run_dir, hub_run_dir, tmp_path):
    """Another model's results are never merged into a card (the Hub would show them under the
    card's model); another set of weights' (retrained in place) only with ``replace``, which
    removes every result of the old weights, in the card and in ``.eval_results``: merged by group,
    the new clean accuracy stood beside the old weights' robust accuracy at another ε."""
    card = tmp_path / "card"
    hub.export(run_dir, card)
    before = (card / "README.md").read_text()
    other = _copy_of(run_dir, tmp_path / "other", spec="builtin:digits-cnn-at", name="builtin:digits-cnn-at")
    with pytest.raises(ConfigError, match="holds advsuite results of the model 'builtin:digits-cnn', and these are "
                                          "of 'builtin:digits-cnn-at': a card describes one model"):
        hub.export(other, card, replace=True)
    assert (card / "README.md").read_text() == before

    weights = read_results(hub_run_dir / "results.json").model.weights
    assert weights and weights.startswith("sha256-")
    hub.export(hub_run_dir, card / "hub")
    retrained = _copy_of(hub_run_dir, tmp_path / "retrained", weights="sha256-0123456789abcdef")
    data = json.loads((retrained / "results.json").read_text())  # the new weights evaluated at another radius only
    data["attacks"] = {key: {**entry, "threat": {**entry["threat"], "eps": 0.05}, "params": {**entry["params"],
                             "eps": 0.05}} for key, entry in data["attacks"].items()}
    data["threat_models"] = {"linf eps=0.05": {**group, "threat": {**group["threat"], "eps": 0.05}}
                             for group in data["threat_models"].values()}
    for attack in data["config"]["attacks"]:
        attack["params"]["eps"] = 0.05
    (retrained / "results.json").write_text(json.dumps(data))
    files = {path: path.read_text() for path in (card / "hub").rglob("*") if path.is_file()}
    with pytest.raises(ConfigError, match=f"other weights of this model \\({weights} there, sha256-0123456789abcdef "
                                          "here: retrained"):
        hub.export(retrained, card / "hub")
    assert {path: path.read_text() for path in files} == files
    hub.export(retrained, card / "hub", replace=True)
    results = ModelCard.load(card / "hub" / "README.md").data.eval_results
    assert len(results) == 4 and {r.metric_args["weights"] for r in results} == {"sha256-0123456789abcdef"}
    assert all(r.metric_args.get("eps") in (None, 0.05) for r in results)
    entries = yaml.safe_load((card / "hub" / ".eval_results/advsuite-ylecun-mnist-mnist-test.yaml").read_text())
    assert len(entries) == 4 and all(entry["notes"].endswith("; weights sha256-0123456789abcdef") for entry in entries)


def test_eval_results_of_another_model_are_refused_whatever_the_card_holds(hub_run_dir, tmp_path):
    """The model check ran through the card alone: under a user's own card (no advsuite
    model-index), another model's results went into the same ``.eval_results`` file, and with
    ``--replace`` (weights recorded) replaced the first model's."""
    card = tmp_path / "card"
    hub.export(hub_run_dir, card)
    (card / "README.md").write_text("# My model card\n")
    files = {path: path.read_text() for path in card.rglob("*") if path.is_file()}
    other = _copy_of(hub_run_dir, tmp_path / "other", spec="builtin:digits-cnn-at", name="builtin:digits-cnn-at",
                     weights="sha256-0123456789abcdef")
    for replace in (False, True):
        with pytest.raises(ConfigError, match="holds advsuite results of the model 'builtin:digits-cnn', and these "
                                              "are of 'builtin:digits-cnn-at'"):
            hub.export(other, card, replace=replace)
    assert {path: path.read_text() for path in card.rglob("*") if path.is_file()} == files


def test_local_data_is_never_published_as_a_hub_dataset(run_dir, tmp_path, monkeypatch):
    """A local folder named like a Hub id (``hf:myorg/digits``) was written as that Hub dataset's
    ``.eval_results``, and a local path stood in the card as the dataset's name."""
    data = json.loads((run_dir / "results.json").read_text())
    cases = {"folder-here": ("myorg/digits", data["dataset"]["fingerprint"]),
             "fingerprinted-by-bytes": ("myorg/reviews", "sha256-0123456789abcdef"),
             "no-hub-id": ("a/b/c", data["dataset"]["fingerprint"]),
             "absolute-path": ("/home/me/data/reviews", data["dataset"]["fingerprint"])}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "myorg" / "digits").mkdir(parents=True)
    for case, (name, fingerprint) in cases.items():
        changed = json.loads(json.dumps(data))
        changed["dataset"].update(spec=f"hf:{name}", fingerprint=fingerprint)
        changed["config"]["dataset"]["spec"] = f"hf:{name}"
        (tmp_path / case).mkdir()
        (tmp_path / case / "results.json").write_text(json.dumps(changed))
        hub.export(tmp_path / case, tmp_path / f"{case}-card")
        assert not (tmp_path / f"{case}-card" / ".eval_results").exists(), case
        types = {r.dataset_type for r in ModelCard.load(tmp_path / f"{case}-card" / "README.md").data.eval_results}
        assert types == {f"local:{Path(name).name}"}, case


def test_a_crlf_card_keeps_its_line_ends_and_its_text(run_dir, tmp_path):
    """The card was read with newline translation: a CRLF card came back LF, its text too."""
    card = tmp_path / "card"
    card.mkdir()
    (card / "README.md").write_bytes(b"---\r\nlicense: mit\r\n---\r\n\r\n# Mine\r\n\r\nSome text.\r\nMore.\r\n")
    hub.export(run_dir, card)
    data = (card / "README.md").read_bytes()
    assert data.count(b"\r\n") == data.count(b"\n") and data.endswith(b"\r\n# Mine\r\n\r\nSome text.\r\nMore.\r\n")
    assert metadata_load(card / "README.md")["license"] == "mit"
