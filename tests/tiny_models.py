"""Tiny models saved to disk the way users' models arrive (no network): test inputs for loaders."""

from __future__ import annotations

import json
from pathlib import Path

import torch

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "good", "bad", "movie", "a", "very", "long", "plot"]


def tiny_tokenizer():
    """A word-level BERT-style tokenizer over :data:`WORDS`, built offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", model_max_length=16)


def save_tiny_bert(directory: Path, *, labels: tuple[str, ...] = ("neg", "neu", "pos"), safe: bool = True,
                   seed: int = 0) -> Path:
    """A tiny BERT classifier + tokenizer written by ``save_pretrained`` into ``directory``.

    Args:
        labels: Label names (the classifier's size).
        safe: ``safe_serialization``: ``False`` writes a pickled ``pytorch_model.bin`` only.
        seed: Initialisation seed (another seed: other weights, same files).
    """
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(WORDS), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=16, num_labels=len(labels),
                        id2label=dict(enumerate(labels)), label2id={name: i for i, name in enumerate(labels)})
    BertForSequenceClassification(config).save_pretrained(directory, safe_serialization=safe)
    tiny_tokenizer().save_pretrained(directory)
    return directory


def relabel_hf_config(directory: Path, labels: tuple[str, ...]) -> None:
    """Rewrite an hf config.json to claim ``labels``, leaving the weights as they are."""
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config["id2label"] = {str(i): name for i, name in enumerate(labels)}
    config["label2id"] = {name: i for i, name in enumerate(labels)}
    path.write_text(json.dumps(config))


def tiny_timm(num_classes: int = 3, in_chans: int = 3, seed: int = 0):
    """timm's ``test_resnet`` with a fresh seeded initialisation, in eval mode."""
    import timm

    torch.manual_seed(seed)
    return timm.create_model("test_resnet", num_classes=num_classes, in_chans=in_chans).eval()


def save_tiny_timm(directory: Path, *, num_classes: int = 3, seed: int = 0, input_size=(3, 24, 24)):
    """A ``test_resnet`` saved in timm's Hub layout (config.json + model.safetensors); returns the net."""
    from suite.models.timm_dir import save_timm_dir

    net = tiny_timm(num_classes, input_size[0], seed)
    channels = input_size[0]
    save_timm_dir(directory, net, "test_resnet", input_size=input_size, mean=(0.4, 0.5, 0.6)[:channels],
                  std=(0.2, 0.25, 0.3)[:channels], label_names=[f"c{i}" for i in range(num_classes)])
    return net


def edit_json(path: Path, **changes) -> None:
    """Set top-level keys of a JSON file (``None`` deletes the key)."""
    meta = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    path.write_text(json.dumps(meta))


def truncate(path: Path) -> None:
    """Cut a file in half, as an interrupted download leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flip_tensor_bytes(path: Path, size: int = 4096) -> None:
    """Invert ``size`` bytes in the middle of a safetensors file's tensor data: same length, valid
    header, other weights (as a bad disk or a stray write leaves it)."""
    import struct

    data = bytearray(path.read_bytes())
    start = 8 + struct.unpack("<Q", data[:8])[0]  # tensor data starts after the JSON header
    middle = max(start, (start + len(data)) // 2 - size // 2)
    end = min(len(data), middle + size)
    data[middle:end] = bytes(byte ^ 0xFF for byte in data[middle:end])
    path.write_bytes(bytes(data))


def save_safetensors(path: Path, state: dict[str, torch.Tensor]) -> Path:
    """Write a state dict as safetensors."""
    from safetensors.torch import save_file

    save_file({key: value.detach().contiguous() for key, value in state.items()}, str(path))
    return path
