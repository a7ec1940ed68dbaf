"""How many examples an attack takes at once: ``--batch-size N`` or ``auto``, and what an
out-of-memory error does in the middle of a run.

Records never depend on the batch size (every attack reduces its loss by sum and draws its
randomness per example; each adversarial input is scored alone), so the batch size is only a
question of speed and memory. The exceptions, :attr:`~suite.attacks.base.Attack.batch_dependent`
attacks (a mean loss, the torchattacks baselines' per-batch draws), run in fixed batches and
are never halved (the runner's ``_mean_batches``). That is what lets the suite choose it, and retry a batch smaller:

- ``auto`` on CUDA: before each attack pass, a forward+backward probe on random inputs finds the
  largest power-of-two batch (at most :data:`AUTO_LIMIT` examples, at most the pass's examples)
  whose rows fit: the attack says how many rows one example takes in its widest search
  (:meth:`~suite.attacks.base.Attack.rows_per_example`: APGD-T and ``auto`` search 9 targets at
  once). The probe halves on out-of-memory and keeps the largest size that worked, as
  lm-eval and accelerate do; the chosen size of every attack is recorded in results
  (``batch_sizes``).
- ``auto`` anywhere else (CPU, MPS) is the fixed :data:`CPU_AUTO_BATCH` examples; for text
  attacks (whose searches pool their candidates into passes the model sizes) it is
  :data:`TEXT_AUTO_BATCH` searches, anywhere.
- Whatever the size, an out-of-memory error while an attack runs a batch retries that batch at
  half the size (one log line), and the rest of the pass keeps the smaller size. Nothing is lost:
  the batch had written no record yet, and its retry draws the same per-example randomness.
  An example that does not fit alone is one line (:class:`OutOfMemory`, exit 1).
- Text recipes are streamed, not batched (:func:`stream_in_windows`): the size is how many
  searches run at once, each is recorded as it ends and the next example's search takes its
  place. An out-of-memory error goes on with half as many searches, those that had finished
  already recorded.

One exception: an attack with ``reduction: mean`` (the mini-batch study's) divides its loss by
the batch size, so its numbers depend on it. It needs an explicit batch size, and an
out-of-memory error is then refused rather than retried smaller (its numbers would change).
Its batches are fixed blocks of the attacked examples for any process count or resume
(:func:`suite.evaluation.runner._mean_batches`), and the size is part of its run's identity.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, TypeVar, Union

from suite.errors import SuiteError

logger = logging.getLogger(__name__)

#: ``--batch-size auto`` for image attacks off CUDA: examples per attack batch.
CPU_AUTO_BATCH = 32
#: ``--batch-size auto`` for text attacks, anywhere: the searches under way at once (their
#: candidates share forward passes: :mod:`suite.attacks.text.cooperative`). Measured on the CPU
#: with a 2-layer BERT and 960 Rotten Tomatoes sentences, streamed (one run each): DeepWordBug's
#: attack loop 18.3 s at 64, 17.0 s at 128, 16.6 s at 256, 16.1 s at 512, in 112, 67, 43 and 32
#: pooled queries; PWWS 63.9 s at 128 and 62.6 s at 256 (106 and 64 queries; peak RSS 1.45 and
#: 1.50 GB). Fewer, fuller passes are what a GPU needs most (a pass has a fixed cost there).
TEXT_AUTO_BATCH = 256
#: The largest batch ``auto`` tries on CUDA (examples).
AUTO_LIMIT = 1024
AUTO = "auto"
BatchSize = Union[int, Literal["auto"]]

T = TypeVar("T")


class OutOfMemory(SuiteError):
    """An attack does not fit in the device's memory even at the smallest batch it may take.

    An environment error (exit 1): the input was fine."""

    exit_code = 1


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is a device running out of memory (CUDA's ``torch.OutOfMemoryError``,
    and the plain ``RuntimeError`` other backends raise with the same words)."""
    import torch

    if isinstance(error, torch.OutOfMemoryError):
        return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


def release_memory(device: Any) -> None:
    """Give the caching allocator's free blocks back after an out-of-memory error."""
    import gc

    import torch

    gc.collect()
    if getattr(device, "type", str(device)).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


def fixed_size(requested: BatchSize, modality: str = "image") -> int:
    """The batch size where nothing is probed: ``requested``, or for ``auto``
    :data:`TEXT_AUTO_BATCH` (text) or :data:`CPU_AUTO_BATCH`."""
    if requested != AUTO:
        return int(requested)
    return TEXT_AUTO_BATCH if modality == "text" else CPU_AUTO_BATCH


def probes(model: Any, attack: Any) -> bool:
    """Whether ``auto`` probes for ``attack`` on ``model``: CUDA, and an image attack that differentiates."""
    return (model.modality == "image" and getattr(model.device, "type", "cpu") == "cuda"
            and attack.rows_per_example(model.num_classes) is not None)


def probe_batch_size(model: Any, attack: Any, sample: Any, upper: int) -> int:
    """The largest power of two ≤ ``upper`` (or ``upper`` itself) examples whose rows pass one
    forward+backward of ``model`` on random inputs shaped like ``sample``; 1 when nothing fits
    (the run then says so in one line if a single example does not fit either)."""
    rows = max(1, int(attack.rows_per_example(model.num_classes) or 1))
    size = max(1, min(upper, AUTO_LIMIT))
    precision = getattr(attack, "precision", "fp32")
    while size > 1:
        try:
            _forward_backward(model, size * rows, sample.shape, precision)
            release_memory(model.device)
            return size
        except Exception as error:  # noqa: BLE001 - only out-of-memory is handled
            if not is_out_of_memory(error):
                raise
        # Out of the except block: the error's traceback (holding the pass's tensors) is gone.
        release_memory(model.device)
        size = 1 << (size.bit_length() - 1) if size & (size - 1) else size // 2
    return 1


def _forward_backward(model: Any, rows: int, shape: Any, precision: str) -> None:
    """One forward+backward (input gradient) of ``rows`` random inputs of ``shape``."""
    import torch

    from suite.attacks.image.loop import autocast

    generator = torch.Generator(device="cpu").manual_seed(0)
    inputs = torch.rand((rows, *shape), generator=generator).to(model.device).requires_grad_(True)
    with autocast(model.device, precision):
        logits = model.logits(inputs, grad=True)
    torch.autograd.grad(logits.float().logsumexp(dim=1).sum(), inputs)


def run_in_batches(items: Sequence[T], size: int, run: Callable[[list[T]], None], *, what: str,
                   device: Any = None, halve: bool = True) -> int:
    """Call ``run`` on consecutive batches of ``items`` of ``size``; on out-of-memory, release
    memory and retry the batch at half the size (one log line), keeping the smaller size for the
    rest. Returns the size the last batch ran at.

    ``run`` must commit nothing for a batch that raises (the runner appends a batch's records
    only after its attack returned). ``halve=False`` (a batch-dependent attack) refuses instead.
    """
    start = 0
    while start < len(items):
        batch = list(items[start : start + size])
        try:
            run(batch)
            start += len(batch)
            continue
        except Exception as error:  # noqa: BLE001 - only out-of-memory is handled
            if not is_out_of_memory(error):
                raise
        # Out of the except block: the error's traceback (holding the batch's tensors) is gone.
        release_memory(device)
        if not halve:
            raise OutOfMemory(f"{what}: out of memory at batch size {size}; its loss is a mean over the "
                              "batch, or its draws are seeded per batch, so a smaller batch would change its "
                              "numbers: rerun with a smaller --batch-size (finished records are kept)")
        if len(batch) == 1:
            raise OutOfMemory(f"{what}: out of memory with a single example; free device memory or use a "
                              "smaller model or --precision bf16 (finished records are kept)")
        size = max(1, len(batch) // 2)
        logger.warning("%s: out of memory at batch size %d; retrying that batch at %d", what, len(batch), size)
    return size


def attack_in_parts(attack: Any, model: Any, items: Sequence[T], size: int, seed: int,
                    commit: Callable[[list[T], list[Any]], None], *, what: str,
                    load: Callable[[list[T]], list[T]] = list) -> int:
    """Attack ``items`` on ``model`` and hand each finished part to ``commit(examples,
    outputs)``: a text recipe's searches as they end, ``size`` under way at once
    (:func:`stream_in_windows`), any other attack in batches of ``size`` (:func:`run_in_batches`;
    ``load`` makes a batch's examples ready first, e.g. decodes streamed images). Returns the
    size the last part ran at."""
    device = getattr(model, "device", None)
    if attack.streams:
        return stream_in_windows(items, size, lambda part, window: attack.stream(model, part, seed, window), commit,
                                 what=what, device=device)

    def run(batch: list[T]) -> None:
        batch = load(batch)
        commit(batch, attack.run(model, batch, seed))

    return run_in_batches(items, size, run, what=what, device=device, halve=not attack.batch_dependent)


def stream_in_windows(items: Sequence[T], size: int, stream: Callable[[list[T], int], Iterator[list[tuple[int, Any]]]],
                      commit: Callable[[list[T], list[Any]], None], *, what: str, device: Any = None) -> int:
    """:func:`run_in_batches` for an attack whose examples finish one by one (a text recipe's
    searches, at most ``size`` alive at once: :meth:`~suite.attacks.text.recipes.TextAttackRecipe.stream`).
    ``stream(items, size)`` yields ``(index in items, output)`` pairs as searches finish, and
    ``commit`` records each yielded group at once, so an interruption loses only the searches
    under way. On out-of-memory, the examples not yet committed are streamed again with half
    the searches at once (one log line). Returns the size the last window ran at."""
    remaining = list(items)
    while remaining:
        committed: set[int] = set()
        try:
            with contextlib.closing(stream(remaining, size)) as finished:
                for pairs in finished:
                    commit([remaining[index] for index, _ in pairs], [output for _, output in pairs])
                    committed.update(index for index, _ in pairs)
            return size
        except Exception as error:  # noqa: BLE001 - only out-of-memory is handled
            if not is_out_of_memory(error):
                raise
        # Out of the except block: the error's traceback (holding the passes' tensors) is gone.
        release_memory(device)
        if size == 1:
            raise OutOfMemory(f"{what}: out of memory with a single search; free device memory or use a "
                              "smaller model (finished records are kept)")
        remaining = [item for index, item in enumerate(remaining) if index not in committed]
        size, before = max(1, size // 2), size
        logger.warning("%s: out of memory with %d searches at once; going on with %d", what, before, size)
    return size
