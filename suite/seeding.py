"""Per-example seeding.

Every random choice an attack makes on an example comes from a generator seeded by
``(run seed, attack name, example id)``, so results do not depend on batch size, order or the
number of processes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

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


@contextlib.contextmanager
def deterministic_kernels() -> Iterator[None]:
    """Deterministic kernels and no TF32 while the block runs (``--deterministic``), restored after.

    On the CPU the suite's results are already batch-size invariant and reproducible; this
    matters on CUDA, where cuDNN autotuning, atomics in some backward kernels and TF32
    matmuls (10-bit mantissa) make two runs, or two batch sizes, round differently. cuBLAS
    needs ``CUBLAS_WORKSPACE_CONFIG`` for deterministic matmuls; it is set here when unset,
    which takes effect only if CUDA was not initialised yet (the CLI sets it first). An
    operation with no deterministic kernel raises instead of silently varying.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[1], saved[2]
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[3], saved[4]


#: Draws of at least this many values go to threads (below it a thread's hand-off costs more
#: than the draw: an 8×8 digit is 64 values, a 224² image 150,528).
PARALLEL_DRAW = 1 << 14
_pool: tuple[int, int, ThreadPoolExecutor] | None = None  # (process id, workers, the pool)


def per_generator(draw: Callable[[torch.Generator], torch.Tensor], generators: Sequence[torch.Generator],
                  size: int) -> list[torch.Tensor]:
    """``[draw(g) for g in generators]``, the same values, drawn in parallel threads when each draw
    is ``size`` ≥ :data:`PARALLEL_DRAW` values: one task per distinct generator, which makes that
    generator's draws in their order in ``generators`` (the rows of an example share its
    generator). PyTorch's CPU draws release the GIL and each generator is only ever used by one
    thread, so the values are those of the loop. A search's random starts are drawn so
    (:func:`suite.attacks.image.norms.random_starts`): while they are drawn on the host, a GPU
    waits for them."""
    global _pool
    groups: dict[int, list[int]] = {}
    for position, generator in enumerate(generators):
        groups.setdefault(id(generator), []).append(position)
    drawn: list[torch.Tensor | None] = [None] * len(generators)

    def run(positions: list[int]) -> None:
        for position in positions:
            drawn[position] = draw(generators[position])

    threads = torch.get_num_threads()  # the process's share of the machine (accelerate sets it per process)
    if threads < 2 or len(groups) < 2 or size < PARALLEL_DRAW:
        for positions in groups.values():
            run(positions)
        return drawn  # type: ignore[return-value]
    if _pool is None or _pool[:2] != (os.getpid(), threads):  # a forked child has none of its parent's threads
        if _pool is not None and _pool[0] == os.getpid():
            _pool[2].shutdown(wait=False)
        _pool = (os.getpid(), threads, ThreadPoolExecutor(threads, thread_name_prefix="advsuite-draws"))
    list(_pool[2].map(run, groups.values()))
    return drawn  # type: ignore[return-value]
