"""``advsuite train``: adversarial training of an image classifier into a ``timm:<dir>`` model,
or of a text classifier into an ``hf:<dir>`` model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from suite.cli.argtypes import nonnegative_int, output_dir, positive_float, spec
from suite.cli.common import add_directory_flags, positive_int

IMAGE_METHODS = ("standard", "fgsm_at", "pgd_at", "trades", "mart", "beta_at", "sbeta_at", "bat")
TEXT_METHODS = ("standard", "pgd_k", "freelb", "ascc", "ddi_at", "aug")
METHOD_NAMES = tuple(dict.fromkeys(IMAGE_METHODS + TEXT_METHODS))
EPILOG = """image methods (timm: and built-in image models; SGD, lr decayed at 1/2 and 3/4 of the epochs):
  standard   clean cross-entropy (no adversary)
  fgsm_at    FGSM adversarial training (Goodfellow et al. 2015): one step of size eps
  pgd_at     PGD adversarial training (Madry et al. 2018): --steps steps of --alpha (default eps/4)
  trades     TRADES (Zhang et al. 2019): CE + --lam x KL to the worst point (lam 5)
  mart       MART (Wang et al. 2020): boosted CE + --lam x KL x (1 - p_y) (lam 5)
  beta_at    BETA-AT (Robey et al. 2024, Alg. 2): train on BETA's best target (--steps per target)
  sbeta_at   SBETA-AT (Robey et al. 2024, Alg. 3): every target, weighted by softmax(--mu x margin)
  bat        second member of a BAT randomized ensemble (Pinot et al. 2020): trained only on PGD
             examples of --source (the first, adversarially trained member)

text methods (hf:<dir> and built-in text models; AdamW, constant lr; defaults of the paper's App. C:
lr 1e-5, weight decay 0.01, batch 8, 5 epochs; embedding-space L2 PGD with --eps 1.0, --alpha 0.03,
--init 0.05):
  standard   clean cross-entropy (the paper's base)
  pgd_k      PGD-K in embedding space (--steps 5), trained on the last iterate
  freelb     FreeLB (Zhu et al. 2020): gradients averaged over the --steps ascent iterates
  ascc       ASCC (Dong et al. 2021): convex hull of WordNet synonyms, --entropy-weight 10, --beta 40
  ddi_at     DDi-AT (IOR paper, App. A, eq. 15): min-norm combination of --adversaries 3 PGD
             gradients (--steps 3), normalised to unit norm (--normalize global|clip|none)
  aug        fine-tune on the training set plus --attack (deepwordbug) examples of --source

examples:
  advsuite train --model timm:test_resnet --dataset builtin:digits --method beta_at --eps 0.1 --epochs 8 --output runs/beta
  advsuite train --model builtin:digits-cnn --dataset builtin:digits --method pgd_at --eps 0.1 --epochs 2 --output runs/ft
  advsuite evaluate --model timm:runs/beta --dataset builtin:digits --attacks pgd_linf,beta --eps 0.1
  advsuite train --model hf:./my-bert --dataset hf:./rotten_tomatoes --val-split validation --method ddi_at --output runs/ddi
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "train", help="adversarially train an image (timm:<dir>) or text (hf:<dir>) classifier", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True,
                        help="timm:<architecture> (fresh weights), or timm:<dir> / builtin:<image model> / hf:<dir> / "
                        "builtin:<text model> to fine-tune")
    parser.add_argument("--dataset", type=spec, required=True, help="builtin:<name>, hf:<hub name or local file/dir>")
    parser.add_argument("--split", default="train", help="split to train on (default: train)")
    parser.add_argument("--method", choices=METHOD_NAMES, help="training method (default: pgd_at, text: pgd_k)")
    parser.add_argument("--eps", type=_nonnegative_float, help="radius trained against (default 8/255 under linf, 0.5 under "
                        "l2; text: 1.0, L2 per sequence in embedding space)")
    parser.add_argument("--norm", choices=("linf", "l2"), help="image methods: threat norm (default linf)")
    parser.add_argument("--epochs", type=positive_int, help="default 10 (text: 5)")
    parser.add_argument("--batch-size", type=positive_int, help="default 128 (text: 8)")
    parser.add_argument("--lr", type=positive_float, help="SGD learning rate, x0.1 after half the epochs and x0.01 "
                        "after three quarters (default 0.1); text: AdamW's constant learning rate (default 1e-5)")
    parser.add_argument("--momentum", type=_momentum, help="SGD momentum, 0 (plain SGD) to below 1 (default 0.9)")
    parser.add_argument("--weight-decay", type=_nonnegative_float, help="default 5e-4 (text: 0.01)")
    parser.add_argument("--seed", type=nonnegative_int, default=0)
    parser.add_argument("--output", type=output_dir, help="output dir (default: runs/train/<model>__<method>-<hash>)")
    add_directory_flags(parser)
    knobs = parser.add_argument_group("method options (only the method's own are accepted)")
    knobs.add_argument("--steps", type=positive_int, help="inner attack steps (default 10; BETA: per target)")
    knobs.add_argument("--alpha", type=positive_float, help="PGD step size of pgd_at, trades, mart (default eps/4); "
                       "text: of pgd_k, freelb, ddi_at (default 0.03)")
    knobs.add_argument("--lam", type=_nonnegative_float, help="trades, mart: weight of the KL term (default 5)")
    knobs.add_argument("--mu", type=positive_float, help="sbeta_at: softmax temperature of the target weights (default 1)")
    knobs.add_argument("--targets", type=positive_int, help="beta_at, sbeta_at: attack the N most likely wrong classes "
                       "(default: all)")
    knobs.add_argument("--source", help="bat: the first member, whose PGD examples the model trains on "
                       "(a model spec: builtin:digits-cnn-at, timm:<dir>); aug: the model attacked (hf:<dir>)")
    knobs.add_argument("--attack-lr", type=positive_float, help="beta_at, sbeta_at: BETA's learning rate (default eps/10)")
    knobs.add_argument("--init", type=_nonnegative_float, help="pgd_k, freelb, ddi_at: magnitude of the random start "
                       "(default 0.05)")
    knobs.add_argument("--adversaries", type=positive_int, help="ddi_at: PGD runs per batch, M (default 3)")
    knobs.add_argument("--normalize", choices=("global", "clip", "none"),
                       help="ddi_at: the update direction's normalisation (default global, the paper's)")
    knobs.add_argument("--max-grad-norm", type=positive_float, help="text: clip the gradient norm (default 1.0; "
                       "ddi_at: the clip threshold of --normalize clip)")
    knobs.add_argument("--entropy-weight", type=_nonnegative_float, help="ascc: alpha, the entropy weight (default 10)")
    knobs.add_argument("--beta", type=_nonnegative_float, help="ascc: weight of the KL term (default 40)")
    knobs.add_argument("--neighbours", type=positive_int, help="ascc: synonyms per word (default 8)")
    knobs.add_argument("--attack", help="aug: the attack whose examples are added (default deepwordbug)")
    validation = parser.add_argument_group("validation (each epoch: clean, PGD and BETA accuracy)")
    validation.add_argument("--val-split", help="split to validate on (default: hold out --val-fraction of --split)")
    validation.add_argument("--val-fraction", type=_fraction, default=0.1)
    validation.add_argument("--val-n", type=positive_int, metavar="N", help="validate on at most N examples per epoch")
    validation.add_argument("--eval-steps", type=positive_int, help="image: steps of the validation attacks (10)")
    fresh = parser.add_argument_group("fresh architectures on non-built-in data")
    fresh.add_argument("--input-size", type=_size, metavar="C,H,W")
    fresh.add_argument("--num-classes", type=positive_int, metavar="N")
    fresh.add_argument("--model-args", type=_mapping, metavar="JSON", help="extra timm.create_model arguments")
    parser.add_argument("--device", help="cpu, cuda, cuda:1 (default: CUDA when present)")
    parser.set_defaults(handler=handle)


def build_config(args: argparse.Namespace):
    from pydantic import ValidationError

    from suite.errors import ConfigError, format_validation_error
    from suite.train.config import TrainConfig

    given = {"eps": args.eps, "steps": args.steps, "alpha": args.alpha, "lam": args.lam, "mu": args.mu,
             "targets": args.targets, "lr": args.attack_lr, "source": args.source, "norm": args.norm,
             "init": args.init, "adversaries": args.adversaries, "normalize": args.normalize,
             "max_grad_norm": args.max_grad_norm, "entropy_weight": args.entropy_weight, "beta": args.beta,
             "neighbours": args.neighbours, "attack": args.attack}
    params = {key: value for key, value in given.items() if value is not None}
    fields = {"method": args.method, "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
              "momentum": args.momentum, "weight_decay": args.weight_decay}
    try:
        return TrainConfig(
            model=args.model, model_args=args.model_args or {}, dataset=args.dataset, split=args.split,
            val_split=args.val_split, val_fraction=args.val_fraction, val_n=args.val_n, input_size=args.input_size,
            num_classes=args.num_classes, method_params=params, seed=args.seed, device=args.device,
            **{key: value for key, value in {**fields, "eval_steps": args.eval_steps}.items() if value is not None},
        )
    except ValidationError as error:
        raise ConfigError(format_validation_error(error)) from error


def handle(args: argparse.Namespace) -> int:
    from suite.evaluation.recipe import slug
    from suite.text import printable
    from suite.train import method_for, train

    config = build_config(args)
    method = method_for(config)  # unknown knobs, a method of the other modality: one line, before any loading
    output = args.output or Path("runs") / "train" / f"{slug(args.model)}__{config.method}-{config.fingerprint()[:8]}"
    summary = train(config, output, overwrite=args.overwrite, wait=args.wait)
    last = summary.log[-1]  # the store checked the log: one line per finished epoch, in order
    best = summary.log[summary.best_epoch - 1]
    steps = config.eval_steps
    print(f"{method.name}: {config.epochs} epoch(s) on {printable(config.dataset)} "
          f"({'resumed after epoch ' + str(summary.resumed_from) if summary.resumed_from else 'from the start'})")
    if config.modality == "text":
        for label, entry in (("last", last), ("best", best)):
            print(f"  {label} (epoch {entry['epoch']}): validation clean {100 * entry['val_clean']:.1f}%, mean "
                  f"confidence {100 * entry['val_confidence']:.2f}%, saturated {100 * entry['val_saturated']:.0f}%, "
                  f"ECE {100 * entry['val_ece']:.1f}%")
        print(f"model: hf:{printable(str(summary.directory))} (best: hf:{printable(summary.files['best'])})")
        print(f"log: {printable(summary.files['log'])}; curves: {printable(summary.files['curves'])}")
        return 0
    for label, entry in (("last", last), ("best", best)):
        print(f"  {label} (epoch {entry['epoch']}): validation clean {100 * entry['val_clean']:.1f}%, "
              f"PGD-{steps} {100 * entry['val_pgd']:.1f}%, BETA-{steps} {100 * entry['val_beta']:.1f}%, "
              f"robust {100 * entry['val_robust']:.1f}%")
    print(f"model: timm:{printable(str(summary.directory))} (best: timm:{printable(summary.files['best'])})")
    print(f"log: {printable(summary.files['log'])}; curves: {printable(summary.files['curves'])}")
    return 0


def _nonnegative_float(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def _momentum(text: str) -> float:
    value = _nonnegative_float(text)
    if not value < 1:
        raise argparse.ArgumentTypeError(f"expected a number from 0 up to (not including) 1, got {text!r}")
    return value


def _fraction(text: str) -> float:
    value = _nonnegative_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number strictly between 0 and 1, got {text!r}")
    return value


def _size(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    try:
        size = tuple(int(part) for part in parts)
    except ValueError:
        size = ()
    if len(size) != 3 or min(size) < 1:
        raise argparse.ArgumentTypeError(f"expected three positive integers C,H,W, got {text!r}")
    return size


def _mapping(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"drop_rate\": 0.1}}', got {text!r}")
    return value
