"""Tiny built-in models, trained deterministically on the built-in datasets on first use.

- ``builtin:sentiment-tiny``: a one-layer BERT (transformers) with a word-level tokenizer,
  trained on ``builtin:sentiment``. Words it has not seen map to ``[UNK]``, so character-level
  attacks (DeepWordBug) break it easily: a known-vulnerable model for tests and the demo.
- ``builtin:digits-cnn``: timm's ``test_resnet`` architecture (0.37 M parameters), one input
  channel, trained on ``builtin:digits`` (1×32×32).

Both train in seconds on two CPU cores, are saved with safetensors under
``$ADVSUITE_CACHE/models/<name>-<version>`` and are loaded back through the same code as
``hf:<dir>`` and ``timm:<dir>``. Training runs once per cache; the directory appears
atomically, so concurrent processes never read a half-written model.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from suite.models.base import Classifier, ModelInfo
from suite.models.config import ModelConfig
from suite.models.registry import BUILTIN_MODELS  # entries are registered lazily there
from suite.paths import cache_dir

logger = logging.getLogger(__name__)

# Bump a version when its training recipe changes, so stale caches are not reused.
SENTIMENT_VERSION = "v2"  # v2: trained without the validation split
DIGITS_VERSION = "v1"
TRAIN_SEED = 0


def load_builtin(name: str, config: ModelConfig) -> Classifier:
    """``builtin:<name>`` → the trained (and cached) built-in model."""
    return BUILTIN_MODELS.get(name)(config)


def _cached(name: str, train: Callable[[Path], None]) -> Path:
    """The cache dir of a built-in model, training it into a temp dir and renaming on first use."""
    target = cache_dir("models") / name
    if (target / "DONE").exists():
        return target
    logger.info("training %s (first use; cached in %s)", name, target)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(TRAIN_SEED)
            train(staging)
        (staging / "DONE").write_text("ok\n")
        try:
            os.replace(staging, target)
        except OSError:  # another process won the race (target exists and is not empty)
            if not (target / "DONE").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


# --------------------------------------------------------------------------- sentiment-tiny


def _train_sentiment(directory: Path) -> None:
    from suite.data.builtin import sentiment

    train = sentiment("train")
    train_word_bert(directory, list(train.inputs), list(train.labels), ["negative", "positive"], epochs=30)


def train_word_bert(directory: Path, texts: list[str], labels: list[int], label_names: list[str], epochs: int,
                    hidden_size: int = 64, max_length: int = 64, lr: float = 2e-3, seed: int = TRAIN_SEED) -> None:
    """Train a one-layer BERT with a word-level tokenizer (vocabulary of ``texts``) and save it
    with ``save_pretrained`` (safetensors) into ``directory``. Also used by ``bench/``."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    pre = pre_tokenizers.Whitespace()
    words = sorted({w for text in texts for w, _ in pre.pre_tokenize_str(text.lower())})
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {token: i for i, token in enumerate(specials + words)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre
    core.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_max_length=max_length,
    )
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=hidden_size, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=2 * hidden_size, max_position_embeddings=max_length, num_labels=len(label_names),
        id2label=dict(enumerate(label_names)), label2id={name: i for i, name in enumerate(label_names)},
    )
    model = BertForSequenceClassification(config)
    targets = torch.tensor(labels)
    encoded = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(targets), generator=generator)
        for start in range(0, len(order), 32):
            rows = order[start : start + 32]
            batch = {key: value[rows] for key, value in encoded.items()}
            loss = model(**batch, labels=targets[rows]).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)


def sentiment_tiny(config: ModelConfig) -> Classifier:
    """Tiny 1-layer BERT sentiment classifier trained on builtin:sentiment."""
    from suite.models.hf_text import load_hf

    directory = _cached(f"sentiment-tiny-{SENTIMENT_VERSION}", _train_sentiment)
    classifier = load_hf(str(directory), config.model_copy(update={"revision": None}))
    classifier.info = ModelInfo(spec="builtin:sentiment-tiny", revision=SENTIMENT_VERSION, extra={"path": str(directory)})
    return classifier


# --------------------------------------------------------------------------- digits-cnn

DIGITS_ARCH = "test_resnet"
DIGITS_MEAN, DIGITS_STD = (0.3,), (0.4,)  # of builtin:digits pixels, rounded


def _train_digits(directory: Path) -> None:
    import timm

    from suite.data.builtin import digits
    from suite.models.timm_image import save_timm_dir

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
    for _ in range(epochs):
        order = torch.randperm(len(labels), generator=generator)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            loss = torch.nn.functional.cross_entropy(model((images[rows] - mean) / std), labels[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    model.eval()
    save_timm_dir(directory, model, DIGITS_ARCH, input_size=(1, 32, 32), mean=DIGITS_MEAN, std=DIGITS_STD,
                  label_names=[str(d) for d in range(10)])


def digits_cnn(config: ModelConfig) -> Classifier:
    """Small timm CNN (test_resnet, 1 channel) trained on builtin:digits."""
    from suite.models.timm_image import load_timm

    directory = _cached(f"digits-cnn-{DIGITS_VERSION}", _train_digits)
    classifier = load_timm(str(directory), config.model_copy(update={"checkpoint": None}))
    classifier.info = ModelInfo(
        spec="builtin:digits-cnn", revision=DIGITS_VERSION, extra={"path": str(directory), "architecture": DIGITS_ARCH}
    )
    return classifier
