"""Bad-input cases: models (see ``test_bad_input.py``).

Model directories and checkpoints that are pickled, corrupt, malformed or missing; options that
do not apply to the model; devices that do not exist. Each must fail while the model loads,
before the output directory is made.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path

import torch

from bad_input_cases import Case
from tiny_models import edit_json, relabel_hf_config, save_safetensors, save_tiny_bert, save_tiny_timm, tiny_timm, truncate

OUT = ("--output", "{tmp}/out")


def hf(*extra: str) -> tuple[str, ...]:
    """``evaluate`` argv for the hf model directory ``{tmp}/m`` on the sentiment set."""
    return ("evaluate", "--model", "hf:{tmp}/m", "--dataset", "builtin:sentiment", *OUT, *extra)


def timm(*extra: str, model: str = "timm:{tmp}/m") -> tuple[str, ...]:
    """``evaluate`` argv for a timm model (default the directory ``{tmp}/m``) on the digits set."""
    return ("evaluate", "--model", model, "--dataset", "builtin:digits", *OUT, *extra)


def bert(*, safe: bool = True, labels: tuple[str, ...] = ("negative", "positive"),
         then: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    """Setup: a tiny BERT in ``m/``, then ``then(m)`` to damage it."""
    def setup(work: Path) -> None:
        directory = save_tiny_bert(work / "m", safe=safe, labels=labels)
        if then is not None:
            then(directory)
    return setup


def remote_code(directory: Path) -> None:
    """A model whose config asks for code of its own, which would leave a mark if it ran."""
    (directory / "evil.py").write_text("import pathlib\npathlib.Path(__file__).with_name('RAN').touch()\n"
                                       "from transformers import BertConfig as Cfg, BertForSequenceClassification as M\n")
    edit_json(directory / "config.json", model_type="evil-bert",  # no class of transformers' own to fall back on
              auto_map={"AutoConfig": "evil.Cfg", "AutoModelForSequenceClassification": "evil.M"})


def timm_dir(then: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    """Setup: a tiny timm model directory in ``m/``, then ``then(m)`` to damage it."""
    def setup(work: Path) -> None:
        save_tiny_timm(work / "m")
        if then is not None:
            then(work / "m")
    return setup


def config_json(**changes) -> Callable[[Path], None]:
    """Setup: a timm directory whose config.json has ``changes``."""
    return timm_dir(lambda directory: edit_json(directory / "config.json", **changes))


def write(name: str, data: bytes) -> Callable[[Path], None]:
    """Damage: replace file ``name`` of the model directory by ``data``."""
    return lambda directory: (directory / name).write_bytes(data)


def as_pickle(directory: Path) -> None:
    """Damage: a timm directory whose only weights are a pickled pytorch_model.bin."""
    (directory / "model.safetensors").unlink()
    torch.save(tiny_timm(3).state_dict(), directory / "pytorch_model.bin")


def checkpoint(work: Path) -> None:
    """Setup: a 3-class test_resnet checkpoint, ``c.safetensors``."""
    save_safetensors(work / "c.safetensors", tiny_timm(3).state_dict())


def pickled_checkpoint(work: Path) -> None:
    """Setup: the same checkpoint pickled, ``c.pt``."""
    torch.save(tiny_timm(3).state_dict(), work / "c.pt")


class _Exploit:
    """Unpickling this would run ``touch``: a malicious checkpoint."""

    def __reduce__(self):
        return (Path.touch, (Path("pwned"),))


def evil_checkpoint(work: Path) -> None:
    """Setup: a pickle that runs code when loaded without weights_only, ``evil.pt``."""
    (work / "evil.pt").write_bytes(pickle.dumps({"fc.weight": _Exploit()}))


def one_channel_checkpoint(work: Path) -> None:
    """Setup: a test_resnet checkpoint for 1-channel inputs, ``c.safetensors``."""
    save_safetensors(work / "c.safetensors", tiny_timm(3, in_chans=1).state_dict())


def _vit(directory: Path) -> None:
    """A transformers image classifier (a tiny ViT)."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=8, patch_size=4, num_channels=1, hidden_size=8, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=8, num_labels=2)
    ViTForImageClassification(config).save_pretrained(directory)


NOT_TIMM = "applies to timm: models only"


def transfer_recipe(source: str, then: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    """Setup: ``r.yaml``, a good first task, then one scoring texts crafted on ``source``; then
    ``then(work)``. The source is found bad while the tasks are prepared, before the first runs
    (it had been found only when its own task ran, after the tasks before it)."""
    def setup(work: Path) -> None:
        task = "    model: builtin:sentiment-tiny\n    dataset: {spec: builtin:sentiment, n: 4}\n"
        (work / "r.yaml").write_text(
            f"name: r\ntasks:\n  - name: first\n{task}    attacks: [deepwordbug]\n  - name: second\n{task}"
            f"    attacks: [{{name: transfer, source: '{source}', attack: deepwordbug}}]\n")
        if then is not None:
            then(work)
    return setup

CASES: list[Case] = [
    # Pickles: refused without --allow-pickle, and read with weights_only=True with it.
    Case("model-hf-pickle-only", hf(), "--allow-pickle", bert(safe=False)),
    Case("model-timm-dir-model-args-pretrained", timm(), "model_args sets pretrained: the directory's own weights "
         "are the model's", config_json(model_args={"pretrained": True})),
    Case("model-timm-dir-pickle-only", timm(), "--allow-pickle", timm_dir(as_pickle)),
    Case("model-timm-dir-crop-pct-over-1", timm(), "crop_pct must be a number in (0, 1], got 1.5",
         timm_dir(lambda d: edit_json(d / "config.json", pretrained_cfg={
             **json.loads((d / "config.json").read_text())["pretrained_cfg"], "crop_pct": 1.5}))),
    Case("model-timm-dir-border-crop", timm(), "timm's 'border' mode, which pads, is not implemented",
         timm_dir(lambda d: edit_json(d / "config.json", pretrained_cfg={
             **json.loads((d / "config.json").read_text())["pretrained_cfg"], "crop_mode": "border"}))),
    Case("model-hf-image-classifier", hf(), "is an image classifier (ViTForImageClassification): hf: serves text "
         "classifiers", lambda work: _vit(work / "m")),
    # Heads whose prediction is no argmax over classes: a regression, independent sigmoids, one output.
    Case("model-hf-regression-head", hf(), "is a regression model (1 output(s)): advsuite evaluates single-label "
         "classifiers", bert(labels=("score",))),
    Case("model-hf-multi-label-head", hf(), "is a multi-label-classification model (2 output(s), problem_type "
         "multi_label_classification)", bert(then=lambda d: edit_json(d / "config.json",
                                                                   problem_type="multi_label_classification"))),
    Case("model-timm-dir-one-class", timm(), "has 1 class(es): robust accuracy needs a classifier over at least 2 "
         "classes", lambda work: save_tiny_timm(work / "m", num_classes=1)),
    Case("model-timm-checkpoint-pickle", timm("--checkpoint", "{tmp}/c.pt", model="timm:test_resnet"),
         "c.pt' is a pickle", pickled_checkpoint),
    Case("model-timm-checkpoint-evil-pickle",
         timm("--checkpoint", "evil.pt", "--allow-pickle", model="timm:test_resnet"),
         "with torch.load(weights_only=True)", evil_checkpoint),
    # A device is not a missing file (it was said to be).
    Case("model-timm-checkpoint-device", timm("--checkpoint", "/dev/null", model="timm:test_resnet"),
         "checkpoint '/dev/null' is not a regular file (a device, pipe or socket)"),
    # Corrupt safetensors.
    Case("model-hf-truncated-safetensors", hf(), "is not a valid safetensors file",
         bert(then=lambda d: truncate(d / "model.safetensors"))),
    Case("model-hf-garbage-safetensors", hf(), "is not a valid safetensors file",
         bert(then=write("model.safetensors", b"\x00garbage" * 8))),
    Case("model-timm-truncated-safetensors", timm(), "is not a valid safetensors file",
         timm_dir(lambda d: truncate(d / "model.safetensors"))),
    Case("model-timm-empty-safetensors", timm(), "is not a valid safetensors file",
         timm_dir(write("model.safetensors", b""))),
    # hf directories that do not hold a model, or disagree with their weights.
    Case("model-hf-labels-disagree-with-weights", hf(), "its config has 3 labels but the weights' classifier has 2",
         bert(then=lambda d: relabel_hf_config(d, ("a", "b", "c")))),
    # Two labels and two positions: the embedding's size is not the label count (it was said to be).
    Case("model-hf-positions-disagree-with-weights", hf(),
         "the weights do not fit the model its config.json describes: Embedding weight has shape (16, 8) in the "
         "weights, (2, 8) in the model", bert(then=lambda d: edit_json(d / "config.json", max_position_embeddings=2))),
    Case("model-hf-no-config", hf(), "has no config.json", bert(then=lambda d: (d / "config.json").unlink())),
    Case("model-hf-garbage-config", hf(), "config.json' is not valid JSON", bert(then=write("config.json", b"{not json"))),
    Case("model-hf-no-weights", hf(), "holds no weights", bert(then=lambda d: (d / "model.safetensors").unlink())),
    Case("model-hf-config-list", hf(), "config.json' holds a JSON list, not a mapping",
         bert(then=write("config.json", b"[]"))),
    Case("model-hf-tokenizer-unreadable", hf(), "cannot load the tokenizer of hf model",
         bert(then=write("tokenizer.json", b'{"a": 1}'))),
    # Missing local directories: a path is never mistaken for a Hub id or an architecture.
    Case("model-hf-missing-dir", ("evaluate", "--model", "hf:./nope", "--dataset", "builtin:sentiment", *OUT),
         "model directory './nope' does not exist"),
    Case("model-hf-missing-dir-no-dataset", ("evaluate", "--model", "hf:./nope", *OUT),
         "model directory './nope' does not exist"),
    Case("model-timm-missing-dir", timm(model="timm:./nope"), "model directory './nope' does not exist"),
    Case("model-timm-missing-nested-dir", timm(model="timm:models/nope"), "model directory 'models/nope' does not exist"),
    Case("model-timm-file-not-dir", timm(model="timm:c.safetensors"), "is a file, not a model directory", checkpoint),
    # Malformed timm config.json.
    Case("model-timm-config-list", timm(), "holds a JSON list, not a mapping",
         timm_dir(write("config.json", b"[1, 2, 3]"))),
    Case("model-timm-config-binary", timm(), "needs a config.json", timm_dir(write("config.json", b"\xff\xfe\x00"))),
    Case("model-timm-config-arch-number", timm(), "architecture: Input should be a valid string",
         config_json(architecture=18)),
    Case("model-timm-config-unknown-arch", timm(), "unknown timm model 'resnet_nope'",
         config_json(architecture="resnet_nope")),
    Case("model-timm-config-pretrained-cfg-string", timm(), "pretrained_cfg: Input should be a valid dictionary",
         config_json(pretrained_cfg="imagenet")),
    Case("model-timm-config-mean-length", timm(), "pretrained_cfg.mean has 1 values for 3 channel(s)",
         config_json(pretrained_cfg={"input_size": [3, 24, 24], "mean": [0.5], "std": [0.2, 0.2, 0.2]})),
    Case("model-timm-config-std-zero", timm(), "pretrained_cfg.std.0: Input should be greater than 0",
         config_json(pretrained_cfg={"input_size": [3, 24, 24], "mean": [0.5] * 3, "std": [0, 0.2, 0.2]})),
    Case("model-timm-config-std-nan", timm(), "pretrained_cfg.std.2: Input should be a finite number",
         timm_dir(write("config.json", json.dumps({"architecture": "test_resnet", "num_classes": 3, "pretrained_cfg": {
             "input_size": [3, 24, 24], "mean": [0.5] * 3, "std": [0.2, 0.2, float("nan")]}}).encode()))),
    Case("model-timm-config-model-args-list", timm(), "model_args: Input should be a valid dictionary",
         config_json(model_args=["in_chans", 3])),
    Case("model-timm-config-model-args-unknown", timm(), "cannot build timm model 'test_resnet' with arguments",
         config_json(model_args={"no_such_argument": 1})),
    Case("model-timm-config-num-classes-zero", timm(), "num_classes: Input should be greater than 0",
         config_json(num_classes=0)),
    Case("model-timm-config-num-classes-string", timm(), "num_classes: Input should be a valid integer",
         config_json(num_classes="3")),
    Case("model-timm-config-num-classes-vs-weights", timm(), "set num_classes to 3 in",
         config_json(num_classes=7, label_names=None)),
    # timm:<architecture> --checkpoint.
    Case("model-timm-checkpoint-num-classes-mismatch",
         timm("--checkpoint", "{tmp}/c.safetensors", "--num-classes", "5", model="timm:test_resnet"),
         "fc.weight has shape (3, 96) in the checkpoint, (5, 96) in the model; pass --num-classes 3", checkpoint),
    Case("model-timm-checkpoint-other-architecture",
         timm("--checkpoint", "{tmp}/c.safetensors", model="timm:test_resnet"),
         "does not fit timm:test_resnet", one_channel_checkpoint),
    Case("model-timm-checkpoint-missing", timm("--checkpoint", "{tmp}/none.safetensors", model="timm:test_resnet"),
         "none.safetensors' does not exist"),
    Case("model-timm-num-classes-on-pretrained", timm("--num-classes", "10", model="timm:test_resnet"),
         "untrained classifier head"),
    # Options the model would ignore.
    Case("model-checkpoint-for-builtin",
         ("evaluate", "--model", "builtin:digits-cnn", "--checkpoint", "{tmp}/c.safetensors", *OUT), NOT_TIMM,
         checkpoint),
    Case("model-checkpoint-for-hf", hf("--checkpoint", "{tmp}/c.safetensors"), NOT_TIMM, checkpoint),
    Case("model-num-classes-for-hf", hf("--num-classes", "2"), NOT_TIMM),
    Case("model-hf-remote-code-not-trusted", hf(), "runs code of its own (auto_map), which advsuite does not run "
         "unless asked: read that code, then pass --trust-remote-code", bert(then=remote_code)),
    Case("model-revision-for-builtin", ("evaluate", "--model", "builtin:digits-cnn", "--revision", "v999", *OUT),
         "revision 'v999' does not apply to 'builtin:digits-cnn', which is at 'v2'"),
    Case("model-revision-for-timm-name", timm("--revision", "zzz", model="timm:test_resnet"),
         "revision 'zzz' does not apply to 'timm:test_resnet': timm loads a model name's weights"),
    Case("model-revision-for-timm-dir", timm("--revision", "zzz"), "revision 'zzz' does not apply to 'timm:", timm_dir()),
    Case("data-config-for-builtin", ("evaluate", "--model", "builtin:digits-cnn", "--dataset", "builtin:digits",
                                     "--dataset-config", "bogus", *OUT),
         "config apply to hf: datasets; builtin:digits has one configuration and revision"),
    # Devices.
    Case("model-device-banana", ("evaluate", "--model", "builtin:digits-cnn", "--device", "banana", *OUT),
         "device 'banana' is not a device"),
    Case("model-device-cuda-99", ("evaluate", "--model", "builtin:digits-cnn", "--device", "cuda:99", *OUT),
         "device 'cuda:99'"),
    Case("model-timm-config-input-size-huge", timm(), "pretrained_cfg.input_size [3, 100000, 100000] is beyond what",
         config_json(pretrained_cfg={"input_size": [3, 100000, 100000]})),
    Case("model-timm-config-label-names-twice", timm(), "label_names names a class twice",
         config_json(label_names=["a", "b", "a"])),
    # A transfer source that is missing, or whose classes are not the evaluated model's (its 3
    # classes against sentiment-tiny's 2: each text aimed at one class would be scored on another).
    Case("model-transfer-source-missing", ("run", "{tmp}/r.yaml", *OUT), "task 'second': model directory",
         transfer_recipe("hf:./nope")),
    Case("model-transfer-source-other-classes", ("run", "{tmp}/r.yaml", *OUT),
         "has the classes (neg, neu, pos) and 'builtin:sentiment-tiny' the classes (negative, positive)",
         transfer_recipe("hf:./m", lambda work: save_tiny_bert(work / "m"))),
    Case("model-path-component-too-long", ("evaluate", "--model", "hf:{tmp}/" + "a" * 300, "--dataset", "builtin:digits"),
         "is too long (a name over 255 bytes"),
]
