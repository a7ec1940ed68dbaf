"""A randomized defence evaluated as the suite did before EOT, and as it does now.

The defence: ``builtin:digits-cnn`` (``--model``) with Gaussian noise of σ added to its pixels on every query.
For each σ, radius and attack, on the first ``--n`` test digits:

- *one draw* (the suite before): the attack follows one draw's gradient a step, and the clean
  and adversarial inputs are each scored on one draw;
- *one draw, expected*: the same adversarial inputs, scored by their expected accuracy (the
  share of 100 fresh draws that decide for the label, :class:`suite.models.randomized.Randomized`);
- *EOT* (the suite now, ``suite.evaluate``): the attack sees the average of 20 draws per query,
  and every accuracy is the expected accuracy.

With ``--peer``, a row more per σ and radius: torchattacks' ``EOTPGD`` (a peer, installed with
the ``baselines`` extra) with the suite's PGD settings (20 steps of 2.5ε/20 from a random start)
and 20 draws per step, scored by expected accuracy as the rest; beside it the suite's
``pgd_linf`` through the same view, each over ``--peer-seeds`` seeds (mean, and the range): one
run's random start moves either by a few points on a robust model.

Usage: ``python bench/randomized.py [--n 60] [--sigmas 0.02,0.05] [--eps 0.03,0.1] [--attacks pgd_linf,auto] [--peer]
[--model builtin:digits-cnn]``
"""

from __future__ import annotations

import argparse
import time

import torch

import suite
from suite.attacks import build_attack
from suite.data.base import Example
from suite.data.builtin import digits
from suite.models import load_model
from suite.models.base import decide
from suite.models.randomized import Randomized
from suite.models.temperature import LogitView


class InputNoise(LogitView):
    """Gaussian noise of σ added to the pixels on every query."""

    def __init__(self, base, sigma: float) -> None:
        super().__init__(base)
        self.sigma = sigma

    def _forward(self, batch):
        return self.base._forward(batch + self.sigma * torch.randn_like(batch))


def one_draw(model, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Each row scored on one draw (0 or 1), as a deterministic model is."""
    with torch.no_grad():
        return (decide(model.logits(images), labels).cpu() == labels).float()


def peer_eot_pgd(model, images: torch.Tensor, labels: torch.Tensor, eps: float, seed: int) -> torch.Tensor:
    """torchattacks' EOTPGD on ``model``'s logits, at the suite's PGD settings, 20 draws a step."""
    import torchattacks

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.anchor = torch.nn.Parameter(torch.zeros(()), requires_grad=False)  # torchattacks reads a device

        def forward(self, x):
            return model.logits(x, grad=torch.is_grad_enabled())

    torch.manual_seed(seed)
    attack = torchattacks.EOTPGD(Logits().eval(), eps=eps, alpha=2.5 * eps / 20, steps=20, eot_iter=20)
    return attack(images, labels).detach()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--sigmas", default="0.02,0.05")
    parser.add_argument("--eps", default="0.03,0.1")
    parser.add_argument("--attacks", default="pgd_linf,auto")
    parser.add_argument("--peer", action="store_true", help="also torchattacks' EOTPGD")
    parser.add_argument("--peer-seeds", type=int, default=4)
    parser.add_argument("--model", default="builtin:digits-cnn", help="the deterministic model the noise is added to")
    args = parser.parse_args()
    torch.set_num_threads(2)
    split = digits("test")
    images = torch.stack(list(split.inputs[: args.n]))
    labels = torch.tensor(list(split.labels[: args.n]))
    examples = [Example(i, x, int(y)) for i, (x, y) in enumerate(zip(images, labels))]
    base = load_model(args.model)
    print("| σ | ε | attack | clean, one draw | clean, expected | one draw | one draw, expected | EOT | s, attack (one draw) | s, `suite.evaluate` (EOT) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for sigma in map(float, args.sigmas.split(",")):
        noisy = InputNoise(base, sigma)
        view = Randomized(noisy, seed=0)
        torch.manual_seed(0)
        clean_once = one_draw(noisy, images, labels)
        clean_expected = view.correctness(images, labels)
        for eps in map(float, args.eps.split(",")):
            for name in args.attacks.split(","):
                attack = build_attack(name, {"eps": eps})
                start = time.perf_counter()
                torch.manual_seed(0)
                outputs = attack.run(noisy, examples, seed=0)
                adversarial = torch.stack([ex.input if out.adversarial is None else out.adversarial
                                           for ex, out in zip(examples, outputs)])
                once = float((one_draw(noisy, adversarial, labels) * clean_once).mean())
                before = time.perf_counter() - start
                expected = float(torch.minimum(view.correctness(adversarial, labels), clean_expected).mean())
                start = time.perf_counter()
                results = suite.evaluate(noisy, (images, labels), attacks=[name], eps=eps)
                after = time.perf_counter() - start
                print(f"| {sigma:g} | {eps:g} | `{name}` | {float(clean_once.mean()):.1%} | {results.clean_accuracy:.1%} "
                      f"| {once:.1%} | {expected:.1%} | **{results.attacks[name].robust_accuracy:.1%}** "
                      f"| {before:.1f} | {after:.1f} |", flush=True)
            if args.peer:
                peer, ours, seconds = [], [], []
                for seed in range(args.peer_seeds):
                    start = time.perf_counter()
                    adversarial = peer_eot_pgd(noisy, images, labels, eps, seed)
                    seconds.append(time.perf_counter() - start)
                    peer.append(float(torch.minimum(view.correctness(adversarial, labels), clean_expected).mean()))
                    outputs = build_attack("pgd_linf", {"eps": eps}).run(view, examples, seed=seed)
                    adversarial = torch.stack([ex.input if out.adversarial is None else out.adversarial
                                               for ex, out in zip(examples, outputs)])
                    ours.append(float(torch.minimum(view.correctness(adversarial, labels), clean_expected).mean()))
                rows = ((f"torchattacks `EOTPGD` (20 draws), {args.peer_seeds} seeds", peer,
                         f"{sum(seconds) / len(seconds):.1f}"),
                        (f"`pgd_linf` (EOT), the same {args.peer_seeds} seeds", ours, ""))
                for label, values, took in rows:
                    spread = f"{min(values):.1%}–{max(values):.1%}"
                    print(f"| {sigma:g} | {eps:g} | {label} | | | | | **{sum(values) / len(values):.1%}** ({spread}) "
                          f"| {took} | |", flush=True)

if __name__ == "__main__":
    main()
