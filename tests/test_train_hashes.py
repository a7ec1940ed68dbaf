"""The built-in models' weights, pinned: a change to the training code that changes one trained
bit fails here (issue 34: the one training loop had to train every built-in bit for bit as the two
loops it replaced did).

Training is deterministic on CPU (pinned kernels: one thread, AVX2 on x86-64; see
``tests/test_models.py::test_builtin_weights_do_not_depend_on_threads_or_cpu_features``), so a
hash holds on any machine with the library versions it was recorded with (:data:`RECORDED_WITH`);
other versions of torch, transformers or timm may train other weights, and there the test skips,
saying so. A built-in whose recipe changes on purpose bumps its version (the suffix of its cache
directory), and its pin here with it.

The test trains nothing: it reads the built-ins the session's other tests have trained (one
cache per session, ``tests/conftest.py``) and skips any not trained yet.
"""

from __future__ import annotations

import platform

import pytest

#: torch, transformers, timm and the machine the hashes were recorded with.
RECORDED_WITH = {"torch": "2.14.1", "transformers": "4.57.6", "timm": "1.0.31", "machine": "x86_64"}
#: built-in → (version, weights hash). ``digits-cnn`` and ``sentiment-tiny`` are trained by
#: suite/models/builtin.py; the others by suite.train.train.
PINNED = {
    "digits-cnn": ("v2", "sha256-eceb7dbc4bb43275"),
    "sentiment-tiny": ("v3", "sha256-78ae3bc57e85eed3"),
    "digits-cnn-at": ("v1", "sha256-e694a08603bde25f"),  # pgd_at
    "digits-cnn-beta-at": ("v1", "sha256-beed5f2e25361dd9"),  # beta_at
    "digits-cnn-bat": ("v1", "sha256-ff3af48d84b9e6e8"),  # bat, on PGD examples of digits-cnn-at
    "sentiment-base-s0": ("v1", "sha256-8a0ca1eea339636d"),  # text standard
    "sentiment-ddi-at-s0": ("v1", "sha256-730d902cff2913d9"),  # ddi_at
}


def _versions() -> dict[str, str]:
    import timm
    import torch
    import transformers

    return {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
            "timm": timm.__version__, "machine": platform.machine().lower()}


def _version(name: str) -> str:
    """The version ``name`` is built at now (what its cache directory ends with)."""
    from suite.models import builtin as models_builtin
    from suite.train import builtin, builtin_text

    if name == "digits-cnn":
        return models_builtin.DIGITS_VERSION
    if name == "sentiment-tiny":
        return models_builtin.SENTIMENT_VERSION
    if name.startswith("digits-"):
        return builtin.DIGITS_AT_VERSION
    method = name.removeprefix("sentiment-").rpartition("-s")[0]
    return builtin_text.METHOD_VERSIONS.get(method, builtin_text.TEXT_AT_VERSION)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_builtin_weights_are_the_pinned_ones(name):
    from suite.models import load_model
    from suite.models.builtin_cache import is_cached

    version, expected = PINNED[name]
    assert _version(name) == version, (f"builtin:{name} is now built at {_version(name)}: its recipe changed on "
                                       f"purpose, so record its new hash here")
    if _versions() != RECORDED_WITH:
        pytest.skip(f"hashes recorded with {RECORDED_WITH}; this is {_versions()}")
    if not is_cached(f"{name}-{version}"):
        pytest.skip(f"builtin:{name} is not trained in this session (this test trains nothing)")
    assert load_model(f"builtin:{name}").weights_hash() == expected
