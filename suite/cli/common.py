"""Helpers shared by the subcommands that run tasks: argument types and the printed report."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Sequence

from suite.cli.argtypes import positive_float


def positive_int(text: str) -> int:
    try:
        if not re.fullmatch(r"\s*\+?[0-9]+\s*", text):  # int() also takes 4_0 and digits of other scripts
            raise ValueError(text)
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def batch_size(text: str) -> int | str:
    """``--batch-size``: a positive integer, or ``auto`` (:mod:`suite.evaluation.batching`)."""
    if text == "auto":
        return text
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or auto, got {text!r}") from None


def add_directory_flags(parser: argparse.ArgumentParser) -> None:
    """``--overwrite`` and ``--wait``: what to do with an output directory that is not fresh."""
    parser.add_argument("--overwrite", action="store_true",
                        help="start over: clear what advsuite wrote in the output dir (records, results, samples, plots; "
                        "never other files); without it a rerun resumes, and another run there is refused")
    parser.add_argument("--wait", action="store_true",
                        help="if another advsuite run is writing to the output dir, wait for it (default: refuse)")


def add_image_model_flags(group) -> None:
    """The flags that say how an image model is loaded (``evaluate`` and ``certify`` share them)."""
    group.add_argument("--checkpoint", help="safetensors weights for a timm:<architecture> model")
    group.add_argument("--num-classes", type=positive_int, metavar="N",
                       help="timm: classes of the --checkpoint model (default: read from the checkpoint)")
    group.add_argument("--allow-pickle", action="store_true",
                       help="also load pickled weights (pytorch_model.bin, .pt, .pth, .ckpt). UNSAFE: unpickling "
                       "runs arbitrary code; only for files you trust (default: safetensors only)")
    group.add_argument("--pretrained", action=argparse.BooleanOptionalAction, default=True,
                       help="timm: load the named pretrained weights from the Hub (default: yes)")
    group.add_argument("--temperature", type=positive_float, default=1.0, help="served (design) temperature T: logits / T")


def add_deterministic_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--deterministic", action="store_true",
                        help="deterministic kernels and no TF32 (matters on CUDA; an op without a deterministic "
                        "kernel then fails instead of varying)")


def add_channels_last_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--channels-last", action="store_true",
                        help="image models on CUDA: the network in channels-last memory format (measured slower "
                        "for ResNet-50 on an H200; no effect on the CPU)")


def radii(text: str) -> float | list[float]:
    """``--eps``: one radius, or several separated by commas; finite and >= 0."""
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number or comma-separated numbers, got {text!r}") from None
        if not (value >= 0 and math.isfinite(value)) or not re.fullmatch(r"\s*[0-9.eE+-]+\s*", part):
            raise argparse.ArgumentTypeError(f"a radius must be a finite number >= 0, got {part.strip()!r}")
        from suite.threat import MAX_RADIUS

        if value > MAX_RADIUS:
            raise argparse.ArgumentTypeError(f"a radius must be at most {MAX_RADIUS:.4g} (float32's largest number), "
                                             f"got {part.strip()!r}")
        value = abs(value)  # -0 is 0
        values.append(value)
    return values[0] if len(values) == 1 else values


def print_report(results: Sequence, options, log_samples: bool = False) -> None:
    """The results table, the adversary table, illusion lines, and where the files are."""
    from suite.report.table import adversary_table, has_adversaries, results_table
    from suite.text import printable

    print(results_table(results))
    for result in results:  # where each radius came from: asked for, the model's own, or a default
        if result.radius is not None:
            print(f"radius{'' if len(results) == 1 else f' ({printable(result.task)})'}, {result.radius.source}: "
                  f"{printable(result.radius.detail)}")
    if has_adversaries(results):
        print(f"\nrobust accuracy by adversary temperature (none = out of the box):\n{adversary_table(results)}")
    for result in results:
        if result.illusion is not None and result.illusion.flagged:
            print(f"\nILLUSION OF ROBUSTNESS: {printable(result.model.name)} ({result.task}): "
                  f"an aware adversary lowers robust accuracy by up to {100 * result.illusion.max_drop:.1f} pp")
            if result.illusion.mechanism is not None:
                print(f"  mechanism: {result.illusion.mechanism}: {printable(result.illusion.mechanism_detail or '')}")
    directories = [options.directory_for(result.task) for result in results]
    print(f"\nresults: {', '.join(printable(directory / 'results.json') for directory in directories)}")
    if log_samples:
        print(f"samples: {', '.join(printable(directory / 'samples.md') for directory in directories)}")
