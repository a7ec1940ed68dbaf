"""Bad-input cases: export (see ``test_bad_input.py``).

``advsuite export RUN_DIR --to DIR [--push REPO_ID]`` refuses, in one line and before writing
anything: a run directory that is missing, holds no results or a damaged one, or holds results
of several models; a ``--to`` that is a file; a ``--push`` that is not a Hub repo id; and an
existing card or ``.eval_results`` file it cannot read (refused rather than clobbered). Results
files are the version 1 file in ``tests/data``, upgraded to version 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bad_input_cases import Case

V1_RESULTS = Path(__file__).resolve().parent / "data" / "results_v1_vision.json"
EXPORT = ("export", "{tmp}/run", "--to", "{tmp}/card")


def _results(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    from suite.report.results import upgrade

    data = upgrade(json.loads(V1_RESULTS.read_text()))
    change(data)
    return data


def _run(*extra: tuple[str, bytes], change: Callable[[dict[str, Any]], Any] = lambda data: None):
    """A setup writing a valid ``run/results.json`` (``change`` applied) and ``extra`` files."""

    def setup(root: Path) -> None:
        (root / "run").mkdir()
        (root / "run" / "results.json").write_text(json.dumps(_results(change)))
        for name, content in extra:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(content)

    return setup


def _hub_dataset(data: dict[str, Any]) -> None:
    data["dataset"]["spec"] = "hf:ylecun/mnist"


def _two_models(root: Path) -> None:
    for task, name in (("a", "builtin:digits-cnn"), ("b", "builtin:digits-cnn-at")):
        (root / "run" / task).mkdir(parents=True)
        data = _results(lambda data: data["model"].update(name=name, spec=name))
        (root / "run" / task / "results.json").write_text(json.dumps(data))


def _empty_run(root: Path) -> None:
    (root / "run" / "task").mkdir(parents=True)


EVAL_FILE = "card/.eval_results/advsuite-ylecun-mnist-test.yaml"

CASES: list[Case] = [
    Case("export-card-front-matter-never-closed", EXPORT, "its front matter opens with --- but is never closed",
         _run(("card/README.md", b"---\nlicense: mit\n# My model\n"))),
    Case("export-missing-run-dir", EXPORT, "run' does not exist: give a run directory or its results.json"),
    Case("export-no-results", EXPORT, "holds no results.json (nor do its sub-directories)", _empty_run),
    Case("export-damaged-results", EXPORT, "results.json' is not JSON",
         _run(("run/results.json", b'{"schema_version": 2,'))),
    Case("export-results-not-schema", EXPORT, "is not a valid advsuite results file",
         _run(change=lambda data: data.update(clean_accuracy=1.5))),
    Case("export-several-models", EXPORT, "holds results of 2 models", _two_models),
    Case("export-to-is-a-file", EXPORT, "card' is a file: name the directory of the card",
         _run(("card", b"not a directory"))),
    Case("export-card-is-a-directory", EXPORT, "README.md' exists and is not a file", _run(("card/README.md/x", b""))),
    Case("export-push-with-space", (*EXPORT, "--push", "my org/model"), "--push 'my org/model' is not a Hub repo id",
         _run()),
    Case("export-push-control-chars", (*EXPORT, "--push", "org/\x1b[2Jmodel"),
         "--push 'org/\\x1b[2Jmodel' is not a Hub repo id", _run()),
    Case("export-push-three-parts", (*EXPORT, "--push", "a/b/c"), "is not a Hub repo id", _run()),
    # The tests run offline: the repo's current card cannot be read, and is not taken for absent.
    Case("export-push-hub-unreachable", (*EXPORT, "--push", "me/digits"),
         "cannot read README.md of 'me/digits' from the Hub (offline?)", _run()),
    Case("export-pr-without-push", (*EXPORT, "--pr"), "--pr opens a pull request on the repo --push names", _run()),
    Case("export-card-invalid-yaml", EXPORT, "README.md' has metadata advsuite cannot read",
         _run(("card/README.md", b"---\nlicense: [mit\ntags: x\n---\n# My model\n"))),
    Case("export-card-metadata-not-a-mapping", EXPORT, "README.md' has metadata advsuite cannot read",
         _run(("card/README.md", b"---\n- a list\n---\n# My model\n"))),
    Case("export-card-bad-model-index", EXPORT, "README.md' has metadata advsuite cannot read",
         _run(("card/README.md", b"---\nmodel-index:\n- results: []\n---\n# My model\n"))),
    Case("export-eval-results-invalid-yaml", EXPORT, "advsuite-ylecun-mnist-test.yaml' is not valid YAML",
         _run((EVAL_FILE, b"- dataset: {id: [\n"), change=_hub_dataset)),
    Case("export-eval-results-not-a-list", EXPORT, "is not a list of eval results entries",
         _run((EVAL_FILE, b"dataset: {id: x}\nvalue: 1\n"), change=_hub_dataset)),
]
