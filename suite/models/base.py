"""The one classifier interface every attack and metric talks to.

Contract (see the design notes):

- images enter as float tensors in [0, 1], shape N×C×H×W; the wrapper normalises;
- texts enter as ``list[str]``; the wrapper tokenises;
- :meth:`Classifier.logits` returns raw logits N×C (never probabilities) in eval mode, without
  gradients unless ``grad=True`` is asked for;
- :meth:`Classifier.correctness` gives each example's correctness in [0, 1]: the label's logit
  strictly above every other (:func:`decide`) for a deterministic model, the exact expectation
  over its randomness for a randomized one (a randomized ensemble overrides it). Every accuracy
  the suite reports is a mean of these.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from suite.data.base import SUITE_PREPROCESSING, InputSpec, Preprocessing
from suite.errors import ConfigError
from suite.threat import Threat

Modality = Literal["text", "image"]


def answered(logits: torch.Tensor) -> torch.Tensor:
    """Per row (the last dimension holds the classes), whether the logits give an answer: their
    largest value is finite. A NaN anywhere (``amax`` propagates it), a +inf, or every logit
    −inf leaves no class chosen (``argmax`` would pick the NaN, the first +inf, or class 0) and
    no softmax; a −inf beside finite logits is a class ruled out, and is an answer."""
    return torch.isfinite(logits.amax(dim=-1))


def decide(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The class each row of N×C ``logits`` decides for, judged against its label: the label
    where its logit is strictly above every other, and otherwise the largest of the others
    (the lowest index among equals). So a row is correct exactly when the label wins outright:
    a label tied for the largest logit is not chosen, where ``argmax`` would choose it when it
    comes first (logits clamped or rounded into ties would otherwise leave class 0 unbreakable).
    A NaN among the others also rules the label out (``amax`` and ``argmax`` propagate it),
    as :func:`answered` does. Elsewhere the same class as ``argmax``."""
    labels = labels.to(logits.device).view(-1, 1)
    others = logits.scatter(1, labels, float("-inf"))
    rival = others.argmax(dim=1)
    wins = logits.gather(1, labels).squeeze(1) > others.gather(1, rival.view(-1, 1)).squeeze(1)
    return torch.where(wins, labels.squeeze(1), rival)


def attack_decide(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """:func:`decide` as an attack's early exit reads it: a search stops an example, and counts
    it broken, when this is not its label.

    Logits that carry the draws they average (a randomized model's view sets ``logits.draws``,
    R×N×C: :class:`~suite.models.randomized.Randomized`; a randomized ensemble its members'
    logits) decide for the label while any draw does, and otherwise for the averaged logits'
    largest other class: an example is broken only when no draw the attack saw (no member)
    decides for its label, not when the averaged answer first flips (where up to half the draws
    may still be right, and most of an ensemble's α). Other logits: :func:`decide`."""
    decided = decide(logits.detach(), labels)
    draws = getattr(logits, "draws", None)
    if draws is None:
        return decided
    rows, count, classes = draws.shape
    labels = labels.to(logits.device)
    per_draw = decide(draws.reshape(rows * count, classes), labels.repeat_interleave(count)).view(rows, count)
    rival = logits.detach().scatter(1, labels.view(-1, 1), float("-inf")).argmax(dim=1)
    return torch.where((per_draw == labels.view(-1, 1)).any(dim=1), labels, rival)


def draws_right(draws: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per row and draw of R×K×C ``draws`` (a randomized ensemble's members), whether the draw
    decides for its row's label (:func:`decide`) and gives an answer (:func:`answered`): R×K,
    on the draws' device."""
    rows, count, classes = draws.shape
    labels = labels.to(draws.device)
    per_draw = decide(draws.reshape(rows * count, classes), labels.repeat_interleave(count)).view(rows, count)
    return (per_draw == labels.view(-1, 1)) & answered(draws)


def attack_level(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """How much of the model still decides for each row's label at an attack's iterate, in
    [0, 1] (float32, on the logits' device): what a search keeps the lowest of, and stops an
    example at 0 (where :func:`attack_decide` is not the label).

    - Plain logits: 1 where :func:`attack_decide` gives the label, else 0.
    - Logits carrying ``draws`` (R×N×C) and ``draw_weights`` (N, summing to 1: a randomized
      ensemble's members and their α, :class:`~suite.models.ensemble.RandomizedEnsemble`): the
      weight of the draws deciding for the label, L(x, y, α) = Σ_i α_i·1{f_i decides y}, the
      ensemble's exact expected accuracy (Dbouk & Shanbhag 2022, eq. 1). An iterate where the
      averaged answer flips may keep most of it (α = 0.85 on the member still right).
    - Logits carrying ``draws`` alone (:class:`~suite.models.randomized.Randomized`'s fresh
      draws): 1 while any draw decides for the label, else 0. Not the share of draws: each
      step sees new draws, and its expected accuracy is scored on others.
    """
    draws = getattr(logits, "draws", None)
    weights = getattr(logits, "draw_weights", None)
    if draws is None or weights is None:
        return (attack_decide(logits, labels) == labels.to(logits.device)).float()
    # Summed in one fixed order, so one set of members always gives the same float.
    return (draws_right(draws, labels).float() * weights.to(draws.device, torch.float32).view(1, -1)).sum(dim=1)


@dataclass(frozen=True)
class ModelInfo:
    """Identity of a loaded model, as recorded in results.

    Attributes:
        spec: The spec the user gave (``hf:...``, ``timm:...``, ``builtin:...``).
        revision: Hub revision / commit, or a content hash for local weights; ``None`` if unknown.
        temperature: Served (design) temperature; 1.0 means the logits are served as computed.
        extra: Anything else worth recording (architecture, checkpoint path).
        threat_model: The threat model (norm and ε) the model was trained for, as its card
            declares it (:mod:`suite.models.card`); ``None``: it declares none.
    """

    spec: str
    revision: str | None = None
    temperature: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)
    threat_model: Threat | None = None

    @property
    def name(self) -> str:
        """A display name that tells temperature-scaled models apart from their base model."""
        return self.spec if self.temperature == 1.0 else f"{self.spec}@T={self.temperature:g}"


class Classifier(ABC):
    """A classifier over texts or images that returns raw logits.

    Subclasses set :attr:`modality`, :attr:`labels` and :attr:`info`, and implement
    :meth:`_forward`.
    """

    modality: Modality
    labels: list[str]
    info: ModelInfo
    #: Image models only: expected input (channels, height, width) of [0, 1] pixels.
    input_size: tuple[int, int, int] | None = None
    #: Image models only: how an image of another size is resized and cropped to ``input_size``.
    preprocessing: Preprocessing = SUITE_PREPROCESSING

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @property
    def input_spec(self) -> InputSpec:
        """What the model takes: what data loading conforms examples to."""
        return InputSpec(self.modality, tuple(self.labels), self.input_size, self.info.spec, self.preprocessing)

    @property
    @abstractmethod
    def device(self) -> torch.device:
        """Device the model runs on; image batches are moved there by :meth:`logits`."""

    @abstractmethod
    def _forward(self, batch: Any) -> torch.Tensor:
        """Raw logits for one batch; called under the right grad mode."""

    def logits(self, batch: Sequence[str] | torch.Tensor, *, grad: bool = False) -> torch.Tensor:
        """Raw logits, shape N×C, float32.

        Args:
            batch: ``list[str]`` for text models, a float tensor in [0, 1] of shape N×C×H×W
                for image models.
            grad: Keep the autograd graph (image attacks ask for it); otherwise no grad.
        """
        with torch.set_grad_enabled(grad):
            logits = self._forward(batch).float()
        if logits.dim() != 2 or logits.shape[0] != len(batch) or logits.shape[1] != len(self.labels):
            # (a module whose output count changed with the batch failed with an index error in scoring)
            raise ConfigError(f"{self.info.name!r} gave logits of shape {tuple(logits.shape)} for {len(batch)} "
                              f"input(s); it has {len(self.labels)} classes, so N×{len(self.labels)} was expected")
        return logits

    def correctness(self, batch: Sequence[str] | torch.Tensor, labels: torch.Tensor, *,
                    logits: torch.Tensor | None = None) -> torch.Tensor:
        """Per-example correctness in [0, 1], shape N (float32, on the CPU).

        For a deterministic model, 1 where the label's logit is strictly above every other
        (:func:`decide`: a tie for the top is not a decision for the label) and 0 elsewhere; a
        row that gives no answer (:func:`answered`: a NaN, a +inf) is never correct, since
        ``argmax`` would pick the NaN. A randomized model overrides this with its exact expected
        accuracy per example.

        Args:
            batch: Inputs, as for :meth:`logits`.
            labels: Class index per example.
            logits: This batch's logits when the caller has them already (saves a forward pass;
                a randomized model ignores them).
        """
        logits = self.logits(batch) if logits is None else logits
        return ((decide(logits, labels).cpu() == labels.cpu()) & answered(logits).cpu()).float()

    @property
    def argmax_verdicts(self) -> bool:
        """Whether correctness is :func:`decide`'s ``== label`` (the default :meth:`correctness`),
        so that a verdict follows from the logits alone: batched scoring relies on it
        (:func:`suite.evaluation.scoring.score_batch`). A randomized ensemble's is not."""
        return type(self).correctness is Classifier.correctness

    def scores(self, batch: Sequence[str] | torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This batch's logits and per-example correctness, from as few forward passes as the model
        needs (one; a randomized ensemble derives both from one pass of its members)."""
        logits = self.logits(batch)
        return logits, self.correctness(batch, labels, logits=logits)

    def text_rows(self, texts: Sequence[str]) -> torch.Tensor | None:
        """Text models: logits of texts gathered from several searches (N×C, float32, CPU, no grad),
        or ``None`` when the model cannot pool unrelated texts (then each search's texts are sent
        to :meth:`logits` on their own, as one search alone would send them). Cooperative text
        searches pool their candidates through it (:mod:`suite.attacks.text.cooperative`), and a text
        attack's records are scored through it (:func:`suite.evaluation.scoring.score_batch`).

        On the CPU each row's value must not depend on which texts share its pass, so that a
        search's result does not depend on the other searches of its block (hence on the batch
        size or process count). ``None`` by default."""
        return None

    @property
    def thread_safe(self) -> bool:
        """Whether two threads may call the model at once (each call is then served whole, one
        after the other, or side by side where that is safe). Cooperative text searches score one
        half of their candidates in a thread of their own while the other half runs
        (:meth:`~suite.attacks.text.cooperative.Driver.lane_count`) only where it is. ``False``
        by default: a model in memory may keep state between calls."""
        return False

    def embedding_logits(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Text models: token ids, the input embeddings as a leaf that requires grad, and the
        logits computed from them (under ``torch.enable_grad``). Gradient-ranked text attacks
        use it; views such as a temperature pass it through, so attacks never unwrap a model."""
        raise TypeError(f"{self.info.name} has no input embeddings to take gradients through")

    def lipschitz_bound(self) -> tuple[float | None, str]:
        """A certified upper bound on the L2 Lipschitz constant of [0, 1] pixels ↦ logits, and how
        it was obtained; ``(None, reason)`` where the suite has none (:mod:`suite.models.lipschitz`)."""
        return None, f"no certified Lipschitz bound for {type(self).__name__} models"

    def float64_logits(self, batch: torch.Tensor) -> torch.Tensor | None:
        """Image models: the logits of ``batch`` computed in float64 on the CPU, N×C; ``None``
        where the suite cannot. Certificates evaluate eq. 17's far point with it, where float32
        rounding would exceed the supremum they bound (:mod:`suite.wdro.bounds`)."""
        return None

    def cell_support(self) -> str | None:
        """Why :meth:`relu_cell` gives no activation cone for this model (``None``: it does)."""
        return f"activation cells are computed for ReLU MLPs only, not {type(self).__name__} models"

    def relu_cell(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The recession cone of a ReLU network's activation cell at the input ``x``, as a matrix
        A with rec(C) = {u : A·u ≥ 0}, and the logits' Jacobian J in that cell (float64); ``None``
        where the suite cannot compute them (:func:`suite.models.lipschitz.relu_cell`)."""
        return None

    def weights_hash(self) -> str:
        """A content hash of the weights the model serves (run identity and results use it, so a
        model retrained in place is never mistaken for the old one).

        By default it hashes every ``nn.Module`` and :class:`Classifier` the instance holds (in
        attributes, lists, tuples or dicts: the members of an ensemble). A classifier holding
        neither gets a hash unique to this object, so its records are never resumed by
        another process (override this to allow it)."""
        parts = []
        for name, value in sorted(vars(self).items()):
            items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
            for item in items:
                if isinstance(item, torch.nn.Module):
                    parts.append(f"{name}:{weights_hash(item)}")
                elif isinstance(item, Classifier) and item is not self:
                    parts.append(f"{name}:{item.weights_hash()}")
        if not parts:
            return f"unhashed-{type(self).__qualname__}-{id(self):x}-{os.getpid()}"
        return "sha256-" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]

    def predict(self, batch: Sequence[str] | torch.Tensor, batch_size: int = 64) -> torch.Tensor:
        """Predicted class ids for a batch of any size, computed in chunks."""
        predictions = [
            self.logits(batch[start : start + batch_size]).argmax(dim=-1).cpu()
            for start in range(0, len(batch), batch_size)
        ]
        return torch.cat(predictions) if predictions else torch.empty(0, dtype=torch.long)


class TorchClassifier(Classifier):
    """Shared plumbing for classifiers backed by one ``nn.Module`` kept in eval mode."""

    def __init__(self, module: torch.nn.Module, device: torch.device | str | None = None) -> None:
        self.module = module.eval()
        self.module.requires_grad_(False)  # attacks need input gradients only
        self.module.to(resolve_device(device))

    @property
    def device(self) -> torch.device:
        # A module may hold only buffers (a fixed filter bank), or nothing at all (the CPU then).
        tensor = next(self.module.parameters(), None)
        if tensor is None:
            tensor = next(self.module.buffers(), None)
        return tensor.device if tensor is not None else torch.device("cpu")

    def weights_hash(self) -> str:
        # Kept while no tensor of the module changed (state_key): a classifier whose weights are
        # changed in place (fine-tuned in a notebook, then evaluated again) hashed as the old ones,
        # so its run resumed the old weights' records.
        key = state_key(self.module)
        cached = getattr(self, "_weights_hash", None)
        if cached is None or cached[0] != key:
            cached = self._weights_hash = (key, weights_hash(self.module))
        return cached[1]


def state_key(module: torch.nn.Module) -> tuple:
    """What changes whenever a tensor of ``module`` changes: each parameter's and buffer's storage,
    shape and version counter (every in-place operation bumps it: an optimiser's step, ``copy_``,
    ``load_state_dict``). Cheap, unlike :func:`weights_hash`; a write through ``.data`` (its own
    counter) is the one change it misses."""
    return tuple((name, tensor.data_ptr(), tensor._version, tuple(tensor.shape), tensor.dtype, str(tensor.device))
                 for name, tensor in module.state_dict(keep_vars=True).items())


def weights_hash(module: torch.nn.Module) -> str:
    """A content hash of a module's parameters and buffers (names, shapes, dtypes and values)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        value = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{tuple(value.shape)}:{value.dtype}".encode())
        digest.update(value.view(-1).view(torch.uint8).numpy().tobytes() if value.numel() else b"")
    return "sha256-" + digest.hexdigest()[:16]


def resolve_device(device: torch.device | str | None = None) -> torch.device:
    """The requested device, checked to exist here, else CUDA when present, else the CPU.

    Under a multi-process launch (``accelerate launch``, ``torchrun``) the default CUDA device is
    the process's own, ``cuda:$LOCAL_RANK``.

    Raises:
        ConfigError: ``device`` names no device, or one this machine does not have.
    """
    if device is not None:
        return _existing_device(device)
    if not torch.cuda.is_available():
        return torch.device("cpu")
    from suite.launch import launch

    place = launch()
    return torch.device(f"cuda:{place.local_rank}" if place.several else "cuda")


def _existing_device(device: torch.device | str) -> torch.device:
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ConfigError(f"device {str(device)!r} is not a device: use cpu, cuda or cuda:<index>") from error
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device {str(device)!r}: CUDA is not available on this machine: use --device cpu")
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            raise ConfigError(f"device {str(device)!r}: this machine has {count} CUDA device(s), "
                              f"cuda:0 to cuda:{count - 1}")
    elif parsed.type != "cpu":
        try:  # mps, xpu...: the backend itself knows whether the device is there
            torch.empty(0, device=parsed)
        except (RuntimeError, AssertionError) as error:
            raise ConfigError(f"device {str(device)!r} is not available on this machine: use --device cpu") from error
    return parsed


#: Files in a local model directory that do not decide its outputs (docs, VCS metadata).
_NOT_WEIGHTS = (".md", ".lock")


def local_revision(path: Path) -> str:
    """A content hash of local weights: a weights file, or every file of a model directory.

    A directory's fingerprint covers the name and bytes of each top-level file (weights,
    config, tokenizer), hidden files and docs aside, so a model retrained or edited in place
    gets a new revision. Files are streamed, never read whole.
    """
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(
        item for item in path.iterdir()
        if item.is_file() and not item.name.startswith(".") and not item.name.endswith(_NOT_WEIGHTS)
    )
    for item in files:
        digest.update(f"{item.name}:{item.stat().st_size}:".encode())
        with open(item, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return "local-" + digest.hexdigest()[:12]
