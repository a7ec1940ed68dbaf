"""Bad-input cases: leaderboard (see ``test_bad_input.py``).

Results files are built from the version 1 file in ``tests/data`` (upgraded to version 2 where
a case needs version 2 fields), then broken one way each. Every case must leave the directory
as its setup left it: no leaderboard, no page, no lock file.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bad_input_cases import Case

V1_RESULTS = Path(__file__).resolve().parent / "data" / "results_v1_vision.json"
ADD = ("leaderboard", "add", "{tmp}/results.json", "--leaderboard", "{tmp}/board.json")


def _v1() -> dict[str, Any]:
    return json.loads(V1_RESULTS.read_text())


def _v2() -> dict[str, Any]:
    from suite.report.results import upgrade

    return copy.deepcopy(upgrade(_v1()))


def _results(change: Callable[[dict[str, Any]], Any], version: int = 2, raw: dict[str, str] | None = None):
    """A setup writing ``results.json``: a valid file with ``change`` applied; ``raw`` replaces
    quoted placeholders with text JSON cannot carry as a value (``"@nan": NaN``)."""

    def setup(root: Path) -> None:
        data = _v2() if version == 2 else _v1()
        change(data)
        text = json.dumps(data)
        for placeholder, literal in (raw or {}).items():
            text = text.replace(json.dumps(placeholder), literal)
        (root / "results.json").write_text(text)

    return setup


def _bytes(name: str, content: bytes, results: bool = True):
    def setup(root: Path) -> None:
        if results:
            (root / "results.json").write_text(V1_RESULTS.read_text())
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)

    return setup


def _board(board: Any, raw: dict[str, str] | None = None):
    def setup(root: Path) -> None:
        (root / "results.json").write_text(V1_RESULTS.read_text())
        text = json.dumps(board)
        for placeholder, literal in (raw or {}).items():
            text = text.replace(json.dumps(placeholder), literal)
        (root / "board.json").write_text(text)

    return setup


def _full_then_smoke(root: Path) -> None:
    """A board holding the n = 200 evaluation, and results of the same model on n = 10."""
    from suite.report import leaderboard

    (root / "full.json").write_text(V1_RESULTS.read_text())
    leaderboard.add([root / "full.json"], root / "board.json")
    data = _v1()
    data["dataset"]["n"] = 10
    for entry in data["attacks"].values():  # (each attack attacked at most the 10)
        entry["n_attacked"] = min(entry["n_attacked"], 10)
    (root / "results.json").write_text(json.dumps(data))


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set a field named by its keys joined with ``|`` (keys hold dots: ``threat_models|linf eps=0.03|threat|eps``)."""

    def change(data: dict[str, Any]) -> None:
        *parents, last = path.split("|")
        target = data
        for part in parents:
            target = target[part]
        target[last] = value

    return change


def _distributional_only(data: dict[str, Any]) -> None:
    """The run as an earlier advsuite wrote ``--attacks wda_pp`` alone: no point-wise attack, and
    the clean accuracy in ``worst_case_robust_accuracy`` (read back as null)."""
    data.update(attacks={}, threat_models={}, broken_only_by={}, worst_case_robust_accuracy=data["clean_accuracy"])
    data["distributional"] = {"wda_pp": {
        "threat": {"norm": "linf", "eps": 0.03, "p": 1.0}, "access": "white-box", "attack": "wda_pp",
        "params": {"eps": 0.03}, "budget": {}, "accuracy": 0.0, "n_attacked": 200, "mean_queries": 30.0,
        "seconds": 1.0}}


def _nested(depth: int) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        (root / "results.json").write_text("[" * depth + "]" * depth)

    return setup


CASES: list[Case] = [
    Case("leaderboard-results-warning-of-20000-characters", ADD, "String should have at most 10000 characters",
         _results(lambda data: data.update(warnings=["masked? " * 2_500]))),
    Case("leaderboard-results-201-warnings", ADD, "List should have at most 200 items",
         _results(lambda data: data.update(warnings=["masked?"] * 201))),
    Case("leaderboard-results-n-zero", ADD, "dataset.n is 0", _results(_set("dataset|n", 0))),
    Case("leaderboard-results-created-unparseable", ADD, "created 'yesterday' is not an ISO 8601 date",
         _results(_set("created", "yesterday"))),
    Case("leaderboard-results-eps-negative", ADD, "threat.eps: Input should be greater than or equal to 0",
         _results(_set("threat_models|linf eps=0.03|threat|eps", -0.03))),
    Case("leaderboard-results-eps-nan", ADD, "threat_models.linf eps=0.03.threat.eps is NaN",
         _results(_set("threat_models|linf eps=0.03|threat|eps", "@nan"), raw={"@nan": "NaN"})),
    Case("leaderboard-results-threat-names-unknown-attack", ADD, "names attack(s) ['apgd_ce'] that are not in attacks",
         _results(lambda d: d["threat_models"]["linf eps=0.03"]["attacks"].append("apgd_ce"))),
    Case("leaderboard-results-binary", ADD, "is not a JSON text file", _bytes("results.json", b"\x89PNG\r\n\x1a\n\x00\xff", False)),
    Case("leaderboard-results-empty", ADD, "is not JSON (Expecting value, line 1)", _bytes("results.json", b"", False)),
    Case("leaderboard-results-list", ADD, "holds a JSON list, not an advsuite results object",
         _bytes("results.json", b"[]", False)),
    Case("leaderboard-results-missing", ADD, "cannot read results", None),
    Case("leaderboard-results-deeply-nested", ADD, "nested too deeply", _nested(100_000)),
    Case("leaderboard-results-nan-temperature", ADD, "model.temperature is NaN; results files hold finite numbers only",
         _results(_set("model|temperature", "@nan"), raw={"@nan": "NaN"})),
    Case("leaderboard-results-infinite-compute-seconds", ADD, "compute_seconds is Infinity",
         _results(_set("compute_seconds", "@inf"), raw={"@inf": "Infinity"})),
    Case("leaderboard-results-nan-in-calibration", ADD, "calibration.ece is NaN",
         _results(_set("calibration|ece", "@nan"), raw={"@nan": "NaN"})),
    Case("leaderboard-results-overflow-in-adversary", ADD, "adversary.cal is -Infinity",
         _results(_set("adversary|cal", "@big"), raw={"@big": "-1e999"})),
    Case("leaderboard-results-nan-in-attack-params", ADD, "attacks.pgd_linf.params.eps is NaN",
         _results(_set("attacks|pgd_linf|params|eps", "@nan"), version=1, raw={"@nan": "NaN"})),
    Case("leaderboard-results-newer-schema", ADD, "has schema_version 3; this advsuite reads results of schema versions 1, 2",
         _results(_set("schema_version", 3))),
    Case("leaderboard-results-v1-layout-broken", ADD, "is not a valid version 1 results file",
         _results(_set("attacks", [1]), version=1)),
    Case("leaderboard-results-interval-misses-value", ADD, "clean accuracy 1 is outside its 95% interval [0.1, 0.2]",
         _results(_set("clean_accuracy_ci", [0.1, 0.2]))),
    Case("leaderboard-results-worst-case-above-an-attack", ADD,
         "the worst case under 'linf eps=0.03' 0.5 is above its clean accuracy 1 or one of its attacks'",
         _results(_set("threat_models|linf eps=0.03|worst_case_robust_accuracy", 0.5))),
    Case("leaderboard-results-distributional-only", ADD,
         "task 'vision' ran no point-wise attack (distributional: wda_pp), so it has no worst-case robust accuracy",
         _results(_distributional_only)),
    Case("leaderboard-results-dir-without-results", ("leaderboard", "add", "{tmp}/runs", "--leaderboard", "{tmp}/board.json"),
         "holds no results.json", lambda root: (root / "runs" / "task").mkdir(parents=True)),
    Case("leaderboard-smaller-evaluation-without-replace", ADD,
         "with n=200, seed 0 and dataset fingerprint 'sklearn-digits-32px-test'; these results have n=10", _full_then_smoke),
    Case("leaderboard-board-binary", ADD, "board.json' is not a JSON text file", _bytes("board.json", b"\xff\xfe\x00{")),
    Case("leaderboard-board-is-a-directory", ("leaderboard", "add", "{tmp}/results.json", "--leaderboard", "{tmp}/site"),
         "site' is a directory; name the leaderboard file", _bytes("site/index.html", b"<html></html>")),
    # The page written beside the board would overwrite it (all entries lost after "1 added").
    Case("leaderboard-board-named-as-the-schema",
         ("leaderboard", "add", "{tmp}/results.json", "--leaderboard", "{tmp}/site/schema.json"),
         "has the name of the page's own schema.json", _bytes("site/keep.txt", b"")),
    Case("leaderboard-board-linked-to-the-page",
         ("leaderboard", "add", "{tmp}/results.json", "--leaderboard", "{tmp}/board.json"),
         "has the name of the page's own index.html",
         lambda root: (_bytes("index.html", b"<html></html>")(root), (root / "board.json").symlink_to("index.html"))),
    Case("leaderboard-board-parent-is-a-file",
         ("leaderboard", "add", "{tmp}/results.json", "--leaderboard", "{tmp}/notes.txt/board.json"),
         "notes.txt' is not a directory", _bytes("notes.txt", b"notes")),
    Case("leaderboard-board-wrong-schema", ADD, "does not match leaderboard/schema.json: entries.0.task: Field required",
         _board({"leaderboard_version": 2, "entries": [{"model": "m"}]})),
    Case("leaderboard-board-key-given-twice", ADD, "is not a leaderboard file advsuite can read: key 'entries' is "
         "given twice in one object", _board({"leaderboard_version": 2, "entries": [], "@second": 0},
                                             raw={"@second": '"entries"'})),
    Case("leaderboard-results-key-given-twice", ADD, "key 'seed' is given twice in one object",
         _results(lambda data: data.update({"@seed": 3}), raw={"@seed": '"seed"'})),
    Case("leaderboard-board-list", ADD, "holds a JSON list, not a leaderboard object", _board([])),
    Case("leaderboard-board-newer-version", ADD, "has leaderboard_version 9; this advsuite reads versions 1, 2",
         _board({"leaderboard_version": 9, "entries": []})),
    Case("leaderboard-board-nan", ADD, "entries.0.clean_accuracy is NaN",
         _board({"leaderboard_version": 2, "entries": [{"clean_accuracy": "@nan"}]}, raw={"@nan": "NaN"})),
    Case("leaderboard-show-binary-board", ("leaderboard", "show", "--leaderboard", "{tmp}/board.json"),
         "is not a JSON text file", _bytes("board.json", b"\x00\x9f\x92\x96")),
    Case("leaderboard-show-missing-board", ("leaderboard", "show", "--leaderboard", "{tmp}/board.json"),
         "no leaderboard at", None),
    Case("leaderboard-schema-output-directory", ("leaderboard", "schema", "--output", "{tmp}/site"),
         "site' is a directory; name the schema file", _bytes("site/keep.txt", b"", False)),
    Case("leaderboard-schema-output-missing-parent", ("leaderboard", "schema", "--output", "{tmp}/no/such/schema.json"),
         "does not exist", None),
    Case("leaderboard-show-unknown-sort", ("leaderboard", "show", "--leaderboard", "{tmp}/board.json", "--sort", "nope"),
         "--sort 'nope' is neither worst_case_robust_accuracy, clean_accuracy nor an attack of the leaderboard",
         _board({"leaderboard_version": 2, "entries": []})),
]
