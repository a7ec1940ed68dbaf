"""Tiny built-in models, trained deterministically on the built-in datasets on first use.

- ``builtin:sentiment-tiny``: a one-layer BERT (transformers) with a word-level tokenizer,
  trained on ``builtin:sentiment``. Words it has not seen map to ``[UNK]``, so character-level
  attacks (DeepWordBug) break it easily: a known-vulnerable model for tests and the demo.
- ``builtin:digits-cnn``: timm's ``test_resnet`` architecture (0.37 M parameters), one input
  channel, trained on ``builtin:digits`` (1×32×32).

Both train in seconds on first use, once per cache (:mod:`suite.models.builtin_cache`: a
process of their own with pinned CPU kernels, so one torch version gives the same weights on
every machine; an atomic, hash-recorded entry, trained again when its weights no longer match).
They are saved with safetensors and loaded back through the same code as ``hf:<dir>`` and
``timm:<dir>``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from suite.data.base import SUITE_PREPROCESSING
from suite.models.base import Classifier, ModelInfo, resolve_device
from suite.models.builtin_cache import load_cached
from suite.models.config import ModelConfig
from suite.models.registry import BUILTIN_MODELS  # entries are registered lazily there
from suite.models.word_bert import TRAIN_SEED, train_word_bert
from suite.progress import progress_bar


# Bump a version when its training recipe changes, so stale caches are not reused.
SENTIMENT_VERSION = "v3"  # v2: trained without the validation split; v3: pinned kernels
DIGITS_VERSION = "v2"  # v2: pinned kernels (training_env, pinned_training)


def load_builtin(name: str, config: ModelConfig) -> Classifier:
    """``builtin:<name>`` → the trained (and cached) built-in model."""
    loader = BUILTIN_MODELS.get(name)
    resolve_device(config.device)  # a bad device fails before a first use trains
    return loader(config)


def _train_sentiment(directory: Path) -> None:
    from suite.data.builtin import sentiment

    train = sentiment("train")
    train_word_bert(directory, list(train.inputs), list(train.labels), ["negative", "positive"], epochs=30)


def sentiment_tiny(config: ModelConfig) -> Classifier:
    """Tiny 1-layer BERT sentiment classifier trained on builtin:sentiment."""
    from suite.models.hf_text import load_hf

    classifier, directory = load_cached(
        "builtin:sentiment-tiny", f"sentiment-tiny-{SENTIMENT_VERSION}", f"{__name__}:_train_sentiment",
        lambda path: load_hf(path, config.model_copy(update={"revision": None})))
    classifier.info = ModelInfo(spec="builtin:sentiment-tiny", revision=SENTIMENT_VERSION, extra={"path": str(directory)})
    return classifier


# --------------------------------------------------------------------------- digits-cnn

DIGITS_ARCH = "test_resnet"
DIGITS_MEAN, DIGITS_STD = (0.3,), (0.4,)  # of builtin:digits pixels, rounded


def _train_digits(directory: Path) -> None:
    import timm

    from suite.data.builtin import digits
    from suite.models.timm_dir import save_timm_dir

    train = digits("train")
    images = torch.stack(train.inputs)
    labels = torch.tensor(train.labels)
    model = timm.create_model(DIGITS_ARCH, num_classes=10, in_chans=1)
    mean, std = torch.tensor(DIGITS_MEAN).view(1, 1, 1, 1), torch.tensor(DIGITS_STD).view(1, 1, 1, 1)
    epochs, batch_size = 12, 64
    steps = epochs * ((len(labels) + batch_size - 1) // batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=5e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps)
    generator = torch.Generator().manual_seed(TRAIN_SEED)
    model.train()
    with progress_bar(epochs, f"training {Path(directory).name}", unit="epoch") as bar:
        for _ in range(epochs):
            order = torch.randperm(len(labels), generator=generator)
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                loss = torch.nn.functional.cross_entropy(model((images[rows] - mean) / std), labels[rows])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                schedule.step()
            bar.update(1)
    model.eval()
    save_timm_dir(directory, model, DIGITS_ARCH, input_size=(1, 32, 32), mean=DIGITS_MEAN, std=DIGITS_STD,
                  label_names=[str(d) for d in range(10)])


def digits_cnn(config: ModelConfig) -> Classifier:
    """Small timm CNN (test_resnet, 1 channel) trained on builtin:digits."""
    from suite.models.timm_image import load_timm

    classifier, directory = load_cached(
        "builtin:digits-cnn", f"digits-cnn-{DIGITS_VERSION}", f"{__name__}:_train_digits",
        lambda path: load_timm(path, config.model_copy(update={"checkpoint": None})))
    classifier.preprocessing = SUITE_PREPROCESSING  # trained so (caches from before wrote no geometry)
    classifier.info = ModelInfo(
        spec="builtin:digits-cnn", revision=DIGITS_VERSION, extra={"path": str(directory), "architecture": DIGITS_ARCH}
    )
    return classifier

