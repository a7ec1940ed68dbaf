"""Bad-input cases: randomized ensembles and their attacks (see ``test_bad_input.py``).

Ensemble specs whose probabilities are not a distribution, malformed inline members, nested
ensembles, members that cannot be mixed, ensemble attacks on a deterministic model, α sweeps out
of range, and a BAT partner without its source.
"""

from __future__ import annotations

from pathlib import Path

from bad_input_cases import Case

OUT = ("--output", "{tmp}/out")


def evaluate(model: str, *extra: str) -> tuple[str, ...]:
    return ("evaluate", "--model", model, "--dataset", "builtin:digits", "--n", "4", *OUT, *extra)


def recipe(model: str, attacks: str = "[arc]", extra: str = ""):
    """Setup: ``r.yaml`` with one task on ``model`` (a YAML flow mapping or a spec)."""
    def setup(work: Path) -> None:
        (work / "r.yaml").write_text(f"name: bad\n{extra}tasks:\n  - name: t\n    model: {model}\n"
                                     f"    dataset: {{spec: builtin:digits, n: 4}}\n    attacks: {attacks}\n")
    return setup


PAIR = "{spec: ensemble:pair, members: [{spec: builtin:digits-cnn, probability: 0.5}, " \
       "{spec: builtin:digits-cnn, probability: 0.5}]}"
RUN = ("run", "{tmp}/r.yaml", *OUT)

CASES: list[Case] = [
    Case("ensemble-probabilities-sum", evaluate("ensemble:0.5*builtin:digits-cnn,0.6*builtin:digits-cnn"),
         "ensemble probabilities must sum to 1, got 1.1"),
    Case("ensemble-probability-negative", evaluate("ensemble:1.5*builtin:digits-cnn,-0.5*builtin:digits-cnn"),
         "probability: Input should be greater than or equal to 0"),
    Case("ensemble-probability-nan", evaluate("ensemble:nan*builtin:digits-cnn"), "probability"),
    Case("ensemble-probability-underscore", evaluate("ensemble:0_5*builtin:digits-cnn,0.5*builtin:digits-cnn"),
         "ensemble member '0_5*builtin:digits-cnn' is not <probability>*<spec>"),
    Case("ensemble-inline-word", evaluate("ensemble:half*builtin:digits-cnn"),
         "ensemble member 'half*builtin:digits-cnn' is not <probability>*<spec>"),
    Case("ensemble-no-members", evaluate("ensemble:mine"), "'ensemble:mine' lists no members"),
    Case("ensemble-unknown-member", evaluate("ensemble:1*builtin:no-such-model"), "no-such-model"),
    Case("ensemble-mixed-modalities", evaluate("ensemble:0.5*builtin:digits-cnn,0.5*builtin:sentiment-tiny"),
         "ensemble members mix image and text models"),
    Case("ensemble-attack-on-single-model",
         ("evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits", "--n", "4", "--attacks", "arc",
          *OUT), "attack 'arc' attacks randomized ensembles; 'builtin:digits-cnn' is not one"),
    Case("ensemble-nested", RUN, "ensemble members cannot be ensembles",
         recipe("{spec: ensemble:outer, members: [{spec: 'ensemble:1*builtin:digits-cnn', probability: 1.0}]}")),
    Case("ensemble-members-on-a-single-model", RUN, "members apply to ensemble: models only",
         recipe("{spec: builtin:digits-cnn, members: [{spec: builtin:digits-cnn, probability: 1.0}]}")),
    Case("ensemble-revision-on-ensemble", RUN, "revision applies to an ensemble's members",
         recipe(PAIR.replace("ensemble:pair,", "ensemble:pair, revision: main,"))),
    Case("ensemble-member-index-out-of-range", RUN, "member 5 does not exist",
         recipe(PAIR, "[{name: pgd_member, member: 5}]")),
    Case("ensemble-candidates-zero", RUN, "candidates: Input should be greater than or equal to 1",
         recipe(PAIR, "[{name: arc, candidates: 0}]")),
    Case("ensemble-sweep-alpha-above-one", RUN, "sweep alphas are probabilities",
         recipe(PAIR, extra="sweep: {alphas: [0.5, 1.5]}\n")),
    Case("ensemble-sweep-alpha-twice", RUN, "alpha listed twice", recipe(PAIR, extra="sweep: {alphas: [0.5, 0.5]}\n")),
    Case("ensemble-sweep-alpha-one-member", RUN, "sweep alphas needs ensembles of two or more members",
         recipe("{spec: ensemble:one, members: [{spec: builtin:digits-cnn, probability: 1.0}]}",
                extra="sweep: {alphas: [0.5]}\n")),
    Case("ensemble-members-empty", RUN, "lists no members", recipe("{spec: ensemble:none, members: []}")),
    Case("train-bat-without-source",
         ("train", "--model", "timm:test_resnet", "--dataset", "builtin:digits", "--method", "bat", *OUT),
         "training method 'bat': source"),
    Case("train-source-for-pgd-at",
         ("train", "--model", "timm:test_resnet", "--dataset", "builtin:digits", "--source", "builtin:digits-cnn",
          *OUT), "training method 'pgd_at': source: unknown parameter"),
    Case("sweep-grid-too-large", RUN, "the sweep makes 4,000,000 runs of each task (its lists multiplied): at most 10,000",
         recipe("builtin:digits-cnn", "[fgm_linf]", extra="sweep: {batch_size: [%s], seeds: [%s]}\n" % (
             ", ".join(map(str, range(1, 2001))), ", ".join(map(str, range(2000)))))),
    Case("model-scheme-without-name", evaluate("hf:"), "model spec 'hf:' names no model after 'hf:'"),
]
