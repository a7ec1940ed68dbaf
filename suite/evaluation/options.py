"""How a run is carried out, as one frozen object (not flags passed six levels deep)."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class RunOptions:
    """Options shared by every task of a run.

    Attributes:
        seed: Run seed: subsamples and every attack's per-example randomness derive from it.
        batch_size: Examples per attack batch (text recipes: searches under way at once), for
            tasks that do not set their own (results do not depend on it, except for a
            batch-dependent attack's: a mean loss, a torchattacks baseline), or ``auto``: the
            largest that fits on CUDA, probed per attack,
            else :data:`~suite.evaluation.batching.CPU_AUTO_BATCH` (text attacks:
            :data:`~suite.evaluation.batching.TEXT_AUTO_BATCH`; :mod:`.batching`).
        output: Output directory; ``None`` keeps records in memory and writes no files (the
            Python API without ``output``).
        subdirs: One sub-directory per task (``output/<task name>``), as recipes write.
        overwrite: Start over in an output directory: clear everything the suite wrote there
            (records, results, samples, plots), whatever run it was.
        wait: Wait for another run writing to the same output directory to finish (else refuse).
        log_samples: Also write ``samples.md`` (and adversarial images) per task.
        command: The command line recorded in provenance (default: this process's).
        deterministic: Deterministic kernels and no TF32 while the tasks run
            (:func:`suite.seeding.deterministic_kernels`; it matters on CUDA).
        channels_last: Image models on CUDA: the network in channels-last memory format (its
            kernels change, not its weights; no effect on the CPU, with a warning). Measured on
            an H200, ResNet-50's input-gradient passes were slower in it (docs/attacks/measured.md).
    """

    seed: int = 0
    batch_size: int | Literal["auto"] = "auto"
    output: Path | None = None
    subdirs: bool = False
    overwrite: bool = False
    wait: bool = False
    log_samples: bool = False
    command: str | None = None
    deterministic: bool = False
    channels_last: bool = False

    def __post_init__(self) -> None:
        from suite.errors import ConfigError

        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be a whole number >= 0, not {self.seed!r}")
        size = self.batch_size
        if size != "auto" and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ConfigError(f"batch_size must be a whole number >= 1 or 'auto', not {size!r}")
        if self.output is not None and (not isinstance(self.output, (str, Path)) or not str(self.output)):
            raise ConfigError(f"output must be a directory path (None: in memory), not {self.output!r}")

    def directory_for(self, task_name: str) -> Path | None:
        """Where a task writes (``None``: in memory)."""
        if self.output is None:
            return None
        return Path(self.output) / task_name if self.subdirs else Path(self.output)

    @property
    def command_line(self) -> str:
        if self.command is not None:
            return self.command
        return " ".join(shlex.quote(part) for part in ["advsuite", *sys.argv[1:]])
