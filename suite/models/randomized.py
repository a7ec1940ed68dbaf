"""Randomized models that are not ensembles: attacked through the expectation over their
randomness, scored by their expected accuracy over fresh draws.

A model whose answer to one query changes from call to call (noise added to its input or
activations, dropout left on, a random resize and pad) has no single prediction: one draw is
neither its accuracy nor what an attack faces. Scored on one draw, an example counts as right
or wrong by luck; attacked through one draw a step, an attack follows the gradient of that
draw, noise included, and stalls (Athalye, Carlini & Wagner, "Obfuscated Gradients Give a
False Sense of Security", ICML 2018, Sec. 4.2: Expectation over Transformation). AutoAttack's
``version='rand'`` runs APGD with the gradient averaged over 20 draws and scores one draw.

:class:`Randomized` makes such a model what every attack and score of the suite expects, a
deterministic classifier, without hiding its randomness:

- :meth:`~Randomized.logits`: for each input row, ``log (1/N) Σ_k softmax(f(x; ω_k))`` over
  N = :data:`EOT_DRAWS` draws ω_k, the log-probabilities of the answer one query gets, averaged
  over the randomness (as a randomized ensemble's ``logits``). An attack's gradient through it
  is the EOT gradient of that expected answer. *Deviation from AutoAttack's rand version*: it
  averages the gradients of the loss of each draw, E[∇ℓ(f(x; ω))]; this differentiates the
  loss of the averaged answer, ∇ℓ(E[softmax f(x; ω)]), the objective that decides the averaged
  answer, and one attacks see with the same number of passes.
- :meth:`~Randomized.correctness`: each example's expected accuracy, estimated as the share of
  M = :data:`SCORE_DRAWS` fresh draws (not those the attacks saw) that decide for the label
  (:func:`~suite.models.base.decide`, one draw at a time). So every accuracy is the model's
  expected accuracy up to the estimate's sampling error (at most 0.5/√M = 0.05 per example, and
  the mean of n examples' estimates within 0.05/√n of the truth, one standard error), where one
  draw's verdict is off by up to 1 per example.

**Determinism.** The draws of a row are seeded from a hash of the row's bytes, the run's seed
and their use (the attacks' or the score's), and the row is run on its own (N or M copies of it
as one batch): a row's draws never depend on the rows beside it, the batch size, the process
count or the order of calls. The model is thereby a deterministic function, and records resume
and merge as for any model. The draws come from torch's global generators (and Python's and
NumPy's, seeded too), forked for each row and given back after. What holds on CUDA is what holds
for the base model (kernels round differently in batches of another size).

**Early exit.** An image attack counts an example broken only when none of the N draws decides
for its label (:func:`~suite.models.base.attack_decide`, reading the draws the averaged logits
carry), and the suite's searches run every step on this view (:attr:`Randomized.runs_every_step`).
A text attack's goal is the same: reached only where none of the N draws decides for the label
(:meth:`Randomized.draw_winners`, :func:`~suite.attacks.text.recipe_base.every_draw_goal`), not
where the averaged answer first flips (TextAttack's goal, which left up to half of them right).

**Text.** A text row is hashed from its UTF-8 bytes, its draws run as N copies of it in one
pass (so on the CPU its value does not depend on the texts pooled beside it,
:meth:`Randomized.text_rows`), and a gradient-guided search's embedding gradient is summed over
the N draws (:meth:`Randomized.embedding_logits`).

**Cost.** Every row an attack sends costs N rows of the base model in its own call, every score
M, and no search stops early: ``auto`` on the PGD-AT digits CNN took 30 times its time through
one draw (``bench/randomized.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from suite.errors import ConfigError
from suite.models.base import Classifier, answered, decide
from suite.models.temperature import LogitView

#: Draws an attack's query is averaged over (AutoAttack's rand version: ``eot_iter`` 20).
EOT_DRAWS = 20
#: Fresh draws each example's expected accuracy is estimated from.
SCORE_DRAWS = 100
#: Examples the randomness probe runs on (two passes each).
PROBE_EXAMPLES = 16
#: Texts whose draws' decisions a view remembers (:meth:`Randomized.draw_winners`).
WINNERS_REMEMBERED = 65_536


def spread(first: torch.Tensor, second: torch.Tensor) -> tuple[float, float]:
    """The largest difference of two passes' logits, and their scale, both after centring each
    row (a constant added to every logit changes no decision, and would hide a difference
    under a tolerance relative to the largest logit)."""
    first, second = (logits - logits.mean(dim=1, keepdim=True) for logits in (first, second))
    return float((first - second).abs().max()), 1.0 + float(first.abs().max())


def changes_across_queries(model: Classifier, batch: Any) -> tuple[bool, float, int]:
    """Whether ``model`` answers the same query differently twice: two passes of ``batch``
    (differences under 1e-3 of the centred logits' scale, kernel rounding on a GPU, are not
    randomness). Also the largest difference and the decisions that flipped. The global
    generators are seeded 0 for the first pass and 1 for the second, so what it finds is the
    same from run to run."""
    passes = []
    for seed in (0, 1):
        with seeded(seed, model.device):
            passes.append(model.logits(batch).float())
    first, second = passes
    # Identical passes are no change, NaNs and infinities included (a deterministic model that
    # gives no answer on some input is not randomized: centring a row with an infinity in it,
    # or subtracting two NaNs, would read as a difference).
    if bool(((first == second) | (first.isnan() & second.isnan())).all()):
        return False, 0.0, 0
    difference, scale = spread(first, second)
    flipped = int((first.argmax(dim=1) != second.argmax(dim=1)).sum())
    return not difference <= 1e-3 * scale, difference, flipped  # NaN counts as a change


def row_seed(row: torch.Tensor | str, seed: int, use: str) -> int:
    """The seed of one row's draws: a hash of the row (an image's shape and float32 bytes, a
    text's UTF-8 bytes), the run seed and what the draws are for (``attack`` or ``score``)."""
    if isinstance(row, str):
        digest = hashlib.sha256(f"{use}\x00{seed}\x00text\x00".encode())
        digest.update(row.encode("utf-8", "surrogatepass"))
    else:
        digest = hashlib.sha256(f"{use}\x00{seed}\x00{tuple(row.shape)}\x00".encode())
        digest.update(row.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return int.from_bytes(digest.digest()[:8], "little") >> 1


@contextlib.contextmanager
def seeded(seed: int, device: torch.device) -> Iterator[None]:
    """Torch's (the CPU's and ``device``'s), Python's and NumPy's global generators seeded with
    ``seed`` inside, and given back their states after."""
    devices = [torch.cuda.current_device() if device.index is None else device.index] if device.type == "cuda" else []
    state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=devices):
        # Not torch.manual_seed: it also queues the seed, with the caller's stack, for every
        # device type not in use (2.4 ms a call here, against 0.01 ms for the generators used).
        torch.default_generator.manual_seed(seed)
        if devices:
            torch.cuda.default_generators[devices[0]].manual_seed(seed)
        elif device.type == "mps":
            torch.mps.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % (1 << 32))
        try:
            yield
        finally:
            random.setstate(state[0])
            np.random.set_state(state[1])


class Randomized(LogitView):
    """``base``, a randomized image or text model, as a deterministic classifier: logits averaged over
    ``draws`` draws per row, correctness the share of ``score_draws`` fresh draws that decide
    for the label (see the module's docstring).

    Args:
        base: The randomized model.
        seed: The run's attack seed (part of every row's draw seed).
        draws: Draws per row an attack's query is averaged over.
        score_draws: Draws per example its expected accuracy is estimated from.
    """

    def __init__(self, base: Classifier, seed: int, draws: int = EOT_DRAWS, score_draws: int = SCORE_DRAWS) -> None:
        super().__init__(base)
        self.seed, self.draws, self.score_draws = seed, draws, score_draws
        #: Whether its draws are reproducible: the base model draws from the global generators
        #: this view seeds (:func:`randomized_view` probes it).
        self.reproducible = True
        #: Per text (the most recent ones): the class each of its attack draws decides for, or -1
        #: (:meth:`draw_winners`), kept when its averaged logits are computed.
        self._winners: OrderedDict[str, torch.Tensor] = OrderedDict()
        self.info = replace(base.info, extra={**base.info.extra,
                                              "randomized": {"eot_draws": draws, "score_draws": score_draws}})

    #: The suite's searches run every step on it, as EOT PGD does, rather than stop an example
    #: at the first iterate whose attack draws all decide against its label: the draws it is
    #: scored on are others, and there, stopping left 0.4-2.3 % of the expected accuracy that
    #: running on took (``bench/randomized.py`` before the change, on the digits CNN).
    runs_every_step = True

    @property
    def thread_safe(self) -> bool:
        return False  # its draws seed the global generators

    def weights_hash(self) -> str:
        described = f"{self.base.weights_hash()}\nrandomized:{self.seed}:{self.draws}:{self.score_draws}"
        return "sha256-" + hashlib.sha256(described.encode()).hexdigest()[:16]

    def draw(self, row: torch.Tensor | str, count: int, use: str) -> torch.Tensor:
        """``count`` draws of the base model's logits on one input row, an image or a text
        (count×C, float32), as one batch of copies of it, seeded for that row and ``use``."""
        with seeded(row_seed(row, self.seed, use), self.device):
            return self.base.logits(_copies(row, count), grad=torch.is_grad_enabled()).float()

    def text_rows(self, texts: Sequence[str]) -> torch.Tensor:
        """The averaged logits of texts pooled from several searches (N×C, CPU): each text's
        draws run on their own, so a row depends on its text alone, whatever shares the pool."""
        return self.logits(list(texts)).cpu()

    def embedding_logits(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One text's token ids (1×T), the input embeddings of its :attr:`draws` attack draws
        (draws×T×H, the leaf) and their averaged logits (1×C): the gradient of a loss of the
        averaged logits, summed over the draws' rows, is the EOT gradient at the text's
        embedding (the text attacks' ``get_grad`` sums it)."""
        if len(texts) != 1:
            raise ValueError(f"a randomized model's embedding gradient is taken one text at a time, got {len(texts)}")
        with seeded(row_seed(texts[0], self.seed, "attack"), self.device):
            ids, embeddings, logits = self.base.embedding_logits(_copies(texts[0], self.draws))
        return ids[:1], embeddings, _averaged(logits.float()).unsqueeze(0)

    def _forward(self, batch: Any) -> torch.Tensor:
        """The averaged logits of each row's attack draws; the draws themselves ride along as
        ``.draws`` (R×N×C, detached), for :func:`~suite.models.base.attack_decide`."""
        drawn = [self.draw(row, self.draws, "attack") for row in batch]
        if not drawn:
            return torch.empty(0, self.num_classes, device=self.device)
        averaged = torch.stack([_averaged(rows) for rows in drawn])
        averaged.draws = torch.stack([rows.detach() for rows in drawn])
        for row, rows in zip(batch, averaged.draws):
            if isinstance(row, str):
                self._remember(row, rows)
        return averaged

    def draw_winners(self, text: str) -> torch.Tensor:
        """The class each of a text's :attr:`draws` attack draws decides for (the label when its
        logit is strictly above every other), or -1 where none does (a tie at the top, no
        answer): a text search's goal is reached only where no draw decides for the label, as
        an image search's early exit (:func:`~suite.models.base.attack_decide`). Read from the
        pass that averaged them; a text no longer remembered is drawn again (the same draws)."""
        winners = self._winners.get(text)
        if winners is None:
            with torch.no_grad():
                self._remember(text, self.draw(text, self.draws, "attack"))
            winners = self._winners[text]
        return winners

    def _remember(self, text: str, draws: torch.Tensor) -> None:
        # A draw decides for its largest class where decide() would, judged with that class as the label.
        draws = draws.detach().float()
        top = draws.argmax(dim=-1)
        self._winners[text] = torch.where(decide(draws, top) == top, top, -1).cpu()
        self._winners.move_to_end(text)
        while len(self._winners) > WINNERS_REMEMBERED:
            self._winners.popitem(last=False)

    def scores(self, batch: Any, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The averaged logits and the expected accuracy, both from the score's draws."""
        logits, correct = [], []
        with torch.no_grad():
            for row, label in zip(batch, labels.tolist()):
                drawn = self.draw(row, self.score_draws, "score")
                logits.append(_averaged(drawn))
                correct.append(_share_correct(drawn, label))
        if not logits:
            return torch.empty(0, self.num_classes, device=self.device), torch.empty(0)
        return torch.stack(logits), torch.tensor(correct, dtype=torch.float32)

    def correctness(self, batch: Any, labels: torch.Tensor, *, logits: torch.Tensor | None = None) -> torch.Tensor:
        """Each example's share of :attr:`score_draws` fresh draws that decide for its label;
        ``logits`` are ignored."""
        return self.scores(batch, labels)[1]

    def relu_cell(self, x: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None

    def cell_support(self) -> str | None:
        return "a randomized model has no one activation cell"

    def float64_logits(self, batch: Any) -> torch.Tensor | None:
        return None

    def lipschitz_bound(self) -> tuple[float | None, str]:
        return None, "no certified Lipschitz bound for a randomized model"


def _copies(row: torch.Tensor | str, count: int) -> torch.Tensor | list[str]:
    """A batch of ``count`` copies of one input row (an image tensor, or a text)."""
    if isinstance(row, str):
        return [row] * count
    return row.unsqueeze(0).repeat(count, *([1] * row.dim()))


def _averaged(drawn: torch.Tensor) -> torch.Tensor:
    """log (1/k) Σ softmax over k draws (k×C → C)."""
    return torch.logsumexp(torch.log_softmax(drawn, dim=-1), dim=0) - math.log(len(drawn))


def _share_correct(drawn: torch.Tensor, label: int) -> float:
    labels = torch.full((len(drawn),), label, dtype=torch.long)
    right = (decide(drawn, labels).cpu() == label) & answered(drawn).cpu()
    return float(right.double().mean())


def probe_randomness(model: Classifier, inputs: Sequence[torch.Tensor | str]) -> tuple[bool, float, int, Any]:
    """:func:`changes_across_queries` on the first :data:`PROBE_EXAMPLES` of ``inputs``, and the
    batch it ran on: a model that runs out of memory on 16 rows is probed on fewer (the run
    halves its batches too)."""
    probe = list(inputs[:PROBE_EXAMPLES]) if model.modality == "text" else torch.stack(list(inputs[:PROBE_EXAMPLES]))
    while True:
        try:
            return (*changes_across_queries(model, probe), probe)
        except RuntimeError as error:  # torch.OutOfMemoryError, and other backends' "out of memory"
            if len(probe) == 1 or "out of memory" not in str(error).lower():
                raise
            probe = probe[: len(probe) // 2]


def _refuse_random_members(ensemble: Classifier, inputs: Sequence[torch.Tensor | str]) -> None:
    """An ensemble's expected accuracy is scored exactly from each member's decision, which
    needs members that answer a query one way: a member with noise of its own was scored on
    single draws (0.5 or 1.0 at one input from call to call, its true expected accuracy 0.77),
    and the worst case was overstated by 3 points, unwarned."""
    for member, alpha in zip(ensemble.members, ensemble.alphas):
        if alpha > 0 and probe_randomness(member, inputs)[0]:
            raise ConfigError(f"ensemble member {member.info.name!r} answers identical queries differently (it is "
                              "randomized itself): an ensemble's expected accuracy is exact over deterministic members "
                              "only; evaluate that member alone (the suite then averages its draws) or make it "
                              "deterministic")


def randomized_view(model: Classifier, inputs: Sequence[torch.Tensor | str],
                    seed: int) -> tuple[Classifier, str | None]:
    """``model`` as :class:`Randomized` where it is a randomized model, image or text (not an
    ensemble, whose exact expected accuracy needs no draws), that answers identical queries
    differently, with a note saying so; else ``model`` itself and ``None``."""
    if not inputs:
        return model, None
    if getattr(model, "alphas", None) is not None:
        _refuse_random_members(model, inputs)
        return model, None
    changes, difference, flipped, probe = probe_randomness(model, inputs)
    if not changes:
        return model, None
    view = Randomized(model, seed)
    note = (f"the model is randomized (its logits differ by up to {difference:.3g} across identical queries, "
            f"{flipped} of {len(probe)} decisions flipped): every attack sees the average of {view.draws} draws "
            f"per query (EOT), and every accuracy is its expected accuracy, each example's estimated from "
            f"{view.score_draws} fresh draws; it costs about {view.draws}x a deterministic model's evaluation (if it "
            f"answers with one of a few fixed models, evaluate it as ensemble:<p>*<spec>,... instead, scored exactly)")
    if changes_across_queries(view, probe)[0]:
        view.reproducible = False
        note += ("; its draws come from a source the suite cannot seed (not torch's, Python's or NumPy's global "
                 "generators), so they differ from run to run: its numbers are not reproducible, and a resumed "
                 "run is refused when its clean pass differs")
    return view, note
