"""A randomized text model evaluated as the suite did before EOT, and as it does now.

The model: ``builtin:sentiment-tiny`` (``--model``) with Gaussian noise of σ added to its logits
on every query (a stand-in for a randomized text defence). For each σ and attack, on the first
``--n`` built-in sentiment test sentences:

- *one draw* (the suite before): the attack searches through one draw per query, and the clean
  and adversarial texts are each scored on one draw;
- *one draw, expected*: the same adversarial texts, scored by their expected accuracy (the
  share of 100 fresh draws that decide for the label, :class:`suite.models.randomized.Randomized`);
- *EOT* (the suite now, ``suite.evaluate``): the search sees the average of 20 draws per
  query, and every accuracy is the expected accuracy.

Usage: ``python bench/randomized_text.py [--n 40] [--sigmas 2,4] [--attacks deepwordbug,pwws]``
"""

from __future__ import annotations

import argparse

import torch

import suite
from suite.attacks import build_attack
from suite.data.base import Example
from suite.data.builtin import sentiment
from suite.models import load_model
from suite.models.base import decide
from suite.models.randomized import Randomized
from suite.models.temperature import LogitView


class LogitNoise(LogitView):
    """Gaussian noise of σ added to the logits on every query."""

    def __init__(self, base, sigma: float) -> None:
        super().__init__(base)
        self.sigma = sigma

    def _forward(self, batch):
        logits = self.base._forward(batch)
        return logits + self.sigma * torch.randn_like(logits)

    def text_rows(self, texts):
        return None  # its rows are not its text's alone: each search's texts go to logits


def one_draw(model, texts: list[str], labels: torch.Tensor) -> torch.Tensor:
    """Each text scored on one draw (0 or 1), as a deterministic model is."""
    with torch.no_grad():
        return (decide(model.logits(texts), labels).cpu() == labels).float()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--sigmas", default="2,4")
    parser.add_argument("--attacks", default="deepwordbug,pwws")
    parser.add_argument("--model", default="builtin:sentiment-tiny")
    args = parser.parse_args()
    torch.set_num_threads(2)
    split = sentiment("test")
    texts, labels = list(split.inputs[: args.n]), torch.tensor(list(split.labels[: args.n]))
    examples = [Example(i, text, int(label)) for i, (text, label) in enumerate(zip(texts, labels))]
    base = load_model(args.model)
    print("| σ | attack | clean, one draw | clean, expected | one draw | one draw, expected | EOT |")
    print("|---|---|---|---|---|---|---|")
    for sigma in map(float, args.sigmas.split(",")):
        noisy = LogitNoise(base, sigma)
        view = Randomized(noisy, seed=0)
        torch.manual_seed(0)
        clean_once = one_draw(noisy, texts, labels)
        clean_expected = view.correctness(texts, labels)
        for name in args.attacks.split(","):
            torch.manual_seed(0)
            outputs = build_attack(name, {}).run(noisy, examples, seed=0)
            adversarial = [ex.input if out.adversarial is None else out.adversarial for ex, out in zip(examples, outputs)]
            once = float((one_draw(noisy, adversarial, labels) * clean_once).mean())
            expected = float(torch.minimum(view.correctness(adversarial, labels), clean_expected).mean())
            results = suite.evaluate(noisy, (texts, labels.tolist()), attacks=[name], adversary=["none"])
            print(f"| {sigma:g} | `{name}` | {float(clean_once.mean()):.1%} | {results.clean_accuracy:.1%} "
                  f"| {once:.1%} | {expected:.1%} | **{results.attacks[name].robust_accuracy:.1%}** |", flush=True)


if __name__ == "__main__":
    main()
