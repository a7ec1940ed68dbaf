"""Bad-input cases: compare (see ``test_bad_input.py``).

``advsuite compare RUN_A RUN_B [...] [--per-class]`` refuses, in one line: fewer than two runs;
a run that is missing, holds no results, damaged or invalid results, or a results.json that is
a directory; a recipe's output directory (naming its tasks); runs evaluated on other examples
(another dataset fingerprint, an unknown one, another n, another subsample seed); and
``--per-class`` on results written before per-class results; a results.json changed after its run (an
accuracy outside its own interval, a model name that is not its spec's). Results files are the version 1 file
in ``tests/data``, upgraded to version 2 (so without ``per_class``), changed per case.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bad_input_cases import Case

V1_RESULTS = Path(__file__).resolve().parent / "data" / "results_v1_vision.json"
COMPARE = ("compare", "{tmp}/a", "{tmp}/b")


def _results(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    from suite.report.results import upgrade

    data = upgrade(json.loads(V1_RESULTS.read_text()))
    change(data)
    return data


def _fifo_results(root: Path) -> None:
    """``b/results.json`` a FIFO: opening it to read would wait for a writer forever."""
    import os

    _runs()(root)
    (root / "b" / "results.json").unlink()
    os.mkfifo(root / "b" / "results.json")


def _runs(b: Callable[[dict[str, Any]], Any] = lambda data: None, *extra: tuple[str, bytes]):
    """A setup writing valid ``a/results.json`` and ``b/results.json`` (``b`` changed), then ``extra`` files."""

    def setup(root: Path) -> None:
        for name, change in (("a", lambda data: None), ("b", b)):
            (root / name).mkdir()
            (root / name / "results.json").write_text(json.dumps(_results(change)))
        for name, content in extra:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            if (root / name).is_file():
                (root / name).unlink()
            (root / name).write_bytes(content)

    return setup


def _dataset(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda data: data["dataset"].update(fields)


def _smaller(data: dict[str, Any]) -> None:
    """A run of 100 examples (each attack attacked at most that many)."""
    data["dataset"]["n"] = 100
    for entry in data["attacks"].values():
        entry["n_attacked"] = min(entry["n_attacked"], 100)


def _results_is_directory(root: Path) -> None:
    _runs()(root)
    (root / "b" / "results.json").unlink()
    (root / "b" / "results.json").mkdir()


def _missing_run(root: Path) -> None:
    _runs()(root)
    (root / "b" / "results.json").unlink()
    (root / "b").rmdir()


def _no_results(root: Path) -> None:
    _runs()(root)
    (root / "b" / "results.json").unlink()
    (root / "b" / "records.jsonl").write_text("")


def _recipe_dir(root: Path) -> None:
    _runs()(root)
    (root / "b" / "results.json").unlink()
    for task in ("pgd", "square"):
        (root / "b" / task).mkdir()
        (root / "b" / task / "results.json").write_text(json.dumps(_results(lambda data: None)))


CASES: list[Case] = [
    Case("compare-one-run", ("compare", "{tmp}/a"), "compare needs at least two runs; got 1", _runs()),
    Case("compare-no-runs", ("compare",), "the following arguments are required: RUN"),
    Case("compare-missing-run", COMPARE, "b' does not exist: give a run directory or its results.json",
         _missing_run),
    Case("compare-no-results", COMPARE, "b' holds no results.json: give a finished run's directory", _no_results),
    Case("compare-results-is-directory", COMPARE, "results.json' is a directory, not a results file",
         _results_is_directory),
    Case("compare-results-path-is-directory", ("compare", "{tmp}/a", "{tmp}/b/results.json"),
         "results.json' is a directory, not a results file", _results_is_directory),
    Case("compare-recipe-dir", COMPARE, "b' is a recipe's output directory with tasks pgd, square: compare task "
         "directories", _recipe_dir),
    Case("compare-not-json", COMPARE, "results.json' is not JSON",
         _runs(lambda data: None, ("b/results.json", b'{"schema_version": 2,'))),
    Case("compare-binary-results", COMPARE, "is not a JSON text file",
         _runs(lambda data: None, ("b/results.json", b"\xff\xfe\x00garbage"))),
    Case("compare-results-not-schema", COMPARE, "is not a valid advsuite results file",
         _runs(lambda data: data.update(clean_accuracy=1.5))),
    Case("compare-results-array", COMPARE, "holds a JSON list, not an advsuite results object",
         _runs(lambda data: None, ("b/results.json", b"[1, 2]"))),
    Case("compare-newer-schema", COMPARE, "has schema_version 99",
         _runs(lambda data: data.update(schema_version=99))),
    Case("compare-bad-per-class", COMPARE, "is not a valid advsuite results file: per_class",
         _runs(lambda data: data.update(per_class={"0": {"n": 0}}))),
    Case("compare-other-fingerprint", COMPARE, "not evaluated on the same examples (different datasets): dataset "
         "fingerprints 'sklearn-digits-32px-test' and 'other-data'", _runs(_dataset(fingerprint="other-data"))),
    Case("compare-unknown-fingerprint", COMPARE, "(a dataset fingerprint is unknown): dataset fingerprints "
         "'sklearn-digits-32px-test' and None", _runs(_dataset(fingerprint=None))),
    Case("compare-other-columns", COMPARE, "(different columns of the data: {} and {'text': 'hypothesis'})",
         _runs(_dataset(columns={"text": "hypothesis"}))),
    Case("compare-other-n", COMPARE, "(different n): dataset fingerprints 'sklearn-digits-32px-test' and "
         "'sklearn-digits-32px-test', n=200 and n=100", _runs(_smaller)),
    Case("compare-other-subsample", COMPARE, "(different subsamples of the split: seeds 0 and 1)",
         _runs(lambda data: data.update(seed=1))),
    Case("compare-per-class-missing", (*COMPARE, "--per-class"),
         "a' predates per-class results (its results.json has no per_class)", _runs()),
    Case("compare-results-are-dev-zero", ("compare", "{tmp}/a", "/dev/zero"),
         "'/dev/zero' is not a regular file; give the results JSON file", _runs()),
    Case("compare-results-are-a-fifo", ("compare", "{tmp}/a", "{tmp}/b/results.json"),
         "results.json' is not a regular file; give the results JSON file", _fifo_results),
    Case("compare-control-chars-in-path", ("compare", "{tmp}/a", "{tmp}/b\x1b[2J"),
         "b\\x1b[2J' does not exist", _runs()),
    Case("compare-value-outside-its-interval", COMPARE, "clean accuracy 1 is outside its 95% interval [0.5, 0.9]",
         _runs(lambda data: data.update(clean_accuracy=1.0, clean_accuracy_ci=[0.5, 0.9]))),
    Case("compare-name-not-its-spec", COMPARE, "is not its spec's",
         _runs(lambda data: data["model"].update(name="someone-else"))),
]
