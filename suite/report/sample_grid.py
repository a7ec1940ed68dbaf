"""``--log-samples`` grids for image models: one PNG per attack, ``samples/grid-<attack>.png``.

Each row is one attacked example, three cells wide:

1. the clean image, captioned with the example id, its label, and the clean prediction with its
   confidence (the largest softmax probability of the served model);
2. the adversarial image, captioned ``BROKEN`` (red), ``partly <robust>`` (orange: a randomized
   ensemble's expected correctness went down but not to 0) or ``held`` (green), and the served
   prediction on it with its confidence;
3. the difference ``|adversarial - clean|`` (per pixel, the largest over the colour channels),
   amplified by one factor for the whole grid so that the largest difference in the grid is
   white: the factor is printed under each difference cell. A fixed ``1/eps`` factor would
   leave an L2 attack's differences (far below ε per pixel) black; one factor per grid keeps
   rows comparable with each other.

The cells are drawn from the 8-bit PNGs saved under ``samples/`` (``samples/clean/<id>.png``,
``samples/<attack>/<id>.png``), so a resumed run draws the same grid, and every pixel shown is
the saved pixel: within ``eps * 255 + 1`` of the clean one under an L∞ threat (each image is
rounded to 8 bits once). Images are enlarged by an integer factor (nearest neighbour, no
smoothing) so every cell is at least :data:`MIN_CELL` pixels wide; 32×32 digits become 96×96.

At most :data:`MAX_ROWS` rows are drawn: the first attacked examples in evaluation order that
have both images. Examples attacked by a run without ``--log-samples`` have no adversarial
image and are left out (``samples.md`` says how many). A confidence that is not known (images
saved by an older version, which did not store it) is printed as ``?``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from suite.paths import KEPT_RECORDS, RESUME, atomic_write
from suite.report.sample_files import SAMPLES_DIR, image_path, safe_name

#: Rows per grid: a 10,000-example run still draws a picture one can look at.
MAX_ROWS = 16
#: Smallest width (and height) of a cell in pixels; images are enlarged by an integer factor.
MIN_CELL = 96
#: Pixels between cells and around the grid.
GAP = 6
#: Caption lines under each cell, and the title lines above the grid.
CAPTION_LINES = 3
TITLE_LINES = 2
FONT_SIZE = 11
LINE_HEIGHT = 14
#: PNG text keys under which the served prediction and confidence of an adversarial image are kept.
PREDICTION_KEY = "advsuite-prediction"
CONFIDENCE_KEY = "advsuite-confidence"

_BLACK, _GREY = (0, 0, 0), (110, 110, 110)
_MARKS = {"BROKEN": (200, 0, 0), "held": (0, 130, 0), "partly": (210, 120, 0)}


@dataclass(frozen=True)
class Row:
    """One example of a grid: its two images (H×W×3, uint8) and the captions' facts."""

    example_id: str
    clean: np.ndarray
    adversarial: np.ndarray
    label: str
    clean_prediction: str
    clean_confidence: float | None
    prediction: str
    confidence: float | None
    #: ``BROKEN``, ``partly <robust>`` or ``held``.
    outcome: str


@dataclass(frozen=True)
class Layout:
    """Where everything goes in a grid of ``rows`` rows of ``height``×``width`` images."""

    rows: int
    height: int
    width: int

    @property
    def scale(self) -> int:
        """Integer enlargement of every image (nearest neighbour)."""
        return max(1, math.ceil(MIN_CELL / max(self.height, self.width)))

    @property
    def cell(self) -> tuple[int, int]:
        """(width, height) of a cell in pixels."""
        return self.width * self.scale, self.height * self.scale

    @property
    def row_height(self) -> int:
        return self.cell[1] + CAPTION_LINES * LINE_HEIGHT + GAP

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the whole grid in pixels."""
        return (GAP + 3 * (self.cell[0] + GAP),
                GAP + TITLE_LINES * LINE_HEIGHT + self.rows * self.row_height)

    def origin(self, row: int, column: int) -> tuple[int, int]:
        """Top-left pixel (x, y) of the image in ``column`` (0 clean, 1 adversarial, 2 difference) of ``row``."""
        return GAP + column * (self.cell[0] + GAP), GAP + TITLE_LINES * LINE_HEIGHT + row * self.row_height


def load_rgb(path: Path) -> np.ndarray:
    """A saved sample PNG as an H×W×3 uint8 array (grey images repeated over the channels)."""
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def read_served(path: Path) -> tuple[int, float] | None:
    """The served (prediction, confidence) stored in a saved adversarial PNG, or None (older PNGs)."""
    from PIL import Image

    with Image.open(path) as image:
        text = getattr(image, "text", {}) or {}
    try:
        return int(text[PREDICTION_KEY]), float(text[CONFIDENCE_KEY])
    except (KeyError, ValueError):
        return None


def outcome(robust: float, clean_correct: float) -> str:
    """``BROKEN`` (robust 0), ``partly <robust>`` (lowered but not to 0) or ``held``."""
    if robust >= clean_correct:
        return "held"
    return "BROKEN" if robust == 0 else f"partly {robust:.2g}"


def select_rows(directory: Path, attack: str, examples: Sequence[Any], clean: dict[str, dict[str, Any]],
                by_id: dict[str, dict[str, Any]], name: Callable[[int], str]) -> tuple[list[Row], int]:
    """The first :data:`MAX_ROWS` attacked examples (in evaluation order) with both images saved,
    and the number of attacked examples left out: no image saved, or one of another size."""
    rows, missing = [], 0
    for example in examples:
        result = by_id.get(example.id)
        if result is None:
            continue
        clean_png, adversarial_png = image_path(directory, "clean", example.id), image_path(directory, attack, example.id)
        if not (clean_png.exists() and adversarial_png.exists()):
            missing += 1
            continue
        if len(rows) == MAX_ROWS:
            continue  # still counting the examples without images
        clean_image, adversarial_image = load_rgb(clean_png), load_rgb(adversarial_png)
        if adversarial_image.shape != clean_image.shape or (rows and clean_image.shape != rows[0].clean.shape):
            missing += 1
            continue
        record, served = clean[example.id], read_served(adversarial_png)
        # The stored confidence belongs to the stored prediction: shown only when it is the recorded one.
        confidence = served[1] if served is not None and served[0] == result["prediction"] else None
        rows.append(Row(example.id, clean_image, adversarial_image, name(example.label), name(record["prediction"]),
                        record.get("confidence"), name(result["prediction"]), confidence,
                        outcome(result["robust"], record["correct"])))
    return rows, missing


def differences(rows: Sequence[Row]) -> tuple[list[np.ndarray], float]:
    """Per row ``|adversarial - clean|`` (H×W, max over channels, 0–255), and the grid's amplification."""
    diffs = [np.abs(row.adversarial.astype(np.int16) - row.clean.astype(np.int16)).max(axis=2) for row in rows]
    largest = max((int(diff.max()) for diff in diffs), default=0)
    return diffs, (255.0 / largest if largest else 1.0)


def draw_grid(rows: Sequence[Row], title: str, path: Path) -> Path:
    """Draw ``rows`` (all images of one size) into ``path``, written atomically; returns ``path``."""
    from PIL import Image, ImageDraw

    layout = Layout(len(rows), *rows[0].clean.shape[:2])
    canvas = Image.new("RGB", layout.size, "white")
    draw, font = ImageDraw.Draw(canvas), _font()
    diffs, amplification = differences(rows)
    _text(draw, font, (GAP, GAP), title, layout.size[0] - 2 * GAP, _BLACK)
    for column, heading in enumerate(("clean", "adversarial", f"|adv - clean| x{amplification:.3g}")):
        _text(draw, font, (layout.origin(0, column)[0], GAP + LINE_HEIGHT), heading, layout.cell[0], _GREY)
    for index, (row, diff) in enumerate(zip(rows, diffs)):
        shown = np.clip(np.rint(diff * amplification), 0, 255).astype(np.uint8)
        for column, image in enumerate((row.clean, row.adversarial, np.repeat(shown[:, :, None], 3, axis=2))):
            x, y = layout.origin(index, column)
            canvas.paste(Image.fromarray(image).resize(layout.cell, Image.NEAREST), (x, y))
            for line, (text, colour) in enumerate(_captions(row, diff, amplification)[column]):
                _text(draw, font, (x, y + layout.cell[1] + 1 + line * LINE_HEIGHT), text, layout.cell[0], colour)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, lambda handle: canvas.save(handle, format="PNG"), KEPT_RECORDS, RESUME)


def _captions(row: Row, diff: np.ndarray, amplification: float) -> list[list[tuple[str, tuple[int, int, int]]]]:
    """Caption lines (text, colour) under the clean, adversarial and difference cells of ``row``."""
    mark = _MARKS[row.outcome.split()[0]]
    return [
        [(row.example_id, _GREY), (f"label {row.label}", _BLACK),
         (f"clean {row.clean_prediction} ({_confidence(row.clean_confidence)})", _BLACK)],
        [(row.outcome, mark), (f"adv {row.prediction} ({_confidence(row.confidence)})", _BLACK)],
        [(f"max diff {int(diff.max()) / 255:.3f}", _BLACK), (f"shown x{amplification:.3g}", _GREY)],
    ]


def _confidence(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def _font() -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=FONT_SIZE)
    except TypeError:  # Pillow < 10.1: the fixed bitmap font (about 11 px high as well)
        return ImageFont.load_default()


def _text(draw: Any, font: Any, xy: tuple[int, int], text: str, width: int, colour: tuple[int, int, int]) -> None:
    """Draw ``text`` at ``xy``, cut (with ``..``) to fit ``width`` pixels."""
    if draw.textlength(text, font=font) > width:
        while text and draw.textlength(text + "..", font=font) > width:
            text = text[:-1]
        text += ".."
    draw.text(xy, text, fill=colour, font=font)


def grid_name(attack: str) -> str:
    """File name of ``attack``'s grid inside ``samples/``."""
    return f"grid-{safe_name(attack)}.png"


def grid_section(directory: Path, examples: Sequence[Any], clean: dict[str, dict[str, Any]],
                 attacks: dict[str, dict[str, dict[str, Any]]], name: Callable[[int], str]) -> list[str]:
    """Draw one grid per attack under ``directory/samples/``; the lines of ``samples.md`` showing them.

    ``clean`` and ``attacks[key]`` map example ids to records (a clean record may carry the
    clean ``confidence``); the clean images must already be saved."""
    lines = [f"**Grids**: per attack, the first {MAX_ROWS} attacked examples with saved images, one per row: "
             "clean | adversarial | the difference |adversarial - clean|, amplified so that the largest "
             "difference in the grid is white (the factor is printed on the grid). Confidence is the served "
             "model's largest softmax probability (`?`: not recorded).", ""]
    for key, by_id in attacks.items():
        by_id = {example_id: record for example_id, record in by_id.items() if record is not None}
        rows, left_out = select_rows(directory, key, examples, clean, by_id, name)
        path = Path(directory) / SAMPLES_DIR / grid_name(key)
        note = (f"; {left_out} attacked example(s) left out: no saved image (attacked by a run without "
                "--log-samples) or an image of another size" if left_out else "")
        if not rows:
            path.unlink(missing_ok=True)
            lines += [f"- {key}: no grid ({len(by_id)} attacked{note}).", ""]
            continue
        draw_grid(rows, f"{key}: first {len(rows)} of {len(by_id)} attacked", path)
        lines += [f"![{safe_alt(key)}]({path.relative_to(directory).as_posix()})", "",
                  f"{key}: {len(rows)} of {len(by_id)} attacked example(s) shown{note}.", ""]
    return lines


def safe_alt(text: str) -> str:
    """``text`` usable as markdown image alt text (no brackets)."""
    return text.replace("[", "(").replace("]", ")")
