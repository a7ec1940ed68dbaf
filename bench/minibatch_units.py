"""Where the mini-batch paper's floor sits: on the gradient of [0, 1] inputs or of 0–255 pixels.

Redgrave & Crum normalise an L2 step by √max(1e-12, Σg²) (eq. 2); their official code attacks raw
0–255 pixels, whose gradient is the [0, 1] gradient over 255, so the floor is 255 times higher on
the suite's scale. ``l2_step: floored`` floors the [0, 1] gradient, ``floored_pixels`` the
pixels' (:mod:`suite.attacks.image.norms`). For each model this prints the share of its correctly
classified test digits whose cross-entropy gradient norm, divided by N (a mean over a batch of N),
falls under each floor, and the success rate of FGM-L2 and PGD-L2 (Table 1: ε = 128/256, PGD 32
steps of 2ε/32) with each step, the loss summed (any batch size gives the same) or averaged over
batches of 8 and 128:

    python bench/minibatch_units.py --n 200          # about 10 minutes on 2 CPU cores
"""

from __future__ import annotations

import argparse

import torch

import suite
from suite.data.config import DatasetConfig
from suite.data.load import load_eval_set
from suite.evaluation.options import RunOptions
from suite.models import load_model

ATTACKS = {"fgm_l2": {"eps": 0.5}, "pgd_l2": {"eps": 0.5, "steps": 32, "alpha": 0.03125}}
#: (batch size, reduction): summed (batch-invariant), then averaged over 8 and 128.
SETTINGS = ((128, "sum"), (8, "mean"), (128, "mean"))
#: The floor on ‖g‖ of the [0, 1] gradient: the paper's 1e-6, and the same on 0–255 pixels.
FLOORS = {"[0, 1]": 1e-6, "0-255": 255e-6}


def below_floor(spec: str, sizes=(8, 16, 128)) -> dict[str, float]:
    """The share of correctly classified test digits whose gradient norm over N is under each floor."""
    model = load_model(spec)
    examples = load_eval_set(DatasetConfig(spec="builtin:digits", split="test"), model.input_spec, 0).examples
    images = torch.stack([example.input for example in examples])
    labels = torch.tensor([example.label for example in examples])
    keep = model.predict(images) == labels
    images = images[keep].clone().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(model.logits(images, grad=True), labels[keep], reduction="sum")
    norms = torch.autograd.grad(loss, images)[0].flatten(1).norm(dim=1)
    return {f"N={size} {unit}": float((norms / size < floor).float().mean())
            for size in sizes for unit, floor in FLOORS.items()}


def success_rates(spec: str, n: int | None) -> list[dict]:
    rows = []
    for attack, params in ATTACKS.items():
        for step in ("floored", "floored_pixels"):
            rates = []
            for batch, reduction in SETTINGS:
                config = {"name": attack, **params, "l2_step": step, "reduction": reduction}
                results = suite.evaluate(spec, "builtin:digits", attacks=[config], n=n,
                                         options=RunOptions(batch_size=batch))
                clean = results.clean_accuracy
                rates.append(100 * (clean - results.attacks[attack].robust_accuracy) / clean)
            rows.append({"model": spec, "attack": attack, "l2_step": step, "rates": rates})
            print(f"{spec} {attack} {step}: " + " / ".join(f"{rate:.1f}" for rate in rates), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="test digits per run (default 200)")
    parser.add_argument("--models", default="builtin:digits-cnn,builtin:digits-cnn-at")
    args = parser.parse_args()
    for spec in args.models.split(","):
        shares = below_floor(spec)
        print(f"{spec}: under the floor " + ", ".join(f"{key} {100 * value:.1f}%" for key, value in shares.items()))
    print("success rate (%): summed / averaged over 8 / averaged over 128")
    for spec in args.models.split(","):
        success_rates(spec, args.n)


if __name__ == "__main__":
    main()
