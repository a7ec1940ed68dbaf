"""Bad-input cases: cli (see ``test_bad_input.py``).

Flags and arguments argparse or the commands refuse before anything runs: unknown commands and
flags, missing arguments, numbers out of range, empty lists and paths that would silently mean
a default, names that do not exist, and values carrying terminal controls. Every one is one
line (no usage block) and exit 2.
"""

from __future__ import annotations

from pathlib import Path

from bad_input_cases import Case

#: An evaluate command that parses and names its dataset (no model card lookup).
DIGITS = ("evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--output", "{tmp}/out")
SENTIMENT = ("evaluate", "--model", "builtin:sentiment-tiny", "--dataset", "builtin:sentiment", "--output", "{tmp}/out")


def recipe_dir(work: Path) -> None:
    (work / "recipes.yaml").mkdir()


CASES: list[Case] = [
    # Commands and arguments.
    Case("cli-no-command", (), "the following arguments are required: COMMAND"),
    Case("cli-unknown-command", ("frobnicate",), "invalid choice: 'frobnicate'"),
    Case("cli-evaluate-without-model", ("evaluate",), "the following arguments are required: --model"),
    Case("cli-unknown-flag", (*DIGITS, "--bogus"), "unrecognized arguments: --bogus (see `advsuite evaluate --help`)"),
    Case("cli-ls-bogus", ("ls", "bogus"), "argument what: invalid choice: 'bogus'"),
    Case("cli-ls-control-chars", ("ls", "\x1b[2Jmodels\u202e"), "invalid choice: '\\x1b[2Jmodels\\u202e'"),
    Case("cli-validate-without-recipe", ("validate",), "the following arguments are required: recipe"),
    Case("cli-validate-directory", ("validate", "{tmp}/recipes.yaml"), "is a directory, not a recipe file",
         recipe_dir),
    Case("cli-run-missing-recipe", ("run", "{tmp}/missing.yaml"), "missing.yaml' does not exist"),
    Case("cli-run-unknown-recipe", ("run", "quickstrat"), "unknown recipe 'quickstrat'. Did you mean: quickstart?"),
    Case("cli-prefetch-nothing", ("prefetch",), "name attacks to prefetch"),
    # Every spec is checked before the first model loads (trains, downloads).
    Case("cli-prefetch-models-unknown-scheme", ("prefetch", "--models", "builtin:digits-cnn", "bogus:x"),
         "unknown model scheme 'bogus'. Available: builtin, ensemble, hf, timm."),
    Case("cli-prefetch-models-unknown-builtin", ("prefetch", "--models", "builtin:digits-cnn", "builtin:digits-cn"),
         "unknown built-in model 'digits-cn'. Did you mean: digits-cnn"),
    Case("cli-prefetch-models-no-scheme", ("prefetch", "--models", "digits-cnn"),
         "--models 'digits-cnn': spec: model spec 'digits-cnn' needs a scheme"),
    Case("cli-prefetch-models-missing-dir", ("prefetch", "--models", "hf:{tmp}/missing"),
         "1 resource(s) or model(s) could not be fetched; first: hf:"),
    Case("cli-prefetch-list-models", ("prefetch", "--list", "--models", "builtin:digits-cnn"),
         "--list shows the attacks' resources; `advsuite ls --verify` checks the cached built-in models"),
    # Numbers out of range.
    Case("cli-batch-size-zero", (*DIGITS, "--batch-size", "0"), "argument --batch-size: expected a positive integer or auto, got '0'"),
    Case("cli-batch-size-negative", (*DIGITS, "--batch-size", "-1"), "expected a positive integer or auto, got '-1'"),
    Case("cli-batch-size-word", (*DIGITS, "--batch-size", "x"), "expected a positive integer or auto, got 'x'"),
    Case("cli-batch-size-newline", (*DIGITS, "--batch-size", "1\n2"), "expected a positive integer or auto, got '1\\n2'"),
    Case("cli-batch-size-auto-capital", (*DIGITS, "--batch-size", "AUTO"), "expected a positive integer or auto, got 'AUTO'"),
    Case("cli-precision-unknown", (*DIGITS, "--precision", "fp8"), "argument --precision: invalid choice: 'fp8'"),
    Case("cli-precision-text-model", (*SENTIMENT, "--precision", "bf16"),
         "--precision applies to image models; 'builtin:sentiment-tiny' is a text model"),
    Case("cli-channels-last-text-model", (*SENTIMENT, "--channels-last"),
         "--channels-last applies to image models; 'builtin:sentiment-tiny' is a text model"),
    Case("cli-seed-negative", (*DIGITS, "--seed", "-1"), "argument --seed: expected an integer >= 0, got '-1'"),
    Case("cli-seed-float", (*DIGITS, "--seed", "0.5"), "argument --seed: expected an integer >= 0, got '0.5'"),
    Case("cli-n-zero", (*DIGITS, "--n", "0"), "argument --n/--limit: expected a positive integer, got '0'"),
    Case("cli-limit-zero", ("run", "quickstart", "--limit", "0"), "argument --limit: expected a positive integer"),
    Case("cli-num-classes-zero", (*DIGITS, "--num-classes", "0"), "argument --num-classes: expected a positive integer"),
    Case("cli-temperature-zero", (*DIGITS, "--temperature", "0"), "argument --temperature: expected a finite number > 0, got '0'"),
    Case("cli-temperature-negative", (*DIGITS, "--temperature", "-2"), "expected a finite number > 0, got '-2'"),
    Case("cli-temperature-nan", (*DIGITS, "--temperature", "nan"), "expected a finite number > 0, got 'nan'"),
    Case("cli-temperature-inf", (*DIGITS, "--temperature", "inf"), "expected a finite number > 0, got 'inf'"),
    Case("cli-temperature-beyond-float32", (*DIGITS, "--temperature", "1e308"),
         "expected a number > 0 and at most 3.403e+38 (float32's largest number), got '1e308'"),
    Case("cli-train-lr-beyond-float32", ("train", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits",
                                         "--lr", "1e39", "--output", "{tmp}/out"),
         "argument --lr: expected a number > 0 and at most 3.403e+38 (float32's largest number), got '1e39'"),
    Case("cli-eps-negative", (*DIGITS, "--eps", "-0.1"), "a radius must be a finite number >= 0, got '-0.1'"),
    Case("cli-eps-nan-in-list", (*DIGITS, "--eps", "0.1,nan"), "a radius must be a finite number >= 0, got 'nan'"),
    Case("cli-eps-word", (*DIGITS, "--eps", "big"), "expected a number or comma-separated numbers, got 'big'"),
    # Empty values that would silently mean a default.
    Case("cli-attacks-empty", (*DIGITS, "--attacks", ""), "argument --attacks: is empty"),
    Case("cli-attacks-only-commas", (*DIGITS, "--attacks", " , "), "argument --attacks: is empty"),
    Case("cli-attacks-empty-name", (*DIGITS, "--attacks", "pgd_linf,,fgm_linf"), "has an empty name between commas"),
    Case("cli-adversary-empty", (*SENTIMENT, "--adversary", ""), "argument --adversary: is empty"),
    Case("cli-output-empty", (*DIGITS[:-2], "--output", ""), "argument --output: is empty"),
    Case("cli-output-blank", (*DIGITS[:-2], "--output", "  "), "argument --output: is empty"),
    Case("cli-run-output-empty", ("run", "quickstart", "--output", ""), "argument --output: is empty"),
    Case("cli-demo-output-empty", ("demo", "--output", ""), "argument --output: is empty"),
    Case("cli-output-nul", (*DIGITS[:-2], "--output", "a\0b"), "holds a NUL character"),
    # Names that do not exist.
    Case("cli-adversary-bogus", (*SENTIMENT, "--adversary", "bogus"), "adversary.kinds.0: Input should be 'none', 'cal', 'opt' or 'platt'"),
    Case("cli-unknown-attack", (*DIGITS, "--attacks", "pgd_lnf"), "unknown attack 'pgd_lnf'. Did you mean: pgd_linf"),
    Case("cli-eps-beyond-float32", (*DIGITS, "--attacks", "fgm_linf", "--eps", "1e39"),
         "a radius must be at most 3.403e+38 (float32's largest number), got '1e39'"),
    Case("cli-eps-underscores", (*DIGITS, "--attacks", "fgm_linf", "--eps", "1_0"),
         "a radius must be a finite number >= 0, got '1_0'"),
    Case("cli-eps-other-digits", (*DIGITS, "--attacks", "fgm_linf", "--eps", "\u0660.\u0661"),
         "a radius must be a finite number >= 0"),
    Case("cli-recipe-nested-too-deeply", ("validate", "{tmp}/deep.yaml"), "is nested too deeply to be a recipe",
         lambda work: (work / "deep.yaml").write_text("name: d\ntasks: " + "[" * 2000 + "]" * 2000 + "\n")),
    Case("cli-n-underscores", (*DIGITS, "--n", "4_0"), "argument --n/--limit: expected a positive integer, got '4_0'"),
    Case("cli-seed-other-digits", (*DIGITS, "--seed", "\u0664"), "argument --seed: expected an integer >= 0"),
]
