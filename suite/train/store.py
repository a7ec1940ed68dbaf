"""The output directory of a training run: what it holds, and resuming after a kill.

::

    <output>/
      config.json, model.safetensors   the last finished epoch: a ``timm:<dir>`` model (a text
                                       model's tokenizer files too: an ``hf:<dir>`` model)
      weights.sha256.json              the sha256 of model.safetensors, checked when it loads
      best/                            the epoch with the best robust validation accuracy (same layout)
      train_log.jsonl                  one line per finished epoch
      curves.png                       learning curves (Robey et al., Fig. 1)
      train_run.json                   the run's identity: a different run is refused here
      state.safetensors                weights, optimiser state and progress: what a rerun resumes from

Everything is written atomically; a model directory's hash record after its weights, so a
load refuses weights damaged after they were written. ``state.safetensors`` is written last
in an epoch and is the only commit point: a run killed at any moment resumes from its last
finished epoch, and since every random choice is keyed by (seed, epoch, example), the resumed
run ends with the weights an uninterrupted run has. Nothing is ever unpickled: tensors go to
safetensors, the rest to JSON.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from suite.errors import ConfigError
from suite.models.weights import HASH_FILE, record_hashes
from suite.paths import (RESUME, append_text, atomic_write, atomic_write_text, check_run_directory, lock_directory,
                         writable_parent, writing)

logger = logging.getLogger(__name__)
RUN_FILE = "train_run.json"
#: What a failed write keeps: a rerun resumes from the last finished epoch.
KEPT_EPOCHS = "finished epochs are kept"
STATE_FILE = "state.safetensors"
LOG_FILE = "train_log.jsonl"
CURVES_FILE = "curves.png"
BEST_DIR = "best"
#: The model card beside the weights (:attr:`TrainStore.card`).
CARD_FILE = "README.md"
#: What ``save_pretrained`` of a text model writes beside its weights (tokenizer files).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "vocab.json",
                   "merges.txt", "spm.model", "sentencepiece.bpe.model", "spiece.model", "added_tokens.json",
                   "generation_config.json", "chat_template.jinja")
#: Everything a training run writes: ``--overwrite`` clears exactly these, never other files.
TRAIN_FILES = (RUN_FILE, STATE_FILE, LOG_FILE, CURVES_FILE, "config.json", "model.safetensors", HASH_FILE,
               *TOKENIZER_FILES)
TRAIN_DIRS = (BEST_DIR,)


class TrainStore:
    """One training run's output directory: checks, lock, identity, resume state, outputs."""

    def __init__(self, directory: Path, identity: dict[str, Any]) -> None:
        self.directory = Path(directory)
        self.identity = identity
        #: A model card (``README.md``) written with every model directory, or ``None``.
        self.card: str | None = None
        self._lock: int | None = None
        self._created = False

    def check(self, overwrite: bool) -> None:
        """Refuse, before anything is written, a directory this run cannot use."""
        if writable_parent(self.directory) == self.directory and not overwrite:
            self._verify()

    def _verify(self) -> None:
        check_run_directory(self.directory, self.directory / RUN_FILE, self.identity,
                            foreign="files of no training run", replaces="what training writes",
                            another="another training run")

    def open(self, overwrite: bool, wait: bool) -> None:
        """Create and lock the directory; clear it when overwriting; record the identity."""
        self._created = not self.directory.exists()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = lock_directory(self.directory, wait, "advsuite train")
        try:
            if overwrite:  # the card too where this run writes one (a run without one leaves a README alone)
                for name in (*TRAIN_FILES, *((CARD_FILE,) if self.card is not None else ())):
                    (self.directory / name).unlink(missing_ok=True)
                for name in TRAIN_DIRS:
                    shutil.rmtree(self.directory / name, ignore_errors=True)
                for path in self.directory.glob(".*.tmp"):
                    path.unlink(missing_ok=True)
            else:
                self._verify()  # again, under the lock
            atomic_write_text(self.directory / RUN_FILE, json.dumps(self.identity, indent=2, sort_keys=True) + "\n",
                              KEPT_EPOCHS, RESUME)
        except BaseException:
            self.close(failed=True)
            raise

    def close(self, failed: bool = False) -> None:
        """Release the directory; after a failure before the first finished epoch, remove
        what this run wrote, so it does not claim the directory."""
        if self._lock is None:
            return
        try:
            # Only where the run wrote nothing else: an epoch whose state write failed (a full
            # disk) has left its model, log and card, and the run file is what lets the rerun
            # claim them (it trains that epoch again) rather than refuse the directory.
            wrote = [name for name in (*TRAIN_FILES, *TRAIN_DIRS)
                     if name != RUN_FILE and (self.directory / name).exists()]
            if failed and not wrote:
                (self.directory / RUN_FILE).unlink(missing_ok=True)
                if self._created and not any(self.directory.iterdir()):
                    self.directory.rmdir()
        finally:
            os.close(self._lock)
            self._lock = None

    # -- resume state -------------------------------------------------------------------------

    def load_state(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, Any]] | None:
        """The last finished epoch's (model state, optimiser tensors, progress), or ``None``."""
        path = self.directory / STATE_FILE
        if not path.exists():
            return None
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt") as handle:
                progress = json.loads((handle.metadata() or {})["progress"])
                tensors = {key: handle.get_tensor(key) for key in handle.keys()}
        except (SafetensorError, OSError, KeyError, ValueError) as error:
            raise ConfigError(f"cannot read {str(path)!r} ({error}); use --overwrite to start over") from error
        model = {key.removeprefix("model."): value for key, value in tensors.items() if key.startswith("model.")}
        optimiser = {key.removeprefix("optim."): value for key, value in tensors.items() if key.startswith("optim.")}
        return model, optimiser, progress

    def resume(self, model: Any, optimiser: torch.optim.Optimizer, best: dict[str, Any],
               epochs: int) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
        """Load the last finished epoch's weights and optimiser state into ``model`` and
        ``optimiser``, if there is one: ``(epochs done, best so far, log of those epochs)``
        (``(0, best, [])`` for a fresh run)."""
        start = 0
        state = self.load_state()
        if state is None:
            self._check_no_state()
        if state is not None:
            weights, tensors, progress = state
            try:  # a state file the suite wrote, edited or from another architecture: one line
                start, best = progress["epochs_done"], progress["best"]
                if not (isinstance(start, int) and 0 < start <= epochs and isinstance(best, dict)):
                    raise ValueError(f"progress {str(progress)[:200]} is not a finished epoch's")
                model.load_state(weights)
                restore_optimiser(optimiser, tensors, progress["optimiser"])
            except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as error:
                path = self.directory / STATE_FILE
                raise ConfigError(f"cannot resume from {str(path)!r} ({str(error).splitlines()[0][:300]}): it was "
                                  "edited or damaged; use --overwrite to start over") from error
            logger.info("resuming %s from epoch %d of %d", self.directory, start, epochs)
            if best.get("epoch") == start:  # its weights are the ones just loaded (see end_epoch)
                self.save_model(model.save, best=True)
        return start, best, self.log(start)

    def _check_no_state(self) -> None:
        """Without a resume state the run starts over, and the log is cut to nothing: right after
        a first epoch whose state write failed (its log line is then all there is), but a log of a
        second epoch means a state was written (an epoch's line follows the last one's state), so
        the state was deleted or lost: refused, not trained over without a word."""
        path = self.directory / LOG_FILE
        if not path.exists():
            return
        epochs = []
        for text in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                entry = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("epoch"), int):
                epochs.append(entry["epoch"])
        if max(epochs, default=0) >= 2:
            raise ConfigError(f"{str(self.directory)!r} holds a training log of {max(epochs)} epochs but no "
                              f"{STATE_FILE} to resume from (deleted or lost): nothing was trained over; use "
                              "--overwrite to train again")

    def end_epoch(self, model: Any, optimiser: torch.optim.Optimizer, entry: dict[str, Any], log: list[dict[str, Any]],
                  best: dict[str, Any], improved: bool) -> None:
        """Commit a finished epoch: the model, its log line, then the resume state (the commit
        point), and ``best/`` when ``improved``.

        ``best/`` comes after the commit: written before it, a kill in between left ``best/``
        holding the weights of an epoch the rerun trains again, which differ where training is
        not bit-reproducible (CUDA, another thread count); when that epoch then did not improve,
        ``best/`` kept them while the log named an earlier best. Now a kill after the commit
        leaves ``best/`` one improvement behind (or, inside its swap, absent), and the resume,
        whose loaded weights are the best epoch's whenever it is the last finished one, writes
        it again (:meth:`resume`)."""
        self.save_model(model.save)
        self.append_log(entry)
        log.append(entry)
        tensors, meta = optimiser_tensors(optimiser)
        self.save_state(model.state(), tensors, {"epochs_done": entry["epoch"], "best": best, "optimiser": meta})
        if improved:
            self.save_model(model.save, best=True)

    def files(self) -> dict[str, str]:
        """Where a run's outputs are: the model, ``best/``, the log and the curves."""
        return {"model": str(self.directory), "best": str(self.directory / BEST_DIR),
                "log": str(self.directory / LOG_FILE), "curves": str(self.directory / CURVES_FILE)}

    def save_state(self, model: dict[str, torch.Tensor], optimiser: dict[str, torch.Tensor],
                   progress: dict[str, Any]) -> None:
        """Commit a finished epoch (atomically): the point a rerun resumes from."""
        from safetensors.torch import save

        tensors = {f"model.{key}": value.contiguous() for key, value in model.items()}
        tensors |= {f"optim.{key}": value.detach().cpu().contiguous() for key, value in optimiser.items()}
        path = self.directory / STATE_FILE
        data = save(tensors, metadata={"progress": json.dumps(progress, sort_keys=True)})
        atomic_write(path, lambda handle: handle.write(data), KEPT_EPOCHS, RESUME)

    # -- outputs ------------------------------------------------------------------------------

    def save_model(self, save, best: bool = False) -> None:
        """Write a model directory with ``save(directory)``, atomically: the top level (the last
        epoch) or ``best/``."""
        staging = self.directory / f".staging.{os.getpid()}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            with writing(self.directory / (BEST_DIR if best else ""), KEPT_EPOCHS, RESUME):
                save(staging)
                record_hashes(staging)  # checked by every load of the directory
                if self.card is not None:
                    atomic_write_text(staging / CARD_FILE, self.card, KEPT_EPOCHS, RESUME)
                if best:
                    target = self.directory / BEST_DIR
                    old = self.directory / f".old-best.{os.getpid()}.tmp"
                    if target.exists():
                        os.replace(target, old)
                    os.replace(staging, target)
                    shutil.rmtree(old, ignore_errors=True)
                    return
                # weights, config (and a text model's tokenizer files), then the hash record of those weights
                for path in sorted(staging.iterdir(), key=lambda path: path.name == HASH_FILE):
                    os.replace(path, self.directory / path.name)
        finally:  # whatever was staged and not moved into place is removed, on success or failure
            shutil.rmtree(staging, ignore_errors=True)

    def log(self, epochs_done: int) -> list[dict[str, Any]]:
        """The log of the finished epochs (lines of epochs not committed by a state are dropped)."""
        path = self.directory / LOG_FILE
        lines: list[dict[str, Any]] = []
        if not path.exists() and epochs_done == 0:
            return lines
        for text in (path.read_text(encoding="utf-8") if path.exists() else "").splitlines():
            try:
                entry = json.loads(text)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            if isinstance(entry, dict) and isinstance(entry.get("epoch"), int) and entry["epoch"] <= epochs_done:
                lines.append(entry)
        # The finished epochs' lines, each once and in order: the summary reads the best epoch's
        # line by its number, and a deleted or edited log would name another epoch's numbers.
        if [entry["epoch"] for entry in lines] != list(range(1, epochs_done + 1)):
            held = [entry["epoch"] for entry in lines][:20]
            raise ConfigError(f"{str(path)!r} does not hold one line for each of the {epochs_done} finished "
                              f"epochs (it holds epochs {held}): it was edited or damaged; use --overwrite to "
                              "train again")
        atomic_write_text(path, "".join(json.dumps(entry, sort_keys=True) + "\n" for entry in lines), KEPT_EPOCHS, RESUME)
        return lines

    def append_log(self, entry: dict[str, Any]) -> None:
        append_text(self.directory / LOG_FILE, json.dumps(entry, sort_keys=True, allow_nan=False) + "\n",
                    KEPT_EPOCHS, RESUME)


def optimiser_tensors(optimiser: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """An optimiser's state as flat tensors (``<param index>.<name>``) and JSON (the rest)."""
    state = optimiser.state_dict()
    tensors, scalars = {}, {}
    for index, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value
            else:
                scalars[f"{index}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def restore_optimiser(optimiser: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, value in [*tensors.items(), *meta["scalars"].items()]:
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    optimiser.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
