"""advsuite: adversarial robustness evaluation with no illusions.

The Python API (imported on first use, so ``import suite`` stays light)::

    import suite

    results = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["pgd_linf"], eps=0.03, n=100)
    print(results.clean_accuracy, results.worst_case_robust_accuracy)

    report = suite.certify("builtin:digits-cnn", "builtin:digits", norm="l2", eps=[0.1, 0.3], n=20)
    print(report["rows"][0]["upper_bound"])

See :func:`suite.evaluation.api.evaluate` for every form ``model`` and ``dataset`` may take;
``suite.certify`` (:func:`suite.evaluation.certify_api.certify`, the W_1 certificate that
``advsuite certify`` writes) takes the same forms of image model and data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from suite.errors import SuiteError
    from suite.evaluation.api import evaluate
    from suite.evaluation.certify_api import certify
    from suite.evaluation.options import RunOptions
    from suite.report.results import Results

_LAZY = {
    "certify": "suite.evaluation.certify_api",
    "evaluate": "suite.evaluation.api",
    "RunOptions": "suite.evaluation.options",
    "Results": "suite.report.results",
    "SuiteError": "suite.errors",
}
__all__ = ["Results", "RunOptions", "SuiteError", "__version__", "certify", "evaluate"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'suite' has no attribute {name!r}")
