"""One-command polish: the dataset a model names for itself, --limit, --log-samples."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from suite.cli.main import main
from suite.models.card import card_datasets


def advsuite(*args: str) -> int:
    with pytest.raises(SystemExit) as caught:
        main(list(args))
    return caught.value.code


def test_card_front_matter_datasets():
    assert card_datasets("---\nlicense: mit\ndatasets:\n- rotten_tomatoes\n- imdb\n---\n# Card\n") == ["rotten_tomatoes", "imdb"]
    assert card_datasets("---\ndatasets: glue\n---\n") == ["glue"]
    assert card_datasets("# no front matter\ndatasets: [x]\n") == []
    assert card_datasets("---\ndatasets: [unclosed\n---\n") == []
    assert card_datasets("---\ntags: [a]\n---\n") == []


@pytest.mark.slow
def test_image_model_default_dataset_limit_and_samples(tmp_path, capsys):
    from PIL import Image
    import numpy as np

    out = tmp_path / "digits"
    assert advsuite("evaluate", "--model", "builtin:digits-cnn", "--attacks", "fgm_linf", "--eps", "0.05",
                    "--limit", "8", "--log-samples", "--output", str(out)) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["dataset"]["spec"] == "builtin:digits" and results["dataset"]["n"] == 8
    samples = (out / "samples.md").read_text()
    assert samples.count("\n## ") == 8 and "samples.md" in capsys.readouterr().out
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
    attacked = [r for r in records if r["kind"] == "attack"]
    assert attacked
    for record in attacked:
        clean = np.asarray(Image.open(out / "samples" / "clean" / f"{record['id']}.png"), dtype=float) / 255
        adversarial = np.asarray(Image.open(out / "samples" / "fgm_linf" / f"{record['id']}.png"), dtype=float) / 255
        # The saved images respect the ε-ball (up to 8-bit rounding of each image).
        assert clean.shape == adversarial.shape == (32, 32)
        assert np.abs(adversarial - clean).max() <= 0.05 + 1 / 255
        assert f"samples/fgm_linf/{record['id']}.png" in samples


@pytest.mark.slow
def test_hub_style_model_dir_uses_the_dataset_its_card_names(tmp_path, sentiment_model, capsys):
    from suite.data.builtin import sentiment

    model_dir = tmp_path / "model"
    shutil.copytree(sentiment_model.info.extra["path"], model_dir)
    test = sentiment("test")
    data = tmp_path / "reviews.csv"
    with open(data, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(zip(test.inputs, test.labels))
    out = tmp_path / "run"
    # No card: one line asking for --dataset, nothing written.
    assert advsuite("evaluate", "--model", f"hf:{model_dir}", "--output", str(out)) == 2
    error = capsys.readouterr().err.strip()
    assert "names no dataset" in error and "--dataset" in error and len(error.splitlines()) == 1
    assert not out.exists()
    (model_dir / "README.md").write_text(f"---\nlicense: apache-2.0\ndatasets:\n- {data}\n---\n# A sentiment model\n")
    assert advsuite("evaluate", "--model", f"hf:{model_dir}", "--attacks", "deepwordbug", "--adversary", "none",
                    "--limit", "10", "--log-samples", "--output", str(out)) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["dataset"]["spec"] == f"hf:{data}" and results["dataset"]["n"] == 10
    samples = (out / "samples.md").read_text()
    broken = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
    broken = [r for r in broken if r["kind"] == "attack" and r["robust"] == 0]
    assert broken, "DeepWordBug breaks the built-in model"
    for record in broken:
        assert f"  > {record['adversarial']}" in samples
    assert samples.count("changed: ") >= len(broken)


@pytest.mark.slow
def test_run_limit_caps_every_task_and_names_its_own_output(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert advsuite("-q", "run", "quickstart", "--limit", "5") == 0
    for task in ("text", "vision"):
        results = json.loads((tmp_path / "runs" / "quickstart-limit5" / task / "results.json").read_text())
        assert results["dataset"]["n"] == 5 and results["config"]["dataset"]["n"] == 5
    assert not (tmp_path / "runs" / "quickstart").exists()
