"""Bad-input cases: train (see ``test_bad_input.py``).

``advsuite train`` refuses, before it trains or writes anything: flags out of range, knobs of
another method, models it cannot train, data it cannot train on, and output directories that
belong to something else.
"""

from __future__ import annotations

from pathlib import Path

from bad_input_cases import Case
from bad_input_models import as_pickle, bert, timm_dir

def _d_jsonl(work: Path) -> None:
    (work / "d.jsonl").write_text('{"text": "good film", "label": 1}\n{"text": "bad film", "label": 0}\n')


TRAIN = ("train", "--model", "timm:test_resnet", "--dataset", "builtin:digits", "--output", "{tmp}/out")
TEXT = ("train", "--model", "builtin:sentiment-tiny", "--dataset", "builtin:sentiment", "--output", "{tmp}/out")


def foreign_output(work: Path) -> None:
    (work / "out").mkdir()
    (work / "out" / "notes.txt").write_text("mine\n")


def other_run(work: Path) -> None:
    (work / "out").mkdir()
    (work / "out" / "train_run.json").write_text('{"config": {"method": "mart"}}\n')


def output_file(work: Path) -> None:
    (work / "out").write_text("a file\n")


def text_recipe(model: str, extra: str = "", task: str = ""):
    """Setup: ``r.yaml`` with one DeepWordBug task on ``model`` over built-in sentiment."""
    def setup(work: Path) -> None:
        (work / "r.yaml").write_text(f"name: bad\n{extra}tasks:\n  - name: t\n    model: '{model}'\n"
                                     f"    dataset: {{spec: builtin:sentiment, n: 4}}\n    attacks: [deepwordbug]\n{task}")
    return setup


RUN = ("run", "{tmp}/r.yaml", "--output", "{tmp}/out")


def csv_data(work: Path) -> None:
    (work / "data.csv").write_text("text,label\nhello,0\nworld,1\n")


#: Training has no --allow-pickle: the loaders' remedy (pass --allow-pickle) was said to it.
NO_PICKLE = "advsuite train starts only from safetensors weights (it has no --allow-pickle)"

CASES: list[Case] = [
    Case("train-one-file-val-split", ("train", "--model", "builtin:sentiment-tiny", "--dataset", "hf:{tmp}/d.jsonl",
                                      "--split", "train", "--val-split", "validation", "--output", "{tmp}/out"),
         "--val-split 'validation': dataset 'hf:", _d_jsonl),
    Case("train-hf-pickle-only", ("train", "--model", "hf:{tmp}/m", "--dataset", "builtin:sentiment", "--output",
                                  "{tmp}/out"), NO_PICKLE, bert(safe=False)),
    Case("train-timm-dir-pickle-only", ("train", "--model", "timm:{tmp}/m", "--dataset", "builtin:digits", "--output",
                                        "{tmp}/out"), NO_PICKLE, timm_dir(as_pickle)),
    Case("train-without-model", ("train", "--dataset", "builtin:digits"), "the following arguments are required: --model"),
    Case("train-device-meta", (*TRAIN, "--device", "meta"), "device 'meta' is not a device: use cpu, cuda or "
         "cuda:<index>"),
    Case("train-unknown-method", (*TRAIN, "--method", "free_at"), "argument --method: invalid choice: 'free_at'"),
    Case("train-knob-of-another-method", (*TRAIN, "--method", "pgd_at", "--mu", "2"),
         "training method 'pgd_at': mu: unknown parameter"),
    Case("train-lam-for-beta", (*TRAIN, "--method", "beta_at", "--lam", "5"), "training method 'beta_at': lam"),
    Case("train-eps-negative", (*TRAIN, "--eps", "-0.1"), "argument --eps: expected a finite number >= 0, got '-0.1'"),
    Case("train-eps-nan", (*TRAIN, "--eps", "nan"), "argument --eps: expected a finite number >= 0, got 'nan'"),
    Case("train-epochs-zero", (*TRAIN, "--epochs", "0"), "argument --epochs: expected a positive integer, got '0'"),
    Case("train-epochs-huge", (*TRAIN, "--epochs", "100000000"), "epochs"),
    Case("train-steps-huge", (*TRAIN, "--steps", "100000"), "steps"),
    Case("train-lr-zero", (*TRAIN, "--lr", "0"), "argument --lr"),
    Case("train-momentum-one", (*TRAIN, "--momentum", "1"), "argument --momentum: expected a number from 0 up to (not including) 1"),
    Case("train-val-fraction-over-one", (*TRAIN, "--val-fraction", "1.5"), "argument --val-fraction"),
    Case("train-input-size-two", (*TRAIN, "--input-size", "32,32"), "expected three positive integers C,H,W"),
    Case("train-model-args-not-json", (*TRAIN, "--model-args", "{{drop_rate: 0.1"), "expected a JSON object"),
    Case("train-unknown-architecture", ("train", "--model", "timm:resnet_does_not_exist", "--dataset", "builtin:digits",
                                        "--output", "{tmp}/out", "--epochs", "1"), "unknown timm model"),
    Case("train-bad-model-args", ("train", "--model", "timm:test_resnet", "--dataset", "builtin:digits", "--output",
                                  "{tmp}/out", "--model-args", '{{"no_such_arg": 1}}'), "cannot build timm model"),
    Case("train-text-model-on-images", ("train", "--model", "builtin:sentiment-tiny", "--dataset", "builtin:digits",
                                        "--output", "{tmp}/out"), "dataset 'builtin:digits' holds image but model 'builtin:sentiment-tiny' takes text"),
    Case("train-image-method-on-text", (*TEXT, "--method", "trades"), "training method 'trades' trains image models"),
    Case("train-text-method-on-image", (*TRAIN, "--method", "ddi_at"), "training method 'ddi_at' trains text models"),
    Case("train-text-knob-of-another-method", (*TEXT, "--method", "pgd_k", "--adversaries", "3"),
         "training method 'pgd_k': adversaries: unknown parameter"),
    Case("train-text-norm", (*TEXT, "--method", "pgd_k", "--norm", "linf"), "training method 'pgd_k': norm: unknown parameter"),
    Case("train-ddi-bad-normalize", (*TEXT, "--method", "ddi_at", "--normalize", "unit"), "argument --normalize: invalid choice"),
    Case("train-ddi-too-many-adversaries", (*TEXT, "--method", "ddi_at", "--adversaries", "50"), "adversaries"),
    Case("train-aug-without-source", (*TEXT, "--method", "aug"), "training method 'aug': source"),
    Case("train-aug-image-source", (*TEXT, "--method", "aug", "--source", "builtin:digits-cnn"),
         "aug: source 'builtin:digits-cnn' is not a text model"),
    Case("train-text-momentum", (*TEXT, "--momentum", "0.5"), "momentum applies to image training (SGD with momentum"),
    Case("train-text-eval-steps", (*TEXT, "--eval-steps", "3"), "eval_steps applies to image training"),
    Case("train-aug-image-attack", (*TEXT, "--method", "aug", "--source", "builtin:sentiment-tiny", "--attack",
                                    "pgd_linf"), "aug: attack 'pgd_linf' works on images; aug adds adversarial texts"),
    Case("train-aug-unknown-attack", (*TEXT, "--method", "aug", "--source", "builtin:sentiment-tiny", "--attack", "dwb"),
         "unknown attack 'dwb'"),
    Case("train-text-fresh-args", (*TEXT, "--num-classes", "3"), "is fine-tuned as it is"),
    Case("train-model-args-checkpoint-path", (*TRAIN, "--model-args", '{{"checkpoint_path": "w.pth"}}'),
         "model_args sets checkpoint_path: timm would read that file itself"),
    Case("train-model-args-unknown-layer", (*TRAIN, "--model-args", '{{"act_layer": "os.system"}}'),
         "cannot build timm model 'test_resnet' with arguments"),
    Case("train-input-size-beyond-memory", (*TRAIN, "--input-size", "3,100000,100000", "--num-classes", "2"),
         "input_size [3, 100000, 100000] is beyond what advsuite takes"),
    Case("recipe-seed-without-sweep", RUN, "task 't' names {seed}: add sweep",
         text_recipe("builtin:sentiment-base-s{seed}")),
    Case("recipe-seed-without-model", RUN, "unknown built-in model 'sentiment-base-s7'",
         text_recipe("builtin:sentiment-base-s{seed}", extra="sweep: {seeds: [7]}\n")),
    Case("recipe-temperature-zero", RUN, "temperatures must be finite and > 0",
         text_recipe("builtin:sentiment-tiny", task="    temperatures: [0, 1]\n")),
    Case("recipe-temperature-twice", RUN, "temperature listed twice",
         text_recipe("builtin:sentiment-tiny", task="    temperatures: [1, 1.0]\n")),
    Case("recipe-platt-unknown-kind", RUN, "Input should be 'none', 'cal', 'opt' or 'platt'",
         text_recipe("builtin:sentiment-tiny", task="    adversary: {kinds: [none, vector]}\n")),
    Case("train-text-dataset", ("train", "--model", "timm:test_resnet", "--dataset", "builtin:sentiment", "--output",
                                "{tmp}/out"), "holds text"),
    Case("train-unknown-dataset", ("train", "--model", "timm:test_resnet", "--dataset", "builtin:cifar", "--output",
                                   "{tmp}/out"), "unknown built-in dataset 'cifar'"),
    Case("train-missing-split", (*TRAIN, "--split", "validation"), "builtin:digits has no split 'validation'"),
    Case("train-fresh-without-size", ("train", "--model", "timm:test_resnet", "--dataset", "{tmp}/data.csv",
                                      "--output", "{tmp}/out"), "needs --input-size C,H,W and --num-classes", csv_data),
    Case("train-fine-tune-with-size", ("train", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits",
                                       "--input-size", "1,32,32", "--output", "{tmp}/out"), "is fine-tuned as it is"),
    Case("train-output-foreign", TRAIN, "holds files of no training run ('notes.txt')", foreign_output),
    Case("train-output-other-run", TRAIN, "holds another training run", other_run),
    Case("train-output-is-file", TRAIN, "is a file, not a directory", output_file),
    Case("train-bad-device", (*TRAIN, "--device", "tpu"), "device 'tpu'"),
    Case("train-model-args-num-classes", (*TRAIN, "--model-args", '{{"num_classes": 5}}'),
         "model_args sets num_classes, which the suite sets itself: use --num-classes instead"),
    Case("train-model-args-in-chans", (*TRAIN, "--model-args", '{{"in_chans": 3}}'),
         "model_args sets in_chans, which the suite sets itself: use --input-size instead"),
]
