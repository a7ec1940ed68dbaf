"""Processes of an ``accelerate launch`` (or ``torchrun``) run, and how examples are split among them.

``accelerate launch -m suite run RECIPE`` starts one ``advsuite`` per process. Every process
loads the same recipe, model and examples (the seeded subsample is the same everywhere), then
takes the examples at positions ``rank, rank + world, ...`` of the evaluation order. Because
every attack seeds each example from (run seed, attack, example id), which process attacks an
example never changes its result: records are the same as a one-process run's.

Launching: the environment variables ``WORLD_SIZE``/``RANK``/``LOCAL_RANK`` that the launcher
sets decide everything. With one process (or no launcher) nothing is initialised and no
collective runs. On a CPU-only machine, ``accelerate launch --cpu --num_processes 2`` starts
ONE process; ``accelerate launch --multi_gpu --num_processes 2`` starts two, which then talk
over gloo (NCCL on GPUs).
"""

from __future__ import annotations

import atexit
import re
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from typing import Any, TypeVar

from suite.errors import SuiteError, rerun
from suite.launch import Launch, launch

T = TypeVar("T")

#: How long a process waits for the others at a collective before giving up. A launcher
#: stops every process as soon as one fails, so this only bounds a hung (not a failed) peer.
TIMEOUT = timedelta(hours=2)


@dataclass(frozen=True)
class Processes(Launch):
    """This process's place among the launched processes, and the collectives between them."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, items: Sequence[T]) -> list[T]:
        """This process's share of ``items`` (round robin over their order)."""
        return list(items[self.rank :: self.world])

    def barrier(self) -> None:
        if self.several:
            import torch.distributed as dist

            with _peers():
                dist.barrier()

    def gather(self, value: Any) -> list[Any]:
        """Every process's ``value`` (picklable), in rank order, on every process."""
        if not self.several:
            return [value]
        import torch.distributed as dist

        values: list[Any] = [None] * self.world
        with _peers():
            dist.all_gather_object(values, value)
        return values

    def sum(self, value: float) -> float:
        return sum(self.gather(value))


class PeerLost(SuiteError):
    """A collective failed because another process is gone (it failed, and said why, or was
    killed): this process stops too. Not a bug of this process and not bad input: exit 1."""

    exit_code = 1


@contextmanager
def _peers():
    """A collective whose peer is gone (gloo: "Connection closed by peer") is :class:`PeerLost`."""
    try:
        yield
    except RuntimeError as error:  # torch.distributed's DistBackendError is one
        # gloo's message starts with its source location: "[.../pair.cc:561] Connection closed by peer ..."
        cause = re.sub(r"^\[[^\]]*\]\s*", "", (str(error).strip().splitlines() or [""])[0]).split(". ")[0][:100]
        raise PeerLost(rerun("another process stopped (its own message says why), so this one stops too; finished "
                             "records are kept, rerun the same command (with any number of processes) to resume "
                             f"({cause or type(error).__name__})")) from None


@lru_cache(maxsize=1)
def current() -> Processes:
    """The launched processes (initialising the process group once when there are several)."""
    place = launch()
    if not place.several:
        return Processes()
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(place.local_rank)
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend, timeout=TIMEOUT)
        atexit.register(_close)
    return Processes(rank=place.rank, world=place.world, local_rank=place.local_rank)


def _close() -> None:
    """At exit, the process group this module started, closed while the interpreter is whole.

    Left to the interpreter's teardown, gloo's worker threads outlive it: a process then ended
    in ``terminate called without an active exception`` (SIGABRT) after all of its work was
    written, and the launcher stopped the other process mid-merge. A two-process gloo script on
    a 2-core CPU aborted 2 times in 80 runs left open, never in 40 closed so
    (pytorch/pytorch#190489 describes the same abort). A group the caller started itself is the
    caller's to close."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
