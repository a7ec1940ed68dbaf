"""Robust built-in models: ``builtin:digits-cnn-at`` (PGD-AT), ``builtin:digits-cnn-beta-at``
(BETA-AT) and the BAT randomized ensemble ``builtin:digits-bat`` (``digits-cnn-at`` plus its
BAT partner ``builtin:digits-cnn-bat``, :mod:`suite.train.bat`), trained by :func:`suite.train.train` on first use and cached like
``builtin:digits-cnn`` (in a process of their own with pinned CPU kernels, so one torch version
trains the same weights everywhere), then loaded back through ``timm:<dir>``.

Both are timm's ``test_resnet`` on ``builtin:digits`` (1×32×32), trained against L∞
ε = :data:`DIGITS_AT_EPS`. Scaled down from Robey et al. (Sec. 5: 200 epochs of SGD, 10-step
inner attacks with α = ε/4, BETA over all 9 targets) so that each trains in about two minutes
on one CPU thread:

- 6 epochs of SGD (lr 0.05, momentum 0.9, weight decay 5e-4, batch 32), the lr × 0.1 after
  epoch 3 and × 0.01 after epoch 4 (the paper's piecewise schedule, scaled);
- PGD-AT: 10-step PGD with α = ε/4, as in the paper;
- BETA-AT: BETA with :data:`BETA_STEPS` RMSprop steps per target on the
  :data:`BETA_TARGETS` most likely wrong classes (the paper: 10 steps on all 9), about the
  cost of PGD-10;
- 10 % of the training split is held out for validation (PGD-10 and BETA-10 on 100 of them
  each epoch: ``train_log.jsonl`` and ``curves.png`` are kept beside the weights).

ε = 0.15 puts robust accuracy near the middle of its range under the default evaluation (the
docs/training.md gives the measured numbers).
"""

from __future__ import annotations

from pathlib import Path

from suite.data.base import SUITE_PREPROCESSING
from suite.models.base import Classifier, ModelInfo
from suite.models.builtin import DIGITS_ARCH
from suite.models.builtin_cache import load_cached
from suite.models.card import BUILTIN_THREAT_MODELS
from suite.models.config import ModelConfig
from suite.paths import atomic_write_text
from suite.train.config import TrainConfig

#: Bump when a recipe below changes, so stale caches are not reused.
DIGITS_AT_VERSION = "v1"
#: The radius every robust built-in is trained for: the one its card declares (0.15).
DIGITS_AT_EPS = BUILTIN_THREAT_MODELS["digits-cnn-at"].eps
BETA_STEPS = 4
BETA_TARGETS = 3
_COMMON = {"model": f"timm:{DIGITS_ARCH}", "dataset": "builtin:digits", "epochs": 6, "batch_size": 32, "lr": 0.05,
           "val_n": 100}
RECIPES = {
    "digits-cnn-at": TrainConfig(method="pgd_at", method_params={"eps": DIGITS_AT_EPS, "steps": 10}, **_COMMON),
    "digits-cnn-beta-at": TrainConfig(
        method="beta_at", method_params={"eps": DIGITS_AT_EPS, "steps": BETA_STEPS, "targets": BETA_TARGETS}, **_COMMON),
    "digits-cnn-bat": TrainConfig(
        method="bat", method_params={"eps": DIGITS_AT_EPS, "steps": 10, "source": "builtin:digits-cnn-at"}, **_COMMON),
}
#: The BAT partner's directory keeps the α search that chose the ensemble's probabilities.
BAT_ALPHA_FILE = "bat_alpha.json"


def _train(name: str, directory: Path) -> None:
    from suite.train.loop import train
    from suite.train.store import STATE_FILE

    train(RECIPES[name], directory)
    (directory / STATE_FILE).unlink()  # resuming is done: keep the model, its log and curves


def train_digits_bat(directory: Path) -> None:
    """The BAT partner of ``digits-cnn-at``, then BAT's α search (APGD, on the held-out
    validation digits neither member trained on), kept in :data:`BAT_ALPHA_FILE`."""
    import json

    from suite.models import load_model
    from suite.models.timm_image import load_timm
    from suite.train.bat import alpha_search
    from suite.train.image import ImageTraining
    from suite.train.methods import method_for

    _train("digits-cnn-bat", directory)
    recipe = RECIPES["digits-cnn-bat"]
    examples = ImageTraining(recipe, method_for(recipe)).prepare().val
    first = load_model("builtin:digits-cnn-at")
    second = load_timm(str(directory), ModelConfig(spec=f"timm:{directory}"))
    search = alpha_search(first, second, examples, eps=DIGITS_AT_EPS)
    atomic_write_text(directory / BAT_ALPHA_FILE, json.dumps(search, indent=2) + "\n")


def train_digits_at(directory: Path) -> None:
    _train("digits-cnn-at", directory)


def train_digits_beta_at(directory: Path) -> None:
    _train("digits-cnn-beta-at", directory)


def _load(name: str, recipe: str, config: ModelConfig) -> Classifier:
    from suite.models.timm_image import load_timm

    classifier, directory = load_cached(f"builtin:{name}", f"{name}-{DIGITS_AT_VERSION}", recipe,
                                        lambda path: load_timm(path, config.model_copy(update={"checkpoint": None})))
    classifier.preprocessing = SUITE_PREPROCESSING  # trained so (caches from before wrote no geometry)
    trained = RECIPES[name]
    classifier.info = ModelInfo(
        spec=f"builtin:{name}", revision=DIGITS_AT_VERSION,
        extra={"path": str(directory), "architecture": DIGITS_ARCH, "training": trained.method,
               "trained_eps": DIGITS_AT_EPS, "trained_norm": "linf"},
        threat_model=BUILTIN_THREAT_MODELS[name],
    )
    return classifier


def digits_cnn_at(config: ModelConfig) -> Classifier:
    """test_resnet trained on builtin:digits with PGD-AT (L∞ ε = 0.15)."""
    return _load("digits-cnn-at", "suite.train.builtin:train_digits_at", config)


def digits_cnn_beta_at(config: ModelConfig) -> Classifier:
    """test_resnet trained on builtin:digits with BETA-AT (L∞ ε = 0.15)."""
    return _load("digits-cnn-beta-at", "suite.train.builtin:train_digits_beta_at", config)


def digits_cnn_bat(config: ModelConfig) -> Classifier:
    """test_resnet trained on builtin:digits only on PGD examples (L∞ ε = 0.15) of digits-cnn-at
    (BAT's second member): not robust by itself."""
    return _load("digits-cnn-bat", "suite.train.builtin:train_digits_bat", config)


def digits_bat(config: ModelConfig) -> Classifier:
    """The BAT randomized ensemble: digits-cnn-at with probability α, its BAT partner with 1 − α,
    α from BAT's grid search with APGD (recorded in results)."""
    import json

    from suite.models.ensemble import RandomizedEnsemble, member_records

    members = [digits_cnn_at(config), digits_cnn_bat(config)]
    search = json.loads((Path(members[1].info.extra["path"]) / BAT_ALPHA_FILE).read_text())
    alphas = [search["alpha"], round(1 - search["alpha"], 10)]
    info = ModelInfo(spec="builtin:digits-bat", revision=f"{DIGITS_AT_VERSION}-alpha{search['alpha']:g}",
                     extra={"members": member_records(members, alphas), "bat_alpha_search": search},
                     threat_model=BUILTIN_THREAT_MODELS["digits-bat"])
    return RandomizedEnsemble(members, alphas, info)
