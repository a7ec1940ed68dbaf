"""One classifier interface for HF text models, timm image models and built-in tiny models."""

from __future__ import annotations

from suite.models.base import Classifier, ModelInfo
from suite.models.config import ModelConfig
from suite.models.registry import BUILTIN_MODELS, MODEL_SCHEMES


def load_model(config: ModelConfig | str) -> Classifier:
    """Build the classifier a spec names, wrapped in its served temperature if one is set."""
    if isinstance(config, str):
        config = ModelConfig(spec=config)
    scheme, _, name = config.spec.partition(":")  # ModelConfig has checked the scheme is there
    classifier = MODEL_SCHEMES.get(scheme)(name, config)
    if config.temperature != 1.0:
        from suite.models.temperature import TemperatureScaled

        classifier = TemperatureScaled(classifier, config.temperature)
    return classifier


__all__ = ["BUILTIN_MODELS", "MODEL_SCHEMES", "Classifier", "ModelConfig", "ModelInfo", "load_model"]
