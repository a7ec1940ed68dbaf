"""Where this process stands in a multi-process launch, from the launcher's environment.

``accelerate launch`` and ``torchrun`` set ``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK`` in every
process they start. Read here only (the CLI labels its messages with them, models pick
``cuda:LOCAL_RANK``, :mod:`suite.evaluation.distributed` splits the work); nothing here starts
a process group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Launch:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def several(self) -> bool:
        return self.world > 1

    def label(self) -> str:
        """`` (process 2 of 4)`` under a multi-process launch, else empty."""
        return f" (process {self.rank + 1} of {self.world})" if self.several else ""


def _int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    if value == "":
        return default
    try:
        return int(value)
    except ValueError:
        from suite.errors import ConfigError

        raise ConfigError(f"environment variable {name}={value!r} is not an integer") from None


def launch() -> Launch:
    """This process's place (one process of one when no launcher started it)."""
    world = _int("WORLD_SIZE", 1)
    if world <= 1:
        return Launch()
    return Launch(rank=_int("RANK", 0), world=world, local_rank=_int("LOCAL_RANK", 0))
