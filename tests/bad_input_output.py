"""Bad-input cases: output directories, records, recipes and attack settings (see ``test_bad_input.py``)."""

from __future__ import annotations

import json
from pathlib import Path

from bad_input_cases import Case

DIGITS = ("evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--n", "4")
GOOD_TASK = "  - name: vision\n    model: builtin:digits-cnn\n    dataset: {spec: builtin:digits, n: 4}\n"


def _file(name: str, content: str | bytes):
    def setup(work: Path) -> None:
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())

    return setup


def without_wordnet(monkeypatch) -> None:
    """WordNet unreadable, as on a machine without it, and the ASCC built-in not yet trained."""
    from suite.attacks.text import resources

    available = resources.Resource.available
    monkeypatch.setattr(resources.Resource, "available", lambda self: self.name != "wordnet" and available(self))
    monkeypatch.setattr("suite.train.builtin_text.is_cached", lambda name: False)


def _bad_card(work: Path) -> None:
    """A loadable timm directory whose card declares a threat model with an unknown norm."""
    import timm

    from suite.models.timm_dir import save_timm_dir

    model = timm.create_model("test_resnet", num_classes=10, in_chans=1)
    save_timm_dir(work / "m", model, "test_resnet", input_size=(1, 32, 32), mean=(0.3,), std=(0.4,),
                  label_names=[str(d) for d in range(10)])
    (work / "m" / "README.md").write_text("---\nthreat_model: {norm: l7, eps: 0.3}\n---\n")


def _recipe(attacks: str, extra: str = "") -> str:
    return f"name: bad\n{extra}tasks:\n{GOOD_TASK}    attacks: {attacks}\n"


def _records_without_run(work: Path) -> None:
    (work / "out").mkdir()
    (work / "out" / "records.jsonl").write_text(json.dumps({"kind": "clean", "id": "0", "correct": 1.0}) + "\n")


def _no_model_load(monkeypatch) -> None:
    """Loading a model fails the case: what it checks must be refused before any load (or training)."""
    def load_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr("suite.evaluation.prepare.load_model", load_model)


CASES: list[Case] = [
    Case("output-is-a-file", (*DIGITS, "--output", "{tmp}/taken"), "is a file, not a directory", _file("taken", "x")),
    Case("output-under-a-file", (*DIGITS, "--output", "{tmp}/taken/sub"), "is a file, not a directory",
         _file("taken", "x")),
    Case("output-foreign-files", (*DIGITS, "--output", "{tmp}/theirs"), "holds files advsuite did not write",
         _file("theirs/results.json", '{"their": "numbers"}')),
    Case("output-foreign-samples", (*DIGITS, "--output", "{tmp}/theirs"), "'samples.md'",
         _file("theirs/samples.md", "their notes")),
    Case("output-garbage-run-file", (*DIGITS, "--output", "{tmp}/out"), "use --overwrite to start over",
         _file("out/run.json", b"\x00\xffnot json")),
    Case("output-run-file-a-list", (*DIGITS, "--output", "{tmp}/out"), "is not a run description",
         _file("out/run.json", "[1, 2]")),
    Case("output-another-run", (*DIGITS, "--output", "{tmp}/out"), "holds another run",
         _file("out/run.json", '{"seed": 5}')),
    Case("output-records-of-unknown-run", (*DIGITS, "--output", "{tmp}/out"), "records of an unknown run",
         _records_without_run),
    Case("output-recipe-into-an-evaluation", ("run", "quickstart", "--limit", "2", "--output", "{tmp}/out"),
         "is one evaluation's directory (it holds run.json)", _file("out/run.json", '{"seed": 0}')),
    Case("output-symlink-loop", (*DIGITS, "--output", "{tmp}/loop"), "is a symbolic link that loops",
         lambda work: (work / "loop").symlink_to("loop")),
    Case("output-dangling-symlink", (*DIGITS, "--output", "{tmp}/gone/sub"),
         "is a symbolic link that points to '/nonexistent/advsuite', which does not exist",
         lambda work: (work / "gone").symlink_to("/nonexistent/advsuite")),
    Case("cache-env-names-a-file", (*DIGITS, "--output", "{tmp}/out"),
         "the cache 'cachefile' (ADVSUITE_CACHE or the default) cannot hold 'cachefile/models': Not a directory",
         _file("cachefile", "not a directory"), lambda monkeypatch: monkeypatch.setenv("ADVSUITE_CACHE", "cachefile")),
    Case("output-path-too-long", (*DIGITS, "--output", "{tmp}/" + "a" * 300), "too long a path"),
    Case("output-empty", (*DIGITS, "--output", ""), "--output"),
    Case("recipe-duplicate-key", ("run", "{tmp}/r.yaml"), "at line 6: key 'eps' is given twice in one mapping",
         _file("r.yaml", "name: bad\ntasks:\n  - name: v\n    model: builtin:digits-cnn\n"
                         "    dataset: {spec: builtin:digits, n: 4}\n    attacks: [{name: fgm_linf, eps: 0.3, eps: 0.01}]\n")),
    Case("recipe-seed-true", ("run", "{tmp}/r.yaml"), "seed: Input should be a valid integer",
         _file("r.yaml", "name: bad\nseed: true\ntasks:\n" + GOOD_TASK)),
    Case("recipe-n-yes", ("run", "{tmp}/r.yaml"), "tasks.0.dataset.n: Input should be a valid integer",
         _file("r.yaml", "name: bad\ntasks:\n  - name: v\n    model: builtin:digits-cnn\n"
                         "    dataset: {spec: builtin:digits, n: yes}\n")),
    Case("recipe-names-collide-once-expanded", ("run", "{tmp}/r.yaml"),
         "two tasks are named 'vision-T2' and 'vision-T2' once temperatures and sweeps are expanded",
         _file("r.yaml", "name: bad\ntasks:\n" + GOOD_TASK + "    temperatures: [2]\n"
                         + GOOD_TASK.replace("name: vision", "name: vision-T2"))),
    Case("recipe-names-differ-only-by-case", ("run", "{tmp}/r.yaml"), "two tasks are named 'vision' and 'Vision'",
         _file("r.yaml", "name: bad\ntasks:\n" + GOOD_TASK + GOOD_TASK.replace("name: vision", "name: Vision"))),
    Case("recipe-task-name-300-chars", ("run", "{tmp}/r.yaml"), "at most 100 characters",
         _file("r.yaml", f"name: bad\ntasks:\n  - name: {'t' * 300}\n    model: builtin:digits-cnn\n"
                         "    dataset: builtin:digits\n")),
    Case("recipe-optimizer-lbfgs", ("run", "{tmp}/r.yaml"), "optimizer 'LBFGS' does not step each coordinate",
         _file("r.yaml", _recipe("[{name: beta, optimizer: LBFGS}]"))),
    Case("recipe-optimizer-sparseadam", ("run", "{tmp}/r.yaml"), "optimizer 'SparseAdam' does not step each",
         _file("r.yaml", _recipe("[{name: beta, optimizer: SparseAdam}]"))),
    # Adafactor scales its step by norms over the whole δ, every example of the batch together.
    Case("recipe-optimizer-adafactor", ("run", "{tmp}/r.yaml"), "would depend on the other examples of its batch",
         _file("r.yaml", _recipe("[{name: beta, optimizer: Adafactor}]"))),
    Case("recipe-optimizer-unknown", ("run", "{tmp}/r.yaml"), "unknown optimizer 'Adamm'",
         _file("r.yaml", _recipe("[{name: beta, optimizer: Adamm}]"))),
    Case("recipe-steps-true", ("run", "{tmp}/r.yaml"), "steps: Input should be a valid integer",
         _file("r.yaml", _recipe("[{name: pgd_linf, steps: true}]"))),
    Case("recipe-steps-huge-float", ("run", "{tmp}/r.yaml"), "steps: Input should be a valid integer",
         _file("r.yaml", _recipe("[{name: pgd_linf, steps: 1.0e+26}]"))),
    Case("recipe-steps-huge-int", ("run", "{tmp}/r.yaml"), "is more than 10,000,000",
         _file("r.yaml", _recipe("[{name: pgd_linf, steps: 100000000000000000000}]"))),
    Case("recipe-batch-size-auto-with-mean-loss", ("run", "{tmp}/r.yaml"),
         "fgm_linf averages the loss over the batch (reduction: mean), so the batch size changes the numbers",
         _file("r.yaml", _recipe("[{name: fgm_linf, reduction: mean}]"))),
    Case("recipe-batch-size-capital-auto", ("run", "{tmp}/r.yaml"), "batch_size",
         _file("r.yaml", "batch_size: Auto\n" + _recipe("[fgm_linf]"))),
    Case("recipe-eps-string", ("run", "{tmp}/r.yaml"), "eps: Input should be a valid number",
         _file("r.yaml", _recipe("[{name: pgd_linf, eps: '0.1'}]"))),
    Case("recipe-eps-nan", ("run", "{tmp}/r.yaml"), "eps: Input should be a finite number",
         _file("r.yaml", _recipe("[{name: pgd_linf, eps: .nan}]"))),
    Case("recipe-sweep-empty-batch-sizes", ("run", "{tmp}/r.yaml"), "sweep batch_size lists nothing",
         _file("r.yaml", _recipe("[fgm_linf]", "sweep: {batch_size: []}\n"))),
    Case("recipe-sweep-repeated-seed", ("run", "{tmp}/r.yaml"), "seed listed twice",
         _file("r.yaml", _recipe("[fgm_linf]", "sweep: {seeds: [1, 1]}\n"))),
    Case("recipe-floored-step-on-linf", ("run", "{tmp}/r.yaml"), "l2_step: floored applies to L2 attacks only",
         _file("r.yaml", _recipe("[{name: pgd_linf, l2_step: floored}]"))),
    Case("recipe-certify-radius-twice", ("validate", "{tmp}/r.yaml"), "certify radius listed twice: 0.1",
         _file("r.yaml", f"name: bad\ntasks:\n{GOOD_TASK}    certify: {{eps: [0.1, 0.1]}}\n")),
    Case("recipe-certify-radius-past-float32", ("validate", "{tmp}/r.yaml"),
         "certify eps must be finite numbers >= 0 and at most 3.403e+38",
         _file("r.yaml", f"name: bad\ntasks:\n{GOOD_TASK}    certify: {{eps: [1e300]}}\n")),
    Case("recipe-binary", ("run", "{tmp}/r.yaml"), "cannot read recipe", _file("r.yaml", b"\xff\xfe\x00\x01garbage")),
    Case("recipe-a-list", ("run", "{tmp}/r.yaml"), "must be a mapping", _file("r.yaml", "- a\n- b\n")),
    Case("recipe-label-twice", ("run", "{tmp}/r.yaml"), "attack listed twice",
         _file("r.yaml", _recipe("[fgm_linf, fgm_linf]"))),
    Case("eps-nan", (*DIGITS, "--attacks", "fgm_linf", "--eps", "nan"), "a radius must be a finite number"),
    Case("eps-listed-twice", (*DIGITS, "--attacks", "fgm_linf", "--eps", "0.1,0.1"), "--eps lists a radius twice"),
    Case("eps-not-a-number", (*DIGITS, "--attacks", "fgm_linf", "--eps", "0.1,big"), "expected a number"),
    # The radius and norm of the default attacks (--eps alone applies to them).
    Case("eps-on-default-text-attack", ("evaluate", "--model", "builtin:sentiment-tiny", "--eps", "0.1"),
         "--eps does not apply to deepwordbug (the default text attack): text attacks take no radius"),
    Case("norm-on-default-text-attack", ("evaluate", "--model", "builtin:sentiment-tiny", "--norm", "l2"),
         "--norm does not apply to deepwordbug (the default text attack)"),
    Case("eps-on-text-and-image-attacks", (*DIGITS, "--attacks", "fgm_linf,deepwordbug,pwws", "--eps", "0.1"),
         "--eps does not apply to deepwordbug, pwws: they take no radius"),
    Case("norm-unknown", (*DIGITS, "--norm", "l1"), "argument --norm: invalid choice: 'l1'"),
    Case("norm-against-a-fixed-norm-attack", (*DIGITS, "--attacks", "pgd_linf,fgm_linf", "--norm", "l2"),
         "norm l2 does not apply to pgd_linf, fgm_linf: they have a fixed norm"),
    Case("declared-radius-another-norm", ("evaluate", "--model", "builtin:digits-cnn-at", "--dataset", "builtin:digits",
                                          "--attacks", "pgd_l2", "--output", "{tmp}/out"),
         "builtin:digits-cnn-at declares the threat model linf eps=0.15, which pgd_l2 cannot run at"),
    Case("card-bad-threat-model", ("evaluate", "--model", "timm:{tmp}/m", "--dataset", "builtin:digits",
                                   "--output", "{tmp}/out"), "the model card of timm:", _bad_card),
    # Optional data a built-in needs and cannot get (a recipe skips such tasks: test_radius.py).
    Case("wordnet-missing-for-a-builtin", ("evaluate", "--model", "builtin:sentiment-ascc-s0", "--output", "{tmp}/out"),
         "built-in model 'builtin:sentiment-ascc-s0' is trained on first use and needs NLTK data 'wordnet'",
         patch=without_wordnet),
    # A named attack's missing resource is refused before the model is loaded (or trained): the
    # model here cannot be loaded, and the line is about the attack.
    Case("wordnet-missing-for-an-attack", ("evaluate", "--model", "hf:{tmp}/m", "--dataset", "builtin:sentiment", "--attacks", "pwws"),
         "needs NLTK data 'wordnet'", _file("m/config.json", "{not json"), patch=without_wordnet),
    Case("torchattacks-missing", ("evaluate", "--model", "timm:{tmp}/m", "--dataset", "builtin:digits", "--attacks", "square"),
         "attack 'square' needs torchattacks, which is not installed: pip install 'advsuite[baselines]'",
         _file("m/config.json", "{not json"),
         patch=lambda monkeypatch: monkeypatch.setitem(__import__("sys").modules, "torchattacks", None)),
    # Columns that cannot be what they are named for.
    Case("text-column-is-the-label", ("evaluate", "--model", "builtin:sentiment-tiny", "--text-column", "label"),
         "text_column is 'label', the column labels are read from"),
    Case("text-column-equals-label-column", ("evaluate", "--model", "builtin:sentiment-tiny", "--dataset", "hf:{tmp}/d.csv",
                                             "--text-column", "body", "--label-column", "body"),
         "text_column and label_column are both 'body'", _file("d.csv", "body,label\ngood,1\nbad,0\n")),
    Case("column-flag-on-builtin-data", ("evaluate", "--model", "builtin:sentiment-tiny", "--label-column", "y"),
         "label_column apply to hf: datasets; builtin:sentiment has fixed columns"),
    Case("recipe-eps-on-text-attack", ("run", "{tmp}/r.yaml"), "eps does not apply to deepwordbug",
         _file("r.yaml", "name: r\ntasks:\n  - {model: builtin:sentiment-tiny, dataset: builtin:sentiment, "
               "attacks: [deepwordbug], eps: 0.1}\n")),
    Case("adversary-on-images", (*DIGITS, "--adversary", "none,cal"), "adversary temperatures (cal, opt, platt) apply to text"),
    Case("output-run-file-number-too-long", (*DIGITS, "--output", "{tmp}/out"), "cannot read",
         _file("out/run.json", '{"seed": ' + "9" * 5000 + "}")),
    # /proc permits no new file, whatever the permission bits say (root's os.access passes there):
    # refused by trying, before the model loads (or a built-in trains).
    Case("output-where-no-folder-can-be-made", (*DIGITS, "--output", "/proc/advsuite-out/sub"),
         "cannot write to '/proc' (no new file can be made there): choose another --output", patch=_no_model_load),
    Case("output-too-long-before-loading", (*DIGITS, "--output", "{tmp}/" + "a" * 300), "too long a path",
         patch=_no_model_load),
    Case("dataset-empty", (*DIGITS[:3], "--dataset", ""), "argument --dataset: is empty ('')"),
    Case("recipe-empty-name", ("validate", ""), "the recipe is empty ('')"),
    Case("recipe-a-device-file", ("validate", "/dev/null"), "recipe file '/dev/null' is not a regular file"),
]
