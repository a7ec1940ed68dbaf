"""Built-in text models of the illusion-of-robustness protocol ("Extreme Confidence and the
Illusion of Robustness in Adversarial Training", Sec. 5.1): ``builtin:sentiment-<method>-s<seed>``
for the paper's base model, DDi-AT and the four AT baselines, each for training seeds 0, 1, 2
(every table of the paper is a mean ± std over three seeds).

All start from one initial model, ``sentiment-init`` (the role of the pretrained checkpoint:
a fresh one-layer word-level BERT, :func:`suite.models.word_bert.train_word_bert`, with the
vocabulary of ``builtin:sentiment``'s training split), and are trained by :func:`suite.train.
train` on that split, validated on its validation split, and cached like the other built-ins
(in a process of their own with pinned CPU kernels). The seed decides the data order, dropout
and every random start; the initial weights are shared, as a pretrained checkpoint is.

Scaled down from App. C, and why:

- AdamW at lr 5e-4 for 20 epochs (the paper: 1e-5 for 5 epochs). The paper fine-tunes a
  pretrained 100M-parameter model; this one learns its embeddings from scratch.
- Embedding PGD radii × 0.1: ``eps`` 0.1, ``alpha`` 0.003, ``init`` 0.005 (the paper: 1.0,
  0.03, 0.05). The tiny model's word embeddings have L2 norm ≈ 0.16 at initialisation and ≈ 0.27
  after training, so a sentence's whole embedding has norm ≈ 0.5–0.9: at ε = 1, every AT method
  trained to chance accuracy (measured: 50 % after 30 epochs). At × 0.1 the perturbation is a
  fraction of a sentence's norm, as it is for a pretrained model.
- Batch size 8, M = 3, K = 3, 5 baseline steps, ASCC α = 10 and β = 40, as the paper.
"""

from __future__ import annotations

import sys
from pathlib import Path

from suite.models.base import Classifier, ModelInfo
from suite.models.builtin_cache import is_cached, load_cached
from suite.models.config import ModelConfig
from suite.train.config import TrainConfig

#: Bump when a recipe below changes, so stale caches are not reused (a method's own entry in
#: ``METHOD_VERSIONS`` when only that method changed).
TEXT_AT_VERSION = "v1"
#: aug v2: one DeepWordBug text per training sentence, fooling or not (v1 kept only the fooling ones).
#: ascc v2: the entropy term averaged over the padded batch's positions, as TextDefender (v1 summed it).
METHOD_VERSIONS = {"aug": "v2", "ascc": "v2"}
#: NLTK data a method's training needs (ASCC: WordNet synonyms), checked before it starts.
TRAINING_RESOURCES = {"ascc": ("wordnet",)}
INIT_VERSION = "v1"
SEEDS = (0, 1, 2)
SCALE = 0.1
_RADII = {"eps": 1.0 * SCALE, "alpha": 0.03 * SCALE, "init": 0.05 * SCALE}
#: method name in the built-in's name → (training method, its knobs).
METHODS = {
    "base": ("standard", {}),
    "ddi-at": ("ddi_at", _RADII),
    "pgd": ("pgd_k", _RADII),
    "freelb": ("freelb", _RADII),
    "ascc": ("ascc", {}),
    "aug": ("aug", {"source": "builtin:sentiment-base-s{seed}"}),
}
_COMMON = {"dataset": "builtin:sentiment", "split": "train", "val_split": "validation", "lr": 5e-4, "epochs": 20,
           "batch_size": 8, "weight_decay": 0.01}


def recipe(method: str, seed: int) -> TrainConfig:
    """The training run of ``builtin:sentiment-<method>-s<seed>``."""
    name, params = METHODS[method]
    params = {key: value.format(seed=seed) if isinstance(value, str) else value for key, value in params.items()}
    return TrainConfig(model="builtin:sentiment-init", method=name, method_params=params, seed=seed, **_COMMON)


def builtin_names() -> list[str]:
    return [f"sentiment-{method}-s{seed}" for method in METHODS for seed in SEEDS]


def train_init(directory: Path) -> None:
    from suite.data.builtin import sentiment
    from suite.models.word_bert import train_word_bert

    train = sentiment("train")
    train_word_bert(directory, list(train.inputs), list(train.labels), ["negative", "positive"], epochs=0)


def sentiment_init(config: ModelConfig) -> Classifier:
    """The untrained word-level BERT every sentiment-<method> model starts from."""
    from suite.models.hf_text import load_hf

    classifier, directory = load_cached("builtin:sentiment-init", f"sentiment-init-{INIT_VERSION}",
                                        "suite.train.builtin_text:train_init",
                                        lambda path: load_hf(path, config.model_copy(update={"revision": None})))
    classifier.info = ModelInfo(spec="builtin:sentiment-init", revision=INIT_VERSION, extra={"path": str(directory)})
    return classifier


def train_builtin(name: str, directory: Path) -> None:
    """Entry point of the training process of ``builtin:<name>``."""
    from suite.train.loop import train
    from suite.train.store import STATE_FILE

    method, seed = _parse(name)
    train(recipe(method, seed), directory)
    (directory / STATE_FILE).unlink()  # resuming is done: keep the model, its log and curves


def _parse(name: str) -> tuple[str, int]:
    stem, _, seed = name.removeprefix("sentiment-").rpartition("-s")
    return stem, int(seed)


def load(name: str, config: ModelConfig) -> Classifier:
    from suite.models.hf_text import load_hf

    method, seed = _parse(name)
    trained = recipe(method, seed)
    version = METHOD_VERSIONS.get(method, TEXT_AT_VERSION)
    if method in TRAINING_RESOURCES and not is_cached(f"{name}-{version}"):
        from suite.attacks.text.resources import NLTK, require_for_model

        # Before the training process starts: a missing corpus is one line, not its traceback.
        require_for_model(f"builtin:{name}", tuple(NLTK[item] for item in TRAINING_RESOURCES[method]))
    classifier, directory = load_cached(f"builtin:{name}", f"{name}-{version}",
                                        f"suite.train.builtin_text:train_{name.replace('-', '_')}",
                                        lambda path: load_hf(path, config.model_copy(update={"revision": None})))
    classifier.info = ModelInfo(spec=f"builtin:{name}", revision=version,
                                extra={"path": str(directory), "training": trained.method, "train_seed": seed,
                                       "method_params": trained.method_params})
    return classifier


def _define(name: str) -> None:
    """``<name>`` (the loader) and ``train_<name>`` (the training entry) as module attributes,
    so the registry can name them lazily."""
    module = sys.modules[__name__]
    attribute = name.replace("-", "_")
    setattr(module, attribute, lambda config: load(name, config))
    setattr(module, f"train_{attribute}", lambda directory: train_builtin(name, Path(directory)))


for _name in builtin_names():
    _define(_name)
