"""Bad-input cases: data (see ``test_bad_input.py``).

Local data files and folders that cannot give a model its examples: empty, binary or
unparseable files; folders where several files claim one split; image folders holding a file
that is no image; labels that are no class; columns that do not exist or hold the wrong type.
Each is found while the dataset loads, before the run writes anything. None needs the Hub.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from bad_input_cases import Case


def text_run(dataset: str, *extra: str) -> tuple[str, ...]:
    """An ``evaluate`` of the built-in text model on ``dataset``."""
    return ("evaluate", "--model", "builtin:sentiment-tiny", "--dataset", dataset, "--output", "{tmp}/out", *extra)


def image_run(dataset: str, *extra: str) -> tuple[str, ...]:
    """An ``evaluate`` of the built-in image model on ``dataset``."""
    return ("evaluate", "--model", "builtin:digits-cnn", "--dataset", dataset, "--output", "{tmp}/out", *extra)


def write(name: str, content: str | bytes) -> Callable[[Path], None]:
    """A setup writing one file under the case's directory (folders made as needed)."""

    def setup(work: Path) -> None:
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))

    return setup


def write_all(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    """A setup running several setups in turn."""

    def setup(work: Path) -> None:
        for one in setups:
            one(work)

    return setup


def png_bytes() -> bytes:
    """A small valid grey PNG."""
    from io import BytesIO

    from PIL import Image

    buffer = BytesIO()
    Image.new("L", (64, 64), color=200).save(buffer, format="PNG")
    return buffer.getvalue()


def png(name: str) -> Callable[[Path], None]:
    """A setup writing a valid PNG."""
    return lambda work: write(name, png_bytes())(work)


def truncated_png(name: str) -> Callable[[Path], None]:
    """A setup writing a PNG cut off inside its data: PIL opens it but cannot decode it."""
    return lambda work: write(name, png_bytes()[:60])(work)


def bomb_png(name: str) -> Callable[[Path], None]:
    """A setup writing a PNG whose header claims 30000×30000 pixels (a decompression bomb: 45
    bytes on disk, 900 megapixels if decoded); PIL refuses it on open."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 30000, 30000, 8, 0, 0, 0, 0)
    return write(name, b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b""))


def tiff(name: str, mode: str) -> Callable[[Path], None]:
    """A setup writing a 64×64 TIFF of PIL mode ``mode`` (F: 32-bit floats, I: 32-bit integers,
    LAB: a colour space PIL cannot turn into grey)."""
    from io import BytesIO

    def setup(work: Path) -> None:
        from PIL import Image

        buffer = BytesIO()
        Image.new("RGB", (64, 64), color=(200, 100, 50)).convert("L" if mode in ("F", "I") else "RGB").convert(
            mode).save(buffer, format="TIFF")
        write(name, buffer.getvalue())(work)

    return setup


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


#: How a row is named in messages (rows of the split, from 0).
ROW0, ROW1 = "row 0 (counting data rows from 0)", "row 1 (counting data rows from 0)"
#: Bytes that are not UTF-8 (fixed, so the case is the same on every run).
BINARY = bytes((i * 167 + 13) % 256 for i in range(512))
GOOD = "text,label\nfine film,1\nbad film,0\n"

CASES: list[Case] = [
    # Files that are empty, binary, missing or do not parse.
    Case("data-csv-empty", text_run("hf:{tmp}/empty.csv"), "empty.csv' is empty", write("empty.csv", "")),
    Case("data-csv-header-only", text_run("hf:{tmp}/header.csv"), "has no rows in split 'test'",
         write("header.csv", "text,label\n")),
    Case("data-csv-binary", text_run("hf:{tmp}/random.csv"), "random.csv' is not UTF-8 text",
         write("random.csv", BINARY)),
    Case("data-jsonl-binary", text_run("hf:{tmp}/random.jsonl"), "random.jsonl' is not UTF-8 text",
         write("random.jsonl", b"\xff\xfe\xfd" * 100)),
    Case("data-csv-nul-bytes", text_run("hf:{tmp}/nul.csv"), "nul.csv' holds NUL bytes",
         write("nul.csv", b"text,label\n\x00\x00,1\n")),
    Case("data-csv-ragged", text_run("hf:{tmp}/ragged.csv"), "cannot load dataset",
         write("ragged.csv", "text,label\ngood,1\nbad,0,extra,fields\n")),
    Case("data-text-pairs-qnli", text_run("hf:{tmp}/qnli.csv"), "holds text pairs (columns 'question' and 'sentence')",
         write("qnli.csv", "question,sentence,label\nwhy?,because.,1\n")),
    Case("data-text-pairs-nli", text_run("hf:{tmp}/nli.jsonl"), "holds text pairs (columns 'premise' and 'hypothesis')",
         write("nli.jsonl", '{"premise": "a cat", "hypothesis": "an animal", "label": 0}\n')),
    Case("data-json-broken", text_run("hf:{tmp}/broken.json"), "cannot load dataset",
         write("broken.json", '{"text": ["good"], "label": [1]')),
    Case("data-json-not-a-table", text_run("hf:{tmp}/number.json"), "cannot load dataset",
         write("number.json", "42\n")),
    Case("data-jsonl-broken-line", text_run("hf:{tmp}/broken.jsonl"), "cannot load dataset",
         write("broken.jsonl", '{"text": "good", "label": 1}\n{"text": "bad", "label": \n')),
    Case("data-file-missing", text_run("hf:{tmp}/missing.csv"), "missing.csv' does not exist"),
    Case("data-relative-file-missing", text_run("hf:missing.csv"), "dataset path 'missing.csv' does not exist"),
    Case("data-bare-path-missing", text_run("{tmp}/missing.csv"), "missing.csv' does not exist"),
    Case("data-dir-missing", image_run("hf:{tmp}/no-such-folder/"), "no-such-folder/' does not exist"),
    Case("data-unsupported-file", text_run("hf:{tmp}/notes.txt"), "unsupported file type", write("notes.txt", GOOD)),
    # Folders: several files for one split, a split that is not there, no data at all.
    Case("data-dir-several-files-one-split", text_run("hf:{tmp}/data"),
         "3 files in", write_all(write("data/test.csv", GOOD), write("data/test_str.csv", "text,label\nx,positive\n"),
                                 write("data/test_cols.csv", "sentence,y\nfine,1\n"))),
    Case("data-dir-unknown-split", text_run("hf:{tmp}/data", "--split", "validation"), "split 'validation'",
         write_all(write("data/train.csv", GOOD), write("data/test.csv", GOOD))),
    Case("data-dir-empty", text_run("hf:{tmp}/data"), "cannot load dataset", write("data/README", "nothing here\n")),
    # Image folders.
    Case("data-image-in-a-nested-folder", image_run("hf:{tmp}/images"),
         "'test/1/sub/b.png' of dataset",
         write_all(png("images/test/0/a.png"), png("images/test/1/sub/b.png"))),
    Case("data-image-beside-the-class-folders", image_run("hf:{tmp}/images"),
         "'test/stray.png' of dataset", write_all(png("images/test/0/a.png"), png("images/test/stray.png"))),
    Case("data-image-link-to-nothing", image_run("hf:{tmp}/images"),
         "'test/1/gone.png' of dataset", write_all(
             png("images/test/0/a.png"), lambda work: (work / "images/test/1").mkdir(parents=True) or
             (work / "images/test/1/gone.png").symlink_to("/nonexistent/advsuite.png"))),
    Case("data-image-corrupt-png", image_run("hf:{tmp}/images"), "broken.png' in",
         write_all(png("images/test/0/a.png"), truncated_png("images/test/1/broken.png"))),
    Case("data-image-decompression-bomb", image_run("hf:{tmp}/images"), "bomb.png' in",
         write_all(png("images/test/0/a.png"), bomb_png("images/test/1/bomb.png"))),
    Case("data-image-text-as-png", image_run("hf:{tmp}/images"), "notes.png' in",
         write_all(png("images/test/0/a.png"), write("images/test/1/notes.png", "these are my notes\n"))),
    # Pixels with no defined range (a float or 32-bit integer TIFF: 0-255? 0-1? counts?) are
    # refused before anything runs, not clipped; a LAB TIFF cannot become the model's grey.
    Case("data-image-float-tiff", image_run("hf:{tmp}/images"), "float.tif' in '",
         write_all(png("images/test/0/a.png"), tiff("images/test/1/float.tif", "F"))),
    Case("data-image-int32-tiff", image_run("hf:{tmp}/images"), "32-bit integer pixels (PIL mode I)",
         write_all(png("images/test/0/a.png"), tiff("images/test/1/int.tif", "I"))),
    Case("data-image-lab-tiff-for-grey", image_run("hf:{tmp}/images"), "(PIL mode LAB) that cannot be converted",
         write_all(png("images/test/0/a.png"), tiff("images/test/1/lab.tif", "LAB"))),
    Case("data-image-class-superscript", image_run("hf:{tmp}/images"), "class '²'",
         write_all(png("images/test/0/a.png"), png("images/test/²/b.png"))),
    Case("data-image-class-only-superscript", image_run("hf:{tmp}/images"), "class '²'",
         write_all(png("images/test/³/a.png"), png("images/test/²/b.png"))),
    Case("data-image-column-string", image_run("hf:{tmp}/pixels.csv"),
         "column 'image' of", write("pixels.csv", "image,label\nnot-a-picture.png,1\n")),
    Case("data-image-column-list", image_run("hf:{tmp}/pixels.jsonl"), f"holds list [[0, 1], [1, 0]] in {ROW0}",
         write("pixels.jsonl", jsonl([{"image": [[0, 1], [1, 0]], "label": 1}]))),
    Case("data-text-for-an-image-model", image_run("builtin:sentiment"), "holds text but model"),
    # Labels that are no class of the model.
    Case("data-label-superscript", text_run("hf:{tmp}/labels.csv"), "label '²' in column 'label'",
         write("labels.csv", "text,label\ngood,1\nodd,²\n")),
    Case("data-label-unknown-name", text_run("hf:{tmp}/labels.csv"), "label 'neutral' in column 'label'",
         write("labels.csv", "text,label\ngood,positive\nmeh,neutral\n")),
    Case("data-label-fraction", text_run("hf:{tmp}/labels.csv"), "label 0.5 in column 'label'",
         write("labels.csv", "text,label\ngood,1\nmeh,0.5\n")),
    Case("data-label-empty-csv", text_run("hf:{tmp}/labels.csv"), "column 'label' of",
         write("labels.csv", "text,label\ngood,1\nmeh,\n")),
    Case("data-label-null-jsonl", text_run("hf:{tmp}/labels.jsonl"),
         f"has no value in {ROW0}: every example needs a label",
         write("labels.jsonl", jsonl([{"text": "meh", "label": None}, {"text": "good", "label": 1}]))),
    Case("data-label-nan-jsonl", text_run("hf:{tmp}/labels.jsonl"),
         f"has no value in {ROW0}: every example needs a label",
         write("labels.jsonl", '{"text": "hi", "label": NaN}\n{"text": "ho", "label": 1.5}\n')),
    Case("data-label-out-of-range", text_run("hf:{tmp}/labels.csv"), "out of range",
         write("labels.csv", "text,label\ngood,1\nodd,7\n")),
    # Text columns that hold no text.
    Case("data-text-numeric", text_run("hf:{tmp}/numbers.csv"), "column 'text' of",
         write("numbers.csv", "text,label\n12,1\n34,0\n")),
    Case("data-text-empty-cell", text_run("hf:{tmp}/texts.csv"), f"has no value in {ROW1}",
         write("texts.csv", "text,label\nhello,1\n,0\n")),
    # An empty or blank string was scored (the model's bias on no input) and counted robust: nothing to attack.
    Case("data-text-empty-string-jsonl", text_run("hf:{tmp}/texts.jsonl"), f"holds no text in {ROW1}",
         write("texts.jsonl", jsonl([{"text": "good", "label": 1}, {"text": "", "label": 1}]))),
    Case("data-text-blank-csv", text_run("hf:{tmp}/texts.csv"), f"holds only white space in {ROW0}",
         write("texts.csv", 'text,label\n"   \t ",1\ngood,1\n')),
    Case("data-label-unlabelled-split", text_run("hf:{tmp}/test.jsonl"),
         "has label -1, which marks an unlabelled example (the Hub's mark of a hidden label): give every example its label",
         write("test.jsonl", jsonl([{"text": "good", "label": -1}, {"text": "bad", "label": -1}]))),
    Case("data-label-double-minus", text_run("hf:{tmp}/labels.jsonl"), "label '--1' in column 'label'",
         write("labels.jsonl", jsonl([{"text": "good", "label": "--1"}]))),
    # A single file is one split under any name: a second split of it reads the same rows.
    Case("data-one-file-adversary-split", text_run("hf:{tmp}/data.jsonl", "--adversary", "none,cal",
                                                   "--adversary-split", "validation"),
         "is one file, which is one split whatever its name, so it would read the same rows as 'test'",
         write("data.jsonl", jsonl([{"text": "good", "label": 1}, {"text": "bad", "label": 0}]))),
    Case("data-text-null", text_run("hf:{tmp}/texts.jsonl"), "column 'text' of",
         write("texts.jsonl", jsonl([{"text": "good", "label": 1}, {"text": None, "label": 0}]))),
    Case("data-text-list", text_run("hf:{tmp}/texts.jsonl"), f"holds list ['good', 'film'] in {ROW0}, not a string",
         write("texts.jsonl", jsonl([{"text": ["good", "film"], "label": 1}]))),
    # Columns named on the command line that do not exist, or none found.
    Case("data-text-column-missing", text_run("hf:{tmp}/data.csv", "--text-column", "body"),
         "has no column 'body'; columns are: text, label", write("data.csv", GOOD)),
    Case("data-label-column-missing", text_run("hf:{tmp}/data.csv", "--label-column", "stars"),
         "has no column 'stars'", write("data.csv", GOOD)),
    Case("data-image-column-missing", image_run("hf:{tmp}/images", "--image-column", "picture"),
         "has no column 'picture'", png("images/test/0/a.png")),
    Case("data-no-text-column", text_run("hf:{tmp}/data.csv"), "cannot find the text column",
         write("data.csv", "body,label\ngood,1\n")),
    Case("data-no-label-column", text_run("hf:{tmp}/data.csv"), "cannot find the label column",
         write("data.csv", "text,stars\ngood,1\n")),
    Case("data-jsonl-not-utf8-after-64-kib", text_run("hf:{tmp}/late.jsonl"), "late.jsonl' is not UTF-8 text (byte",
         write("late.jsonl", (jsonl([{"text": "x" * 70_000, "label": 0}]) + '{"text": "caf').encode() + b"\xe9"
               + b'", "label": 0}\n')),
]
