"""Model registries: spec schemes (``hf``, ``timm``, ``builtin``) and the built-in models."""

from __future__ import annotations

import functools
from collections.abc import Callable

from suite.registry import PluginError, Registry

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


def _plugin_loader(scheme: str, loader: object) -> Callable:
    """A plugin's ``advsuite.models`` entry point: a loader ``(name, ModelConfig) -> Classifier``
    for the specs ``<scheme>:<name>`` (docs/plugins.md); what it returns is checked."""
    if not callable(loader):
        raise TypeError(f"{loader!r} is not callable: an advsuite.models entry point names a loader (name, config)")

    @functools.wraps(loader)
    def load(name: str, config):
        from suite.models.base import Classifier

        model = loader(name, config)
        if not isinstance(model, Classifier):
            raise PluginError(f"model scheme {scheme!r} of plugin {MODEL_SCHEMES.origin(scheme)}: its loader returned "
                              f"{type(model).__name__}, not a suite.models.Classifier")
        return model

    return load


# Other packages add schemes through the entry-point group advsuite.models (read when first needed).
MODEL_SCHEMES.use_entry_points("advsuite.models", check=_plugin_loader)

#: Built-in models that take text (the others take images): what ``advsuite train`` needs to
#: know before loading one.
TEXT_BUILTINS: set[str] = set()


#: Built-in models that are randomized ensembles: what ``advsuite certify`` refuses before
#: loading (training) their members.
ENSEMBLE_BUILTINS: set[str] = {"digits-bat"}


def is_ensemble_spec(spec: str) -> bool:
    """Whether ``spec`` names a randomized ensemble (``ensemble:``, or an ensemble built-in)."""
    scheme, _, name = spec.partition(":")
    return scheme == "ensemble" or (scheme == "builtin" and name in ENSEMBLE_BUILTINS)


def add_text_builtin(name: str, loader: str, help: str) -> None:
    BUILTIN_MODELS.add(name, loader, help=help)
    TEXT_BUILTINS.add(name)


def spec_modality(spec: str) -> str:
    """``text`` or ``image``, from a model spec alone (``hf:`` and text built-ins are text)."""
    scheme, _, name = spec.partition(":")
    return "text" if scheme == "hf" or (scheme == "builtin" and name in TEXT_BUILTINS) else "image"


add_text_builtin("sentiment-tiny", "suite.models.builtin:sentiment_tiny",
                 help="1-layer BERT text classifier trained on builtin:sentiment (positive/negative)")
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

# The illusion-of-robustness protocol's text models (suite.train.builtin_text): one initial model,
# and the paper's base, DDi-AT and four AT baselines trained from it, for training seeds 0-2.
add_text_builtin("sentiment-init", "suite.train.builtin_text:sentiment_init",
                 help="untrained 1-layer word-level BERT: the initial model of every sentiment-<method>-s<seed>")
TEXT_AT_BUILTINS = {
    "base": "standard fine-tuning (the IOR paper's base)",
    "ddi-at": "DDi-AT (min-norm PGD gradients, global normalisation): overconfident",
    "pgd": "PGD-K adversarial training in embedding space",
    "freelb": "FreeLB adversarial training in embedding space",
    "ascc": "ASCC adversarial training (convex hull of WordNet synonyms)",
    "aug": "retrained on DeepWordBug examples of sentiment-base",
}
for _method, _help in TEXT_AT_BUILTINS.items():
    for _seed in (0, 1, 2):
        add_text_builtin(f"sentiment-{_method}-s{_seed}",
                         f"suite.train.builtin_text:sentiment_{_method.replace('-', '_')}_s{_seed}",
                         help=f"{_help} on builtin:sentiment, training seed {_seed}")
