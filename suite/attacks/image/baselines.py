"""Classic baselines through torchattacks: APGD-CE and APGD-T (``ta_apgd_ce``, ``ta_apgd_t``:
cross-checks of the suite's own :mod:`.apgd`), FAB-T, Square and AutoAttack.

The attacks themselves are torchattacks' (Kim, "Torchattacks: A PyTorch Repository for
Adversarial Attacks", 2020); this module adapts our :class:`~suite.models.base.Classifier` to the
``nn.Module`` they expect, seeds them, counts queries and builds the AutoAttack ensemble.

- APGD-CE, APGD-T (targeted DLR): Croce & Hein, "Reliable evaluation of adversarial robustness
  with an ensemble of diverse parameter-free attacks", ICML 2020.
- FAB-T: Croce & Hein, "Minimally distorted Adversarial Examples with a Fast Adaptive Boundary
  Attack", ICML 2020.
- Square: Andriushchenko et al., "Square Attack: a query-efficient black-box adversarial attack
  via random search", ECCV 2020.
- AutoAttack "standard": APGD-CE, then APGD-T, FAB-T and Square, each run only on the examples
  every previous component failed to break; an example is broken if any component broke it.

Where torchattacks 3.5.1 differs from the official AutoAttack (github.com/fra31/auto-attack, read
at a392200, 2023), checked against both sources (6–8 are fixes the official code made in 2021
that torchattacks' copies, of 2020, lack):

1. ``torchattacks.AutoAttack`` builds APGD, APGD-T and FAB without ``steps``, so they run 10
   iterations; the official standard version runs 100. Our ``autoattack`` builds the ensemble
   from torchattacks' components with the official budgets (100 iterations, 1 restart, 9 target
   classes, Square with 5000 queries, p_init 0.8).
2. torchattacks attacks ``n_classes − 1`` targets (99 on CIFAR-100); the official standard
   version attacks 9. We pass ``n_classes = min(C, 10)``.
3. torchattacks' AutoAttack runs Square with ``resc_schedule=True``; the official one with
   False. We pass False.
4. torchattacks seeds the *global* torch RNG (``torch.manual_seed``) and falls back to
   ``time.time()`` when no seed is given. We seed each batch from (seed, attack, example ids)
   and restore the global RNG afterwards. Their random draws depend on the batch composition,
   so unlike our own attacks these baselines are reproducible for a given batch size, not
   across batch sizes.
5. The official version runs its ``checks.py`` first; our evaluation runs its own checks
   (:mod:`suite.evaluation.checks`).
6. APGD-T under L2 steps every example with the first example's step size (``step_size[0]``;
   official 27d453e takes each example's own). We run ``ta_apgd_t`` (and so ``autoattack``'s
   APGD-T) one example at a time under L2, which gives each its own schedule; L∞ is unaffected.
7. Square under L2 scales each new square by the norm of the window over all channels; the
   official code (e79935c) takes the norm per channel. Corrected: our ``square`` (and so
   ``autoattack``'s) runs the official search (:mod:`.square_search`), per channel.
8. Square never caps the square's side at the image's smaller side (official 8c86d6f), so on
   non-square images its first squares can fall partly outside (a strip at the edge). Corrected
   the same way. On one-channel square images (the digits) neither fix changes a decision; under
   L∞ on square images the search is torchattacks' bit for bit. (Images under 5×5 are padded,
   as below.)
9. The verdict is on x + Π(adv − x), the returned point projected exactly onto the ε-ball and
   the box (the official code judges the attack's own point): they can differ in the last bits,
   which could undo a break that sits on the boundary; the number reported is then the one of a
   point that is surely inside the threat model.

Queries: torchattacks does not count them. Every row the wrapped model sees is attributed to the
clean input nearest to it in L∞ (exact unless two inputs lie within 2ε of each other), so
``queries`` is per example, forward passes and forward+backward passes alike.

Progress: each attack (and each AutoAttack component) draws a bar over its model calls, with
an ETA (:mod:`suite.progress`). The total is the most calls torchattacks 3.5.1 makes for the
budget (:meth:`TorchattacksAttack.max_calls`, counted on that version; ``tests/test_progress.py``
checks the counts); an attack that breaks every example early ends before it. This module imports torch only when an attack runs, so
listing and validating attacks stays fast.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, model_validator

from suite.attacks.base import Access, Attack, AttackOutput, Threat, register_attack
from suite.attacks.image.driver import image_outputs, with_default_eps
from suite.attacks.image.norms import NORMS
from suite.data.base import Example
from suite.errors import ConfigError, ResourceMissingError
from suite.models.base import Classifier, decide
from suite.progress import progress_bar
from suite.seeding import example_generator, example_seed, global_rng_seeded
from suite.threat import MAX_RADIUS

if TYPE_CHECKING:
    import torch
    from torch import nn

#: The extra ``baselines`` pins torchattacks 3.3.0: 3.4.0 and later pin requests~=2.25.1 (never
#: imported), which conflicts with datasets' requests>=2.32.2 (pip would downgrade both);
#: 3.3.0 declares no dependencies, and its APGD, APGD-T, FAB and Square are 3.5.1's code
#: (checked: the same outputs and query counts on builtin:digits-cnn).
INSTALL_HINT = "pip install 'advsuite[baselines]' (or: pip install torchattacks==3.3.0)"


def import_torchattacks():
    try:
        import torchattacks
    except ImportError as error:
        raise ResourceMissingError(f"the baseline attacks need torchattacks: {INSTALL_HINT}") from error
    return torchattacks


class TorchattacksAttack(Attack):
    """Shared driver for the torchattacks baselines (L∞ or L2, pixels in [0, 1])."""

    modality: ClassVar[str] = "image"

    norm: Literal["linf", "l2"] = "linf"
    eps: float = Field(8 / 255, ge=0, le=MAX_RADIUS, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _eps_for_norm(cls, data: Any) -> Any:
        return with_default_eps(data)

    @property
    def threat(self) -> Threat:
        return Threat(norm=self.norm, eps=self.eps)

    def check_resources(self) -> None:
        """Refuse, before anything runs, when torchattacks is not installed (found without importing it)."""
        if importlib.util.find_spec("torchattacks") is None:
            raise ResourceMissingError(f"attack {self.name!r} needs torchattacks, which is not installed: {INSTALL_HINT}")

    @property
    def torchattacks_norm(self) -> str:
        return {"linf": "Linf", "l2": "L2"}[self.norm]

    def _build(self, torchattacks, module: nn.Module, num_classes: int, seed: int) -> Any:
        raise NotImplementedError

    def max_calls(self, num_classes: int) -> int:
        """The most forward passes torchattacks makes on one batch (the progress bar's total)."""
        raise NotImplementedError

    def _check_classes(self, num_classes: int) -> None:
        pass

    def _canvas(self, x: torch.Tensor) -> torch.Tensor:
        """The images the torchattacks attack works on (the module crops back to ``x``'s size)."""
        return x

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        return self._attack(model, examples, seed)[0]

    def _attack(self, model: Classifier, examples: Sequence[Example], seed: int,
                desc: str | None = None) -> tuple[list[AttackOutput], torch.Tensor]:
        """The outputs, and the model's predictions on them (AutoAttack passes on what is unbroken).

        The attack checks its final inputs once (one query): torchattacks' verdict may not survive
        the exact projection onto the ε-ball below. ``desc`` labels the progress bar.
        """
        import torch

        from suite.attacks.image.query_counting import QueryCountingModule

        torchattacks = import_torchattacks()
        start = time.perf_counter()
        num_classes = len(model.labels)
        self._check_classes(num_classes)
        x = torch.stack([example.input for example in examples]).to(model.device, torch.float32)
        y = torch.tensor([example.label for example in examples], device=model.device)
        batch_seed = example_seed(seed, self.name, *(example.id for example in examples))
        label = f"{desc or self.name} ({len(examples)} ex)"
        with progress_bar(self.max_calls(num_classes), label, unit="call") as bar, global_rng_seeded(batch_seed):
            height, width = x.shape[-2:]
            module = QueryCountingModule(model, x, on_call=bar.update, size=(height, width))
            attack = self._build(torchattacks, module, num_classes, batch_seed % 2**31)
            adversarial = attack(self._canvas(x), y).detach()[..., :height, :width]
        # Keep the ε-ball and the box exact whatever rounding the attack did.
        delta = NORMS[self.norm].project(adversarial - x, self.eps)
        adversarial = (x + delta).clamp(0.0, 1.0)
        predictions = decide(model.logits(adversarial), y)
        outputs = image_outputs(NORMS[self.norm], x, adversarial, module.queries + 1, time.perf_counter() - start)
        return outputs, predictions


def _need_four_classes(name: str, num_classes: int) -> None:
    # The targeted DLR loss reads the 4th-largest logit.
    if num_classes < 4:
        raise ConfigError(f"attack {name!r} needs a model with at least 4 classes (it has {num_classes})")


class _TargetedBaseline(TorchattacksAttack):
    """A torchattacks attack run towards the ``targets`` most likely wrong classes in turn."""

    steps: int = Field(100, ge=1)
    restarts: int = Field(1, ge=1)
    targets: int = Field(9, ge=1)

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        targets = self.targets if num_classes is None else min(self.targets, num_classes - 1)
        return {"steps": self.steps, "restarts": self.restarts, "targets": targets, "max_queries": None}

    #: Forward passes per target and restart, beyond ``2 * steps`` (FAB) or ``steps`` (APGD-T).
    _calls_per_step: ClassVar[int] = 1
    _calls_per_run: ClassVar[int] = 2

    def max_calls(self, num_classes: int) -> int:
        targets = min(self.targets, num_classes - 1)
        return 1 + targets * self.restarts * (self._calls_per_step * self.steps + self._calls_per_run)


@register_attack("ta_apgd_ce")
class TorchattacksAPGDCE(TorchattacksAttack):
    """APGD on cross-entropy (Croce & Hein 2020) via torchattacks.APGD: a cross-check of the
    suite's own ``apgd_ce``.

    ``norm`` linf (default ε 8/255) or l2 (default ε 0.5); defaults as in AutoAttack: 100
    iterations, 1 restart, rho 0.75.
    """

    steps: int = Field(100, ge=1)
    restarts: int = Field(1, ge=1)

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        return {"steps": self.steps, "restarts": self.restarts, "max_queries": None}

    def max_calls(self, num_classes: int) -> int:
        # One pass to find what is already misclassified, then per restart an initial step and
        # ``steps`` iterations.
        return 1 + self.restarts * (self.steps + 1)

    def _build(self, torchattacks, module, num_classes, seed):
        return torchattacks.APGD(module, norm=self.torchattacks_norm, eps=self.eps, steps=self.steps, n_restarts=self.restarts, seed=seed, loss="ce")


@register_attack("ta_apgd_t")
class TorchattacksAPGDT(_TargetedBaseline):
    """APGD on the targeted DLR loss (Croce & Hein 2020) via torchattacks.APGDT: a cross-check
    of the suite's own ``apgd_t``.

    Attacks the ``targets`` (default 9) most likely wrong classes in turn; 100 iterations each.
    Needs at least 4 classes (the targeted DLR loss reads the 4th-largest logit).
    """

    version: ClassVar[int] = 2  # 2: one example at a time under L2 (note 6)

    def _check_classes(self, num_classes: int) -> None:
        _need_four_classes(self.name, num_classes)

    def _attack(self, model: Classifier, examples: Sequence[Example], seed: int,
                desc: str | None = None) -> tuple[list[AttackOutput], torch.Tensor]:
        """Under L2, one example at a time: torchattacks' APGD-T steps every example of a batch
        with the first one's step size (``step_size[0]``, a bug the official code fixed in
        27d453e, 2021), so the first example's schedule decided every other's halvings. Alone,
        each example has its own, as in the official code (and its draws no longer depend on the
        batch). It costs batch-1 passes; L∞ is unaffected and runs batched."""
        if self.norm != "l2" or len(examples) <= 1:
            return super()._attack(model, examples, seed, desc)
        import torch

        found = [super(TorchattacksAPGDT, self)._attack(model, [example], seed, desc) for example in examples]
        return [outputs[0] for outputs, _ in found], torch.cat([predictions for _, predictions in found])

    def _build(self, torchattacks, module, num_classes, seed):
        return torchattacks.APGDT(
            module, norm=self.torchattacks_norm, eps=self.eps, steps=self.steps, n_restarts=self.restarts,
            seed=seed, n_classes=min(num_classes, self.targets + 1),
        )


@register_attack("fab_t")
class FABT(_TargetedBaseline):
    """Targeted FAB (Croce & Hein 2020) via torchattacks.FAB(multi_targeted=True).

    Attacks the ``targets`` (default 9) most likely wrong classes; 100 iterations each.
    """

    # Each iteration takes a Jacobian pass and a forward pass; each run three more.
    _calls_per_step: ClassVar[int] = 2
    _calls_per_run: ClassVar[int] = 3

    def _build(self, torchattacks, module, num_classes, seed):
        return torchattacks.FAB(
            module, norm=self.torchattacks_norm, eps=self.eps, steps=self.steps, n_restarts=self.restarts,
            seed=seed, multi_targeted=True, n_classes=min(num_classes, self.targets + 1),
        )


@register_attack("square")
class Square(TorchattacksAttack):
    """Square Attack (Andriushchenko et al. 2020), score-based black-box: torchattacks.Square with
    the official code's search (:mod:`.square_search`: L2 windows per channel, the side capped).

    Defaults as in AutoAttack: 5000 queries, p_init 0.8, margin loss, no rescaled schedule.
    ``sampled: true`` (randomized ensembles only) queries the ensemble as deployed: each query is
    answered by one member, drawn from a generator seeded per example (one example at a time),
    as a black-box attacker would see it; the default queries its mean probabilities.
    """

    access: ClassVar[Access] = "black-box"
    version: ClassVar[int] = 2  # 2: the official search (windows per channel under L2, side capped)

    queries: int = Field(5000, ge=1)
    p_init: float = Field(0.8, gt=0, le=1)
    sampled: bool = False

    def check_model(self, model: Classifier) -> None:
        from suite.models.ensemble import is_ensemble

        if self.sampled and not is_ensemble(model):
            raise ConfigError(f"square: sampled applies to randomized ensembles; {model.info.name!r} is not one")

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        if not self.sampled:
            return super().run(model, examples, seed)
        from suite.models.ensemble import Served

        self.check_model(model)
        return [self._attack(Served(model, example_generator(seed, self.name, "served", example.id)), [example],
                             seed)[0][0] for example in examples]

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        return {"max_queries": self.queries + 2, "restarts": 1}

    def max_calls(self, num_classes: int) -> int:
        return self.queries + 3  # the clean check, the initial margin, then one pass per query

    def _canvas(self, x: torch.Tensor) -> torch.Tensor:
        # torchattacks' (and the official) L2 initialisation tiles the image with ⌊H/5⌋-pixel
        # squares and loops ⌊H/s⌋ times: an image under 5×5 divides by zero. Pad such images with
        # zeros to 5×5; the classifier sees only the top-left H×W, so the padding cannot help
        # the attack, and the perturbation of the image is at most ε (the L2 budget spent on
        # padding only makes the search weaker, never unsound).
        import torch

        height, width = x.shape[-2:]
        if min(height, width) >= 5:
            return x
        return torch.nn.functional.pad(x, (0, max(0, 5 - width), 0, max(0, 5 - height)))

    def _build(self, torchattacks, module, num_classes, seed):
        from suite.attacks.image.square_search import official_square

        return official_square(torchattacks)(
            module, norm=self.torchattacks_norm, eps=self.eps, n_queries=self.queries, n_restarts=1,
            p_init=self.p_init, seed=seed, resc_schedule=False,
        )


@register_attack("autoattack")
class AutoAttack(TorchattacksAttack):
    """AutoAttack, standard version (Croce & Hein 2020), from torchattacks' components.

    APGD-CE → APGD-T → FAB-T → Square, each on the examples all previous ones failed to break,
    with the official budgets (see the module docstring for how this differs from
    ``torchattacks.AutoAttack``). Needs at least 4 classes.
    """

    version: ClassVar[int] = 2  # 2: APGD-T per example under L2 (note 6), Square's official search (7, 8)

    steps: int = Field(100, ge=1)
    targets: int = Field(9, ge=1)
    queries: int = Field(5000, ge=1)

    def _check_classes(self, num_classes: int) -> None:
        _need_four_classes(self.name, num_classes)

    def budget(self, num_classes: int | None = None) -> dict[str, Any]:
        targets = self.targets if num_classes is None else min(self.targets, num_classes - 1)
        return {
            "components": ["apgd_ce", "apgd_t", "fab_t", "square"],
            "steps": self.steps,
            "restarts": 1,
            "targets": targets,
            "square_queries": self.queries,
            "max_queries": None,
        }

    def _components(self) -> list[TorchattacksAttack]:
        common = {"norm": self.norm, "eps": self.eps}
        return [
            TorchattacksAPGDCE(**common, steps=self.steps),
            TorchattacksAPGDT(**common, steps=self.steps, targets=self.targets),
            FABT(**common, steps=self.steps, targets=self.targets),
            Square(**common, queries=self.queries),
        ]

    def run(self, model: Classifier, examples: Sequence[Example], seed: int) -> list[AttackOutput]:
        start = time.perf_counter()
        self._check_classes(len(model.labels))
        labels = [example.label for example in examples]
        outputs: list[AttackOutput | None] = [None] * len(examples)
        queries = [0] * len(examples)
        remaining = list(range(len(examples)))
        for component in self._components():
            if not remaining:
                break
            # Components draw from their own (seed, component name, ids) streams.
            found, predictions = component._attack(model, [examples[i] for i in remaining], seed,
                                                   desc=f"{self.name}: {component.name}")
            still = []
            for index, output, prediction in zip(remaining, found, predictions.tolist()):
                queries[index] += output.queries
                broken = prediction != labels[index]
                if broken or outputs[index] is None:
                    outputs[index] = output
                if not broken:
                    still.append(index)
            remaining = still
        seconds = (time.perf_counter() - start) / len(examples)
        return [AttackOutput(out.adversarial, out.perturbation, count, seconds) for out, count in zip(outputs, queries)]
