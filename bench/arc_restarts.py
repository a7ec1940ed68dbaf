"""Adaptive PGD with random starts and restarts against ARC on the BAT built-in (the paper's
Table 3, Dbouk & Shanbhag, ICML 2022, Sec. 6.3).

The paper finds that 10 random restarts (APGD + RR) make adaptive PGD slightly *weaker* than
one run from delta = 0 (APGD) or one random start (APGD + R): a restart is kept when its last
iterate has the highest expected loss, and on a randomized ensemble the point of highest
expected loss can fool fewer members than another (their Fig. 2). This runs each variant with
that rule (``keep: loss``) and with the suite's (``keep: level``, the iterate of lowest expected
accuracy over every step and restart), then ARC, on the same digits, one after the other:

    python bench/arc_restarts.py --n 200 --norm linf --eps 0.15
    python bench/arc_restarts.py --n 200 --norm l2 --eps 1

Adaptive PGD runs as in the paper: 20 steps of eps/4. Robust accuracy is the mean exact
expected accuracy after the attack (never above the clean one). ``--restarts`` sets RR's count.
"""

from __future__ import annotations

import torch

from arc_candidates import ensemble_parser, robust_accuracy
from suite.attacks import build_attack
from suite.data.config import DatasetConfig
from suite.data.load import load_eval_set
from suite.models import load_model


def main() -> None:
    parser = ensemble_parser(__doc__)
    parser.add_argument("--restarts", type=int, default=10)
    args = parser.parse_args()

    model = load_model(args.model)
    examples = load_eval_set(DatasetConfig(spec="builtin:digits", n=args.n), model.input_spec, 0).examples
    pgd = {"norm": args.norm, "eps": args.eps, "steps": args.steps, "step": args.eps / 4}
    variants = [("APGD", {"rand_init": False}), ("APGD + R", {}), ("APGD + RR", {"restarts": args.restarts})]
    rows = []
    for label, params in variants:
        row = [label]
        for keep in ("loss", "level"):
            accuracy, seconds = robust_accuracy(model, build_attack("apgd_rec", {**pgd, **params, "keep": keep}),
                                                examples, args.batch_size)
            row += [accuracy, seconds]
        rows.append(row)
    arc, arc_seconds = robust_accuracy(model, build_attack("arc", {"norm": args.norm, "eps": args.eps,
                                                                   "steps": args.steps}), examples, args.batch_size)
    print(f"{args.model}, {args.n} digits, {args.norm} eps={args.eps:g}, {args.steps} steps of eps/4, "
          f"RR = {args.restarts} restarts, torch threads {torch.get_num_threads()}\n")
    print("| attack | the paper's rule (`keep: loss`) | the suite's (`keep: level`) | seconds (loss / level) |")
    print("|---|---|---|---|")
    for label, paper, paper_seconds, suite_rule, suite_seconds in rows:
        print(f"| {label} | {100 * paper:.2f}% | {100 * suite_rule:.2f}% | {paper_seconds:.1f} / {suite_seconds:.1f} |")
    print(f"| ARC | {100 * arc:.2f}% | | {arc_seconds:.1f} |")


if __name__ == "__main__":
    main()
