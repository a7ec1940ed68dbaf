"""Hugging Face sequence classifiers: ``hf:<hub id or local dir>``.

Loads ``AutoModelForSequenceClassification`` and ``AutoTokenizer`` exactly as for any Hub model
(a local directory written by ``save_pretrained`` loads through the same calls), from safetensors
weights only unless the user allows pickles (see :mod:`suite.models.weights`). Queries are
tokenised with dynamic padding: a batch is padded to its longest member, never to
``model_max_length``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from suite.errors import ConfigError, first_line
from suite.models.base import ModelInfo, TorchClassifier, local_revision, resolve_device
from suite.models.config import ModelConfig
from suite.models.hub_access import cached, hub_unreachable
from suite.models.weights import (ALLOW_PICKLE, PickleRefused, check_safetensors, local_dir, pickled_files,
                                  refuse_pickle, verify_weights)


#: :meth:`HFTextClassifier.text_rows` on the CPU: most texts per pass, the step its row count is
#: filled up to (with copies of its first text), and the padding step of their lengths in tokens.
CPU_PASS_ROWS = 128
CPU_ROW_STEP = 8
CPU_LENGTH_STEP = 8
#: :meth:`HFTextClassifier.text_rows` on CUDA: most tokens per pass (texts × padded length).
CUDA_PASS_TOKENS = 32768


class HFTextClassifier(TorchClassifier):
    """A transformers sequence classifier behind the :class:`Classifier` interface.

    Args:
        model: A ``PreTrainedModel`` for sequence classification.
        tokenizer: Its tokenizer.
        info: Identity recorded in results.
        max_length: Truncation length; defaults to the smaller of the tokenizer's
            ``model_max_length`` and the model's position-embedding size.
        device: Where to run; default CUDA when present.
    """

    modality = "text"

    def __init__(self, model, tokenizer, info: ModelInfo, max_length: int | None = None, device=None) -> None:
        super().__init__(model, device)
        self.tokenizer = tokenizer
        self.info = info
        readable = _position_limit(model)
        if max_length is not None and readable is not None and max_length > readable:
            raise ConfigError(f"max_length {max_length} is more tokens than {info.name!r} can read ({readable}: its "
                              "position embeddings): give at most that")
        self.max_length = max_length or _default_max_length(model, tokenizer)
        num_labels = model.config.num_labels
        id2label = getattr(model.config, "id2label", None) or {}
        self.labels = [str(id2label.get(i, id2label.get(str(i), f"LABEL_{i}"))) for i in range(num_labels)]
        #: Held by every call that tokenises or runs the module, so that two threads (a text
        #: stream's pass beside its caller's scoring) take turns: a fast tokenizer refuses to be
        #: reconfigured by one thread while another encodes ("Already borrowed").
        self.serial = threading.RLock()

    @property
    def thread_safe(self) -> bool:
        return True

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Tokenise with dynamic padding and truncation, on the model's device."""
        with self.serial:
            encoded = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length,
                                     padding_side="right", return_tensors="pt")
        return {key: value.to(self.device) for key, value in encoded.items()}

    def embedding_logits(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with self.serial:
            encoded = self.tokenize(texts)
            embeddings = self.module.get_input_embeddings()(encoded["input_ids"]).detach().requires_grad_(True)
            rest = {key: value for key, value in encoded.items() if key != "input_ids"}
            with torch.enable_grad():
                logits = self.module(inputs_embeds=embeddings, **rest).logits.float()
        return encoded["input_ids"], embeddings, logits

    def text_rows(self, texts: Sequence[str]) -> torch.Tensor:
        """Logits of texts pooled from several searches, in passes of texts sorted by token length.

        On the CPU every text is padded to its length rounded up to a multiple of
        :data:`CPU_LENGTH_STEP` tokens (within the model's limit), a pass holds texts of one such
        length only, at most :data:`CPU_PASS_ROWS` of them, and its row count is filled up to a
        multiple of :data:`CPU_ROW_STEP` with copies of its first text. A row's value then
        depends on its text alone: its padded length follows from its own length, and with the
        shape fixed up to a row count that is a multiple of 8 the kernels compute every row the
        same way. Not so at other row counts: rows past the last multiple of 8 round differently
        when 1–3 rows are left over (9–11 rows with 2 threads; 9–11, 17–19 and 25–27 with 16;
        measured on BERTs of hidden size 128 to 768 at 1, 2, 4 and 16 threads, every row count
        from 8 to 40 and multiples of 8 to 128: multiples of 8 were exact at every thread count).
        ``tests/test_cooperative.py`` checks the searches it feeds against block sizes. On CUDA
        passes hold up to :data:`CUDA_PASS_TOKENS` tokens, padded to their longest text: row
        values then depend on the pass at float rounding, as any batched CUDA result does.
        """
        texts = list(texts)
        if not texts:
            return torch.empty(0, self.num_classes)
        with self.serial:
            return self._text_rows(texts)

    def truncated(self, texts: Sequence[str]) -> int:
        """How many of ``texts`` run past :attr:`max_length` tokens: the model sees only their
        first tokens, while a word-level attack still searches all of their words."""
        encoded = self.tokenizer(list(texts), truncation=False, verbose=False)["input_ids"]
        return sum(len(ids) > self.max_length for ids in encoded)

    def _text_rows(self, texts: list[str]) -> torch.Tensor:
        rows = torch.empty(len(texts), self.num_classes)
        encoded = self.tokenizer(texts, truncation=True, max_length=self.max_length)
        lengths = [len(ids) for ids in encoded["input_ids"]]
        cpu = self.device.type == "cpu"
        if cpu:
            lengths = [min(-(-length // CPU_LENGTH_STEP) * CPU_LENGTH_STEP, self.max_length) for length in lengths]
        passes: list[list[int]] = []
        for index in sorted(range(len(texts)), key=lambda i: lengths[i]):
            current = passes[-1] if passes else None
            if current is not None and (
                (cpu and lengths[current[0]] == lengths[index] and len(current) < CPU_PASS_ROWS)
                or (not cpu and (len(current) + 1) * lengths[index] <= CUDA_PASS_TOKENS)
            ):
                current.append(index)
            else:
                passes.append([index])
        with torch.no_grad():
            for members in passes:
                filled = members + members[:1] * (-len(members) % CPU_ROW_STEP) if cpu else members
                length = lengths[members[-1]]  # CPU: the pass's one length; CUDA: its longest text
                inputs = self._padded(encoded, filled, length)
                if inputs is None:  # a tokenizer this cannot pad: let it pad its own output
                    inputs = self.tokenizer([texts[i] for i in filled], padding="max_length", truncation=True,
                                            max_length=length, padding_side="right", return_tensors="pt")
                inputs = {key: value.to(self.device) for key, value in inputs.items()}
                rows[members] = self.module(**inputs).logits[: len(members)].float().cpu()
        return rows

    def _padded(self, encoded, members: list[int], length: int) -> dict[str, torch.Tensor] | None:
        """The tokenizer's own ``padding="max_length"`` output for these rows of ``encoded`` (one
        unpadded encoding of every text), built without tokenising again; ``None`` when the
        encoding holds a field whose padding value this does not know.

        Always on the right, whatever the tokenizer's ``padding_side``: a text padded on the left
        moves its first token off position 0, where an encoder's head reads it, and every token
        off the positions it has alone (a DistilBERT saved with left padding scored its texts up
        to 2.1 logits away from the model's own)."""
        tokenizer = self.tokenizer
        values = {"input_ids": tokenizer.pad_token_id, "attention_mask": 0,
                  "token_type_ids": getattr(tokenizer, "pad_token_type_id", 0)}
        if values["input_ids"] is None or any(key not in values for key in encoded.keys()):
            return None
        padded = {}
        for key in encoded.keys():
            column = encoded[key]
            rows = [[values[key]] * (length - len(column[i])) for i in members]
            padded[key] = torch.tensor([column[i] + pad for i, pad in zip(members, rows)], dtype=torch.long)
        return padded

    def _forward(self, batch: Sequence[str]) -> torch.Tensor:
        if isinstance(batch, str):
            raise TypeError("text models take a list of strings, not a single string")
        with self.serial:
            return self.module(**self.tokenize(batch)).logits


def _position_limit(model) -> int | None:
    """The most tokens the model's position embeddings number, where it has them.

    Learned absolute positions count from 0 (BERT), except where they count from the padding
    index + 1 (RoBERTa, XLM-R, MPNet, CamemBERT...: transformers' ``create_position_ids_from_input_ids``,
    whose position embedding has a ``padding_idx``): those read ``max_position_embeddings`` − 2
    tokens (514 → 512), and a longer text was an ``IndexError``. ``None``: no such limit known."""
    embeddings = getattr(getattr(model, "base_model", None), "embeddings", None)
    positions = getattr(embeddings, "position_embeddings", None)
    if isinstance(positions, torch.nn.Embedding):
        offset = 0 if positions.padding_idx is None else positions.padding_idx + 1
        return positions.num_embeddings - offset
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return limit if isinstance(limit, int) and limit > 0 else None


def _default_max_length(model, tokenizer) -> int:
    limits = [getattr(tokenizer, "model_max_length", None), _position_limit(model)]
    # Tokenizers without a limit report a huge sentinel (int(1e30)); ignore it.
    usable = [int(limit) for limit in limits if isinstance(limit, int) and 0 < limit < 1_000_000]
    return min(usable) if usable else 512


def load_hf(name: str, config: ModelConfig) -> HFTextClassifier:
    """Load ``AutoModelForSequenceClassification`` + ``AutoTokenizer`` from the Hub or a local dir.

    Weights are read from safetensors only (``use_safetensors=True``), unless
    ``config.allow_pickle``; a local directory is checked before transformers reads it, so a
    pickle-only or corrupt directory is refused in one line.
    """
    resolve_device(config.device)  # a bad device fails before any weights are read
    directory = local_dir("hf", name)
    if directory is not None:
        _check_model_dir(directory, config.allow_pickle)
    source = str(directory) if directory is not None else name
    offline = None
    if directory is None and (offline := hub_unreachable()) is not None:  # one line now, not minutes of retries
        if not cached(name, "config.json", config.revision):
            raise ConfigError(f"cannot load hf model {name!r}: it is not in the local Hugging Face cache, and "
                              f"{offline}; connect, or give a local directory (save_pretrained)")
    model_config, model, tokenizer = _from_pretrained(name, source, config, local_only=offline is not None)
    prepare_tokenizer(model, tokenizer)
    if directory is not None:
        revision = config.revision or local_revision(directory)
    else:
        revision = getattr(model_config, "_commit_hash", None) or config.revision
    info = ModelInfo(spec=f"hf:{name}", revision=revision, extra={"architecture": model_config.architectures})
    return HFTextClassifier(model, tokenizer, info, max_length=config.max_length, device=config.device)


def _check_model_dir(directory: Path, allow_pickle: bool) -> None:
    """Refuse a local dir with no config, pickled weights only (without allow_pickle), corrupt safetensors,
    or safetensors that do not match their recorded sha256."""
    if not (directory / "config.json").is_file():
        raise ConfigError(f"{str(directory)!r} is not an hf model directory: it has no config.json "
                          "(save_pretrained writes one)")
    for name in _JSON_FILES:
        _check_json_mapping(directory / name)
    safetensors = sorted(directory.glob("*.safetensors"))
    if not safetensors:
        pickles = pickled_files(directory)
        if not pickles:
            raise ConfigError(f"hf model directory {str(directory)!r} holds no weights (model.safetensors)")
        if not allow_pickle:
            raise refuse_pickle(pickles[0], "hf model weights")
    for path in safetensors:
        check_safetensors(path)
        verify_weights(path)  # against the sha256 recorded when the suite wrote it, if it did


#: JSON files transformers reads from a model directory, each a mapping.
_JSON_FILES = ("config.json", "tokenizer_config.json", "tokenizer.json", "special_tokens_map.json")


def _check_json_mapping(path: Path) -> None:
    if not path.is_file():
        return
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"{str(path)!r} is not valid JSON ({first_line(error)}): save the model again") from error
    if not isinstance(content, dict):
        raise ConfigError(f"{str(path)!r} holds a JSON {type(content).__name__}, not a mapping: save the model again")


def _from_pretrained(name: str, source: str, config: ModelConfig, local_only: bool = False):
    """``(model config, model, tokenizer)``; every loading failure is one line. ``local_only``:
    from the local cache (the Hub cannot be reached)."""
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModelForSequenceClassification

    kwargs = {"revision": config.revision, "trust_remote_code": config.trust_remote_code,
              **({"local_files_only": True} if local_only else {})}
    # A Hub name is asked only once loading fails (no second wait for the network); a directory's
    # config, read for that check, is the one loaded.
    model_config = _refuse_image_classifier(name, source, kwargs) if Path(source).is_dir() else None
    try:
        tokenizer = _tokenizer(name, source, kwargs)
        model_config = model_config or AutoConfig.from_pretrained(source, **kwargs)
        _refuse_other_heads(name, model_config)
        # None lets transformers fall back to pytorch_model.bin, read with weights_only=True.
        use_safetensors = None if config.allow_pickle else True
        model = AutoModelForSequenceClassification.from_pretrained(
            source, config=model_config, use_safetensors=use_safetensors, **kwargs
        )
    except ConfigError:
        raise  # already one line (a ConfigError is also a ValueError)
    except SafetensorError as error:
        raise ConfigError(f"hf model {name!r}: its safetensors weights are not valid ({first_line(error)}): "
                          "download or save them again") from error
    except RuntimeError as error:
        mismatch = _SIZE_MISMATCH.search(str(error))
        if mismatch is None:
            raise
        raise ConfigError(_mismatch_message(name, model_config, mismatch)) from error
    except (OSError, ValueError) as error:
        text = first_line(error)
        if not config.allow_pickle and "safetensors" in text:
            raise PickleRefused(f"hf model {name!r} has no safetensors weights", ALLOW_PICKLE) from error
        if not config.trust_remote_code and "trust_remote_code" in str(error):  # its first line names no flag
            raise ConfigError(f"hf model {name!r} runs code of its own (auto_map), which advsuite does not run "
                              "unless asked: read that code, then pass --trust-remote-code") from error
        _refuse_image_classifier(name, source, kwargs | {"local_files_only": True})
        raise ConfigError(f"cannot load hf model {name!r}: {text}") from error
    return model_config, model, tokenizer


def _refuse_image_classifier(name: str, source: str, kwargs: dict) -> Any:
    """Refuse an image classifier (``ViTForImageClassification``...) in one line: it has no
    tokenizer, and transformers' own error named only its config class. Returns the config read
    (``None`` where it cannot be: loading the model says why)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES as IMAGE,
        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES as TEXT,
    )

    try:
        model_config = AutoConfig.from_pretrained(source, **kwargs)
    except Exception:  # noqa: BLE001 - said where the model itself fails to load
        return None
    named = [arch for arch in getattr(model_config, "architectures", None) or []
             if isinstance(arch, str) and arch.endswith("ForImageClassification")]
    kind = getattr(model_config, "model_type", None)
    if not named and kind in IMAGE and kind not in TEXT:
        named = [str(IMAGE[kind])]
    if named:
        raise ConfigError(f"hf model {name!r} is an image classifier ({named[0]}): hf: serves text classifiers, "
                          "and image models load through timm (timm:<name or directory>)")
    return model_config


def _refuse_other_heads(name: str, model_config) -> None:
    """Refuse a regression or multi-label head: robust accuracy here is the argmax of a softmax
    over at least 2 classes (transformers trains ``num_labels`` 1 as a regression, and a
    multi-label head's classes are independent sigmoids: neither argmax nor softmax is its
    prediction)."""
    problem, labels = getattr(model_config, "problem_type", None), getattr(model_config, "num_labels", 2)
    if problem in ("regression", "multi_label_classification") or labels < 2:
        kind = problem or "regression"
        raise ConfigError(f"hf model {name!r} is a {kind.replace('_', '-')} model ({labels} output(s)"
                          f"{f', problem_type {problem}' if problem else ''}): advsuite evaluates single-label "
                          "classifiers, whose prediction is the argmax over at least 2 classes")


def _tokenizer(name: str, source: str, kwargs: dict):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source, **kwargs)
    except (OSError, ValueError):
        raise  # worded by the caller, as for the model
    except Exception as error:  # tokenizers raises a bare Exception for a tokenizer.json it cannot parse
        raise ConfigError(f"cannot load the tokenizer of hf model {name!r}: {first_line(error)}") from error


_SIZE_MISMATCH = re.compile(
    r"loading state_dict for (\w+):\s+size mismatch for ([\w.]+): copying a param with shape "
    r"torch\.Size\(\[([\d, ]*)\]\) from checkpoint, the shape in current model is torch\.Size\(\[([\d, ]*)\]\)"
)


def _mismatch_message(name: str, model_config, mismatch: re.Match) -> str:
    module, param, stored, built = mismatch.groups()
    stored_shape, built_shape = (tuple(int(size) for size in sizes.split(",") if size.strip())
                                 for sizes in (stored, built))
    where = f"{module} {param} has shape {stored_shape} in the weights, {built_shape} in the model"
    labels = getattr(model_config, "num_labels", None)
    # The classifier is a Linear (transformers names the module it loads) or, in a whole model's
    # message, a parameter of the head; an embedding whose first size happens to equal the label
    # count (max_position_embeddings: 2) is not a label mismatch.
    head = module in ("Linear", "Conv1D") or param.split(".")[0] in ("classifier", "score", "out_proj", "logits_proj")
    if head and labels is not None and built_shape[:1] == (labels,) and stored_shape:
        return (f"hf model {name!r}: its config has {labels} labels but the weights' classifier has "
                f"{stored_shape[0]} ({where}): make num_labels / id2label in config.json match the weights")
    return f"hf model {name!r}: the weights do not fit the model its config.json describes: {where}"


def prepare_tokenizer(model, tokenizer) -> None:
    """Give a tokenizer without a pad token one (batching needs it), and tell the model its id."""
    if tokenizer.pad_token is None:
        # Decoder-style classifiers (GPT-2...) ship without a pad token; batching needs one.
        # The model pools the last non-pad token, so it must know which id that is.
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
        model.config.pad_token_id = tokenizer.pad_token_id
    elif getattr(model.config, "pad_token_id", None) is None:
        # A tokenizer saved with a pad token beside a config without one (a GPT-2 given
        # pad_token = eos before saving): transformers refuses to pool a batch, a traceback.
        model.config.pad_token_id = tokenizer.pad_token_id


