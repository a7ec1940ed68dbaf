"""``--log-samples``: a human-readable file of every example, clean and adversarial.

``samples.md`` (beside results.json) lists, per example in evaluation order: the label and the
clean prediction, then per attack whether it succeeded, the served prediction and confidence,
the queries, and the adversarial input: the text with its changed words listed, or the path of a
PNG under ``samples/<attack>/<id>.png`` (images are written while attacking, since records do
not hold tensors). Examples a resumed run attacked before ``--log-samples`` was given have no
image; the file says so.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from suite.paths import atomic_write_text

SAMPLES_FILE = "samples.md"
SAMPLES_DIR = "samples"


def _safe(name: str) -> str:
    """A file-name-safe form of an example id or attack key."""
    return re.sub(r"[^A-Za-z0-9._@=-]+", "_", name)[:120] or "_"


def image_path(directory: Path, attack: str, example_id: str) -> Path:
    return Path(directory) / SAMPLES_DIR / _safe(attack) / f"{_safe(example_id)}.png"


def save_adversarial(directory: Path, attack: str, example_id: str, adversarial) -> None:
    """Save an adversarial image where :func:`write_samples` points to it (texts live in records)."""
    if not isinstance(adversarial, str) and adversarial is not None:
        save_image(adversarial, image_path(directory, attack, example_id))


def save_image(tensor, path: Path) -> None:
    """Save a C×H×W image in [0, 1] as an 8-bit PNG (grey or RGB)."""
    import torch
    from PIL import Image

    array = (tensor.detach().float().clamp(0, 1).cpu() * 255).round().to(torch.uint8)
    array = array[0] if array.shape[0] == 1 else array.permute(1, 2, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array.numpy()).save(path)


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
    """Write ``samples.md``; ``clean`` and ``attacks[key]`` map example ids to records."""
    directory = Path(directory)

    def name(label: int) -> str:
        return labels[label] if 0 <= label < len(labels) else str(label)

    lines = [f"# Samples: {title}", "", f"{len(examples)} examples; attacks: {', '.join(attacks) or 'none'}.", ""]
    for example in examples:
        record = clean[example.id]
        mark = ("correct" if record["correct"] >= 1 else f"correct with probability {record['correct']:.3g}"
                if record["correct"] > 0 else "WRONG, not attacked")
        lines += [f"## {example.id}: label {name(example.label)}, clean prediction {name(record['prediction'])} ({mark})", ""]
        is_text = isinstance(example.input, str)
        if is_text:
            lines += [f"> {example.input}", ""]
        else:
            clean_png = image_path(directory, "clean", example.id)
            save_image(example.input, clean_png)
            lines += [f"clean image: `{clean_png.relative_to(directory)}`", ""]
        for key, by_id in attacks.items():
            result = by_id.get(example.id)
            if result is None:
                continue
            confidence = f", confidence {result['confidence']:.3f}" if "confidence" in result else ""
            broken = result["robust"] < record["correct"]
            outcome = ("broken" if result["robust"] == 0 else f"robust {result['robust']:.3g}") if broken else "held"
            lines.append(f"- **{key}**: {outcome}; prediction {name(result['prediction'])}{confidence}; "
                         f"{result['queries']} queries")
            if is_text:
                adversarial = result.get("adversarial", example.input)
                if adversarial != example.input:
                    changes = ", ".join(changed_words(example.input, adversarial))
                    # A failed search still reports its last candidate: worth seeing, marked as such.
                    lines += [f"  > {adversarial}" if broken else f"  > (last try) {adversarial}",
                              f"  changed: {changes}"]
            else:
                png = image_path(directory, key, example.id)
                where = f"`{png.relative_to(directory)}`" if png.exists() else "(not saved: attacked by a run without --log-samples)"
                lines.append(f"  adversarial image: {where}; perturbation {result['perturbation']:.4g}")
        lines.append("")
    return atomic_write_text(directory / SAMPLES_FILE, "\n".join(lines))
