"""Argument types for flags whose bad values argparse would otherwise accept.

Each is an ``argparse`` ``type=``: it returns the parsed value or raises
``argparse.ArgumentTypeError``, which the CLI prints as one line (``advsuite: error: argument
--seed: ...``) before anything runs or is written.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

from suite.threat import MAX_RADIUS as FLOAT32_MAX  # float32's largest number: no float32 tensor holds more


def nonnegative_int(text: str) -> int:
    """An integer >= 0 (``--seed``: seeds index random streams, and a negative one is a typo)."""
    try:
        if not re.fullmatch(r"\s*\+?[0-9]+\s*", text):  # int() also takes 4_0 and digits of other scripts
            raise ValueError(text)
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (``--temperature``: logits are divided by it)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    if value > FLOAT32_MAX:  # a learning rate, weight or temperature the float32 tensors cannot hold
        raise argparse.ArgumentTypeError(f"expected a number > 0 and at most {FLOAT32_MAX:.4g} (float32's largest "
                                         f"number), got {text!r}")
    return value


def _comma_names(text: str, example: str) -> str:
    """``text`` if it lists at least one comma-separated name and no empty one (``example`` shows how)."""
    names = [name.strip() for name in text.split(",")]
    if not any(names):
        raise argparse.ArgumentTypeError(f"is empty ({text!r}): name at least one, e.g. {example}; "
                                         "leave the flag out for the default")
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty name between commas")
    return text


def attack_list(text: str) -> str:
    """``--attacks``: comma-separated names, at least one and none empty (returned as given).

    ``--attacks ''`` would otherwise mean "no attack named", which silently ran the default.
    """
    return _comma_names(text, "--attacks pgd_linf (`advsuite ls attacks` lists them)")


def adversary_list(text: str) -> str:
    """``--adversary``: comma-separated adversary kinds, at least one and none empty."""
    return _comma_names(text, "--adversary none,cal,opt")


def output_dir(text: str) -> Path:
    """A directory path that is not empty (``--output ''`` would write into the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"is empty ({text!r}): name a directory, e.g. runs/mine")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} holds a NUL character, which no file system allows")
    return Path(text)


def spec(text: str) -> str:
    """A model or dataset spec that is not empty (``--dataset ''`` silently meant the default)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"is empty ({text!r}): name one, e.g. builtin:digits or hf:<name>, or leave "
                                         "the flag out")
    return text
