"""Peak memory of an evaluation on an image folder as n grows 10×: streamed vs held in memory.

Writes a synthetic folder of 224×224 RGB JPEGs (10 class folders; each class a colour, with a
gradient and noise), then evaluates a small image classifier (a strided convolution and a
linear layer; it tells the classes apart by colour, so most examples are attacked) under
``fgm_linf`` at n = 200 and n = 2,000, each run in a fresh process, and prints peak RSS
(``ru_maxrss`` of that process) and wall time as a markdown table. Modes:

- ``stream``: the folder as a dataset spec (``suite.evaluate(model, "<folder>")``): examples
  hold a row reference and decode each image when it is read.
- ``memory``: the same images decoded by this script into an N×3×224×224 tensor and passed as
  ``(images, labels)``, the Python API's in-memory form: every pixel held for the whole run.

Run a mode under another checkout (``PYTHONPATH=<that tree> ... --modes stream --label before``)
to measure the loading of another version on the same folder.

    .venv/bin/python bench/streaming.py                       # writes the folder in a temp dir
    .venv/bin/python bench/streaming.py --data /tmp/folder    # reuse (or create) a folder
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SIZE = 224
CLASSES = 10
EPS = 8 / 255


def class_colours() -> np.ndarray:
    """Ten well-separated RGB colours in [0.2, 0.8]."""
    return np.random.default_rng(7).uniform(0.2, 0.8, size=(CLASSES, 3))


def write_folder(root: Path, count: int, fmt: str) -> None:
    """``count`` images in ``root/test/<class>/``; skipped when the folder already holds them."""
    from PIL import Image

    if len(list(root.glob("test/*/*"))) == count:
        return
    rng = np.random.default_rng(0)
    colours = class_colours()
    ramp = np.linspace(-0.15, 0.15, SIZE)[None, :, None]
    for i in range(count):
        label = i % CLASSES
        folder = root / "test" / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        pixels = colours[label] + ramp + rng.normal(0, 0.08, size=(SIZE, SIZE, 3))
        image = Image.fromarray((np.clip(pixels, 0, 1) * 255).round().astype(np.uint8))
        image.save(folder / f"{i:05d}.{fmt}", **({"quality": 90} if fmt == "jpg" else {}))


def classifier():
    """A strided convolution (kept the identity on each channel's mean) and a nearest-colour
    linear head: cheap at 224×224, and right on most examples, so the attack runs on them."""
    import torch
    from torch import nn

    from suite.models.wrap import from_module

    torch.manual_seed(0)
    conv = nn.Conv2d(3, 3, kernel_size=8, stride=8)
    with torch.no_grad():
        conv.weight.zero_()
        for channel in range(3):
            conv.weight[channel, channel] = 1 / 64
        conv.bias.zero_()
    colours = torch.tensor(class_colours(), dtype=torch.float32)
    head = nn.Linear(3, CLASSES)
    with torch.no_grad():  # -|x - c|² up to a constant: 2 c·x - |c|²
        head.weight.copy_(2 * colours * 20)
        head.bias.copy_(-(colours**2).sum(1) * 20)
    module = nn.Sequential(conv, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), head).eval()
    return from_module(module, input_size=(3, SIZE, SIZE), labels=[str(k) for k in range(CLASSES)],
                       name="bench:colour-cnn", device="cpu")


def held_in_memory(root: Path, n: int):
    """The n examples ``stream`` evaluates, decoded into one tensor (and their labels)."""
    import torch
    from PIL import Image
    from torchvision.transforms.functional import to_tensor

    import suite  # noqa: F401 - the same imports as a streamed run

    files = sorted(root.glob("test/*/*"))  # the order `datasets` lists an image folder in
    rows = sorted(int(i) for i in np.random.default_rng(0).permutation(len(files))[:n]) if n < len(files) \
        else range(len(files))
    images = torch.empty(len(rows), 3, SIZE, SIZE)
    for position, row in enumerate(rows):
        with Image.open(files[row]) as image:
            images[position] = to_tensor(image.convert("RGB"))
    return images, [int(files[row].parent.name) for row in rows]


def child(root: Path, n: int, mode: str) -> None:
    """One evaluation; prints a JSON line with its peak RSS and times."""
    import suite

    model = classifier()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    dataset = str(root) if mode == "stream" else held_in_memory(root, n)
    results = suite.evaluate(model, dataset, attacks=["fgm_linf"], eps=EPS, n=n if mode == "stream" else None)
    seconds = time.perf_counter() - start
    print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "rss_before_mb": before / 1024, "seconds": seconds, "n": n,
                      "clean": results.clean_accuracy, "robust": results.worst_case_robust_accuracy}))


def run(root: Path, n: int, mode: str) -> dict:
    command = [sys.executable, __file__, "--child", "--data", str(root), "--n", str(n), "--modes", mode]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{mode} n={n} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {**result, "process_seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="image folder to use (written when absent); default a temp dir")
    parser.add_argument("--count", type=int, default=2000, help="images in the folder")
    parser.add_argument("--format", choices=["jpg", "png"], default="jpg")
    parser.add_argument("--n", type=int, nargs="+", default=[200, 2000])
    parser.add_argument("--modes", default="stream,memory", help="comma-separated: stream, memory")
    parser.add_argument("--label", help="the table's name for the mode (one mode only)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    modes = args.modes.split(",")
    if args.child:
        child(args.data, args.n[0], modes[0])
        return
    with tempfile.TemporaryDirectory(prefix="advsuite-streaming-") as temp:
        root = args.data or Path(temp)
        write_folder(root, args.count, args.format)
        print(f"{args.count} {SIZE}×{SIZE} {args.format.upper()} images in {root}; "
              f"{os.cpu_count()} CPU cores", file=sys.stderr)
        rows = []
        for mode in modes:
            for n in args.n:
                result = run(root, n, mode)
                rows.append((args.label or mode, result))
                print(f"{args.label or mode} n={n}: {result}", file=sys.stderr)
    print("| data | n | peak RSS (MB) | RSS before evaluate (MB) | evaluate (s) | process (s) | clean | robust |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, r in rows:
        print(f"| {label} | {r['n']} | {r['peak_rss_mb']:.0f} | {r['rss_before_mb']:.0f} | {r['seconds']:.1f} | "
              f"{r['process_seconds']:.1f} | {r['clean']:.3f} | {r['robust']:.3f} |")


if __name__ == "__main__":
    main()
