"""Adversarial training of image classifiers: BETA-AT and SBETA-AT (Robey et al., ICLR 2024)
and the baselines they are compared with (FGSM-AT, PGD-AT, TRADES, MART), plus standard
training and the second member of a BAT randomized ensemble (:mod:`suite.train.bat`). :func:`train` writes a ``timm:<dir>`` model that ``advsuite evaluate`` loads."""

from __future__ import annotations

from suite.train.config import TrainConfig
from suite.train.loop import TrainSummary, train
from suite.train.methods import METHODS, TrainMethod, build_method
from suite.train import bat as _bat  # noqa: E402,F401  (registers the bat method)

__all__ = ["METHODS", "TrainConfig", "TrainMethod", "TrainSummary", "build_method", "train"]
