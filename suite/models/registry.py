"""Model registries: spec schemes (``hf``, ``timm``, ``builtin``) and the built-in models."""

from __future__ import annotations

from suite.registry import Registry

#: ``scheme -> loader(name, ModelConfig) -> Classifier``.
MODEL_SCHEMES: Registry = Registry("model scheme", list_command="advsuite ls models")

#: ``name -> loader(ModelConfig) -> Classifier`` for ``builtin:<name>``.
BUILTIN_MODELS: Registry = Registry("built-in model", list_command="advsuite ls models")

# Lazy entries: listing names must not import transformers or timm.
MODEL_SCHEMES.add("hf", "suite.models.hf_text:load_hf", help="Hugging Face sequence classifier: hf:<hub id or dir>")
MODEL_SCHEMES.add("timm", "suite.models.timm_image:load_timm", help="timm image model: timm:<name or dir>")
MODEL_SCHEMES.add("ensemble", "suite.models.ensemble:load_ensemble",
                  help="randomized ensemble: ensemble:<p>*<spec>,<p>*<spec>... (or members in a recipe)")
MODEL_SCHEMES.add("builtin", "suite.models.builtin:load_builtin", help="tiny built-in model: builtin:<name>")
BUILTIN_MODELS.add(
    "sentiment-tiny",
    "suite.models.builtin:sentiment_tiny",
    help="1-layer BERT text classifier trained on builtin:sentiment (positive/negative)",
)
BUILTIN_MODELS.add(
    "digits-cnn",
    "suite.models.builtin:digits_cnn",
    help="small timm CNN trained on builtin:digits (8x8 sklearn digits upsampled to 32x32)",
)
# Robust built-ins: trained by the training layer, so their loaders live there (named lazily).
BUILTIN_MODELS.add(
    "digits-cnn-at",
    "suite.train.builtin:digits_cnn_at",
    help="digits-cnn's architecture adversarially trained with PGD-AT (linf eps 0.15) on builtin:digits",
)
BUILTIN_MODELS.add(
    "digits-cnn-beta-at",
    "suite.train.builtin:digits_cnn_beta_at",
    help="digits-cnn's architecture trained with BETA-AT (linf eps 0.15) on builtin:digits",
)
BUILTIN_MODELS.add(
    "digits-cnn-bat",
    "suite.train.builtin:digits_cnn_bat",
    help="digits-cnn's architecture trained only on PGD examples (linf eps 0.15) of digits-cnn-at (BAT's 2nd member)",
)
BUILTIN_MODELS.add(
    "digits-bat",
    "suite.train.builtin:digits_bat",
    help="BAT randomized ensemble: digits-cnn-at w.p. alpha, digits-cnn-bat w.p. 1-alpha (alpha by APGD grid search)",
)
