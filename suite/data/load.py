"""Turn a :class:`DatasetConfig` into the examples a model is evaluated on.

Loading needs only what the model takes (:class:`~suite.data.base.InputSpec`: modality, labels,
input size), never the model itself.

Sources: ``builtin:<name>``; ``hf:<hub name>`` through ``datasets.load_dataset``; and local
csv/tsv/json/jsonl/parquet files or directories (a directory of such files split by file name,
or an image folder) given as ``hf:<path>`` or a bare path.

Images read through ``datasets`` are not held in memory: each example holds a reference to its
row and decodes it when read (:mod:`suite.data.images`). Built-in datasets are small and held
as tensors, as are the Python API's in-memory tensors (:mod:`suite.data.memory`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from suite.data.base import EvalSet, Example, InputSpec, LazyInput
from suite.data.builtin import RawSplit
from suite.data.config import DatasetConfig
from suite.data.images import DatasetImage, check_image, conform_image
from suite.data.hf_split import hf_split, looks_like_a_path, split_fingerprint
from suite.data.registry import BUILTIN_DATASETS
from suite.errors import DataError

TEXT_COLUMNS = ("text", "sentence", "review", "content", "document", "tweet", "utterance", "question")
IMAGE_COLUMNS = ("image", "img", "picture", "pixel_values")
LABEL_COLUMNS = ("label", "labels", "target", "class", "sentiment", "fine_label", "y")
#: Column pairs that hold one example's two texts (NLI, paraphrase, question answering: GLUE's
#: MNLI, QNLI, QQP, MRPC and RTE, SNLI, BoolQ). Scoring a pair model on one of them gives a number
#: about another task, so a dataset holding both is refused unless --text-column names one.
PAIR_COLUMNS = (("premise", "hypothesis"), ("question", "sentence"), ("sentence1", "sentence2"),
                ("question1", "question2"), ("question", "passage"), ("text1", "text2"), ("text_a", "text_b"))
#: Rows of not-decoded images read at a time by the up-front check (bounds its memory on
#: datasets that embed the image bytes).
CHECK_CHUNK = 256


def subsample_indices(size: int, n: int | None, seed: int) -> list[int]:
    """Rows of a deterministic subsample: the first n of a seeded permutation, in row order.

    Smaller n give subsets of larger ones for the same seed.
    """
    if n is None or n >= size:
        return list(range(size))
    return sorted(int(i) for i in np.random.default_rng(seed).permutation(size)[:n])


def load_eval_set(config: DatasetConfig, model: InputSpec, seed: int) -> EvalSet:
    """Load, subsample and check the examples of ``config`` for a model taking ``model``."""
    scheme, sep, name = config.spec.partition(":")
    if sep and scheme == "builtin":
        raw, size, columns = _load_builtin(name, config, model, seed)
    elif sep and scheme == "hf":
        raw, size, columns = _load_hf(name, config, model, seed)
    elif Path(config.spec).expanduser().exists():
        raw, size, columns = _load_hf(config.spec, config, model, seed)
    elif looks_like_a_path(config.spec):
        raise DataError(f"dataset path {config.spec!r} does not exist")
    else:
        raise DataError(
            f"unknown dataset {config.spec!r}: use builtin:<name> (see `advsuite ls datasets`), "
            "hf:<hub name or local path>, or an existing local file/dir"
        )
    if raw.modality != model.modality:
        raise DataError(f"dataset {config.spec!r} holds {raw.modality} but model {model.name!r} takes {model.modality}")
    examples = [Example(i, _conform(x, model), y) for i, x, y in zip(raw.ids, raw.inputs, raw.labels)]
    check_labels(examples, model, config.spec)
    return EvalSet(
        spec=config.spec,
        split=config.split,
        modality=raw.modality,
        examples=examples,
        size=size,
        label_names=raw.label_names,
        fingerprint=raw.fingerprint,
        columns=columns,
    )


def _load_builtin(name: str, config: DatasetConfig, model: InputSpec,
                  seed: int) -> tuple[RawSplit, int, dict[str, str]]:
    full = BUILTIN_DATASETS.get(name)(config.split)
    rows = subsample_indices(len(full.ids), config.n, seed)
    # The data's classes by name where the model names them, as for the Hub's class labels: a
    # model whose id2label reads (positive, negative) was scored on the data's index order
    # (25 % clean for 67 %), and a 3-class (neg, neu, pos) model took every positive for neutral.
    remap = (_class_label_map(full.label_names, model, f"builtin:{name}", renamable=False)
             if full.modality == model.modality else list(range(len(full.label_names))))  # refused after this
    subset = RawSplit(
        ids=[full.ids[i] for i in rows],
        inputs=[full.inputs[i] for i in rows],
        labels=[remap[full.labels[i]] for i in rows],
        label_names=full.label_names,
        modality=full.modality,
        fingerprint=full.fingerprint,
    )
    return subset, len(full.ids), {}


def check_labels(examples: Sequence[Example], model: InputSpec, spec: str) -> None:
    for example in examples:
        if example.label == -1:  # the Hub's mark of a hidden label (GLUE's and SuperGLUE's test splits)
            hub = spec.startswith("hf:") and not Path(spec[3:]).expanduser().exists()
            raise DataError(f"example {example.id!r} of {spec!r} has label -1, which marks an unlabelled example "
                            + ("(as in GLUE's test splits): evaluate a labelled split (--split validation)" if hub
                               else "(the Hub's mark of a hidden label): give every example its label, or drop it"))
        if not 0 <= example.label < model.num_classes:
            raise DataError(
                f"label {example.label} of example {example.id!r} in {spec!r} is out of range for "
                f"{model.name!r}, which has {model.num_classes} classes ({', '.join(model.labels[:10])})"
            )


def _conform(value: Any, model: InputSpec) -> Any:
    if model.modality == "text" or isinstance(value, LazyInput):  # a lazy image conforms as it loads
        return value
    return conform_image(value, model.input_size, preprocessing=model.preprocessing)


def _is_missing(value: Any) -> bool:
    """A null cell: ``None``, or the NaN pandas reads an empty CSV cell of a numeric column as."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _row(row: int) -> str:
    return f"row {row} (counting data rows from 0)"


def _describe(value: Any) -> str:
    """A value's type and a bounded repr, for messages about a cell."""
    shown = repr(value)
    return f"{type(value).__name__} {shown[:40]}{'...' if len(shown) > 40 else ''}"


def _load_hf(name: str, config: DatasetConfig, model: InputSpec, seed: int) -> tuple[RawSplit, int, dict[str, str]]:
    import datasets

    dataset = hf_split(name, config, datasets)
    columns = dataset.column_names
    input_kind = "image" if model.modality == "image" else "text"
    given = config.image_column if input_kind == "image" else config.text_column
    if input_kind == "text" and given is None:
        _refuse_pairs(columns, name)
    input_column = _pick_column(given, IMAGE_COLUMNS if input_kind == "image" else TEXT_COLUMNS, columns, input_kind, name)
    label_column = _pick_column(config.label_column, LABEL_COLUMNS, columns, "label", name)
    if input_column == label_column:
        raise DataError(f"dataset {name!r}: column {input_column!r} would be both the {input_kind} and the label; "
                        f"name the other with --{input_kind}-column or --label-column")
    size = len(dataset)
    rows = subsample_indices(size, config.n, seed)
    subset = dataset.select(rows)
    feature = dataset.features.get(label_column)
    label_names = list(feature.names) if isinstance(feature, datasets.ClassLabel) else None
    labels = [_label_index(value, model, label_column, name, row) for row, value in zip(rows, subset[label_column])]
    if label_names:
        remap = _class_label_map(label_names, model, name)
        labels = [remap[label] if 0 <= label < len(remap) else label for label in labels]
    raw = RawSplit(
        ids=[f"{config.split}-{row}" for row in rows],
        inputs=_inputs(dataset, subset, input_column, rows, model, datasets, name),
        labels=labels,
        label_names=label_names or list(model.labels),
        modality=input_kind,
        fingerprint=split_fingerprint(name, config.split) or getattr(dataset, "_fingerprint", None) or "",
    )
    return raw, size, {input_kind: input_column, "label": label_column}


def _inputs(dataset: Any, subset: Any, column: str, rows: Sequence[int], model: InputSpec, datasets: Any,
            name: str) -> list[Any]:
    """The input column's values, each checked to be what the model takes (a string for text,
    an image for images). An Image column gives lazy images (:func:`_image_rows`)."""
    kind = "image" if model.modality == "image" else "text"
    if kind == "image" and isinstance(dataset.features.get(column), datasets.Image):
        return _image_rows(dataset, column, rows, model, datasets, name)
    values = list(subset[column])
    for row, value in zip(rows, values):
        if kind == "text" and isinstance(value, str) and value.strip():
            continue
        if kind == "text" and isinstance(value, str):  # as an empty CSV cell is: nothing to attack, scored all the same
            raise DataError(f"column {column!r} of {name!r} holds {'no text' if not value else 'only white space'} in "
                            f"{_row(row)}: a text model needs text in every row (fill it in, or drop the row)")
        if kind == "image" and isinstance(value, torch.Tensor):
            continue
        if _is_missing(value):
            needs = "an image" if kind == "image" else "a string"
            raise DataError(f"column {column!r} of {name!r} has no value in {_row(row)}: a {kind} model needs "
                            f"{needs} in every row (fill it in, or drop the row)")
        if kind == "text":
            raise DataError(f"column {column!r} of {name!r} holds {_describe(value)} in {_row(row)}, not a string: a "
                            "text model needs text in every row (pick another column with --text-column)")
        raise DataError(f"column {column!r} of {name!r} holds {_describe(value)} in {_row(row)}, not an image: an "
                        "image model needs an image folder, or a column of images (a parquet or Hub Image feature); "
                        "pick another column with --image-column")
    return values


def _image_rows(dataset: Any, column: str, rows: Sequence[int], model: InputSpec, datasets: Any,
                name: str) -> list[DatasetImage]:
    """A lazy image per row of ``rows`` (decoded each time it is read), after every one is
    checked without being decoded, so that a corrupt or non-image file, or a decompression bomb,
    is one line naming it before anything runs."""
    table = dataset.select_columns([column]).cast_column(column, datasets.Image(decode=False))
    for start in range(0, len(rows), CHECK_CHUNK):
        for item in table[list(rows[start : start + CHECK_CHUNK])][column]:
            check_image(item, column, name)
    return [DatasetImage(table, row, column, model.input_size, name, model.preprocessing) for row in rows]


def _refuse_pairs(columns: Sequence[str], name: str) -> None:
    """Refuse a dataset whose examples are text pairs: the suite attacks single texts."""
    for first, second in PAIR_COLUMNS:
        if first in columns and second in columns:
            raise DataError(
                f"dataset {name!r} holds text pairs (columns {first!r} and {second!r}): advsuite attacks "
                "single-text classifiers, and a pair model scored on one text gives a wrong number; pass "
                "--text-column only for a model that takes that column alone")


def _pick_column(given: str | None, candidates: Sequence[str], columns: Sequence[str], kind: str, name: str) -> str:
    if given is not None:
        if given not in columns:
            raise DataError(f"dataset {name!r} has no column {given!r}; columns are: {', '.join(columns)}")
        return given
    for candidate in candidates:
        if candidate in columns:
            return candidate
    flag = "--label-column" if kind == "label" else f"--{kind}-column"
    raise DataError(
        f"cannot find the {kind} column of dataset {name!r}; columns are: {', '.join(columns)}; pass {flag}"
    )


def _model_classes(model: InputSpec) -> dict[str, list[int]]:
    """The model's classes by label, case-insensitive (a name the labels repeat lists several)."""
    classes: dict[str, list[int]] = {}
    for index, label in enumerate(model.labels):
        classes.setdefault(label.lower(), []).append(index)
    return classes


def _named(classes: dict[str, list[int]], name: str, model: InputSpec, what: str) -> int:
    """The one class ``name`` names; refused where the model's labels repeat it (an id2label of
    positive, positive took the last one, silently)."""
    found = classes[name.lower()]
    if len(found) > 1:
        raise DataError(f"{what} names several of the model's classes ({', '.join(map(str, found))}: its labels "
                        f"repeat {model.labels[found[0]]!r}): give class indices instead")
    return found[0]


def _class_label_map(names: Sequence[str], model: InputSpec, dataset: str, renamable: bool = True) -> list[int]:
    """Dataset class index → model class index, when the dataset's class names say which.

    Names equal to a model label (case-insensitive) or numeric names (image folders named by
    class index) are mapped. When no name is either, the dataset's order is taken to be the
    model's only where the model's labels name nothing (Hub models whose labels are LABEL_0,
    LABEL_1...); a model with labels of its own refuses them. A mix, or a name that
    looks like a number but is not an ASCII class index (``²``, which ``str.isdigit`` accepts),
    is refused: any mapping guessed for it could silently score against the wrong class.
    ``renamable``: whether the user can rename the data's classes (a built-in dataset's are fixed).
    """
    fixed = "evaluate a model over these classes, or give the data as a file labelled with the model's classes"
    by_name = _model_classes(model)
    if all(name.lower() in by_name for name in names):
        return [_named(by_name, name, model, f"class {name!r} of {dataset!r}") for name in names]
    if all(_is_index(name) for name in names):
        return [int(name) for name in names]
    usable = [name for name in names if name.lower() in by_name or _is_index(name)]
    numeric = [name for name in names if name.isnumeric()]  # "²", "½"; not "1 star"
    if usable or numeric:
        bad = next(name for name in names if name not in usable)
        raise DataError(
            f"class {bad!r} of {dataset!r} (a class folder, or a class of its label feature) is neither one of "
            f"the model's labels ({', '.join(model.labels[:10])}) nor a class index 0-{model.num_classes - 1}: "
            + ("rename it" if renamable else fixed)
        )
    if not all(GENERIC_LABEL.fullmatch(label) for label in model.labels):
        # The model names its classes and the data names them otherwise: the data's order (the
        # folders' alphabetical one) would be a guess, and scored digits named zero ... nine as
        # eight, five, four ... (8 % clean accuracy for 100 %).
        shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
        raise DataError(
            f"the classes of {dataset!r} ({shown}) are neither the model's labels ({', '.join(model.labels[:10])}"
            f"{', ...' if len(model.labels) > 10 else ''}) nor class indices 0-{model.num_classes - 1}: "
            + ("rename the class folders (or the label feature's names) to the model's labels or to indices"
               if renamable else fixed)
        )
    return list(range(len(names)))


#: Labels that name no class (transformers' default ``LABEL_0``...): a model that has only these
#: takes the data's classes in the data's own order.
GENERIC_LABEL = re.compile(r"LABEL_\d+")


def _is_index(name: str) -> bool:
    return name.isascii() and name.isdigit()


def _label_index(value: Any, model: InputSpec, column: str, name: str, row: int) -> int:
    """The class index a label cell names: an integer, or one of the model's labels."""
    if _is_missing(value):
        raise DataError(f"column {column!r} of {name!r} has no value in {_row(row)}: every example needs a label "
                        "(fill it in, or drop the row)")
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        lowered = _model_classes(model)
        if value.lower() in lowered:
            return _named(lowered, value, model, f"label {value!r} in column {column!r} of {name!r} ({_row(row)})")
        digits = value.strip()
        if _is_index(digits[1:] if digits.startswith("-") else digits):  # "--1" is no integer
            return int(digits)
    raise DataError(
        f"label {value!r} in column {column!r} of {name!r} ({_row(row)}) is neither a class index nor one of the "
        f"model's labels ({', '.join(model.labels[:10])})"
    )
