"""Bad-input cases: data files (see ``test_bad_input.py``)."""

from __future__ import annotations

from pathlib import Path

from bad_input_cases import Case

TEXT = ("evaluate", "--model", "builtin:sentiment-tiny", "--adversary", "none", "--output", "{tmp}/out", "--dataset")
IMAGE = ("evaluate", "--model", "builtin:digits-cnn", "--output", "{tmp}/out", "--split", "train", "--dataset")


def _files(**contents: str | bytes):
    """Write ``name=content`` files (``__`` in a name is a directory separator)."""

    def setup(work: Path) -> None:
        for name, content in contents.items():
            path = work / name.replace("__", "/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content if isinstance(content, bytes) else content.encode())

    return setup


def _png() -> bytes:
    from io import BytesIO

    from PIL import Image

    buffer = BytesIO()
    Image.new("L", (8, 8), 128).save(buffer, format="PNG")
    return buffer.getvalue()


def _image_folder(bad_name: str, bad: bytes):
    def setup(work: Path) -> None:
        for folder, name, content in (("0", "good.png", _png()), ("1", "good.png", _png()), ("1", bad_name, bad)):
            path = work / "imgs" / "train" / folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)

    return setup


GOOD = "text,label\nfine film,1\nbad film,0\n"

CASES: list[Case] = [
    Case("data-empty-csv", (*TEXT, "hf:{tmp}/d.csv"), "is empty", _files(**{"d.csv": ""})),
    Case("data-binary-csv", (*TEXT, "hf:{tmp}/d.csv"), "is not UTF-8 text",
         _files(**{"d.csv": bytes(range(128, 256)) * 4})),
    Case("data-nul-bytes-csv", (*TEXT, "hf:{tmp}/d.csv"), "holds NUL bytes", _files(**{"d.csv": b"text,label\n\x00\x00,1\n"})),
    Case("data-binary-jsonl", (*TEXT, "hf:{tmp}/d.jsonl"), "is not UTF-8 text",
         _files(**{"d.jsonl": b"\xff\xfe\xfd" * 100})),
    Case("data-split-matches-three-files", (*TEXT, "hf:{tmp}/dir"), "3 files in",
         _files(**{"dir__test.csv": GOOD, "dir__test_str.csv": "text,label\nx,positive\n",
                   "dir__test_cols.csv": "body,y\nx,1\n"})),
    Case("data-numeric-text-column", (*TEXT, "hf:{tmp}/d.csv"), "has int 1 as its text",
         _files(**{"d.csv": "text,label\n1,0\n2,1\n"})),
    Case("data-null-text", (*TEXT, "hf:{tmp}/d.csv"), "has no value as its text",
         _files(**{"d.csv": "text,label\n,0\nhello,1\n"})),
    Case("data-null-label", (*TEXT, "hf:{tmp}/d.csv"), "label None in column 'label'",
         _files(**{"d.csv": "text,label\nhi,\nho,1\n"})),
    Case("data-nan-label", (*TEXT, "hf:{tmp}/d.jsonl"), "label nan",
         _files(**{"d.jsonl": '{"text": "hi", "label": NaN}\n{"text": "ho", "label": 1.5}\n'})),
    Case("data-superscript-label", (*TEXT, "hf:{tmp}/d.csv"), "label '²' in column 'label'",
         _files(**{"d.csv": "text,label\nhi,²\n"})),
    Case("data-label-out-of-range", (*TEXT, "hf:{tmp}/d.csv"), "out of range", _files(**{"d.csv": "text,label\nhi,7\n"})),
    Case("data-jsonl-does-not-parse", (*TEXT, "hf:{tmp}/d.jsonl"), "cannot load dataset",
         _files(**{"d.jsonl": '{"text": "a", "label": 0}\n{"text": "b", "label"\n'})),
    Case("data-json-not-a-table", (*TEXT, "hf:{tmp}/d.json"), "cannot load dataset", _files(**{"d.json": "42\n"})),
    Case("data-unsupported-extension", (*TEXT, "hf:{tmp}/d.txt"), "unsupported file type", _files(**{"d.txt": GOOD})),
    Case("data-missing-file", (*TEXT, "hf:{tmp}/nope.csv"), "does not exist"),
    Case("data-missing-text-column", (*TEXT, "hf:{tmp}/d.csv", "--text-column", "body"), "has no column 'body'",
         _files(**{"d.csv": GOOD})),
    Case("data-missing-label-column", (*TEXT, "hf:{tmp}/d.csv", "--label-column", "y"), "has no column 'y'",
         _files(**{"d.csv": GOOD})),
    Case("data-no-text-column-found", (*TEXT, "hf:{tmp}/d.csv"), "cannot find the text column",
         _files(**{"d.csv": "body,label\nhi,0\n"})),
    Case("data-missing-split", (*TEXT, "hf:{tmp}/dir", "--split", "validation"), "cannot load dataset",
         _files(**{"dir__test.csv": GOOD})),
    Case("data-image-folder-non-image", (*IMAGE, "hf:{tmp}/imgs"), "notes.png' in",
         _image_folder("notes.png", b"these are my notes, not a picture\n")),
    Case("data-image-folder-corrupt-png", (*IMAGE, "hf:{tmp}/imgs"), "cannot be read",
         _image_folder("broken.png", _png()[:20])),
    Case("data-string-in-image-column", (*IMAGE, "hf:{tmp}/d.csv"), "has str 'foo.png' as its image",
         _files(**{"d.csv": "image,label\nfoo.png,0\n"})),
    Case("data-list-in-image-column", (*IMAGE, "hf:{tmp}/d.jsonl"), "has list [0.1, 0.2] as its image",
         _files(**{"d.jsonl": '{"image": [0.1, 0.2], "label": 0}\n'})),
    Case("data-text-for-an-image-model", (*IMAGE, "builtin:sentiment"), "holds text but model"),
]
