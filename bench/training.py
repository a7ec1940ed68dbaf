"""Robey et al. (ICLR 2024) Table 1 and Fig. 1 at small scale: FGSM-AT, PGD-AT, TRADES, MART,
BETA-AT and SBETA-AT trained with the same budget on ``builtin:digits``, then attacked at their
best and last checkpoints.

Every method trains timm's ``test_resnet`` with the same epochs, batch size, SGD schedule and
seed (``advsuite train``'s loop). The test attacks, on the same held-out test digits, are the
paper's columns: clean, PGD-10, PGD-40 (α = ε/4), BETA-10, APGD-CE and AutoAttack (the suite's
``autoattack``: the standard ensemble built from torchattacks' components). It writes a
markdown table, the robust learning curves of every method in one plot, and JSON.

    python bench/training.py --epochs 8 --n 200 --out bench-training     # about an hour on 2 CPU cores

Scaled down from the paper's 200 epochs; BETA-AT and SBETA-AT attack ``--beta-targets`` targets
with ``--beta-steps`` steps each (the paper: all 9 targets, 10 steps), which keeps their cost
near PGD-10's. docs/training.md says what this scale does and does not show.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import suite
from suite.report.training_plots import robust_curves
from suite.train import TrainConfig, train

METHODS = ("fgsm_at", "pgd_at", "trades", "mart", "beta_at", "sbeta_at")


def _attacks(eps: float, labels: set[str] | None = None) -> list[dict]:
    attacks = [
        {"name": "pgd_linf", "steps": 10, "alpha": eps / 4, "label": "PGD-10"},
        {"name": "pgd_linf", "steps": 40, "alpha": eps / 4, "label": "PGD-40"},
        {"name": "beta", "steps": 10, "label": "BETA-10"},
        {"name": "apgd_ce", "label": "APGD-CE"},
        {"name": "autoattack", "label": "AutoAttack"},
    ]
    return [attack for attack in attacks if labels is None or attack["label"] in labels]


def _evaluate(directory: Path, attacks: list[dict], eps: float, n: int, seed: int) -> dict[str, float]:
    columns = {}
    for attack in attacks:
        params = {key: value for key, value in attack.items() if key != "label"}
        results = suite.evaluate(f"timm:{directory}", "builtin:digits", attacks=[params], eps=eps, n=n,
                                 options=suite.RunOptions(seed=seed))
        columns["clean"] = results.clean_accuracy
        columns[attack["label"]] = next(iter(results.attacks.values())).robust_accuracy
    return columns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eps", type=float, default=0.1)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--beta-steps", type=int, default=4)
    parser.add_argument("--beta-targets", type=int, default=3)
    parser.add_argument("--n", type=int, default=200, help="test digits attacked")
    parser.add_argument("--val-n", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--columns", default=None,
                        help="comma-separated test attacks to run (default: all of clean, PGD-10, PGD-40, "
                             "BETA-10, APGD-CE, AutoAttack)")
    parser.add_argument("--out", type=Path, default=Path("bench-training"))
    args = parser.parse_args()
    attacks = _attacks(args.eps, None if args.columns is None else set(args.columns.split(",")))
    torch.set_num_threads(1)  # the built-in models' setting: comparable seconds, reproducible weights
    args.out.mkdir(parents=True, exist_ok=True)
    rows, logs = {}, {}
    for method in args.methods.split(","):
        params = {"eps": args.eps, "steps": 10}
        if method in ("beta_at", "sbeta_at"):
            params = {"eps": args.eps, "steps": args.beta_steps, "targets": args.beta_targets}
        elif method == "fgsm_at":
            params = {"eps": args.eps}
        config = TrainConfig(model="timm:test_resnet", dataset="builtin:digits", method=method, method_params=params,
                             epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, val_n=args.val_n,
                             seed=args.seed)
        directory = args.out / method
        began = time.perf_counter()
        summary = train(config, directory)
        train_seconds = sum(entry["train_seconds"] for entry in summary.log)
        logs[method] = summary.log
        last = _evaluate(directory, attacks, args.eps, args.n, args.seed)
        # The best checkpoint is the last one when robust validation accuracy peaked at the end:
        # the same weights, so the same numbers (the attacks are seeded per example).
        best = last if summary.best_epoch == args.epochs else _evaluate(directory / "best", attacks, args.eps,
                                                                         args.n, args.seed)
        rows[method] = {"train_seconds": train_seconds, "best_epoch": summary.best_epoch, "best": best,
                        "last": last, "wall_seconds": time.perf_counter() - began}
        print(method, json.dumps(rows[method]), flush=True)
    columns = ["clean"] + [attack["label"] for attack in attacks]
    lines = ["| method | train s | best epoch | " + " | ".join(f"{c} best | {c} last" for c in columns) + " |",
             "|---|---|---|" + "---|---|" * len(columns)]
    for method, row in rows.items():
        cells = " | ".join(f"{100 * row['best'][c]:.1f} | {100 * row['last'][c]:.1f}" for c in columns)
        lines.append(f"| {method} | {row['train_seconds']:.0f} | {row['best_epoch']} | {cells} |")
    table = "\n".join(lines)
    print(table)
    (args.out / "table.md").write_text(table + "\n")
    (args.out / "results.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                       "rows": rows, "logs": logs}, indent=2))
    robust_curves(logs, args.out / "robust_curves.png",
                  title=f"robust validation accuracy (PGD-10 and BETA-10), linf eps={args.eps:g}")


if __name__ == "__main__":
    main()
