"""Built-in datasets that need no network.

- ``builtin:digits``: scikit-learn's bundled 8×8 handwritten digits (1,797 images, 10 classes),
  scaled to [0, 1] and upsampled bilinearly to 1×32×32 so that ordinary small CNNs (and
  ε-balls measured in familiar units) apply. Split 80/20 by a fixed permutation.
- ``builtin:sentiment``: 520 two-class sentences written for this project
  (``resources/sentiment.csv``), with fixed train/test splits.
"""

from __future__ import annotations

import csv
import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from suite.data.registry import BUILTIN_DATASETS
from suite.errors import DataError

RESOURCES = Path(__file__).parent / "resources"
DIGITS_SIZE = 32
DIGITS_TEST_FRACTION = 0.2


@dataclass(frozen=True)
class RawSplit:
    """One split of a dataset before subsampling: parallel lists of ids, inputs and labels."""

    ids: list[str]
    inputs: list
    labels: list[int]
    label_names: list[str]
    modality: str
    fingerprint: str


def _check_split(name: str, split: str, available: tuple[str, ...]) -> None:
    if split not in available:
        raise DataError(f"builtin:{name} has no split {split!r}; available: {', '.join(available)}")


@lru_cache(maxsize=1)
def _digits_all() -> tuple[torch.Tensor, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    images = torch.nn.functional.interpolate(images, size=(DIGITS_SIZE, DIGITS_SIZE), mode="bilinear", align_corners=False)
    return images.clamp(0.0, 1.0), digits.target.astype(int)


@BUILTIN_DATASETS.register("digits")
def digits(split: str) -> RawSplit:
    """sklearn's 8x8 digits as 1x32x32 images in [0, 1], 10 classes; splits train/test."""
    _check_split("digits", split, ("train", "test"))
    images, targets = _digits_all()
    order = np.random.default_rng(0).permutation(len(targets))
    n_test = int(round(len(targets) * DIGITS_TEST_FRACTION))
    rows = sorted(order[:n_test] if split == "test" else order[n_test:])
    return RawSplit(
        ids=[f"digits-{i:04d}" for i in rows],
        inputs=[images[i] for i in rows],
        labels=[int(targets[i]) for i in rows],
        label_names=[str(d) for d in range(10)],
        modality="image",
        fingerprint=f"sklearn-digits-{DIGITS_SIZE}px-{split}",
    )


def sentiment_rows() -> list[dict[str, str]]:
    """All rows of the built-in sentiment set (columns id, split, label, text)."""
    path = RESOURCES / "sentiment.csv"
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@BUILTIN_DATASETS.register("sentiment")
def sentiment(split: str) -> RawSplit:
    """520 hand-written review sentences, negative (0) / positive (1); splits train/validation/test.

    ``validation`` is every fifth row of the file's training rows (80 sentences), held out from
    ``train`` (320) for fitting adversary temperatures and calibration.
    """
    _check_split("sentiment", split, ("train", "validation", "test"))
    if split == "test":
        rows = [row for row in sentiment_rows() if row["split"] == "test"]
    else:
        training = [row for row in sentiment_rows() if row["split"] == "train"]
        rows = [row for i, row in enumerate(training) if (i % 5 == 4) == (split == "validation")]
    digest = hashlib.sha256("\n".join(f"{r['id']}\t{r['label']}\t{r['text']}" for r in rows).encode())
    return RawSplit(
        ids=[row["id"] for row in rows],
        inputs=[row["text"] for row in rows],
        labels=[int(row["label"]) for row in rows],
        label_names=["negative", "positive"],
        modality="text",
        fingerprint="sentiment-" + digest.hexdigest()[:12],
    )
