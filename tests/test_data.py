"""Datasets: built-ins, local files through datasets.load_dataset, columns, labels, subsampling."""

from __future__ import annotations

import pytest
import torch

from suite.data.builtin import digits, sentiment
from suite.data.config import DatasetConfig
from suite.data.load import load_eval_set, subsample_indices
from suite.errors import DataError


def test_builtin_digits_are_unit_range_images():
    train, test = digits("train"), digits("test")
    assert len(train.ids) + len(test.ids) == 1797
    assert not set(train.ids) & set(test.ids)
    images = torch.stack(test.inputs)
    assert images.shape[1:] == (1, 32, 32)
    assert images.min() >= 0 and images.max() <= 1 and images.max() > 0.9
    assert set(test.labels) == set(range(10))


def test_builtin_sentiment_has_400_plus_varied_sentences():
    train, validation, test = sentiment("train"), sentiment("validation"), sentiment("test")
    texts = train.inputs + validation.inputs + test.inputs
    assert len(texts) >= 400 and len(set(texts)) == len(texts)  # disjoint splits
    assert (len(train.ids), len(validation.ids), len(test.ids)) == (320, 80, 120)
    assert set(train.labels) == {0, 1} and abs(sum(test.labels) - len(test.labels) / 2) <= 5
    assert set(validation.labels) == {0, 1}
    with pytest.raises(DataError, match="no split 'dev'"):
        sentiment("dev")


def test_subsample_is_seeded_nested_and_sorted():
    small, large = subsample_indices(100, 10, seed=3), subsample_indices(100, 40, seed=3)
    assert small == sorted(small) and set(small) <= set(large)
    assert subsample_indices(100, 10, seed=3) == small != subsample_indices(100, 10, seed=4)
    assert subsample_indices(5, 10, seed=0) == [0, 1, 2, 3, 4]


def test_builtin_eval_set_ids_are_stable(sentiment_model):
    a = load_eval_set(DatasetConfig(spec="builtin:sentiment", n=10), sentiment_model.input_spec, seed=0)
    b = load_eval_set(DatasetConfig(spec="builtin:sentiment", n=30), sentiment_model.input_spec, seed=0)
    assert len(a) == 10 and set(a.ids) <= set(b.ids) and a.size == 120


@pytest.mark.parametrize("folder", [False, True], ids=["file", "folder"])
def test_a_local_file_edited_in_place_is_read_as_it_is_now(tmp_path, sentiment_model, folder):
    """`datasets` keys its cache on a file's path, size and modification time: a file edited in
    place that keeps them (cp -p, rsync -a, tar x) gave its old rows, under the same fingerprint,
    alone or in a folder of splits."""
    import os

    path = tmp_path / ("test.csv" if folder else "s.csv")
    path.write_text("text,label\na wonderful film,1\nan awful mess,0\n")
    config = DatasetConfig(spec=f"hf:{tmp_path if folder else path}", split="test")
    before = load_eval_set(config, sentiment_model.input_spec, seed=0)
    stat = path.stat()
    path.write_text("text,label\na wonderful film,0\nan awful mess,1\n")  # every label flipped, same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    after = load_eval_set(config, sentiment_model.input_spec, seed=0)
    assert [ex.label for ex in before.examples] == [1, 0] and [ex.label for ex in after.examples] == [0, 1]
    assert before.fingerprint != after.fingerprint and after.fingerprint.startswith("sha256-")


def test_a_folder_given_by_a_relative_path_is_read_and_fingerprinted_as_by_its_absolute_one(
        tmp_path, sentiment_model, monkeypatch):
    """``hf:data/reviews`` raised ValueError (a relative folder against datasets' absolute paths)."""
    (tmp_path / "data" / "reviews").mkdir(parents=True)
    (tmp_path / "data" / "reviews" / "test.csv").write_text("text,label\na wonderful film,1\nan awful mess,0\n")
    monkeypatch.chdir(tmp_path)
    relative = load_eval_set(DatasetConfig(spec="hf:data/reviews", split="test"), sentiment_model.input_spec, seed=0)
    absolute = load_eval_set(DatasetConfig(spec=f"hf:{tmp_path / 'data' / 'reviews'}", split="test"),
                             sentiment_model.input_spec, seed=0)
    assert [ex.input for ex in relative.examples] == ["a wonderful film", "an awful mess"]
    assert relative.fingerprint == absolute.fingerprint and relative.fingerprint.startswith("sha256-")


def test_local_csv_with_auto_detected_columns(tmp_path, sentiment_model):
    path = tmp_path / "reviews.csv"
    path.write_text("review,sentiment,extra\nGreat film!,positive,x\nAwful food.,negative,y\nLoved it.,1,z\n")
    eval_set = load_eval_set(DatasetConfig(spec=f"hf:{path}"), sentiment_model.input_spec, seed=0)
    assert [ex.input for ex in eval_set.examples] == ["Great film!", "Awful food.", "Loved it."]
    assert [ex.label for ex in eval_set.examples] == [1, 0, 1]  # names mapped to the model's labels
    assert eval_set.columns == {"text": "review", "label": "sentiment"}
    assert eval_set.ids == ["test-0", "test-1", "test-2"]


def test_local_dir_split_by_file_name(tmp_path, sentiment_model):
    (tmp_path / "train.csv").write_text("text,label\na,0\nb,1\n")
    (tmp_path / "test.csv").write_text("text,label\nGood.,1\nBad.,0\nFine.,1\n")
    eval_set = load_eval_set(DatasetConfig(spec=str(tmp_path), split="test", n=2), sentiment_model.input_spec, seed=0)
    assert len(eval_set) == 2 and eval_set.size == 3


def test_missing_column_lists_the_columns(tmp_path, sentiment_model):
    path = tmp_path / "data.csv"
    path.write_text("body,label\nhello,0\n")
    with pytest.raises(DataError, match="cannot find the text column.*columns are: body, label.*--text-column"):
        load_eval_set(DatasetConfig(spec=f"hf:{path}"), sentiment_model.input_spec, seed=0)
    with pytest.raises(DataError, match="has no column 'txt'; columns are: body, label"):
        load_eval_set(DatasetConfig(spec=f"hf:{path}", text_column="txt"), sentiment_model.input_spec, seed=0)


def test_text_pairs_are_refused_unless_one_column_is_named(tmp_path, sentiment_model):
    # QNLI's columns: "sentence" alone was picked before, silently scoring a pair model on half its input.
    path = tmp_path / "qnli.csv"
    path.write_text("question,sentence,label\nWhy?,Because it rained.,1\nWho?,Nobody came.,0\n")
    with pytest.raises(DataError, match="holds text pairs .*'question' and 'sentence'.*--text-column"):
        load_eval_set(DatasetConfig(spec=f"hf:{path}"), sentiment_model.input_spec, seed=0)
    named = load_eval_set(DatasetConfig(spec=f"hf:{path}", text_column="sentence"), sentiment_model.input_spec, seed=0)
    assert [ex.input for ex in named.examples] == ["Because it rained.", "Nobody came."]


def test_label_out_of_range_is_refused(tmp_path, sentiment_model):
    path = tmp_path / "data.jsonl"
    path.write_text('{"text": "ok", "label": 0}\n{"text": "odd", "label": 5}\n')
    with pytest.raises(DataError, match="label 5 .* out of range .* 2 classes"):
        load_eval_set(DatasetConfig(spec=f"hf:{path}"), sentiment_model.input_spec, seed=0)


def test_unreadable_and_unknown_datasets(tmp_path, sentiment_model, digits_model):
    bad = tmp_path / "notes.txt"
    bad.write_text("x")
    with pytest.raises(DataError, match="unsupported file type"):
        load_eval_set(DatasetConfig(spec=f"hf:{bad}"), sentiment_model.input_spec, seed=0)
    with pytest.raises(DataError, match="unknown dataset 'nothing-here'"):
        load_eval_set(DatasetConfig(spec="nothing-here"), sentiment_model.input_spec, seed=0)
    with pytest.raises(DataError, match="holds text but model 'builtin:digits-cnn' takes image"):
        load_eval_set(DatasetConfig(spec="builtin:sentiment"), digits_model.input_spec, seed=0)
    with pytest.raises(DataError, match="cannot load dataset 'no-such/dataset-xyz'"):
        load_eval_set(DatasetConfig(spec="hf:no-such/dataset-xyz"), sentiment_model.input_spec, seed=0)


def test_image_folder_is_resized_to_the_model_input(tmp_path, digits_model):
    from PIL import Image

    for label in ("0", "1"):
        (tmp_path / "test" / label).mkdir(parents=True)
        Image.new("RGB", (40, 50), color=(255, 255, 255) if label == "1" else (0, 0, 0)).save(tmp_path / "test" / label / "a.png")
    eval_set = load_eval_set(DatasetConfig(spec=str(tmp_path), split="test"), digits_model.input_spec, seed=0)
    images = torch.stack([ex.input for ex in eval_set.examples])
    assert images.shape == (2, 1, 32, 32) and images.min() >= 0 and images.max() <= 1
    assert sorted(ex.label for ex in eval_set.examples) == [0, 1]


def test_class_label_names_map_to_model_labels(tmp_path, digits_model):
    from PIL import Image

    # folders named by class index, in an order where position != class (sorted: "3" < "7")
    for label in ("3", "7"):
        (tmp_path / "test" / label).mkdir(parents=True)
        Image.new("L", (8, 8), color=128).save(tmp_path / "test" / label / "x.png")
    eval_set = load_eval_set(DatasetConfig(spec=str(tmp_path), split="test"), digits_model.input_spec, seed=0)
    assert sorted(ex.label for ex in eval_set.examples) == [3, 7]


def test_local_loads_draw_no_datasets_progress_bars(tmp_path, sentiment_model, capfd):
    import datasets

    datasets.enable_progress_bars()
    path = tmp_path / "reviews.tsv"
    path.write_text("text\tlabel\nGreat film!\t1\nAwful food.\t0\n")
    eval_set = load_eval_set(DatasetConfig(spec=f"hf:{path}"), sentiment_model.input_spec, seed=0)
    assert [ex.label for ex in eval_set.examples] == [1, 0]
    assert not datasets.is_progress_bar_enabled()
    err = capfd.readouterr().err
    assert "Downloading" not in err and "Generating" not in err, err


def test_sharded_split_files_are_one_split(tmp_path, sentiment_model):
    (tmp_path / "test-00000-of-00002.csv").write_text("text,label\nGood.,1\nBad.,0\n")
    (tmp_path / "test-00001-of-00002.csv").write_text("text,label\nFine.,1\n")
    eval_set = load_eval_set(DatasetConfig(spec=f"hf:{tmp_path}"), sentiment_model.input_spec, seed=0)
    assert sorted(ex.input for ex in eval_set.examples) == ["Bad.", "Fine.", "Good."]


def test_utf8_check_allows_a_character_cut_by_the_sample(tmp_path, sentiment_model):
    # The binary check reads the first 64 KiB; an "é" straddling that edge is still text.
    head = "text,label\n"
    filler = "a" * (65535 - len(head))
    path = tmp_path / "long.csv"
    path.write_text(f"{head}{filler}é,1\nok,0\n", encoding="utf-8")
    assert path.read_bytes()[65535:65536] == "é".encode()[:1]
    eval_set = load_eval_set(DatasetConfig(spec=f"hf:{path}"), sentiment_model.input_spec, seed=0)
    assert [ex.label for ex in eval_set.examples] == [1, 0]


def test_rows_outside_the_subsample_are_not_checked(tmp_path, sentiment_model):
    # Only the rows evaluated decide the numbers; a subsample that avoids a bad row runs.
    path = tmp_path / "data.jsonl"
    path.write_text('{"text": "good", "label": 1}\n{"text": null, "label": 0}\n{"text": "bad", "label": 0}\n')
    assert subsample_indices(3, 1, seed=0) == [2] and subsample_indices(3, 1, seed=5) == [1]
    eval_set = load_eval_set(DatasetConfig(spec=f"hf:{path}", n=1), sentiment_model.input_spec, seed=0)
    assert [(ex.id, ex.input) for ex in eval_set.examples] == [("test-2", "bad")]
    with pytest.raises(DataError, match=r"has no value in row 1"):
        load_eval_set(DatasetConfig(spec=f"hf:{path}", n=1), sentiment_model.input_spec, seed=5)
    with pytest.raises(DataError, match=r"column 'text' of .* has no value in row 1 \(counting data rows from 0\)"):
        load_eval_set(DatasetConfig(spec=f"hf:{path}"), sentiment_model.input_spec, seed=0)


@pytest.mark.parametrize(
    ("names", "labels", "expected"),
    [
        (["Positive", "NEGATIVE"], ("negative", "positive"), [1, 0]),  # by the model's label names
        (["1", "0"], ("negative", "positive"), [1, 0]),  # by class index
        (["neg", "pos"], ("LABEL_0", "LABEL_1"), [0, 1]),  # a model whose labels name nothing: the dataset's order
        (["1 star", "2 stars"], ("LABEL_0", "LABEL_1"), [0, 1]),  # names holding digits are names, not indices
    ],
)
def test_class_names_map_to_model_classes(names, labels, expected):
    from suite.data.base import InputSpec
    from suite.data.load import _class_label_map

    assert _class_label_map(names, InputSpec("text", labels), "d") == expected


@pytest.mark.parametrize(("names", "labels"), [(["pos", "neg"], ("negative", "positive")),
                                               (["zero", "one", "two"], ("0", "1", "2"))])
def test_class_names_that_are_not_a_model_with_labels_own_are_refused(names, labels):
    """A model that names its classes, and data that names them otherwise: the data's order was
    taken (an image folder's is alphabetical: zero ... nine became eight, five, four ..., 8 %
    clean accuracy for 100 %; ['pos', 'neg'] scored 18.8 % for 81.2 %)."""
    from suite.data.base import InputSpec
    from suite.data.load import _class_label_map

    with pytest.raises(DataError, match=r"the classes of 'd' \(.*\) are neither the model's labels"):
        _class_label_map(names, InputSpec("text", labels), "d")


@pytest.mark.parametrize(("names", "bad"), [(["²", "³"], "²"), (["0", "²"], "²"), (["negative", "neutral"], "neutral"),
                                            (["½", "x"], "½")])
def test_class_names_that_are_neither_labels_nor_indices_are_refused(names, bad):
    from suite.data.base import InputSpec
    from suite.data.load import _class_label_map

    spec = InputSpec("text", ("negative", "positive"))
    with pytest.raises(DataError, match=f"class '{bad}' of 'd' .* neither one of the model's labels"):
        _class_label_map(names, spec, "d")


def test_a_name_the_model_s_labels_repeat_is_refused():
    """An id2label of positive, Positive: a data label "positive" took the last class silently."""
    from suite.data.base import InputSpec
    from suite.data.load import _class_label_map, _label_index

    spec = InputSpec("text", ("positive", "Positive", "negative"))
    with pytest.raises(DataError, match=r"label 'POSITIVE' in column 'label' of 'd' .* names several of the "
                                        r"model's classes \(0, 1: its labels repeat 'positive'\)"):
        _label_index("POSITIVE", spec, "label", "d", 0)
    with pytest.raises(DataError, match=r"class 'positive' of 'd' names several"):
        _class_label_map(["positive", "negative"], spec, "d")
    assert _label_index("negative", spec, "label", "d", 0) == 2 and _label_index("1", spec, "label", "d", 0) == 1


def test_bad_data_is_found_before_anything_is_written(tmp_path):
    from suite.cli.main import main

    data = tmp_path / "data.csv"
    data.write_text("text,label\n12,1\n")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as caught:
        main(["evaluate", "--model", "builtin:sentiment-tiny", "--dataset", f"hf:{data}", "--output", str(out)])
    assert caught.value.code == 2 and not out.exists()


def test_texts_past_the_model_s_tokens_are_said(tmp_path):
    """The model reads a text's first max_length tokens, while a word-level attack searches and
    queries all its words (one 17,000-word text held a run for an hour): the results say so."""
    import json

    import suite

    path = tmp_path / "long.jsonl"
    rows = [{"text": "great " * 70, "label": 1}, {"text": "bad food", "label": 0}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    results = suite.evaluate("builtin:sentiment-tiny", f"hf:{path}", attacks=["pruthi"], adversary="none")
    assert "1 of 2 texts run past the model's 64 tokens" in " ".join(results.warnings), results.warnings
    path.write_text(json.dumps({"text": "great " * 60, "label": 1}) + "\n")  # 62 tokens with [CLS] and [SEP]
    short = suite.evaluate("builtin:sentiment-tiny", f"hf:{path}", attacks=["pruthi"], adversary="none")
    assert not any("run past" in warning for warning in short.warnings), short.warnings


def test_builtin_datasets_name_their_classes_as_hub_class_labels_do():
    """The built-in datasets were taken by index whatever the model's labels: a model whose
    id2label reads (positive, negative) scored 25 % clean for 67 %, and a 3-class (neg, neu, pos)
    model took every positive sentence for neutral. Their class names now map as a Hub dataset's
    ClassLabel names do."""
    from suite.data.base import InputSpec

    config = DatasetConfig(spec="builtin:sentiment", split="test", n=30)
    plain = load_eval_set(config, InputSpec("text", ("negative", "positive")), 0)
    swapped = load_eval_set(config, InputSpec("text", ("POSITIVE", "NEGATIVE")), 0)
    generic = load_eval_set(config, InputSpec("text", ("LABEL_0", "LABEL_1")), 0)
    labels = [example.label for example in plain.examples]
    assert 0 < sum(labels) < len(labels)
    assert [example.label for example in swapped.examples] == [1 - label for label in labels]
    assert [example.label for example in generic.examples] == labels
    with pytest.raises(DataError, match="are neither the model's labels \\(neg, neu, pos\\).*evaluate a model over "
                                        "these classes"):
        load_eval_set(config, InputSpec("text", ("neg", "neu", "pos")), 0)
    digits = DatasetConfig(spec="builtin:digits", n=20)
    indexed = load_eval_set(digits, InputSpec("image", tuple(f"c{i}" for i in range(10)), (3, 32, 32)), 0)
    reversed_names = load_eval_set(digits, InputSpec("image", tuple(str(i) for i in range(9, -1, -1)), (3, 32, 32)), 0)
    assert [example.label for example in reversed_names.examples] == [9 - example.label for example in indexed.examples]
