"""Image training methods: the loss of one mini-batch of pixels, built on the suite's attacks.

Each method's :meth:`ImageMethod.loss` takes the model being trained, a batch of [0, 1] images,
labels and one generator per example, and returns the scalar loss the optimiser minimises (its
:meth:`~ImageMethod.backward`, what the loop calls, back-propagates it). The inner
maximisations are the suite's own attacks (:mod:`suite.attacks.image`) in their TRAINING mode:
every step is taken and the last iterate is used, as in the papers; the model is attacked in
eval mode with frozen parameters (as TRADES' and MART's reference code do; Madry's runs it in
train mode, which lets attack passes move batch-norm statistics).

Settings follow Robey et al. (ICLR 2024, Sec. 5): ε = 8/255 under L∞, 10-step inner attacks
with α = 2/255 = ε/4, and λ = 5 for TRADES and MART. ``bench/training.py`` and the built-in
robust models scale ε and the number of steps to the machine and say which.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, model_validator

from suite.attacks.image.beta import BETA
from suite.attacks.image.driver import with_default_eps
from suite.attacks.image.search import TRAINING, SearchMode
from suite.attacks.image.fgm import FGML2, FGMLinf
from suite.attacks.image.pgd import PGDL2, PGDLinf
from suite.losses import cross_entropy, margin
from suite.models.trainable import TrainableImage
from suite.train.methods import MAX_STEPS, TrainMethod, register_method
from suite.threat import MAX_RADIUS


class ImageMethod(TrainMethod):
    """Base of the image training methods: the threat model trained against and :meth:`loss`.

    Fields:
        norm: ``linf`` or ``l2``.
        eps: Radius of the ball, in [0, 1] pixel units (default 8/255 under L∞, 0.5 under L2).
    """

    modality: ClassVar[str] = "image"
    norm: Literal["linf", "l2"] = "linf"
    eps: float = Field(8 / 255, ge=0, le=MAX_RADIUS, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _eps_for_norm(cls, data: Any) -> Any:
        return with_default_eps(data)

    def loss(self, model: TrainableImage, x: torch.Tensor, y: torch.Tensor,
             generators: list[torch.Generator]) -> torch.Tensor:
        """The scalar loss of one mini-batch (mean over its examples)."""
        raise NotImplementedError

    def backward(self, model: TrainableImage, inputs: torch.Tensor, labels: torch.Tensor,
                 generators: list[torch.Generator]) -> dict[str, float]:
        loss = self.loss(model, inputs, labels, generators)
        loss.backward()
        return {"loss": float(loss.detach())}


class _Stepped(ImageMethod):
    """Methods with an iterative inner attack: ``steps`` steps of size ``alpha`` (default ε/4)."""

    steps: int = Field(10, ge=1, le=MAX_STEPS)
    alpha: float | None = Field(None, gt=0, allow_inf_nan=False)

    @property
    def step_size(self) -> float:
        # Robey et al. Sec. 5: α = 2/255 at ε = 8/255, for every training and test-time attack.
        return self.alpha if self.alpha is not None else self.eps / 4

    def pgd(self) -> PGDLinf | PGDL2:
        """Madry et al.'s PGD: uniform random start, ``steps`` steps of ``alpha``, cross-entropy."""
        cls = PGDLinf if self.norm == "linf" else PGDL2
        return cls(eps=self.eps, steps=self.steps, alpha=self.step_size)


def _adversarial(attack, model: TrainableImage, x, y, generators, mode: SearchMode = TRAINING) -> torch.Tensor:
    with model.frozen() as classifier:
        return attack.perturb(classifier, x, y, generators, mode).detach()


def _kl(reference_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(p_ref ‖ p) per example, shape N (logits cast to float32)."""
    reference = reference_logits.float().log_softmax(dim=1)
    return (reference.exp() * (reference - logits.float().log_softmax(dim=1))).sum(dim=1)


@register_method("standard")
class Standard(ImageMethod):
    """Empirical risk minimisation on clean inputs (the non-robust baseline); ε is unused."""

    def loss(self, model, x, y, generators):
        return cross_entropy(model.logits(x), y).mean()


@register_method("fgsm_at")
class FGSMAT(ImageMethod):
    """FGSM adversarial training: Goodfellow, Shlens & Szegedy, ICLR 2015 (eq. 6's adversarial
    term), the FGSM baseline of Robey et al. (Table 1).

    Each batch is replaced by one signed-gradient step of size ε from the clean input
    (:class:`~suite.attacks.image.fgm.FGMLinf`), and the cross-entropy is minimised there.
    Deviation: Goodfellow et al.'s eq. 6 mixes in the clean loss with weight 0.5; like the
    usual FGSM-AT baseline (and Wong et al., ICLR 2020, without their random start), only the
    adversarial term is kept. It is known to overfit catastrophically: Robey et al.'s last
    checkpoint has 1.5 % PGD accuracy.
    """

    def loss(self, model, x, y, generators):
        attack = (FGMLinf if self.norm == "linf" else FGML2)(eps=self.eps)
        return cross_entropy(model.logits(_adversarial(attack, model, x, y, generators)), y).mean()


@register_method("pgd_at")
class PGDAT(_Stepped):
    """PGD adversarial training: Madry et al., ICLR 2018, eq. 2.1 (min_θ E max_δ ℓ(x + δ)).

    The inner maximisation is ``steps``-step PGD on the cross-entropy from a uniform random
    start (:class:`~suite.attacks.image.pgd.PGDLinf`), last iterate; the outer step minimises
    the cross-entropy at it.
    """

    def loss(self, model, x, y, generators):
        return cross_entropy(model.logits(_adversarial(self.pgd(), model, x, y, generators)), y).mean()


@register_method("trades")
class TRADES(_Stepped):
    """TRADES: Zhang et al., ICML 2019, eq. 5 (with their Alg. 1's inner PGD on the KL term):

        min_θ E [ CE(f(x), y) + ``lam`` · max_{x'} KL(p(x) ‖ p(x')) ],

    ``lam`` the KL term's weight: TRADES' code's β, the paper's 1/λ (eq. 5 divides by λ).
    It defaults to 5, the value Robey et al. use (TRADES' own default is 6).
    Deviations: the inner search starts uniformly in the ε-ball (the PGD attack's start)
    rather than at x + 0.001·N(0, I); the reference distribution p(x) of the inner search is
    the eval-mode prediction, as in TRADES' code, which also attacks in eval mode.
    """

    lam: float = Field(5.0, ge=0, allow_inf_nan=False)

    def loss(self, model, x, y, generators):
        with model.frozen() as classifier:
            reference = classifier.logits(x).detach()
        mode = SearchMode(stop_on_success=False, keep="last",
                          objective=lambda logits, rows: _kl(reference[rows], logits))
        adversarial = _adversarial(self.pgd(), model, x, y, generators, mode)
        clean = model.logits(x)
        robust = _kl(clean, model.logits(adversarial))  # gradient through both, as in TRADES
        return cross_entropy(clean, y).mean() + self.lam * robust.mean()


@register_method("mart")
class MART(_Stepped):
    """MART: Wang et al., ICLR 2020, eq. 9 / their Alg. 1:

        BCE(p(x'), y) + λ · KL(p(x) ‖ p(x')) · (1 − p_y(x)),
        BCE = −log p_y(x') − log(1 − max_{k≠y} p_k(x')),

    with x' from ``steps``-step PGD on the cross-entropy and λ = ``lam`` (5, as Robey et al.;
    MART's default is 6). Deviation: uniform random start (MART's code: x + 0.001·N(0, I)).
    """

    lam: float = Field(5.0, ge=0, allow_inf_nan=False)

    def loss(self, model, x, y, generators):
        adversarial = _adversarial(self.pgd(), model, x, y, generators)
        clean, adv = model.logits(x).float(), model.logits(adversarial).float()
        adv_probs = adv.softmax(dim=1)
        rival = adv_probs.scatter(1, y.view(-1, 1), 0.0).amax(dim=1)
        # 1.0001 as in MART's code: keeps the log finite when the rival takes all the mass.
        boosted = cross_entropy(adv, y) - torch.log(1.0001 - rival)
        true_prob = clean.softmax(dim=1).gather(1, y.view(-1, 1)).squeeze(1)
        return (boosted + self.lam * _kl(clean, adv) * (1.0 - true_prob)).mean()


class _BetaMethod(ImageMethod):
    """BETA-based training: the inner attack is BETA (Alg. 1) with ``steps`` steps per target,
    its ``optimizer`` (RMSprop under L∞) and learning rate ``lr`` (default: the attack's,
    ε/10 under L∞, where Robey et al.'s Sec. 5 gives 2/255 = ε/4 for every attack; see
    :class:`~suite.attacks.image.beta.BETA`), over the ``targets`` most likely wrong
    classes (default all, as the paper)."""

    steps: int = Field(10, ge=1, le=MAX_STEPS)
    targets: int | None = Field(None, ge=1)
    lr: float | None = Field(None, gt=0, allow_inf_nan=False)

    def beta(self) -> BETA:
        return BETA(norm=self.norm, eps=self.eps, steps=self.steps, targets=self.targets, lr=self.lr)


@register_method("beta_at")
class BETAAT(_BetaMethod):
    """BETA-AT: Robey et al., "Adversarial Training Should Be Cast as a Non-Zero-Sum Game",
    ICLR 2024, Algorithm 2 (eqs. 18-20 / 21-23).

    The attacker maximises each target's negative margin M_j = f_j − f_y (BETA, last iterate
    of every target) and hands over the perturbation of j* = argmax_j M_j; the defender
    minimises the cross-entropy there. Deviation: Alg. 2 samples one example per step; like
    the paper's experiments, a mini-batch is used.
    """

    def loss(self, model, x, y, generators):
        return cross_entropy(model.logits(_adversarial(self.beta(), model, x, y, generators)), y).mean()


@register_method("sbeta_at")
class SBETAAT(_BetaMethod):
    """SBETA-AT: Robey et al., ICLR 2024, Algorithm 3 (eqs. 33-37).

    Every target's perturbation η_j enters the loss, weighted by the softmax of μ·M_j:

        L = Σ_{j≠y} λ_j · CE(f(x + η_j), y),  λ_j = exp(μ M_j(x + η_j)) / Σ_{k≠y} exp(μ M_k(x + η_k))

    (eq. 34, 36). As μ → ∞ the weights tend to BETA-AT's one-hot on j*. ``mu`` has no default
    in the paper; 1.0 here. The weights are the margins the lower level reached, of the model
    it maximised them on (eval mode, as every attack of training runs), and are constants:
    they are the lower level's solution (eq. 34), which the upper level does not differentiate
    through, as it does not through η*. They were taken from the training forward pass, in
    train mode, where BatchNorm normalises by the batch of N·(K − 1) adversarial rows: another
    function, whose μ → ∞ choice differed from BETA-AT's j* on 36 of 64 digits.
    """

    mu: float = Field(1.0, gt=0, allow_inf_nan=False)

    def loss(self, model, x, y, generators):
        with model.frozen() as classifier:
            points, _, rows, margins = self.beta().target_iterates(classifier, x, y, generators)
        logits = model.logits(points.detach()).float()
        weights = target_weights(margins.detach().float(), len(x), self.mu)
        return (weights * cross_entropy(logits, y[rows])).sum() / len(x)


def target_weights(margins: torch.Tensor, examples: int, mu: float) -> torch.Tensor:
    """λ_j of eq. 34: the softmax of ``mu``·M_j over each example's rows (every example has the
    same number of rows, example-major)."""
    per = len(margins) // examples
    return (mu * margins.view(examples, per)).softmax(dim=1).reshape(-1)
