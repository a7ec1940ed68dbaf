"""The model interface: hf:/timm: adapters on locally saved models, temperature, built-ins."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from suite.errors import ConfigError, SuiteError
from suite.models import ModelConfig, load_model
from tiny_models import (edit_json, relabel_hf_config, save_safetensors, save_tiny_bert, save_tiny_timm, tiny_timm,
                         truncate)


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory):
    """A tiny BERT classifier + tokenizer written with save_pretrained, as a Hub repo would be."""
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def test_hf_local_dir_loads_like_a_hub_model(tiny_bert_dir):
    assert (tiny_bert_dir / "model.safetensors").exists()
    model = load_model(f"hf:{tiny_bert_dir}")
    assert model.modality == "text"
    assert model.labels == ["neg", "neu", "pos"] and model.num_classes == 3
    logits = model.logits(["good movie", "a very long plot that is bad"])
    assert logits.shape == (2, 3) and logits.dtype == torch.float32
    assert not logits.requires_grad
    assert model.info.revision.startswith("local-")


def test_hf_dynamic_padding_pads_to_longest_not_max_length(tiny_bert_dir):
    model = load_model(f"hf:{tiny_bert_dir}")
    short = model.tokenize(["good", "bad movie"])
    assert short["input_ids"].shape == (2, 4)  # [CLS] bad movie [SEP]
    long = model.tokenize(["good " * 40])
    assert long["input_ids"].shape[1] == 16  # truncated to the model's limit


def test_hf_logits_do_not_depend_on_batch_padding(tiny_bert_dir):
    model = load_model(f"hf:{tiny_bert_dir}")
    alone = model.logits(["good movie"])
    padded = model.logits(["good movie", "a very long plot a very long plot"])[:1]
    torch.testing.assert_close(alone, padded, atol=1e-5, rtol=1e-5)


def test_hf_missing_model_is_a_one_line_error(tmp_path):
    with pytest.raises(SuiteError, match="cannot load hf model"):
        load_model("hf:no-such-org/no-such-model-xyz")


def _timm_reference(tmp_path):
    import timm

    from suite.models.timm_dir import save_timm_dir

    torch.manual_seed(0)
    net = timm.create_model("test_resnet", num_classes=3, in_chans=3).eval()
    save_timm_dir(tmp_path / "timm-dir", net, "test_resnet", input_size=(3, 24, 24), mean=(0.4, 0.5, 0.6),
                  std=(0.2, 0.25, 0.3), label_names=["cat", "dog", "fox"])
    return net


def test_timm_dir_normalises_inside_the_wrapper(tmp_path):
    net = _timm_reference(tmp_path)
    model = load_model(f"timm:{tmp_path / 'timm-dir'}")
    assert model.modality == "image" and model.input_size == (3, 24, 24)
    assert model.labels == ["cat", "dog", "fox"]
    x = torch.rand(4, 3, 24, 24)
    mean = torch.tensor([0.4, 0.5, 0.6]).view(1, 3, 1, 1)
    std = torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = net((x - mean) / std)
    torch.testing.assert_close(model.logits(x), expected)
    x.requires_grad_(True)
    model.logits(x, grad=True).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_timm_name_with_checkpoint_reads_its_class_count(tmp_path):
    net = _timm_reference(tmp_path)
    checkpoint = tmp_path / "timm-dir" / "model.safetensors"
    model = load_model(ModelConfig(spec="timm:test_resnet", checkpoint=str(checkpoint)))
    assert model.num_classes == 3 and model.labels == ["class_0", "class_1", "class_2"]
    x = torch.rand(2, *model.input_size)
    with torch.no_grad():
        torch.testing.assert_close(model.logits(x), net((x - model.mean.cpu()) / model.std.cpu()))
    assert model.info.revision.startswith("local-")
    same = load_model(ModelConfig(spec="timm:test_resnet", checkpoint=str(checkpoint), num_classes=3))
    assert same.num_classes == 3


def test_timm_checkpoint_class_mismatch_is_one_line_with_the_fix(tmp_path):
    _timm_reference(tmp_path)
    checkpoint = tmp_path / "timm-dir" / "model.safetensors"
    with pytest.raises(ConfigError) as caught:
        load_model(ModelConfig(spec="timm:test_resnet", checkpoint=str(checkpoint), num_classes=5))
    assert str(caught.value) == (
        f"checkpoint {str(checkpoint)!r} does not fit timm:test_resnet: fc.weight has shape (3, 96) in the "
        "checkpoint, (5, 96) in the model; pass --num-classes 3"
    )


def test_timm_checkpoint_of_integer_weights_is_refused_not_cast(tmp_path):
    """int32 or bool tensors of the right shapes were cast into the float weights: 0 % silently."""
    from safetensors.torch import load_file

    _timm_reference(tmp_path)
    checkpoint = tmp_path / "timm-dir" / "model.safetensors"
    state = load_file(checkpoint)
    state["fc.weight"] = state["fc.weight"].to(torch.int32)
    broken = save_safetensors(tmp_path / "ints.safetensors", state)
    with pytest.raises(ConfigError, match="fc.weight holds int32 values where the model has floating-point weights"):
        load_model(ModelConfig(spec="timm:test_resnet", checkpoint=str(broken)))


def test_timm_checkpoint_from_another_architecture_names_a_tensor(tmp_path):
    checkpoint = save_safetensors(tmp_path / "one-channel.safetensors", tiny_timm(3, in_chans=1).state_dict())
    with pytest.raises(ConfigError, match=r"conv1.*has shape \(\d+, 1, \d+, \d+\) in the checkpoint"):
        load_model(ModelConfig(spec="timm:test_resnet", checkpoint=str(checkpoint)))
    partial = {k: v for k, v in tiny_timm(3).state_dict().items() if not k.startswith("layer1")}
    checkpoint = save_safetensors(tmp_path / "partial.safetensors", partial)
    with pytest.raises(ConfigError, match=r"tensors missing, 0 unexpected \(e.g. missing 'layer1"):
        load_model(ModelConfig(spec="timm:test_resnet", checkpoint=str(checkpoint)))


def test_num_classes_without_checkpoint_on_pretrained_weights_is_refused():
    with pytest.raises(ConfigError, match="untrained classifier head"):
        load_model(ModelConfig(spec="timm:test_resnet", num_classes=10))
    random = load_model(ModelConfig(spec="timm:test_resnet", num_classes=10, pretrained=False))
    assert random.num_classes == 10


def test_timm_options_are_refused_for_other_schemes():
    from pydantic import ValidationError

    for spec in ("builtin:digits-cnn", "hf:org/model"):
        with pytest.raises(ValidationError, match="checkpoint .'x.safetensors'. applies to timm: models only"):
            ModelConfig(spec=spec, checkpoint="x.safetensors")
        with pytest.raises(ValidationError, match="num_classes .10. applies to timm: models only"):
            ModelConfig(spec=spec, num_classes=10)
    with pytest.raises(ValidationError, match="num_classes"):
        ModelConfig(spec="timm:test_resnet", num_classes=True)


def test_pickled_checkpoints_are_refused_unless_allowed(tmp_path):
    net = tiny_timm(3)
    path = tmp_path / "weights.pt"
    torch.save({"state_dict": {f"module.{k}": v for k, v in net.state_dict().items()}}, path)
    with pytest.raises(ConfigError, match="is a pickle.*--allow-pickle"):
        load_model(ModelConfig(spec="timm:test_resnet", checkpoint=str(path)))
    model = load_model(ModelConfig(spec="timm:test_resnet", checkpoint=str(path), allow_pickle=True))
    assert model.num_classes == 3
    torch.testing.assert_close(model.module.fc.weight, net.fc.weight)


class _Exploit:
    """Unpickling this creates a file: what a malicious checkpoint would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_allowed_pickles_are_still_read_with_weights_only(tmp_path):
    import pickle

    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"fc.weight": _Exploit(marker)}))
    with pytest.raises(ConfigError, match=r"cannot read checkpoint .* with torch.load\(weights_only=True\)"):
        load_model(ModelConfig(spec="timm:test_resnet", checkpoint=str(path), allow_pickle=True))
    assert not marker.exists()


def test_timm_pretrained_weights_that_are_pickles_are_refused_unless_allowed(tmp_path, monkeypatch):
    """timm fetches a name's pretrained weights itself: from a Hub repo without safetensors it
    falls back to pytorch_model.bin and torch.load, and a URL is a .pth. Both are refused before
    anything is unpickled (here the Hub is a stand-in that has no safetensors and a real pickle,
    and the unpickler marks that it ran); with --allow-pickle they load."""
    import timm
    import timm.models._hub as timm_hub
    from huggingface_hub.errors import EntryNotFoundError

    weights = timm.create_model("test_resnet").state_dict()
    pickled = tmp_path / "pytorch_model.bin"
    torch.save(weights, pickled)
    fetched = []

    def hub_download(repo_id, filename=None, *args, **kwargs):
        fetched.append(filename)
        if filename.endswith(".safetensors"):
            raise EntryNotFoundError(f"{repo_id} has no {filename}")
        return str(pickled)

    unpickled = []
    torch_load = timm_hub._torch_load
    monkeypatch.setattr(timm_hub, "hf_hub_download", hub_download)
    monkeypatch.setattr(timm_hub, "_torch_load", lambda *a, **k: unpickled.append(a) or torch_load(*a, **k))
    with pytest.raises(ConfigError, match=r"timm:test_resnet's pretrained weights \(a Hub repo's pickle\) .*"
                                          r"pytorch_model.bin' is a pickle.*--allow-pickle"):
        load_model(ModelConfig(spec="timm:test_resnet"))
    assert fetched and fetched[0].endswith(".safetensors") and not unpickled
    model = load_model(ModelConfig(spec="timm:test_resnet", allow_pickle=True))
    assert unpickled and torch.equal(model.module.state_dict()["fc.weight"], weights["fc.weight"])
    assert timm_hub._torch_load is not torch_load  # the guard put back what it found (the test's spy)
    from suite.models.timm_image import _build

    with pytest.raises(ConfigError, match=r"\(a .pth from a URL\) 'file:///nowhere/w.pth' is a pickle"):
        _build("test_resnet", pretrained=True, pretrained_cfg_overlay={"url": "file:///nowhere/w.pth", "hf_hub_id": None})


@pytest.fixture
def hub_down(monkeypatch):
    """The Hub unreachable (every connection refused), with no offline mode or proxy set: the
    connections tried, as (address, timeout)."""
    import socket

    from suite.models import hub_access

    probed = []

    def unreachable(address, timeout=None):
        probed.append((address, timeout))
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    for name in ("HF_HUB_OFFLINE", "HF_ENDPOINT", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    hub_access.hub_unreachable.cache_clear()
    yield probed
    hub_access.hub_unreachable.cache_clear()


def test_an_hf_model_the_hub_cannot_give_is_one_line_at_once(monkeypatch, hub_down):
    """Offline, huggingface_hub retried each request five times with backoff: about eleven lines
    over 30 s before the error. One probe of the Hub now, and a model not in the cache is
    refused in one line before transformers asks anything (a proxy or offline mode: no probe)."""
    import transformers

    from suite.models import hub_access

    def never(*args, **kwargs):
        raise AssertionError("transformers was asked for a model the Hub cannot give")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", never)
    with pytest.raises(ConfigError, match=r"cannot load hf model 'nobody/nothing-here': it is not in the local "
                                          r"Hugging Face cache, and the Hub \(huggingface.co:443\) cannot be "
                                          r"reached \(Network is unreachable\)"):
        load_model(ModelConfig(spec="hf:nobody/nothing-here"))
    assert hub_down == [(("huggingface.co", 443), hub_access.PROBE_SECONDS)]
    hub_access.hub_unreachable.cache_clear()
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert hub_access.hub_unreachable() is None and len(hub_down) == 1  # behind a proxy: no probe


def test_an_hf_dataset_the_hub_cannot_give_is_one_line_at_once(hub_down, capfd, monkeypatch):
    """Offline, `datasets` asked the Hub through huggingface_hub's retries: 12 lines of stderr
    and 40 s before the one-line error. Where the probe fails, datasets load in offline mode
    (from the cache), and one that is not cached is one line at once, naming why."""
    import time

    import datasets
    import huggingface_hub.constants as hub_constants

    from suite.data.config import DatasetConfig
    from suite.data.load import load_eval_set
    from suite.errors import DataError

    model = load_model(ModelConfig(spec="builtin:sentiment-tiny"))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)  # as outside the tests (conftest sets it)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    before = datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE
    started = time.monotonic()
    with pytest.raises(DataError, match=r"cannot load dataset 'nobody/no-such-dataset' \(split 'test'\): the Hub "
                                        r"\(huggingface.co:443\) cannot be reached \(Network is unreachable\), and "
                                        r"it is not in the local datasets cache"):
        load_eval_set(DatasetConfig(spec="hf:nobody/no-such-dataset", split="test"), model.input_spec, seed=0)
    assert time.monotonic() - started < 20 and "Retry" not in capfd.readouterr().err
    assert hub_down == [(("huggingface.co", 443), 3.0)]
    assert (datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE) == before  # restored


def test_timm_weights_the_hub_cannot_give_load_from_the_cache_or_are_one_line(tmp_path, monkeypatch, hub_down):
    """Offline, timm asked huggingface_hub for pretrained weights, which retried five times: 51 s
    of retry lines before the error. Now the cache's copy loads at once (the safetensors; the
    pickle only with --allow-pickle), and weights that are not cached are refused in one line;
    timm never asks the Hub either way."""
    import huggingface_hub.constants
    import timm
    from safetensors.torch import save_file
    from timm.models import _hub as timm_hub

    def never(*args, **kwargs):
        raise AssertionError("timm asked the Hub for weights it cannot give")

    monkeypatch.setattr(timm_hub, "hf_hub_download", never)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ConfigError, match=r"^cannot fetch pretrained weights for timm model 'test_resnet': "
                                          r"timm/test_resnet.r160_in1k \(model.safetensors\) is not in the local "
                                          r"Hugging Face cache, and the Hub \(huggingface.co:443\) cannot be reached"):
        load_model("timm:test_resnet")
    # The Hub's layout: refs/main names the snapshot that holds the files.
    repo = tmp_path / "hub" / "models--timm--test_resnet.r160_in1k"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    reference = timm.create_model("test_resnet").eval()
    torch.save(reference.state_dict(), snapshot / "pytorch_model.bin")
    with pytest.raises(ConfigError, match="is not in the local"):  # a pickle alone: not without --allow-pickle
        load_model("timm:test_resnet")
    model = load_model(ModelConfig(spec="timm:test_resnet", allow_pickle=True))
    torch.testing.assert_close(model.module.state_dict()["fc.weight"], reference.state_dict()["fc.weight"])
    save_file({key: value.contiguous() for key, value in reference.state_dict().items()},
              str(snapshot / "model.safetensors"))
    model = load_model("timm:test_resnet")
    torch.testing.assert_close(model.module.state_dict()["fc.weight"], reference.state_dict()["fc.weight"])


def test_hf_dir_with_only_a_pickle_is_refused_unless_allowed(tmp_path):
    directory = save_tiny_bert(tmp_path / "pickled", safe=False)
    assert (directory / "pytorch_model.bin").is_file() and not list(directory.glob("*.safetensors"))
    with pytest.raises(ConfigError) as caught:
        load_model(f"hf:{directory}")
    assert "pytorch_model.bin" in str(caught.value) and "--allow-pickle" in str(caught.value)
    assert "unsafe" in str(caught.value)
    model = load_model(ModelConfig(spec=f"hf:{directory}", allow_pickle=True))
    assert model.labels == ["neg", "neu", "pos"]
    reference = load_model(f"hf:{save_tiny_bert(tmp_path / 'safe', safe=True)}")  # same seed, same weights
    torch.testing.assert_close(model.logits(["good movie"]), reference.logits(["good movie"]))


def test_hf_loads_safetensors_only(monkeypatch, tiny_bert_dir):
    from transformers import AutoModelForSequenceClassification

    seen = {}
    original = AutoModelForSequenceClassification.from_pretrained

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(AutoModelForSequenceClassification, "from_pretrained", spy)
    load_model(f"hf:{tiny_bert_dir}")
    assert seen["use_safetensors"] is True


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_safetensors_are_one_line(tmp_path, tiny_bert_dir, damage):
    import shutil

    hf_dir = tmp_path / "hf"
    shutil.copytree(tiny_bert_dir, hf_dir)
    timm_dir = tmp_path / "timm"
    save_tiny_timm(timm_dir)
    for weights in (hf_dir / "model.safetensors", timm_dir / "model.safetensors"):
        if damage == "truncate":
            truncate(weights)
        else:
            weights.write_bytes(b"not safetensors at all" if damage == "garbage" else b"")
    for spec, weights in ((f"hf:{hf_dir}", hf_dir / "model.safetensors"),
                          (f"timm:{timm_dir}", timm_dir / "model.safetensors")):
        with pytest.raises(ConfigError, match=f"weights file '{weights}' is not a valid safetensors file"):
            load_model(spec)


def test_hf_label_count_that_disagrees_with_the_weights_is_one_line(tmp_path):
    directory = save_tiny_bert(tmp_path / "m", labels=("neg", "pos"))
    relabel_hf_config(directory, ("a", "b", "c"))
    with pytest.raises(ConfigError, match="its config has 3 labels but the weights' classifier has 2"):
        load_model(f"hf:{directory}")


@pytest.mark.parametrize("scheme", ["hf", "timm"])
def test_missing_local_dirs_are_named(tmp_path, monkeypatch, scheme):
    monkeypatch.chdir(tmp_path)
    for name in ("./nope", str(tmp_path / "nope"), "~/surely-not-here-advsuite", "a/b/c"):
        with pytest.raises(ConfigError, match=f"model directory '{name}' does not exist"):
            load_model(f"{scheme}:{name}")
    (tmp_path / "file.safetensors").write_bytes(b"x")
    with pytest.raises(ConfigError, match="is a file, not a model directory"):
        load_model(f"{scheme}:file.safetensors")


def test_missing_local_dir_is_named_before_looking_for_a_model_card(tmp_path):
    from suite.models.card import default_dataset

    with pytest.raises(ConfigError, match="does not exist"):
        default_dataset(f"hf:{tmp_path / 'nope'}")
    assert default_dataset("builtin:digits-cnn") == ("builtin:digits", "the built-in model's training set")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"architecture": 3}, "architecture: Input should be a valid string"),
        ({"architecture": ""}, "architecture: String should have at least 1 character"),
        ({"pretrained_cfg": "imagenet"}, "pretrained_cfg: Input should be a valid dictionary"),
        ({"pretrained_cfg": {"input_size": [3, 24, 24], "mean": [0.5], "std": [0.2, 0.2, 0.2]}},
         "pretrained_cfg.mean has 1 values for 3 channel(s)"),
        ({"pretrained_cfg": {"input_size": [3, 24, 24], "mean": ["a", 0, 0], "std": [0.2, 0.2, 0.2]}},
         "pretrained_cfg.mean.0: Input should be a valid number"),
        ({"pretrained_cfg": {"input_size": [3, 24, 24], "mean": [0, 0, 0], "std": [0.2, 0, 0.2]}},
         "pretrained_cfg.std.1: Input should be greater than 0"),
        ({"pretrained_cfg": {"input_size": [3, 24], "mean": [0, 0, 0], "std": [1, 1, 1]}},
         "pretrained_cfg.input_size"),
        ({"model_args": [1, 2]}, "model_args: Input should be a valid dictionary"),
        ({"model_args": {"no_such_argument": 1}}, "cannot build timm model 'test_resnet' with arguments"),
        ({"num_classes": 0}, "num_classes: Input should be greater than 0"),
        ({"num_classes": "3"}, "num_classes: Input should be a valid integer"),
        ({"num_classes": 2.5}, "num_classes: Input should be a valid integer"),
        ({"num_classes": 5, "label_names": None},
         "fc.weight has shape (3, 96) in the checkpoint, (5, 96) in the model; set num_classes to 3 in"),
        ({"label_names": ["a", "b"]}, "label_names has 2 names for 3 classes"),
        ({"in_chans": 1}, "pretrained_cfg.input_size has 3 channels but in_chans is 1"),
    ],
)
def test_malformed_timm_config_is_one_line(tmp_path, changes, message):
    directory = tmp_path / "timm"
    save_tiny_timm(directory)
    edit_json(directory / "config.json", **changes)
    with pytest.raises(ConfigError) as caught:
        load_model(f"timm:{directory}")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_timm_config_that_is_not_a_mapping(tmp_path):
    directory = tmp_path / "timm"
    save_tiny_timm(directory)
    (directory / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="holds a JSON list, not a mapping"):
        load_model(f"timm:{directory}")
    (directory / "config.json").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(ConfigError, match="needs a config.json"):
        load_model(f"timm:{directory}")


def test_timm_dir_with_only_a_pickle_is_refused_unless_allowed(tmp_path):
    directory = tmp_path / "timm"
    net = save_tiny_timm(directory)
    (directory / "model.safetensors").unlink()
    torch.save(net.state_dict(), directory / "pytorch_model.bin")
    with pytest.raises(ConfigError, match="pytorch_model.bin' is a pickle.*--allow-pickle"):
        load_model(f"timm:{directory}")
    model = load_model(ModelConfig(spec=f"timm:{directory}", allow_pickle=True))
    torch.testing.assert_close(model.module.fc.weight, net.fc.weight)


def test_local_revision_is_a_content_hash(tmp_path):
    from suite.models.base import local_revision

    directory = tmp_path / "timm"
    save_tiny_timm(directory, seed=0)
    first = load_model(f"timm:{directory}").info.revision
    assert load_model(f"timm:{directory}").info.revision == first
    save_tiny_timm(directory, seed=1)  # retrained in place: same names and sizes, other values
    assert load_model(f"timm:{directory}").info.revision != first
    (directory / "README.md").write_text("docs do not decide outputs")
    assert local_revision(directory) == load_model(f"timm:{directory}").info.revision
    assert local_revision(directory / "model.safetensors") != local_revision(directory)
    bert = save_tiny_bert(tmp_path / "bert", seed=0)
    before = load_model(f"hf:{bert}").info.revision
    save_tiny_bert(bert, seed=1)
    assert load_model(f"hf:{bert}").info.revision != before


def test_devices_are_checked_in_one_line():
    from pydantic import ValidationError

    from suite.models.base import resolve_device

    for bad in ("banana", "cuda:x", "gpu", ""):
        with pytest.raises(ValidationError, match="is not a device"):
            ModelConfig(spec="builtin:digits-cnn", device=bad)
    with pytest.raises(ConfigError, match="'banana' is not a device"):
        resolve_device("banana")
    assert resolve_device("cpu") == torch.device("cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(ConfigError, match="device 'cuda:99'"):
        load_model(ModelConfig(spec="builtin:digits-cnn", device="cuda:99"))
    if count == 0:
        with pytest.raises(ConfigError, match="CUDA is not available on this machine"):
            resolve_device("cuda")
    else:
        assert resolve_device(f"cuda:{count - 1}").type == "cuda"
        with pytest.raises(ConfigError, match=f"this machine has {count} CUDA device"):
            resolve_device(f"cuda:{count}")


def test_unknown_timm_model_is_a_one_line_error():
    with pytest.raises(SuiteError, match="unknown timm model 'resnet_does_not_exist'"):
        load_model(ModelConfig(spec="timm:resnet_does_not_exist", pretrained=False))


def test_unknown_scheme_and_builtin_are_named():
    with pytest.raises(SuiteError, match="Did you mean: hf"):
        load_model("hff:bert")
    with pytest.raises(SuiteError, match="Did you mean: digits-cnn"):
        load_model("builtin:digits-cn")


def test_temperature_scales_logits_and_keeps_predictions(sentiment_model, digits_model, digits_examples):
    from suite.models.temperature import TemperatureScaled

    texts = ["I loved this film.", "The service was awful and slow."]
    for temperature in (0.005, 2e6):
        scaled = TemperatureScaled(sentiment_model, temperature)
        torch.testing.assert_close(scaled.logits(texts), sentiment_model.logits(texts) / temperature)
        assert scaled.info.name == f"builtin:sentiment-tiny@T={temperature:g}"
    images = torch.stack([ex.input for ex in digits_examples[:32]])
    hot = load_model(ModelConfig(spec="builtin:digits-cnn", temperature=0.005))
    assert torch.equal(hot.predict(images), digits_model.predict(images))
    assert hot.info.temperature == 0.005 and hot.input_size == digits_model.input_size


def test_builtin_models_are_accurate_and_cached(sentiment_model, digits_model, digits_examples):
    from suite.data.builtin import sentiment

    test = sentiment("test")
    text_accuracy = (sentiment_model.predict(test.inputs) == torch.tensor(test.labels)).float().mean().item()
    # Well above chance (0.5) on 120 held-out sentences: 80/120 = 66.7% with torch 2.14.1 and the
    # pinned training kernels (one thread, AVX2), on any machine; other torch builds may differ.
    assert text_accuracy >= 0.65
    images = torch.stack([ex.input for ex in digits_examples])
    labels = torch.tensor([ex.label for ex in digits_examples])
    assert (digits_model.predict(images) == labels).float().mean().item() >= 0.95
    # Loaded back from the cache, through the hf:/timm: directory code, identically.
    again = load_model("builtin:digits-cnn")
    torch.testing.assert_close(again.logits(images[:8]), digits_model.logits(images[:8]))
    from pathlib import Path

    assert (Path(digits_model.info.extra["path"]) / "model.safetensors").is_file()
    assert (Path(sentiment_model.info.extra["path"]) / "model.safetensors").is_file()


def test_hf_tokenizer_without_pad_token_still_batches(tiny_bert_dir, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    tokenizer.pad_token = None
    tokenizer.eos_token = "[SEP]"
    copy = tmp_path / "no-pad"
    import shutil

    shutil.copytree(tiny_bert_dir, copy)
    tokenizer.save_pretrained(copy)
    model = load_model(f"hf:{copy}")
    assert model.logits(["good", "a very long plot"]).shape == (2, 3)


def test_pinned_training_restores_threads_and_determinism():
    from suite.models.builtin_cache import TRAIN_THREADS, pinned_training

    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    state = torch.random.get_rng_state()
    with pinned_training():
        assert torch.get_num_threads() == TRAIN_THREADS
        assert torch.are_deterministic_algorithms_enabled()
        first = torch.rand(3)
    with pinned_training():
        assert torch.equal(torch.rand(3), first)  # the seed is fixed, not inherited
    assert torch.get_num_threads() == threads
    assert torch.are_deterministic_algorithms_enabled() == deterministic
    assert torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.slow
def test_builtin_weights_do_not_depend_on_threads_or_cpu_features(sentiment_model, tmp_path):
    """Retrained from scratch under another thread count and without vector kernels: the same weights."""
    import os
    import subprocess
    import sys

    script = "from suite.models import load_model; print(load_model('builtin:sentiment-tiny').weights_hash())"
    env = {**os.environ, "ADVSUITE_CACHE": str(tmp_path), "OMP_NUM_THREADS": "2", "ATEN_CPU_CAPABILITY": "default"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert (tmp_path / "models" / f"sentiment-tiny-{sentiment_model.info.revision}" / "DONE").is_file()
    assert done.stdout.split()[-1] == sentiment_model.weights_hash()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("config.json", b"[]", "config.json' holds a JSON list, not a mapping"),
        ("config.json", b'{"model_type": "no-such-type"}', "cannot load hf model"),
        ("tokenizer.json", b"{garbage", "tokenizer.json' is not valid JSON"),
        ("tokenizer.json", b'{"a": 1}', "cannot load the tokenizer of hf model"),
        ("tokenizer_config.json", b"[1]", "tokenizer_config.json' holds a JSON list"),
        ("special_tokens_map.json", b"\xff", "special_tokens_map.json' is not valid JSON"),
    ],
)
def test_malformed_hf_dir_files_are_one_line(tmp_path, name, content, message):
    directory = save_tiny_bert(tmp_path / "m")
    (directory / name).write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_model(f"hf:{directory}")
    assert message in str(caught.value)
    assert str(caught.value).count("cannot load") <= 1


def test_train_word_bert_takes_a_shape_and_a_warm_up(tmp_path):
    """bench/'s BERT-base recipe: heads, intermediate size and a warm-up reach the model and the
    optimiser; without them the recipe is the built-ins' (the same weights as before)."""
    import json

    from safetensors.torch import load_file

    from suite.models.word_bert import train_word_bert

    texts = [f"{word} movie {i}" for i, word in enumerate(["good", "bad", "great", "awful"] * 16)]  # 2 steps an epoch
    labels = [i % 2 for i in range(len(texts))]

    def trained(name, **kwargs):
        torch.manual_seed(0)
        train_word_bert(tmp_path / name, texts, labels, ["negative", "positive"], epochs=4, hidden_size=16, **kwargs)
        return json.loads((tmp_path / name / "config.json").read_text()), load_file(tmp_path / name / "model.safetensors")

    plain_config, plain = trained("plain")
    again_config, again = trained("again", heads=2, intermediate_size=None, warmup=0.0, device="cpu")
    shaped_config, _ = trained("shaped", heads=4, intermediate_size=24)
    _, warmed = trained("warmed", warmup=0.5)
    assert (plain_config["num_attention_heads"], plain_config["intermediate_size"]) == (2, 32)
    assert (shaped_config["num_attention_heads"], shaped_config["intermediate_size"]) == (4, 24)
    assert all(torch.equal(plain[key], again[key]) for key in plain)  # the explicit defaults change nothing
    # 8 steps at 1/4, 1/2, 3/4, 1, 1, 3/4, 1/2, 1/4 of the rate: other weights than a constant rate's
    assert any(not torch.equal(plain[key], warmed[key]) for key in plain)
    assert load_model(f"hf:{tmp_path / 'warmed'}").logits(["good movie"]).shape == (1, 2)


def test_weights_changed_in_place_are_seen_by_the_hash_and_the_float64_copy(digits_model):
    """A classifier's weights hash and its float64 copy (certificates' losses) were made once:
    after a fine-tune in place, a run resumed the old weights' records, and a certificate gave
    the old model's loss beside the new model's bound. Both now follow every in-place change."""
    import copy

    model = copy.deepcopy(digits_model)
    x = torch.rand(3, 1, 32, 32)
    before, logits = model.weights_hash(), model.float64_logits(x)
    assert model.weights_hash() == before  # unchanged weights: the same hash (kept, not recomputed)
    with torch.no_grad():
        for parameter in model.module.parameters():
            parameter.mul_(0.5)
    assert model.weights_hash() != before
    after = model.float64_logits(x)
    assert not torch.allclose(after, logits)
    torch.testing.assert_close(after.float(), model.logits(x), atol=1e-4, rtol=1e-4)


def _alone(directory: Path, texts: list[str]) -> torch.Tensor:
    """The model's own logits of each text on its own (no padding), as transformers computes them."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    module = AutoModelForSequenceClassification.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    with torch.no_grad():
        return torch.cat([module(**tokenizer([text], truncation=True, max_length=tokenizer.model_max_length,
                                             return_tensors="pt")).logits for text in texts])


TEXTS = ["good", "a very long plot", "bad movie", "a very very long bad movie plot good"]


def test_left_padding_tokenizers_are_padded_on_the_right(tmp_path):
    """A tokenizer saved with padding_side left moved each text's first token off position 0,
    where an encoder's head reads it: a DistilBERT so saved was scored up to 2.1 logits away from
    its own single-text logits. The suite pads on the right whatever the tokenizer says."""
    directory = save_tiny_bert(tmp_path / "m")
    edit_json(directory / "tokenizer_config.json", padding_side="left")
    model = load_model(f"hf:{directory}")
    assert model.tokenizer.padding_side == "left"
    alone = _alone(directory, TEXTS)
    assert torch.allclose(model.text_rows(TEXTS), alone, atol=1e-5)
    assert torch.allclose(model.logits(TEXTS), alone, atol=1e-5)


def test_roberta_style_positions_truncate_two_tokens_early(tmp_path):
    """RoBERTa, XLM-R and MPNet number positions from the padding index + 1, so they read
    max_position_embeddings − pad − 1 tokens. The suite truncated at max_position_embeddings
    where the tokenizer gave no smaller limit (common: model_max_length unset), and a long text
    was an IndexError traceback; a max_length past that limit is one line."""
    from transformers import RobertaConfig, RobertaForSequenceClassification

    from tiny_models import WORDS, tiny_tokenizer

    torch.manual_seed(0)
    config = RobertaConfig(vocab_size=len(WORDS), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=16, max_position_embeddings=10, pad_token_id=0, bos_token_id=2,
                           eos_token_id=3, num_labels=2, type_vocab_size=1)
    RobertaForSequenceClassification(config).save_pretrained(tmp_path / "r")
    tokenizer = tiny_tokenizer()
    tokenizer.model_max_length = int(1e30)  # no limit of its own, as many community checkpoints
    tokenizer.save_pretrained(tmp_path / "r")
    model = load_model(f"hf:{tmp_path / 'r'}")
    assert model.max_length == 10 - 0 - 1
    long = "a very very long bad movie plot good good bad a very long plot"
    rows = model.text_rows([long, "good"])  # an IndexError before
    assert rows.shape == (2, 2) and torch.isfinite(rows).all()
    with pytest.raises(ConfigError, match="max_length 10 is more tokens than .* can read \\(9: its position"):
        load_model(ModelConfig(spec=f"hf:{tmp_path / 'r'}", max_length=10))


def test_a_pad_token_the_config_does_not_know_is_told_to_the_model(tmp_path):
    """A GPT-2-style classifier saved with a tokenizer pad token but no pad_token_id in its
    config: transformers could not pool a batch ("Cannot handle batch sizes > 1"), a traceback."""
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from tiny_models import WORDS, tiny_tokenizer

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(WORDS), n_embd=8, n_layer=1, n_head=2, n_positions=16, num_labels=2)
    assert config.pad_token_id is None
    GPT2ForSequenceClassification(config).save_pretrained(tmp_path / "g")
    tiny_tokenizer().save_pretrained(tmp_path / "g")
    model = load_model(f"hf:{tmp_path / 'g'}")
    alone = torch.stack([model.module(**model.tokenize([text])).logits[0].detach() for text in TEXTS])
    assert torch.allclose(model.text_rows(TEXTS), alone, atol=1e-5)
    assert torch.allclose(model.logits(TEXTS), alone, atol=1e-5)
