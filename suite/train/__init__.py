"""Adversarial training.

Images: BETA-AT and SBETA-AT (Robey et al., ICLR 2024) and the baselines they are compared with
(FGSM-AT, PGD-AT, TRADES, MART), plus standard training and the second member of a BAT
randomized ensemble (:mod:`suite.train.bat`); :func:`train` writes a ``timm:<dir>`` model.
Text: DDi-AT and the embedding-space baselines of "Extreme Confidence and the Illusion of
Robustness" (PGD-K, FreeLB, ASCC, adversarial augmentation; :mod:`suite.train.text_methods`);
:func:`train` writes an ``hf:<dir>`` model. ``advsuite evaluate`` loads either.
"""

from __future__ import annotations

from suite.errors import ConfigError
from suite.train.config import TrainConfig
from suite.train.loop import TrainSummary, train
from suite.train.methods import METHODS, TrainMethod, build_method
from suite.train import bat as _bat  # noqa: E402,F401  (registers the bat method)
from suite.train.text_methods import TEXT_METHODS, TextMethod, build_text_method
from suite.train import ascc as _ascc  # noqa: E402,F401  (registers the ascc method)

__all__ = ["METHODS", "TEXT_METHODS", "TextMethod", "TrainConfig", "TrainMethod", "TrainSummary", "build_method",
           "method_for", "train"]


def method_for(config: TrainConfig) -> TrainMethod | TextMethod:
    """The run's method, from the registry of its model's modality; a method of the other
    modality is refused in one line."""
    if config.modality == "text":
        if config.method not in TEXT_METHODS and config.method in METHODS:
            raise ConfigError(f"training method {config.method!r} trains image models and {config.model!r} is a text "
                              f"model: use one of {', '.join(TEXT_METHODS.names())}")
        return build_text_method(config.method, config.method_params)
    if config.method not in METHODS and config.method in TEXT_METHODS:
        raise ConfigError(f"training method {config.method!r} trains text models and {config.model!r} is an image "
                          f"model: use one of {', '.join(METHODS.names())}")
    return build_method(config.method, config.method_params)
