"""The model interface: hf:/timm: adapters on locally saved models, temperature, built-ins."""

from __future__ import annotations

import pytest
import torch

from suite.errors import SuiteError
from suite.models import ModelConfig, load_model


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory):
    """A tiny BERT classifier + tokenizer written with save_pretrained, as a Hub repo would be."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "good", "bad", "movie", "a", "very", "long", "plot"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]",
                                        cls_token="[CLS]", sep_token="[SEP]", model_max_length=16)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(words), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=16, num_labels=3,
                        id2label={0: "neg", 1: "neu", 2: "pos"}, label2id={"neg": 0, "neu": 1, "pos": 2})
    directory = tmp_path_factory.mktemp("tiny-bert")
    BertForSequenceClassification(config).save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    return directory


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

    from suite.models.timm_image import save_timm_dir

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


def test_timm_name_with_safetensors_checkpoint(tmp_path):
    net = _timm_reference(tmp_path)
    import timm

    default_cfg = timm.create_model("test_resnet").pretrained_cfg
    with pytest.raises(SuiteError, match="cannot load checkpoint"):  # 1000-class head vs 3 classes
        load_model(ModelConfig(spec="timm:test_resnet", checkpoint=str(tmp_path / "timm-dir" / "model.safetensors")))
    model = load_model(ModelConfig(spec="timm:test_resnet", pretrained=False))
    assert model.input_size == tuple(default_cfg["input_size"]) and model.num_classes == 1000
    del net


def test_pickled_checkpoints_are_refused(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"a": torch.zeros(1)}, path)
    with pytest.raises(SuiteError, match="not a .safetensors file"):
        load_model(ModelConfig(spec="timm:test_resnet", checkpoint=str(path)))


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
    # Well above chance (0.5) on 120 held-out sentences. The exact value depends on the CPU kernels
    # the training ran with: 69.2% with torch 2.14.1 on 2 cores (the same before and after the
    # evaluation core v2), 70-77% with earlier builds.
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
