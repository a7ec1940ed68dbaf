"""A BERT with a word-level tokenizer, trained from scratch: the built-in text models
(:mod:`suite.models.builtin`), the text-training methods' initial model, and ``bench/``'s text
models."""

from __future__ import annotations

from pathlib import Path

import torch

from suite.progress import progress_bar

#: The built-in models' training seed.
TRAIN_SEED = 0


def train_word_bert(directory: Path, texts: list[str], labels: list[int], label_names: list[str], epochs: int,
                    hidden_size: int = 64, max_length: int = 64, lr: float = 2e-3, seed: int = TRAIN_SEED,
                    layers: int = 1, heads: int = 2, intermediate_size: int | None = None, warmup: float = 0.0,
                    device: str | torch.device | None = None, max_grad_norm: float | None = None) -> None:
    """Train a BERT (one layer unless ``layers``) with a word-level tokenizer (vocabulary of
    ``texts``) and save it with ``save_pretrained`` (safetensors) into ``directory``. Also used
    by ``bench/`` (which trains a BERT-base shape on a GPU: ``layers=12, hidden_size=768,
    heads=12, intermediate_size=3072``, a ``warmup`` fraction of the steps with the rate rising
    linearly from 0 and then falling linearly to 0, ``device``, and ``max_grad_norm``: the
    gradients' global norm clipped to it). The defaults (no warm-up, a constant rate, the CPU, no
    clipping) are the built-in models' recipe."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    pre = pre_tokenizers.Whitespace()
    words = sorted({w for text in texts for w, _ in pre.pre_tokenize_str(text.lower())})
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {token: i for i, token in enumerate(specials + words)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre
    core.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_max_length=max_length,
    )
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=hidden_size, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=intermediate_size or 2 * hidden_size, max_position_embeddings=max_length,
        num_labels=len(label_names), id2label=dict(enumerate(label_names)),
        label2id={name: i for i, name in enumerate(label_names)},
    )
    model = BertForSequenceClassification(config)
    device = torch.device(device or "cpu")
    model.to(device)
    targets = torch.tensor(labels)
    encoded = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    total = epochs * -(-len(targets) // 32)
    ramp = int(warmup * total)
    schedule = None
    if warmup:
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: (step + 1) / ramp if step < ramp else max(0.0, (total - step) / max(1, total - ramp)))
    generator = torch.Generator().manual_seed(seed)
    model.train()
    with progress_bar(epochs, f"training {Path(directory).name}", unit="epoch") as bar:
        for _ in range(epochs):
            order = torch.randperm(len(targets), generator=generator)
            for start in range(0, len(order), 32):
                rows = order[start : start + 32]
                batch = {key: value[rows].to(device) for key, value in encoded.items()}
                loss = model(**batch, labels=targets[rows].to(device)).loss
                optimizer.zero_grad()
                loss.backward()
                if max_grad_norm is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
                optimizer.step()
                if schedule is not None:
                    schedule.step()
            bar.update(1)
    model.eval()
    model.to("cpu").save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
