"""Images of another size than the model's are resized and cropped as timm's evaluation
transform does (``crop_pct``, ``interpolation``, ``crop_mode`` from the model's pretrained_cfg),
checked side by side against timm's own ``create_transform``; images of the model's size are
taken as they are."""

from __future__ import annotations

import json

import pytest
import torch

from suite.data.base import SUITE_PREPROCESSING, Preprocessing
from suite.data.images import conform_image
from suite.errors import ConfigError
from suite.models import load_model
from suite.models.config import ModelConfig
from tiny_models import save_tiny_timm


def _picture(height: int, width: int, seed: int = 0):
    from PIL import Image

    generator = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (height, width, 3), generator=generator, dtype=torch.uint8)
    return Image.fromarray(pixels.numpy(), "RGB")


@pytest.mark.parametrize("crop_pct", [0.875, 0.95, 1.0])
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
@pytest.mark.parametrize("crop_mode", ["center", "squash"])
def test_image_files_are_resized_and_cropped_as_timms_evaluation_transform(crop_pct, interpolation, crop_mode):
    from timm.data import create_transform

    preprocessing = Preprocessing(crop_pct, interpolation, crop_mode)
    for target in ((3, 24, 24), (3, 16, 24)):
        theirs = create_transform(input_size=target, is_training=False, crop_pct=crop_pct, interpolation=interpolation,
                                  crop_mode=crop_mode, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
        for height, width in ((37, 53), (53, 37), (30, 30), (9, 14)):
            image = _picture(height, width, seed=height * width)
            ours = conform_image(image, target, preprocessing=preprocessing)
            assert ours.shape == target
            torch.testing.assert_close(ours, theirs(image), rtol=0, atol=0)


def test_an_image_of_the_models_size_is_taken_as_it_is():
    """A 224² tensor or file is preprocessed already (RobustBench's ImageNet tensors): timm's
    transform would zoom into it by 1/crop_pct again."""
    from torchvision.transforms import functional as F

    preprocessing = Preprocessing(0.875, "bicubic", "center")
    image = _picture(24, 24)
    torch.testing.assert_close(conform_image(image, (3, 24, 24), preprocessing=preprocessing), F.to_tensor(image))
    tensor = torch.rand(3, 24, 24)
    torch.testing.assert_close(conform_image(tensor, (3, 24, 24), preprocessing=preprocessing), tensor)


def test_tensors_are_cropped_as_files_are_not_squashed():
    """A tensor of another aspect ratio keeps it, as a file does: its centre is cropped (it was
    squashed to the model's size before, while a file of the same pixels was cropped)."""
    wide = torch.zeros(1, 8, 16)
    wide[..., :4] = 1.0  # a stripe the centre crop leaves out
    conformed = conform_image(wide, (1, 8, 8))
    torch.testing.assert_close(conformed, wide[..., 4:12])
    assert float(conformed.max()) == 0.0
    # Resized as a file is, up to the two resamplers' rounding.
    from PIL import Image

    picture = torch.rand(1, 20, 30, generator=torch.Generator().manual_seed(1))
    as_file = Image.fromarray((picture[0] * 255).round().to(torch.uint8).numpy(), "L")
    for preprocessing in (SUITE_PREPROCESSING, Preprocessing(0.875, "bicubic", "center")):
        from_tensor = conform_image((picture * 255).round() / 255, (1, 12, 12), preprocessing=preprocessing)
        from_file = conform_image(as_file, (1, 12, 12), preprocessing=preprocessing)
        assert from_tensor.shape == from_file.shape == (1, 12, 12)
        assert float((from_tensor - from_file).abs().mean()) < 0.02


def test_timm_models_preprocess_as_timm_resolves_their_config(tmp_path):
    """A timm name: its pretrained_cfg's geometry. A timm directory: its config.json's, timm's
    defaults where it has none, exactly what ``timm.create_model('local-dir:...')`` resolves."""
    import timm
    from timm.data import resolve_model_data_config

    named = load_model(ModelConfig(spec="timm:test_resnet.r160_in1k", pretrained=False))
    assert named.preprocessing == Preprocessing(0.95, "bilinear", "center")
    assert named.info.extra["preprocessing"] == {"crop_pct": 0.95, "interpolation": "bilinear", "crop_mode": "center"}

    directory = tmp_path / "m"
    save_tiny_timm(directory)
    config = json.loads((directory / "config.json").read_text())
    assert {key: config["pretrained_cfg"][key] for key in ("crop_pct", "interpolation", "crop_mode")} \
        == SUITE_PREPROCESSING.as_dict()  # the suite writes what it trained with
    for geometry in ({}, {"crop_pct": 0.9, "interpolation": "bicubic", "crop_mode": "squash"}):
        cfg = {key: value for key, value in config["pretrained_cfg"].items()
               if key not in ("crop_pct", "interpolation", "crop_mode")} | geometry
        (directory / "config.json").write_text(json.dumps(config | {"pretrained_cfg": cfg}))
        theirs = resolve_model_data_config(timm.create_model(f"local-dir:{directory}"))
        ours = load_model(f"timm:{directory}").preprocessing
        assert ours == Preprocessing(theirs["crop_pct"], theirs["interpolation"], theirs["crop_mode"])
    assert ours == Preprocessing(0.9, "bicubic", "squash")
    # Nor mean and std: timm's (ImageNet's), as timm normalises (the suite used 0.5).
    cfg = {key: value for key, value in config["pretrained_cfg"].items() if key not in ("mean", "std")}
    (directory / "config.json").write_text(json.dumps(config | {"pretrained_cfg": cfg}))
    theirs = resolve_model_data_config(timm.create_model(f"local-dir:{directory}"))
    loaded = load_model(f"timm:{directory}")
    torch.testing.assert_close(loaded.mean.flatten(), torch.tensor(theirs["mean"], dtype=torch.float32))
    torch.testing.assert_close(loaded.std.flatten(), torch.tensor(theirs["std"], dtype=torch.float32))


def test_built_in_models_keep_the_suites_own_preprocessing():
    assert load_model("builtin:digits-cnn").preprocessing == SUITE_PREPROCESSING


@pytest.mark.parametrize("geometry, message", [
    ({"crop_pct": 1.5}, "crop_pct must be a number in (0, 1]"),
    ({"interpolation": "cubic"}, "interpolation must be one of"),
    ({"crop_mode": "border"}, "'border' mode, which pads, is not implemented"),
])
def test_a_geometry_the_suite_cannot_apply_is_refused(tmp_path, geometry, message):
    directory = tmp_path / "m"
    save_tiny_timm(directory)
    config = json.loads((directory / "config.json").read_text())
    config["pretrained_cfg"].update(geometry)
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_model(f"timm:{directory}")


def test_ensemble_members_that_resize_differently_are_refused(tmp_path):
    for name, crop in (("a", 1.0), ("b", 0.875)):
        save_tiny_timm(tmp_path / name)
        config = json.loads((tmp_path / name / "config.json").read_text())
        config["pretrained_cfg"]["crop_pct"] = crop
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="ensemble members resize images differently"):
        load_model(f"ensemble:0.5*timm:{tmp_path / 'a'},0.5*timm:{tmp_path / 'b'}")
