"""Bad-input cases: damaged files the suite wrote (see ``test_bad_input.py``).

A model directory written by ``advsuite train`` records the sha256 of its weights; weights
damaged after that (flipped bytes, same length, valid header) are refused in one line naming
the file and both hashes, never evaluated as if they were the trained model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bad_input_cases import Case
from tiny_models import flip_tensor_bytes, save_tiny_bert, save_tiny_timm

OUT = ("--output", "{tmp}/out")


def trained(save: Callable[[Path], object]) -> Callable[[Path], None]:
    """Setup: ``run/`` as ``advsuite train`` writes a model directory (``save``, then its hash
    record), then 4 KB of its ``model.safetensors`` flipped."""
    def setup(work: Path) -> None:
        from suite.train.store import TrainStore

        (work / "run").mkdir()
        TrainStore(work / "run", identity={}).save_model(save)
        flip_tensor_bytes(work / "run" / "model.safetensors")
    return setup


MISMATCH = "do not match the sha256 recorded in weights.sha256.json when they were written (damaged or changed since?)"
CASES = [
    Case("fault-train-timm-flipped-bytes",
         ("evaluate", "--model", "timm:{tmp}/run", "--dataset", "builtin:digits", *OUT),
         f"/run/model.safetensors' {MISMATCH}: recorded ",
         setup=trained(lambda directory: save_tiny_timm(directory, num_classes=10, input_size=(1, 32, 32)))),
    Case("fault-train-hf-flipped-bytes",
         ("evaluate", "--model", "hf:{tmp}/run", "--dataset", "builtin:sentiment", *OUT),
         f"/run/model.safetensors' {MISMATCH}: recorded ",
         setup=trained(lambda directory: save_tiny_bert(directory, labels=("negative", "positive")))),
]
