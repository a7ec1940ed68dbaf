"""One classifier interface for HF text models, timm image models and built-in tiny models."""

from __future__ import annotations

from suite.collector import quick_start
from suite.models.base import Classifier, ModelInfo
from suite.models.config import ModelConfig
from suite.models.registry import BUILTIN_MODELS, MODEL_SCHEMES


def load_model(config: ModelConfig | str) -> Classifier:
    """Build the classifier a spec names, wrapped in its served temperature if one is set.

    Loading runs with rare collections (:func:`~suite.collector.quick_start`; the collector's
    own thresholds again when it returns): a first load imports transformers or timm and builds
    the model, hundreds of thousands of objects that live as long as the process, and the full
    scans they set off took 0.3-0.6 s of a 3.6-3.9 s load of a small BERT on a 2-core CPU.
    """
    if isinstance(config, str):
        config = ModelConfig(spec=config)
    scheme, _, name = config.spec.partition(":")  # ModelConfig has checked the scheme is there
    with quick_start():
        classifier = MODEL_SCHEMES.get(scheme)(name, config)
    if scheme in ("builtin", "timm") and config.revision not in (None, classifier.info.revision):
        from suite.errors import ConfigError

        # These loaders take no revision: it was ignored, and the results named the model's own.
        raise ConfigError(f"revision {config.revision!r} does not apply to {config.spec!r}, which is at "
                          f"{classifier.info.revision!r} (a built-in's training recipe version; a timm model's "
                          "checkpoint or directory): it would be ignored: drop --revision")
    require_classes(classifier)
    if config.temperature != 1.0:
        from suite.models.temperature import TemperatureScaled

        classifier = TemperatureScaled(classifier, config.temperature)
    return classifier


def require_classes(model: Classifier) -> None:
    """Refuse, in one line, a model of fewer than 2 classes (a timm head of one output, a
    caller's model): robust accuracy is the argmax over classes, and a single score has none to
    flip to."""
    if model.num_classes < 2:
        from suite.errors import ConfigError

        raise ConfigError(f"model {model.info.name!r} has {model.num_classes} class(es): robust accuracy needs a "
                          "classifier over at least 2 classes (a single score, as a regression or a sigmoid head, "
                          "is not one)")


__all__ = ["BUILTIN_MODELS", "MODEL_SCHEMES", "Classifier", "ModelConfig", "ModelInfo", "load_model", "require_classes"]
