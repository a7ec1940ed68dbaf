"""The CLI starts without torch: ``ls``, ``validate`` and ``--help`` never import it.

Wall time is measured by ``bench/cli_startup.py`` (timings are not tests); this checks the
cause, which does not depend on the machine: which modules a command imports.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "datasets", "timm", "textattack")


def imported(*args: str) -> set[str]:
    """Top-level modules ``python -m suite ARGS`` imports (from ``-X importtime``)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "suite", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}


@pytest.mark.parametrize("args", [("--help",), ("evaluate", "--help"), ("ls", "models"), ("ls", "attacks"),
                                  ("ls", "datasets"), ("validate", "quickstart"), ("validate", "beta_vs_autoattack")])
def test_quick_commands_import_nothing_heavy(args):
    modules = imported(*args)
    assert "suite" in modules  # the listing is real
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_validate_still_checks_attack_hyperparameters_without_torch(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: r\ntasks:\n  - model: builtin:digits-cnn\n    dataset: builtin:digits\n"
                      "    attacks: [{name: autoattack, steps: 0}]\n")
    done = subprocess.run([sys.executable, "-m", "suite", "validate", str(recipe)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.startswith("advsuite: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "attack 'autoattack': steps: Input should be greater than or equal to 1" in done.stderr


DEFERRED = """
import sys
from suite.lazy import defer_import, is_loaded
deferred = defer_import("torch")
import torch
assert torch is deferred and not is_loaded("torch"), "import torch loaded it"
import suite.attacks, suite.models, suite.evaluation.recipe
assert not is_loaded("torch"), "importing the suite loaded torch"
from torch import nn
assert is_loaded("torch") and sys.modules["torch"] is torch and type(torch).__name__ == "module"
assert isinstance(nn.Linear(2, 2)(torch.ones(1, 2)), torch.Tensor)
import torch.nn.functional as F
assert float(F.relu(torch.tensor(-1.0))) == 0.0
print("ok")
"""


def test_a_deferred_torch_loads_in_place_on_first_use():
    done = subprocess.run([sys.executable, "-c", DEFERRED], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr[-2000:]


IMAGE_EVALUATION = """
import sys
import suite
results = suite.evaluate("builtin:digits-cnn", "builtin:digits", attacks=["fgm_linf"], n=4)
assert results.attacks["fgm_linf"].n_attacked > 0
text_stack = [name for name in ("textattack", "flair", "nltk") if name in sys.modules]
assert not text_stack, f"an image evaluation imported {text_stack}"
print("ok")
"""


def test_an_image_evaluation_never_imports_the_text_attack_stack():
    # The built-in is trained once per session in the shared cache (ADVSUITE_CACHE, set by conftest).
    from suite.models import load_model

    load_model("builtin:digits-cnn")
    done = subprocess.run([sys.executable, "-c", IMAGE_EVALUATION], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.endswith("ok\n"), done.stderr[-2000:]
