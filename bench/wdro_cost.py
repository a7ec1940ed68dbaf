"""What the distributional evaluation costs, as ratios measured in one process:

- input Jacobians for the certificate: batched with ``torch.func`` (``suite.wdro.jacobians``)
  against one backward pass per example and class (``jacobians_loop``), on the same images;
- WDA (kappa = 1, 2) and WDA++ against PGD (20 steps) on the same digits, same radius.

    python bench/wdro_cost.py --n 100

Ratios, not absolute times, are the result (2 CPU cores here; a GPU changes both sides).
"""

from __future__ import annotations

import argparse
import time

import torch

from suite.attacks import build_attack
from suite.wdro import jacobians, jacobians_loop
from suite.data.config import DatasetConfig
from suite.data.load import load_eval_set
from suite.models import load_model


def timed(function, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="builtin:digits-cnn-at")
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--eps", type=float, default=0.1)
    args = parser.parse_args()

    model = load_model(args.model)
    examples = load_eval_set(DatasetConfig(spec="builtin:digits", n=args.n), model.input_spec, 0).examples
    x = torch.stack([example.input for example in examples])
    batched = timed(lambda: jacobians(model, x), repeat=2)
    looped = timed(lambda: jacobians_loop(model, x), repeat=2)
    print(f"{args.model}, {args.n} digits, torch threads {torch.get_num_threads()}\n")
    print("| Jacobians of the logits | seconds | ratio |")
    print("|---|---|---|")
    print(f"| per-example loop (K backward passes each) | {looped:.2f} | 1.00 |")
    print(f"| batched torch.func (vmap of jacrev) | {batched:.2f} | {batched / looped:.2f} |")

    attacks = {"pgd_linf (20 steps)": ("pgd_linf", {}), "wda k=1": ("wda", {}), "wda k=2": ("wda", {"kappa": 2.0}),
               "wda_pp": ("wda_pp", {})}
    seconds = {label: timed(lambda name=name, params=params: build_attack(name, {"eps": args.eps, **params}).run(
        model, examples, 0)) for label, (name, params) in attacks.items()}
    print(f"\n| attack, linf eps={args.eps:g} | seconds | time / PGD |")
    print("|---|---|---|")
    for label, value in seconds.items():
        print(f"| {label} | {value:.2f} | {value / seconds['pgd_linf (20 steps)']:.2f} |")


if __name__ == "__main__":
    main()
