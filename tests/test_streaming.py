"""Image datasets stream: examples hold a row reference and decode on each read, giving the
tensors an eager decode gives, bit for bit, and the same evaluation."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch

from suite.data.base import Example, InputSpec, LazyInput
from suite.data.config import DatasetConfig
from suite.data.load import load_eval_set
from suite.errors import DataError

RGB = InputSpec("image", ("0", "1"), (3, 24, 24), "rgb-model")


def image_folder(root, count: int = 40):
    """``count`` PNGs of varied size and mode (RGB, grey, RGBA) in class folders 0 and 1; every
    image differs. Returns {path: label}."""
    from PIL import Image

    rng = np.random.default_rng(0)
    files = {}
    for i in range(count):
        label = i % 2
        folder = root / "test" / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        height, width = (int(v) for v in rng.integers(16, 64, size=2))
        pixels = (rng.random((height, width, 3)) * 255).astype(np.uint8)
        path = folder / f"{i}.png"
        Image.fromarray(pixels).convert(("RGB", "L", "RGBA")[i % 3]).save(path)
        files[path] = label
    return files


def eager(path, input_size) -> torch.Tensor:
    """The tensor loading gave before streaming: the decoded PIL image, conformed."""
    from PIL import Image

    from suite.data.images import conform_image

    with Image.open(path) as image:
        image.load()
        return conform_image(image, input_size)


@pytest.mark.parametrize("spec", [RGB, InputSpec("image", ("0", "1"), (1, 32, 32), "grey-model")],
                         ids=["rgb-24", "grey-32"])
def test_image_folder_streams_the_eager_tensors_bit_for_bit(tmp_path, spec):
    files = image_folder(tmp_path)
    expected = {eager(path, spec.input_size).numpy().tobytes(): label for path, label in files.items()}
    assert len(expected) == len(files)  # every image differs, so a tensor names its file
    eval_set = load_eval_set(DatasetConfig(spec=str(tmp_path), split="test"), spec, seed=0)
    loaded = {}
    for example in eval_set.examples:
        value = example.input
        assert value.dtype == torch.float32 and value.shape == spec.input_size and value.is_contiguous()
        loaded[value.numpy().tobytes()] = example.label
    assert loaded == expected


def test_streamed_examples_hold_no_pixels_and_decode_on_each_read(tmp_path, monkeypatch):
    import suite.data.images as images

    image_folder(tmp_path)
    eval_set = load_eval_set(DatasetConfig(spec=str(tmp_path), split="test"), RGB, seed=0)
    assert len(eval_set) == 40
    for example in eval_set.examples:
        assert isinstance(example.source, LazyInput)
        assert not any(isinstance(value, torch.Tensor) for value in vars(example.source).values())
    # All 40 examples pickle (the memory-mapped table as its file) in far less than their
    # pixels: 40 × 3 × 24 × 24 float32 = 276 KB.
    assert len(pickle.dumps(eval_set.examples)) < 20_000
    decodes = []

    def counting(image, input_size, name="the image", preprocessing=None):
        decodes.append(image)
        return conform_image(image, input_size, name, preprocessing)

    conform_image = images.conform_image
    monkeypatch.setattr(images, "conform_image", counting)
    example = eval_set.examples[3]
    first, second = example.input, example.input
    assert len(decodes) == 2 and torch.equal(first, second) and first is not second


def test_a_file_damaged_after_loading_is_one_line_naming_it(tmp_path):
    files = image_folder(tmp_path, count=4)
    eval_set = load_eval_set(DatasetConfig(spec=str(tmp_path), split="test"), RGB, seed=0)
    for path in files:
        path.write_bytes(path.read_bytes()[:80])
    with pytest.raises(DataError, match=r"image '.*\.png' in '.*' cannot be read \(") as caught:
        eval_set.examples[0].input
    assert "\n" not in str(caught.value)


def test_in_memory_inputs_stay_as_given():
    value = torch.full((1, 2, 2), 0.5)
    example = Example(id="a", input=value, label=1)
    assert example.input is value and example.source is value
    assert Example("t", "a text", 0).input == "a text"


def test_a_jpeg_cut_short_is_refused_before_anything_is_written(tmp_path):
    """``verify`` cannot see a JPEG cut short (only decoding does); the evaluation decodes every
    example for the run's data fingerprint before it writes anything, so it is refused there."""
    import suite

    image_folder(tmp_path / "data", count=4)
    from PIL import Image

    bad = tmp_path / "data" / "test" / "1" / "cut.jpg"
    Image.fromarray(np.full((64, 64, 3), 90, dtype=np.uint8)).save(bad, quality=90)
    bad.write_bytes(bad.read_bytes()[:400])
    with pytest.raises(DataError, match=r"image '.*cut\.jpg' in .* cannot be read \(OSError"):
        suite.evaluate("builtin:digits-cnn", str(tmp_path / "data"), attacks=["fgm_linf"], eps=0.05,
                       output=tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def digits_folder(root, count: int = 40) -> None:
    """``count`` built-in test digits as grey PNGs in folders named by class."""
    from PIL import Image

    from suite.data.builtin import digits

    split = digits("test")
    for i, (image, label) in enumerate(list(zip(split.inputs, split.labels))[:count]):
        folder = root / "test" / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray((image[0].numpy() * 255).round().astype(np.uint8)).save(folder / f"{i}.png")


def test_evaluate_on_an_image_folder_streaming_equals_eager(tmp_path, monkeypatch):
    """The same records and results as an evaluation whose examples hold their tensors."""
    import suite
    import suite.evaluation.prepare as prepare

    digits_folder(tmp_path / "data", count=24)
    options = suite.RunOptions(log_samples=True)

    def evaluate(name):
        results = suite.evaluate("builtin:digits-cnn", str(tmp_path / "data"), attacks=["fgm_linf"], eps=0.1,
                                 options=options, output=tmp_path / name)
        records = [json.loads(line) for line in (tmp_path / name / "records.jsonl").read_text().splitlines() if '"kind": "run"' not in line]
        return results, [{key: value for key, value in record.items() if key != "seconds"} for record in records]

    streamed, streamed_records = evaluate("streamed")
    load = prepare.load_eval_set

    def materialised(*args, **kwargs):
        eval_set = load(*args, **kwargs)
        eval_set.examples = [Example(ex.id, ex.input, ex.label) for ex in eval_set.examples]
        assert all(isinstance(ex.source, torch.Tensor) for ex in eval_set.examples)
        return eval_set

    monkeypatch.setattr(prepare, "load_eval_set", materialised)
    held, held_records = evaluate("held")
    assert streamed_records == held_records and len(streamed_records) >= 24
    assert 0 < streamed.clean_accuracy == held.clean_accuracy
    assert streamed.worst_case_robust_accuracy == held.worst_case_robust_accuracy
    assert streamed.clean_accuracy > streamed.worst_case_robust_accuracy  # the attacks did something
    for kind in ("clean", "fgm_linf"):
        assert sorted(p.name for p in (tmp_path / "streamed" / "samples" / kind).iterdir()) == \
            sorted(p.name for p in (tmp_path / "held" / "samples" / kind).iterdir())


@pytest.mark.parametrize("channels", [1, 3], ids=["grey-model", "rgb-model"])
def test_sixteen_bit_grey_images_are_scaled_not_clipped(tmp_path, channels):
    """A 16-bit grey PNG is scaled by 1/65535: PIL's own conversion to 8 bits clips it at 255,
    which made such an image nearly white. At the model's size the 16-bit image whose values
    are an 8-bit image's × 257 gives that image's tensor exactly; resized, within 1/255."""
    from PIL import Image

    rng = np.random.default_rng(1)
    spec = InputSpec("image", ("0", "1"), (channels, 32, 32), "model")
    pairs = []
    for i, size in enumerate((32, 48)):
        pixels = (rng.random((size, size)) * 255).astype(np.uint8)
        eight, sixteen = tmp_path / "test" / "0" / f"{i}-8.png", tmp_path / "test" / "1" / f"{i}-16.png"
        for path in (eight, sixteen):
            path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(eight)
        Image.fromarray(pixels.astype(np.uint16) * 257).save(sixteen)
        with Image.open(sixteen) as image:
            assert image.mode == "I;16" and np.asarray(image.convert("L")).mean() > 250  # what clipping gave
        pairs.append((eight, sixteen))
    eval_set = load_eval_set(DatasetConfig(spec=str(tmp_path), split="test"), spec, seed=0)
    by_file = {example.source.table[example.source.row]["image"]["path"]: example.input for example in eval_set.examples}
    for index, (eight, sixteen) in enumerate(pairs):
        low, high = by_file[str(eight)], by_file[str(sixteen)]
        assert high.shape == (channels, 32, 32) and high.dtype == torch.float32
        if index == 0:  # no resize: (v·257)/65535 and v/255 are the same quotient, rounded once
            assert torch.equal(high, low)
        else:
            assert (high - low).abs().max() <= 1 / 255 + 1e-6
        assert abs(float(high.mean()) - float(low.mean())) < 0.01


def test_tensors_are_pixels_in_a_known_range():
    from suite.data.images import conform_image

    pixels = torch.arange(0, 256, dtype=torch.uint8).view(1, 16, 16)
    assert torch.equal(conform_image(pixels, (1, 16, 16)), pixels.float() / 255)
    with pytest.raises(DataError, match="tensor of torch.int32, whose range is unknown"):
        conform_image(pixels.int(), (1, 16, 16))
    with pytest.raises(DataError, match=r"pixels outside \[0, 1\] \(from 0 to 255\)"):
        conform_image(pixels.float(), (1, 16, 16))
    with pytest.raises(DataError, match="NaN or infinite pixels"):
        conform_image(torch.full((1, 16, 16), float("nan")), (1, 16, 16))


def test_colour_to_grey_is_one_rule_and_other_channel_counts_are_refused(tmp_path):
    """A pure red image became 0.298 from a file (PIL's luma) and 0.333 from a tensor (the
    channels' mean): both are luma now. A channel count neither 1 nor 3 is one line (it was a
    ValueError deep in the model's forward pass)."""
    from PIL import Image

    from suite.data.images import conform_image

    red = torch.zeros(3, 8, 8)
    red[0] = 1.0
    Image.new("RGB", (8, 8), (255, 0, 0)).save(tmp_path / "red.png")
    from_file = conform_image(Image.open(tmp_path / "red.png"), (1, 8, 8))
    from_tensor = conform_image(red, (1, 8, 8))
    assert torch.allclose(from_file, from_tensor, atol=1 / 255) and abs(float(from_tensor.mean()) - 0.299) < 1e-6
    assert torch.equal(conform_image(red[:1], (3, 8, 8)), red[:1].expand(3, -1, -1))
    with pytest.raises(DataError, match="has 1 channels and the model takes 2"):
        conform_image(red[:1], (2, 8, 8))
    with pytest.raises(DataError, match="is an image file, whose pixels are grey or RGB, and the model takes 2"):
        conform_image(Image.open(tmp_path / "red.png"), (2, 8, 8))


def test_an_image_is_turned_as_its_exif_orientation_says(tmp_path):
    """`datasets` decodes a JPEG as its camera recorded it; the suite read the stored pixels, so
    rotated photos were scored sideways (12.5 % for 100 % on rotated digits)."""
    from PIL import Image

    from suite.data.images import conform_image

    image = Image.new("L", (16, 8), 0)
    image.paste(255, (0, 0, 8, 8))  # left half white, stored 16 wide and 8 high
    exif = image.getexif()
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to view
    image.save(tmp_path / "turned.png", exif=exif)
    seen = conform_image(Image.open(tmp_path / "turned.png"), (1, 16, 8))  # viewed: 8 wide, 16 high
    assert seen.shape == (1, 16, 8)
    assert float(seen[0, :8].mean()) > 0.9 and float(seen[0, 8:].mean()) < 0.1  # the white half on top


def test_an_image_path_that_is_no_regular_file_is_one_line(tmp_path):
    import os

    from suite.data.images import open_image

    os.mkfifo(tmp_path / "pipe.png")
    with pytest.raises(DataError, match="is not a regular file"):
        open_image({"path": str(tmp_path / "pipe.png"), "bytes": None}, "image", "d")


def test_an_image_over_pil_s_bomb_warning_is_said_once_in_a_line(tmp_path, caplog, recwarn):
    """PIL's DecompressionBombWarning (89 M pixels and more) reached stderr raw, two lines each
    time the image was read."""
    from PIL import Image

    from suite.data.images import open_image

    Image.new("L", (9500, 9500)).save(tmp_path / "large.png")  # 90,250,000 pixels
    item = {"path": str(tmp_path / "large.png"), "bytes": None}
    with caplog.at_level("WARNING", logger="suite.data.images"):
        for _ in range(2):
            open_image(item, "image", "d").close()
    said = [record.getMessage() for record in caplog.records if "decompression bomb" in record.getMessage()]
    assert len(said) == 1 and "90,250,000 pixels" in said[0]
    assert not [warning for warning in recwarn if issubclass(warning.category, Image.DecompressionBombWarning)]
