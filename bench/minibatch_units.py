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

With ``--confident``, the study's first table instead (docs/minibatch.md): the digits CNN served
at temperature 0.5 (logit margins doubled, like a confident model), FGM-L2 and PGD-L2 with the
suite's rescaled step and the paper's floored one, and FGM-L∞ and PGD-L∞ (ε 8/256), the loss
summed (at batch 128; any size gives the same) or averaged over batches of 1, 8 and 128, in fp32,
and summed in fp16 at batch 128 (Sec. 4.2's comparison):

    python bench/minibatch_units.py --confident --n 200
"""

from __future__ import annotations

import argparse

import torch

import suite
from suite.data.config import DatasetConfig
from suite.data.load import load_eval_set
from suite.evaluation.options import RunOptions
from suite.models import ModelConfig, load_model

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


#: The first table's attacks: Table 1's L2 ones with both steps, and its L∞ ones (sign steps).
CONFIDENT = [("fgm_l2", ATTACKS["fgm_l2"], "rescaled"), ("fgm_l2", ATTACKS["fgm_l2"], "floored"),
             ("pgd_l2", ATTACKS["pgd_l2"], "rescaled"), ("pgd_l2", ATTACKS["pgd_l2"], "floored"),
             ("fgm_linf", {"eps": 8 / 256}, None), ("pgd_linf", {"eps": 8 / 256, "steps": 32, "alpha": 1 / 256}, None)]


def confident_rates(n: int | None) -> None:
    """Success rates on the CNN at T = 0.5: summed in fp32 / averaged over 1, 8 and 128 in fp32 /
    summed in fp16 (Sec. 4.2's comparison: low precision with a sum against fp32 with a mean)."""
    model = ModelConfig(spec="builtin:digits-cnn", temperature=0.5)
    print("success rate (%), CNN at T = 0.5: fp32 summed / fp32 averaged over 1 / 8 / 128 / fp16 summed")
    for attack, params, step in CONFIDENT:
        rates = []
        for batch, reduction, precision in ((128, "sum", None), (1, "mean", None), (8, "mean", None),
                                            (128, "mean", None), (128, "sum", "fp16")):
            config = {"name": attack, **params, "reduction": reduction, **({"l2_step": step} if step else {})}
            results = suite.evaluate(model, "builtin:digits", attacks=[config], n=n, precision=precision,
                                     options=RunOptions(batch_size=batch))
            clean = results.clean_accuracy
            rates.append(100 * (clean - results.attacks[attack].robust_accuracy) / clean)
        print(f"{attack} {step or 'sign'}: " + " / ".join(f"{rate:.1f}" for rate in rates), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=200, help="test digits per run (default 200)")
    parser.add_argument("--models", default="builtin:digits-cnn,builtin:digits-cnn-at")
    parser.add_argument("--confident", action="store_true", help="the first table: the CNN at T = 0.5 (see above)")
    args = parser.parse_args()
    if args.confident:
        confident_rates(args.n)
        return
    for spec in args.models.split(","):
        shares = below_floor(spec)
        print(f"{spec}: under the floor " + ", ".join(f"{key} {100 * value:.1f}%" for key, value in shares.items()))
    print("success rate (%): summed / averaged over 8 / averaged over 128")
    for spec in args.models.split(","):
        success_rates(spec, args.n)


if __name__ == "__main__":
    main()
