"""ARC's cost against its hyperplane search (G = 1, 2, 4, all) and against adaptive PGD.

Dbouk & Shanbhag (ICML 2022, App. D, Table 5) restrict ARC's closest-hyperplane search to the G
largest logits: on CIFAR-100, G = 4 ran 14x faster than the full search at (nearly) the same
robust accuracy. This measures the same trade on the BAT built-in (10 classes, so "all" is
G = 9), in one process, on the same digits, one attack after the other:

    python bench/arc_candidates.py --n 200

Each row: robust accuracy (exact expected accuracy after the attack), wall time, and time as a
ratio to the full search and to ``apgd_rec`` with the paper's settings (delta(0) = 0, 20 steps of
eps/4) at the same number of iterations. Ratios, not absolute times, are the result.
"""

from __future__ import annotations

import argparse
import time

import torch

from suite.attacks import build_attack
from suite.data.config import DatasetConfig
from suite.data.load import load_eval_set
from suite.models import load_model


def robust_accuracy(model, attack, examples, batch_size: int) -> tuple[float, float]:
    """Mean of min(clean, adversarial) expected accuracy, and the attack's wall time."""
    total, seconds = 0.0, 0.0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        x = torch.stack([example.input for example in chunk])
        y = torch.tensor([example.label for example in chunk])
        began = time.perf_counter()
        outputs = attack.run(model, chunk, seed=0)
        seconds += time.perf_counter() - began
        adversarial = torch.stack([output.adversarial for output in outputs])
        total += float(torch.minimum(model.correctness(adversarial, y), model.correctness(x, y)).sum())
    return total / len(examples), seconds


def ensemble_parser(description: str) -> argparse.ArgumentParser:
    """The options of a bench on the BAT built-in's test digits (``bench/arc_restarts.py`` too)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="builtin:digits-bat")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--eps", type=float, default=0.15)
    parser.add_argument("--norm", default="linf", choices=("linf", "l2"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    return parser


def main() -> None:
    args = ensemble_parser(__doc__).parse_args()

    model = load_model(args.model)
    examples = load_eval_set(DatasetConfig(spec="builtin:digits", n=args.n), model.input_spec, 0).examples
    common = {"norm": args.norm, "eps": args.eps, "steps": args.steps}
    rows = []
    for label, name, params in [
        ("arc G=1", "arc", {"candidates": 1}), ("arc G=2", "arc", {"candidates": 2}),
        ("arc G=4", "arc", {"candidates": 4}), ("arc G=all", "arc", {}),
        ("apgd_rec", "apgd_rec", {"step": args.eps / 4, "rand_init": False}),
    ]:
        accuracy, seconds = robust_accuracy(model, build_attack(name, {**common, **params}), examples, args.batch_size)
        rows.append((label, accuracy, seconds))
    full = next(seconds for label, _, seconds in rows if label == "arc G=all")
    apgd = next(seconds for label, _, seconds in rows if label == "apgd_rec")
    print(f"{args.model}, {args.n} digits, {args.norm} eps={args.eps:g}, {args.steps} iterations, "
          f"torch threads {torch.get_num_threads()}\n")
    print("| attack | robust accuracy | seconds | time / full search | time / apgd_rec |")
    print("|---|---|---|---|---|")
    for label, accuracy, seconds in rows:
        print(f"| {label} | {100 * accuracy:.1f}% | {seconds:.1f} | {seconds / full:.2f} | {seconds / apgd:.1f} |")


if __name__ == "__main__":
    main()
