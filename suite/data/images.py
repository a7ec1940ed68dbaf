"""Images of a dataset: conformed to what the model takes, checked up front, decoded per access.

An image dataset read through ``datasets`` (an image folder, a parquet file with an Image
column, a Hub dataset) is never held as pixels: ImageNet validation would be 30 GB as float32
tensors. Loading checks every image once without keeping it (:func:`check_image`: the header,
where PIL refuses a decompression bomb, and :meth:`PIL.Image.Image.verify`), and each example
then holds a :class:`DatasetImage`, a row reference into the memory-mapped dataset that decodes
and conforms the image each time ``example.input`` is read. The tensor is the one an eager
decode gives, bit for bit, so a run's numbers (and its data fingerprint) do not change.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from dataclasses import dataclass, field
from io import BytesIO
from typing import Any

import torch

from suite.data.base import SUITE_PREPROCESSING, LazyInput, Preprocessing
from suite.errors import DataError

logger = logging.getLogger(__name__)


#: PIL's modes of 16-bit grey pixels (PNG, TIFF). PIL's ``convert("L")`` clips them at 255
#: instead of scaling them, which turns such an image nearly white; they are scaled instead.
SIXTEEN_BIT = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})


def undefined_range(image: Any) -> str | None:
    """What makes a PIL image's pixel values unreadable as intensities, or ``None``: 32-bit
    integers (mode ``I``, outside PNG, which stores 16 bits at most) and floats (mode ``F``)
    come with no range (0–255? 0–1? a sensor's counts?), so the suite cannot scale them."""
    if image.mode == "F":
        return "32-bit float pixels (PIL mode F)"
    if image.mode == "I" and image.format != "PNG":
        return "32-bit integer pixels (PIL mode I)"
    return None


#: PIL's "L" conversion: L = R·299/1000 + G·587/1000 + B·114/1000 (ITU-R 601-2 luma).
LUMA = torch.tensor([0.299, 0.587, 0.114])


def resized_size(height: int, width: int, target: tuple[int, int], preprocessing: Preprocessing) -> tuple[int, int]:
    """The (height, width) an image of ``height`` × ``width`` is resized to before its centre is
    cropped to ``target``: timm's evaluation rule (``transforms_imagenet_eval``). Each side of
    ``target`` is scaled by 1 / ``crop_pct`` (floored); ``squash`` resizes to that, ``center`` keeps
    the aspect ratio: a square scale as torchvision's ``Resize(int)`` (the shorter side to it, the
    longer in proportion, truncated), otherwise as timm's ``ResizeKeepRatio`` (the smaller ratio,
    rounded)."""
    if not height or not width:
        raise DataError(f"an image of {height}×{width} pixels has nothing to resize")
    scale_h, scale_w = (math.floor(side / preprocessing.crop_pct) for side in target)
    if preprocessing.crop_mode == "squash":
        return scale_h, scale_w
    if scale_h == scale_w:
        short, long = (width, height) if width <= height else (height, width)
        new_long = int(scale_h * long / short)
        return (new_long, scale_h) if width <= height else (scale_h, new_long)
    ratio = min(height / scale_h, width / scale_w)
    return round(height / ratio), round(width / ratio)


def _crop_box(height: int, width: int, target: tuple[int, int]) -> tuple[int, int]:
    """The top-left corner of the centre crop, as torchvision's ``center_crop`` rounds it."""
    return int(round((height - target[0]) / 2.0)), int(round((width - target[1]) / 2.0))


def _pil_geometry(image: Any, target: tuple[int, int], preprocessing: Preprocessing) -> Any:
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as F

    if (image.height, image.width) == target:  # taken as preprocessed already
        return image
    size = resized_size(image.height, image.width, target, preprocessing)
    if size != (image.height, image.width):
        image = F.resize(image, list(size), interpolation=InterpolationMode(preprocessing.interpolation))
    return F.center_crop(image, list(target)) if size != target else image


#: Filters a tensor can be resized with (torch's ``interpolate``).
TENSOR_INTERPOLATIONS = ("bilinear", "bicubic", "nearest")


def _tensor_geometry(image: torch.Tensor, target: tuple[int, int], preprocessing: Preprocessing,
                     name: str) -> torch.Tensor:
    if tuple(image.shape[1:]) == target:  # taken as preprocessed already
        return image
    size = resized_size(image.shape[1], image.shape[2], target, preprocessing)
    if size != tuple(image.shape[1:]):
        mode = preprocessing.interpolation
        if mode not in TENSOR_INTERPOLATIONS:
            raise DataError(f"{name} is a tensor, and the model's preprocessing resizes with {mode!r} filtering, "
                            "which only image files have: give image files, or tensors of the model's input size")
        smooth = {"antialias": True, "align_corners": False} if mode != "nearest" else {}
        image = torch.nn.functional.interpolate(image[None], size=size, mode=mode, **smooth)[0]
    if size != target:
        top, left = _crop_box(size[0], size[1], target)
        image = image[:, top:top + target[0], left:left + target[1]]
    return image


def conform_image(image: Any, input_size: tuple[int, int, int], name: str = "the image",
                  preprocessing: Preprocessing = SUITE_PREPROCESSING) -> torch.Tensor:
    """A PIL image or C×H×W tensor as a float tensor in [0, 1] of the model's input size.

    PIL images are turned as their EXIF orientation says. An image of another size than the
    model's is then resized and centre-cropped to it as the model's ``preprocessing`` says (timm's
    evaluation geometry: :func:`resized_size`), with PIL's filters for files and torch's
    (antialiased) for tensors, files and tensors alike. One of the model's size is taken as it
    is: preprocessed already (RobustBench's ImageNet tensors are 224² after a resize to 256 and
    a centre crop; cropping them again would zoom in by 8/7). Grey images are repeated to 3
    channels and colour images weighted to 1 by luma (PIL's, for files and tensors alike) as the
    model needs; other channel counts are refused. 16-bit grey images are scaled by 1/65535 (and resized in float): PIL's own
    conversion to 8 bits would clip them. Images whose pixels have no defined range
    (:func:`undefined_range`) and modes PIL cannot convert are refused
    (:class:`~suite.errors.DataError` naming it as ``name``).
    """
    channels, height, width = input_size
    target = (height, width)
    if not isinstance(image, torch.Tensor):
        from PIL import Image
        from torchvision.transforms import functional as F

        reason = undefined_range(image)
        if reason is not None:
            raise _no_range(name, reason)
        if channels not in (1, 3):
            raise DataError(f"{name} is an image file, whose pixels are grey or RGB, and the model takes {channels} "
                            "channels: pass its inputs as tensors (the Python API)")
        from PIL import ImageOps

        # The orientation a camera recorded, as `datasets`' own decoding applies it (rotated
        # digits scored 12.5 % for 100 %).
        image = ImageOps.exif_transpose(image)
        if image.mode in SIXTEEN_BIT or image.mode == "I":  # "I" here: a 16-bit PNG
            import numpy as np

            grey = Image.fromarray(np.asarray(image, dtype=np.float32) / 65535.0)  # mode F, in [0, 1]
            tensor = F.to_tensor(_pil_geometry(grey, target, preprocessing)).clamp(0.0, 1.0)
            return tensor.expand(3, -1, -1).contiguous() if channels != 1 else tensor.contiguous()
        try:
            image = image.convert("L" if channels == 1 else "RGB")
        except ValueError as error:  # a mode PIL cannot convert (LAB to grey)
            raise DataError(f"{name} has pixels (PIL mode {image.mode}) that cannot be converted to "
                            f"{'grey' if channels == 1 else 'RGB'} ({error}): save it as an RGB PNG") from None
        return F.to_tensor(_pil_geometry(image, target, preprocessing))
    if image.dtype == torch.uint8:
        image = image.float() / 255  # 8-bit pixels, as to_tensor scales them
    elif not image.is_floating_point():
        raise DataError(f"{name} is a tensor of {image.dtype}, whose range is unknown: give 8-bit (uint8) "
                        "pixels or floats in [0, 1]")
    elif image.numel() and not bool(torch.isfinite(image).all()):
        raise DataError(f"{name} has NaN or infinite pixels: give 8-bit (uint8) pixels or floats in [0, 1]")
    elif image.numel() and (float(image.min()) < 0 or float(image.max()) > 1):
        raise DataError(f"{name} has pixels outside [0, 1] (from {float(image.min()):g} to {float(image.max()):g}): "
                        "give 8-bit (uint8) pixels or floats in [0, 1]")
    image = image.float()
    if image.ndim == 2:
        image = image.unsqueeze(0)
    if image.shape[0] != channels:
        if {image.shape[0], channels} != {1, 3}:
            raise DataError(f"{name} has {image.shape[0]} channels and the model takes {channels}: give images of "
                            f"{channels} channels")
        # Colour to grey by PIL's own weights (ITU-R 601-2 luma), as an image file is converted;
        # grey to colour by repeating the channel.
        image = ((image * LUMA.view(3, 1, 1)).sum(0, keepdim=True) if channels == 1
                 else image.expand(channels, -1, -1))
    return _tensor_geometry(image, target, preprocessing, name).clamp(0.0, 1.0).contiguous()


@dataclass(frozen=True, eq=False)
class DatasetImage(LazyInput):
    """Row ``row`` of an image column, decoded and conformed each time it is loaded.

    Holds no pixels: ``table`` is the dataset's image column cast to ``Image(decode=False)``,
    whose rows are ``{"path", "bytes"}`` read from the memory-mapped Arrow file, and every
    example of a split shares it. Picklable (``datasets`` pickles a memory-mapped table as its
    file path), though nothing sends examples between processes: each process loads the data.

    Attributes:
        table: A ``datasets.Dataset`` of the one column ``column``, not decoded.
        row: The row in ``table`` (the row of the split).
        column: The image column, for messages.
        input_size: The model's (channels, height, width).
        preprocessing: The model's resizing and cropping to ``input_size``.
        dataset: The dataset's name, for messages.
    """

    table: Any = field(repr=False)
    row: int
    column: str
    input_size: tuple[int, int, int]
    dataset: str
    preprocessing: Preprocessing = SUITE_PREPROCESSING

    def load(self) -> torch.Tensor:
        item = self.table[self.row][self.column]
        image = open_image(item, self.column, self.dataset)
        try:
            try:
                image.load()
            except Exception as error:  # noqa: BLE001 - PIL raises many types for a bad file
                raise _unreadable(item, self.dataset, error) from None
            return conform_image(image, self.input_size, _name(item, self.dataset), self.preprocessing)
        finally:
            image.close()


#: Images said to be over PIL's bomb warning (once each).
_LARGE: set[str] = set()


def open_image(item: dict[str, Any] | None, column: str, dataset: str) -> Any:
    """The PIL image of a not-decoded cell (``{"path", "bytes"}``), header read, pixels not yet."""
    from PIL import Image

    if item is None:
        raise DataError(f"column {column!r} of {dataset!r} has a row with no image (fill it in, or drop the row)")
    if not item.get("bytes") and isinstance(item.get("path"), str) and os.path.exists(item["path"]) \
            and not os.path.isfile(item["path"]):  # a FIFO's open waited for a writer forever
        raise DataError(f"image {item['path']!r} of {dataset!r} is not a regular file")
    try:
        with warnings.catch_warnings(record=True) as caught:  # PIL's two raw lines on stderr, each time it is read
            warnings.simplefilter("always", Image.DecompressionBombWarning)
            image = Image.open(BytesIO(item["bytes"]) if item.get("bytes") else item["path"])
    except Exception as error:  # noqa: BLE001 - PIL raises many types for a bad file (a bomb too)
        raise _unreadable(item, dataset, error) from None
    name = _name(item, dataset)
    if any(issubclass(warning.category, Image.DecompressionBombWarning) for warning in caught) and name not in _LARGE:
        _LARGE.add(name)
        logger.warning("%s has %s pixels (over PIL's %s, where it warns of a decompression bomb): it is decoded "
                       "whole each time it is read", name, f"{image.width * image.height:,}",
                       f"{Image.MAX_IMAGE_PIXELS:,}")
    return image


def check_image(item: dict[str, Any] | None, column: str, dataset: str) -> None:
    """Refuse, in one line naming the file, a cell that is no readable image, keeping no pixels.

    Opening reads the header (PIL refuses a decompression bomb there) and ``verify`` checks the
    file's structure (PNG chunks and their checksums) without decoding it. A file damaged in a
    way only decoding finds (a JPEG cut short) is named in the same words when it is read.
    """
    image = open_image(item, column, dataset)
    try:
        reason = undefined_range(image)  # the mode is in the header
        if reason is not None:
            raise _no_range(_name(item, dataset), reason)
        image.verify()
    except DataError:
        raise
    except Exception as error:  # noqa: BLE001 - PIL raises many types for a bad file
        raise _unreadable(item, dataset, error) from None
    finally:
        image.close()


def _name(item: dict[str, Any], dataset: str) -> str:
    """How messages name a cell's image: its file (or that it is embedded) and its dataset."""
    return f"image {item.get('path') or '<embedded image>'!r} in {dataset!r}"


def _no_range(name: str, reason: str) -> DataError:
    return DataError(f"{name} has {reason}, whose range is unknown: save it as an 8- or 16-bit PNG")


def _unreadable(item: dict[str, Any], dataset: str, error: Exception) -> DataError:
    reason = str(error).splitlines()[0] if str(error) else "corrupt"
    return DataError(f"{_name(item, dataset)} cannot be read ({type(error).__name__}: {reason})")
