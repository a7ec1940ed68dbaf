"""``--log-samples``: a human-readable file of every example, clean and adversarial.

``samples.md`` (beside results.json) lists, per example in evaluation order: the label and the
clean prediction, then per attack whether it succeeded, the served prediction and confidence,
the queries, and the adversarial input: the text with its changed words listed, or the path of a
PNG under ``samples/<attack>/<id>.png`` (images are written while attacking, since records do
not hold tensors; the served prediction and confidence on each are kept in the PNG's text
chunks, since records do not hold an image's confidence). Examples a resumed run attacked
before ``--log-samples`` was given have no image; the file says so.

For image models the file opens with one grid per attack, ``samples/grid-<attack>.png``
(clean | adversarial | amplified difference, the first rows only: :mod:`suite.report.sample_grid`).
"""

from __future__ import annotations

import difflib
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from suite.paths import KEPT_RECORDS, RESUME, atomic_write, atomic_write_text
from suite.text import printable
from suite.report.sample_files import SAMPLES_FILE, image_path
from suite.report.sample_grid import CONFIDENCE_KEY, PREDICTION_KEY, grid_section, read_served


def save_adversarial(directory: Path, attack: str, example_id: str, adversarial: Any,
                     served: dict[str, Any] | None = None) -> None:
    """Save an adversarial image where :func:`write_samples` points to it (texts live in records).

    ``served``: the served model's ``prediction`` and ``confidence`` on it, stored in the PNG."""
    if not isinstance(adversarial, str) and adversarial is not None:
        text = None if served is None else {PREDICTION_KEY: str(int(served["prediction"])),
                                            CONFIDENCE_KEY: repr(float(served["confidence"]))}
        save_image(adversarial, image_path(directory, attack, example_id), text)


def save_image(tensor: Any, path: Path, text: dict[str, str] | None = None) -> None:
    """Save a C×H×W image in [0, 1] as an 8-bit PNG (grey or RGB), with ``text`` chunks if given."""
    import torch
    from PIL import Image, PngImagePlugin

    array = (tensor.detach().float().clamp(0, 1).cpu() * 255).round().to(torch.uint8)
    array = array[0] if array.shape[0] == 1 else array.permute(1, 2, 0)
    info = PngImagePlugin.PngInfo()
    for key, value in (text or {}).items():
        info.add_text(key, value)
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.fromarray(array.numpy())
    atomic_write(path, lambda handle: image.save(handle, format="PNG", pnginfo=info), KEPT_RECORDS, RESUME)


def changed_words(original: str, adversarial: str) -> list[str]:
    """``old→new`` for every word the attack replaced (insertions and deletions too)."""
    a, b = original.split(), adversarial.split()
    changes = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op != "equal":
            changes.append(f"{' '.join(a[i1:i2]) or '∅'}→{' '.join(b[j1:j2]) or '∅'}")
    return changes


def write_samples(directory: Path, title: str, labels: Sequence[str], examples: Sequence[Any],
                  clean: dict[str, dict[str, Any]], attacks: dict[str, dict[str, dict[str, Any]]]) -> Path:
    """Write ``samples.md`` (and, for images, the clean PNGs and a grid per attack).

    ``clean`` and ``attacks[key]`` map example ids to records; a clean record may carry the
    clean ``confidence`` (records on disk do not)."""
    directory = Path(directory)

    def name(label: int) -> str:
        return _markup(labels[label] if 0 <= label < len(labels) else str(label))

    lines = [f"# Samples: {title}", "", f"{len(examples)} examples; attacks: {', '.join(attacks) or 'none'}.", ""]
    is_text = bool(examples) and isinstance(examples[0].input, str)
    if not is_text:
        for example in examples:
            save_image(example.input, image_path(directory, "clean", example.id))
        if attacks and examples:
            lines += grid_section(directory, examples, clean, attacks, name)
    for example in examples:
        lines += _example_lines(directory, example, clean[example.id], attacks, name)
    # Texts, ids and label names come from the data and the model: their control and bidi
    # characters are written escaped, so `cat samples.md` shows them and runs none.
    return atomic_write_text(directory / SAMPLES_FILE, "\n".join(map(printable, lines)), KEPT_RECORDS, RESUME)


def _markup(text: str) -> str:
    """Data's text in Markdown: ``<``, ``>`` and ``&`` as HTML entities, so a text holding
    ``<script>`` is shown, not run, where the file is rendered (control characters are escaped
    for the terminal when the file is written)."""
    return html.escape(str(text), quote=False)


def _example_lines(directory: Path, example: Any, record: dict[str, Any],
                   attacks: dict[str, dict[str, dict[str, Any]]], name: Any) -> list[str]:
    """The section of one example: its clean verdict, then a line (or three) per attack."""
    mark = ("correct" if record["correct"] >= 1 else f"correct with probability {record['correct']:.3g}"
            if record["correct"] > 0 else "WRONG, not attacked")
    if "confidence" in record:
        mark += f", confidence {record['confidence']:.3f}"
    lines = [f"## {_markup(example.id)}: label {name(example.label)}, clean prediction {name(record['prediction'])} ({mark})", ""]
    is_text = isinstance(example.input, str)
    if is_text:
        lines += [f"> {_markup(example.input)}", ""]
    else:
        lines += [f"clean image: `{image_path(directory, 'clean', example.id).relative_to(directory)}`", ""]
    for key, by_id in attacks.items():
        result = by_id.get(example.id)
        if result is None:
            continue
        png = None if is_text else image_path(directory, key, example.id)
        served = read_served(png) if png is not None and png.exists() else None
        confidence = result.get("confidence", served[1] if served and served[0] == result["prediction"] else None)
        broken = result["robust"] < record["correct"]
        outcome = ("broken" if result["robust"] == 0 else f"robust {result['robust']:.3g}") if broken else "held"
        lines.append(f"- **{key}**: {outcome}; prediction {name(result['prediction'])}"
                     f"{'' if confidence is None else f', confidence {confidence:.3f}'}; {result['queries']} queries")
        if is_text:
            adversarial = result.get("adversarial", example.input)
            if adversarial != example.input:
                changes = _markup(", ".join(changed_words(example.input, adversarial)))
                # A failed search still reports its last candidate: worth seeing, marked as such.
                shown = _markup(adversarial)
                lines += [f"  > {shown}" if broken else f"  > (last try) {shown}",
                          f"  changed: {changes}"]
        else:
            where = f"`{png.relative_to(directory)}`" if png.exists() else "(not saved: attacked by a run without --log-samples)"
            lines.append(f"  adversarial image: {where}; perturbation {result['perturbation']:.4g}")
    lines.append("")
    return lines
