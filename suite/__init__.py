"""advsuite: adversarial robustness evaluation with no illusions.

The Python API (imported on first use, so ``import suite`` stays light)::

    import suite

    results = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["pgd_linf"], eps=0.03, n=100)
    print(results.clean_accuracy, results.worst_case_robust_accuracy)

    report = suite.certify("builtin:digits-cnn", "builtin:digits", norm="l2", eps=[0.1, 0.3], n=20)
    print(report["rows"][0]["upper_bound"])

    for result in suite.run_recipe("quickstart", output="runs/quickstart", limit=20):
        print(result.task, result.worst_case_robust_accuracy)

See :func:`suite.evaluation.api.evaluate` for every form ``model`` and ``dataset`` may take;
``suite.certify`` (:func:`suite.evaluation.certify_api.certify`, the W_1 certificate that
``advsuite certify`` writes) takes the same forms of image model and data; ``suite.run_recipe``
(:func:`suite.evaluation.recipe_run.run_recipe`) runs a recipe file, a shipped recipe's name or a
loaded recipe exactly as ``advsuite run`` does, and returns one result per task.

The package root only re-exports: no module of ``suite`` imports from it (``tests/test_layers.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from suite.version import __version__

if TYPE_CHECKING:
    from suite.errors import SuiteError
    from suite.evaluation.api import evaluate
    from suite.evaluation.certify_api import certify
    from suite.evaluation.options import RunOptions
    from suite.evaluation.recipe_run import run_recipe
    from suite.report.results import Results

_LAZY = {
    "certify": "suite.evaluation.certify_api",
    "evaluate": "suite.evaluation.api",
    "RunOptions": "suite.evaluation.options",
    "run_recipe": "suite.evaluation.recipe_run",
    "Results": "suite.report.results",
    "SuiteError": "suite.errors",
}
__all__ = ["Results", "RunOptions", "SuiteError", "__version__", "certify", "evaluate", "run_recipe"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'suite' has no attribute {name!r}")
