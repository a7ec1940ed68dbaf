"""What users look at: the ``--log-samples`` grids of image runs and every run's ``summary.png``."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from PIL import Image

import suite
from suite.data.base import Example
from suite.evaluation.records import SUITE_FILES
from suite.report import sample_grid
from suite.report.sample_grid import Layout, load_rgb, read_served
from suite.report.samples import image_path, write_samples
from suite.report.summary_plot import SUMMARY_PNG, summary_bars, write_summary_plot

EPS = 0.1
ROWS = 5  # the cap on rows, lowered so 8 examples overflow it


def _evaluate(out):
    return suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=[{"name": "pgd_linf", "steps": 3}],
                          eps=EPS, n=8, options=suite.RunOptions(log_samples=True), output=out)


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    """One image run with --log-samples (cap of ROWS rows); its directory and results."""
    out = tmp_path_factory.mktemp("views") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sample_grid, "MAX_ROWS", ROWS)
        results = _evaluate(out)
    return out, results


def _records(out, kind):
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
    return [record for record in records if record["kind"] == kind]


def _cell(grid: np.ndarray, layout: Layout, row: int, column: int) -> np.ndarray:
    """The image of one cell, shrunk back to the saved image's pixels (nearest-neighbour enlargement)."""
    x, y = layout.origin(row, column)
    width, height = layout.cell
    return grid[y : y + height : layout.scale, x : x + width : layout.scale]


def test_grid_rows_are_the_saved_images_within_the_eps_ball(digits_run):
    out, _ = digits_run
    attacked = _records(out, "attack")
    assert len(attacked) > ROWS  # the cap is what limits the grid
    grid = np.asarray(Image.open(out / "samples" / "grid-pgd_linf.png").convert("RGB"))
    layout = Layout(ROWS, 32, 32)
    assert layout.cell == (96, 96)  # 32×32 digits enlarged ×3
    assert grid.shape == (layout.size[1], layout.size[0], 3) and grid.shape[1] == 3 * 96 + 4 * sample_grid.GAP
    assert grid.shape[0] > ROWS * 96
    diffs = []
    for row, record in enumerate(attacked[:ROWS]):  # the first attacked examples, in evaluation order
        clean = load_rgb(image_path(out, "clean", record["id"]))
        adversarial = load_rgb(image_path(out, "pgd_linf", record["id"]))
        assert np.array_equal(_cell(grid, layout, row, 0), clean)
        assert np.array_equal(_cell(grid, layout, row, 1), adversarial)
        diff = np.abs(adversarial.astype(int) - clean.astype(int)).max(axis=2)
        # The ε-ball survives into the picture: each image is rounded to 8 bits once.
        assert diff.max() <= EPS * 255 + 1
        if record["robust"] == 0:
            assert diff.max() > 0
        diffs.append(diff)
    amplification = 255 / max(diff.max() for diff in diffs)
    for row, diff in enumerate(diffs):
        shown = _cell(grid, layout, row, 2)[:, :, 0].astype(int)
        assert np.abs(shown - np.rint(diff * amplification)).max() <= 1
    assert max(int(_cell(grid, layout, row, 2).max()) for row in range(ROWS)) == 255  # the largest is white
    assert any(record["robust"] == 0 for record in attacked[:ROWS])


def test_samples_md_links_the_grid_and_confidences_are_kept(digits_run):
    out, _ = digits_run
    samples = (out / "samples.md").read_text()
    attacked = _records(out, "attack")
    assert "![pgd_linf](samples/grid-pgd_linf.png)" in samples
    assert f"first {ROWS} attacked examples" in samples
    assert f"pgd_linf: {ROWS} of {len(attacked)} attacked example(s) shown." in samples
    for record in attacked:
        served = read_served(image_path(out, "pgd_linf", record["id"]))
        assert served is not None and served[0] == record["prediction"] and 0.1 <= served[1] <= 1
        assert f"prediction {record['prediction']}, confidence {served[1]:.3f};" in samples
    assert samples.count("(correct, confidence ") == sum(r["correct"] == 1 for r in _records(out, "clean"))


def test_summary_png_is_listed_and_written(digits_run):
    out, results = digits_run
    assert results.plots[0] == SUMMARY_PNG and SUMMARY_PNG in json.loads((out / "results.json").read_text())["plots"]
    with Image.open(out / SUMMARY_PNG) as image:
        assert image.format == "PNG" and image.size[0] == 800 and image.size[1] > 250
    assert SUMMARY_PNG in SUITE_FILES  # --overwrite clears it; samples/ (grids too) is cleared whole


def test_resumed_run_redraws_and_leaves_out_examples_without_images(digits_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(digits_run[0], out)
    first = np.asarray(Image.open(out / "samples" / "grid-pgd_linf.png").convert("RGB"))
    (out / SUMMARY_PNG).unlink()
    (out / "samples" / "grid-pgd_linf.png").unlink()
    attacked = _records(out, "attack")
    # As if the first example had been attacked by a run without --log-samples: no image.
    image_path(out, "pgd_linf", attacked[0]["id"]).unlink()
    again = _evaluate(out)  # resumes (nothing attacked again), with the default cap of rows
    assert again.attacks["pgd_linf"].robust_accuracy == digits_run[1].attacks["pgd_linf"].robust_accuracy
    assert len(_records(out, "attack")) == len(attacked)
    assert (out / SUMMARY_PNG).exists() and SUMMARY_PNG in again.plots
    samples = (out / "samples.md").read_text()
    shown = min(len(attacked) - 1, sample_grid.MAX_ROWS)
    assert shown > ROWS
    assert f"pgd_linf: {shown} of {len(attacked)} attacked example(s) shown; 1 attacked example(s) left out" in samples
    grid = np.asarray(Image.open(out / "samples" / "grid-pgd_linf.png").convert("RGB"))
    layout, capped = Layout(shown, 32, 32), Layout(ROWS, 32, 32)
    assert grid.shape[:2] == (layout.size[1], layout.size[0])
    for row in range(ROWS - 1):  # the same saved images, one row up (the first example is left out)
        for column in (0, 1):
            assert np.array_equal(_cell(grid, layout, row, column), _cell(first, capped, row + 1, column))


def test_png_without_stored_confidence_reads_as_unknown(tmp_path):
    path = tmp_path / "old.png"
    Image.fromarray(np.zeros((4, 4), dtype=np.uint8)).save(path)
    assert read_served(path) is None


def test_text_samples_draw_no_grid(tmp_path):
    examples = [Example("t0", "a fine film", 1), Example("t1", "a dull film", 0)]
    clean = {"t0": {"prediction": 1, "correct": 1.0}, "t1": {"prediction": 0, "correct": 1.0}}
    attacks = {"pwws": {"t0": {"robust": 0.0, "prediction": 0, "confidence": 0.8, "queries": 3,
                               "adversarial": "a fine movie"}}}
    write_samples(tmp_path, "text", ["neg", "pos"], examples, clean, attacks)
    samples = (tmp_path / "samples.md").read_text()
    assert not (tmp_path / "samples").exists() and "Grids" not in samples and "changed: film→movie" in samples


def _results(**extra):
    return {"model": {"name": "m"}, "dataset": {"spec": "d", "split": "test", "n": 10}, "clean_accuracy": 0.9,
            "attacks": {"a": {"robust_accuracy": 0.5, "robust_accuracy_ci": [0.3, 0.7]},
                        "b": {"robust_accuracy": 0.4}, "old": {"robust_accuracy": 0.6}},
            "threat_models": {"linf eps=0.03": {"attacks": ["a", "b"], "worst_case_robust_accuracy": 0.3,
                                                "worst_case_robust_accuracy_ci": [0.1, 0.6]}}, **extra}


def test_summary_bars_order_kinds_and_missing_intervals(tmp_path):
    results = _results(clean_accuracy_ci=None, distributional={"wda": {"accuracy": 0.2}})
    bars = summary_bars(results)
    assert [(bar.label, bar.kind, bar.accuracy, bar.interval) for bar in bars] == [
        ("clean", "clean", 0.9, None),
        ("worst case, linf eps=0.03", "worst", 0.3, [0.1, 0.6]),
        ("a", "attack", 0.5, [0.3, 0.7]),
        ("b", "attack", 0.4, None),
        ("old", "attack", 0.6, None),  # in no threat-model group (an older file)
        ("wda (distributional)", "distributional", 0.2, None),
    ]
    assert write_summary_plot(results, tmp_path) == SUMMARY_PNG
    with Image.open(tmp_path / SUMMARY_PNG) as image:
        assert image.size[0] == 800 and image.size[1] >= 100 * (1.8 + 0.32 * len(bars)) - 2
    assert [path.name for path in tmp_path.iterdir()] == [SUMMARY_PNG]  # no temporary file left
