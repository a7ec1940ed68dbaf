"""Per-example seeding.

Every random choice an attack makes on an example comes from a generator seeded by
``(run seed, attack name, example id)``, so results do not depend on batch size, order or the
number of processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Iterator

import numpy as np
import torch


def example_seed(seed: int, *keys: object) -> int:
    """A stable 63-bit seed derived from the run seed and any keys (attack name, example id)."""
    text = "\x1f".join([str(seed), *map(str, keys)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def example_generator(seed: int, *keys: object, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch generator seeded for one example."""
    generator = torch.Generator(device=device)
    generator.manual_seed(example_seed(seed, *keys))
    return generator


@contextlib.contextmanager
def global_rng_seeded(seed: int) -> Iterator[None]:
    """Seed Python's, NumPy's and torch's global RNGs, and restore their state afterwards.

    Only for third-party code (TextAttack) that draws from the global RNGs and takes no
    generator; our own attacks use :func:`example_generator`.
    """
    py_state, np_state = random.getstate(), np.random.get_state()
    # fork_rng restores torch's CPU state and, when CUDA is up, every GPU's state too.
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)
