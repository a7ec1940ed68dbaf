"""Bad-input cases: the Wasserstein attacks and ``advsuite certify`` (see ``test_bad_input.py``)."""

from __future__ import annotations

from pathlib import Path

from bad_input_cases import Case
from tiny_models import save_tiny_bert, save_tiny_timm

OUT = ("--output", "{tmp}/out")
RUN = ("run", "{tmp}/r.yaml", *OUT)


def recipe(attacks: str):
    """Setup: ``r.yaml`` with one digits task under ``attacks``."""
    def setup(work: Path) -> None:
        (work / "r.yaml").write_text("name: bad\ntasks:\n  - name: t\n    model: builtin:digits-cnn\n"
                                     f"    dataset: {{spec: builtin:digits, n: 4}}\n    attacks: {attacks}\n")
    return setup


def certify(*extra: str, model: str = "builtin:digits-cnn") -> tuple[str, ...]:
    return ("certify", "--model", model, "--n", "4", *OUT, *extra)


def saved(save):
    """Setup: a tiny model saved by ``save`` into ``m/`` (a local ``hf:`` or ``timm:`` directory)."""
    return lambda work: save(work / "m")


CASES: list[Case] = [
    Case("wda-kappa-below-one", RUN, "kappa: Input should be greater than or equal to 1",
         recipe("[{name: wda, kappa: 0.5}]")),
    Case("wda-order-three", RUN, "p: Input should be 1 or 2", recipe("[{name: wda, p: 3}]")),
    Case("wda-norm-l3", RUN, "norm: Input should be 'linf', 'l2' or 'l1'", recipe("[{name: wda, norm: l3}]")),
    Case("wda-pp-top-k-zero", RUN, "top_k: Input should be a whole number ≥ 1, auto, or null (every other class), not 0",
         recipe("[{name: wda_pp, top_k: 0}]")),
    Case("wda-probe-negative", RUN, "probe: Input should be greater than or equal to 0",
         recipe("[{name: wda, probe: -1}]")),
    Case("certify-text-model", ("certify", "--model", "builtin:sentiment-tiny", *OUT),
         "certify works on image models"),
    Case("certify-eps-negative", certify("--eps", "0.1,-1"), "a radius must be a finite number >= 0"),
    Case("certify-eps-twice", certify("--eps", "0.1,0.1"), "--eps lists a radius twice"),
    Case("certify-temperature-that-overflows", certify("--temperature", "1e-45", "--no-attacks"),
         "gives a loss or an input gradient that is not finite on these examples, so no certificate can be computed: "
         "served at temperature 1e-45, they overflow; choose a larger temperature"),
    Case("certify-norm-l3", certify("--norm", "l3"), "argument --norm: invalid choice: 'l3'"),
    Case("certify-loss-dlr", certify("--loss", "dlr"), "argument --loss: invalid choice: 'dlr'"),
    Case("certify-unknown-dataset", certify("--dataset", "builtin:nope"), "nope"),
    Case("certify-model-without-scheme", ("certify", "--model", "nonsense", *OUT), "needs a scheme"),
    Case("certify-device-banana", certify("--device", "banana"), "device 'banana' is not a device"),
    Case("certify-local-hf-text-model", certify(model="hf:{tmp}/m"), "certify works on image models",
         saved(save_tiny_bert)),
    Case("certify-ensemble-spec", certify(model="ensemble:0.5*builtin:digits-cnn,0.5*builtin:digits-cnn"),
         "is a randomized ensemble"),
    Case("certify-timm-dir-names-no-dataset", certify(model="timm:{tmp}/m"), "names no dataset", saved(save_tiny_timm)),
    Case("certify-timm-dir-classes-differ", certify("--dataset", "builtin:digits", model="timm:{tmp}/m"),
         "which has 3 classes", saved(save_tiny_timm)),
    Case("certify-checkpoint-for-builtin", certify("--checkpoint", "w.safetensors"), "applies to timm: models only"),
    Case("certify-no-pretrained-for-builtin", certify("--no-pretrained"),
         "pretrained (False) applies to timm: models only; 'builtin:digits-cnn' would ignore it: drop --no-pretrained"),
    Case("certify-temperature-zero", certify("--temperature", "0"), "argument --temperature"),
    Case("certify-output-is-a-file", ("certify", "--model", "builtin:digits-cnn", "--output", "{tmp}/taken"),
         "is a file, not a directory", lambda work: (work / "taken").write_text("x\n")),
    Case("certify-output-foreign-files", ("certify", "--model", "builtin:digits-cnn", "--output", "{tmp}/theirs"),
         "holds files advsuite certify did not write",
         lambda work: ((work / "theirs").mkdir(), (work / "theirs" / "notes.txt").write_text("mine\n"))),
    Case("certify-output-holds-another-models-certificate", certify("--no-attacks"),
         "holds the certificate of 'builtin:digits-cnn-at' on 'builtin:digits' (test), not of 'builtin:digits-cnn'",
         lambda work: ((work / "out").mkdir(), (work / "out" / "certificate.json").write_text(
             '{"model": "builtin:digits-cnn-at", "dataset": {"spec": "builtin:digits", "split": "test"}}'))),
    Case("certify-output-unreadable-certificate", certify("--no-attacks"), "is not a certificate advsuite can read",
         lambda work: ((work / "out").mkdir(), (work / "out" / "certificate.json").write_text("[1]"))),
]
