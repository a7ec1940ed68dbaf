"""Adversarial training: one loop (:func:`train`) for image and text classifiers.

Images: BETA-AT and SBETA-AT (Robey et al., ICLR 2024) and the baselines they are compared with
(FGSM-AT, PGD-AT, TRADES, MART), plus standard training and the second member of a BAT
randomized ensemble (:mod:`suite.train.image_methods`, :mod:`suite.train.bat`); :func:`train`
writes a ``timm:<dir>`` model. Text: DDi-AT and the embedding-space baselines of "Extreme
Confidence and the Illusion of Robustness" (PGD-K, FreeLB, ASCC, adversarial augmentation;
:mod:`suite.train.text_methods`, :mod:`suite.train.ascc`); :func:`train` writes an ``hf:<dir>``
model. ``advsuite evaluate`` loads either. Every method is in one registry, :data:`METHODS`,
keyed by (method, modality).
"""

from __future__ import annotations

from suite.train.config import TrainConfig
from suite.train.loop import TrainSummary, train
from suite.train.methods import METHODS, TrainMethod, build_method, method_for

# The modules that register methods (at their definitions) are imported here, so that importing
# any part of suite.train completes the registry.
from suite.train import image_methods as _image_methods  # noqa: E402,F401
from suite.train import bat as _bat  # noqa: E402,F401
from suite.train import text_methods as _text_methods  # noqa: E402,F401
from suite.train import ascc as _ascc  # noqa: E402,F401

__all__ = ["METHODS", "TrainConfig", "TrainMethod", "TrainSummary", "build_method", "method_for", "train"]
