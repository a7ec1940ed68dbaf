"""``advsuite certify``: WDRO certificate bounds of an image model over a grid of ε, with the
losses the Wasserstein attacks reach between them."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.cli.argtypes import nonnegative_int, output_dir, spec
from suite.cli.common import add_image_model_flags, positive_int, radii

EPILOG = """examples:
  advsuite certify --model builtin:digits-cnn-at --dataset builtin:digits --n 100 --norm l2 --eps 0.1,0.3,1
  advsuite certify --model timm:runs/mlp --dataset hf:./data.csv --unboxed --loss margin
  advsuite certify --model timm:resnet18 --checkpoint mine.safetensors --dataset hf:./images --no-attacks

The same from Python, on models and data in memory too: suite.certify(model, data, ...) (docs/python.md).

Columns: E[loss] (clean); lower bound (eq. 17's distribution in float64, rounded down; only on
an unbounded input domain); lower cone bound (E + l eps, l the rate inside the activation cells:
ReLU MLPs on R^n); lower est. (E + l_N eps, NOT a bound); each attack's W1 loss; upper est.
(E + L_N eps, NOT a bound); upper bound (certified: the product of the layers' operator norms).
Printed bounds are rounded outward. See docs/wdro.md.
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("certify", help="W1 robustness certificate bounds of an image model", epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True,
                        help="timm:<name or dir>, builtin:<image model>, or a plugin's image model (not text models "
                        "or randomized ensembles)")
    parser.add_argument("--dataset", type=spec, help="builtin:<name>, hf:<name or local file/dir> (default: the dataset the model "
                        "card names; built-in models: their own)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--n", type=positive_int, default=100, help="examples: the empirical distribution (default 100)")
    parser.add_argument("--norm", choices=("l2", "linf", "l1"), default="l2", help="ground cost ||x' - x||_r (default l2)")
    parser.add_argument("--loss", choices=("ce", "margin"), default="ce",
                        help="cross-entropy, or the margin max_k theta_k - theta_y (default ce)")
    parser.add_argument("--eps", type=radii, default=[0.05, 0.1, 0.2, 0.5], metavar="EPS[,EPS...]",
                        help="W1 budgets (default 0.05,0.1,0.2,0.5)")
    parser.add_argument("--unboxed", action="store_true",
                        help="certify the model on all of R^n, not [0, 1] pixels (gives the eq. 17 lower bound)")
    parser.add_argument("--no-attacks", action="store_true", help="bounds only: do not run WDA / WDA++")
    parser.add_argument("--seed", type=nonnegative_int, default=0)
    parser.add_argument("--output", type=output_dir, help="output dir (default: runs/certify/<model>)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a certificate of another model or dataset in --output (one of the same is "
                             "always replaced)")
    model = parser.add_argument_group("model options (as for advsuite evaluate)")
    add_image_model_flags(model)
    model.add_argument("--device", help="cpu, cuda, cuda:1 (default: CUDA when present)")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from suite.errors import ConfigError, format_validation_error
    from suite.evaluation.api import radii as radii_of
    from suite.evaluation.certify_api import CERTIFY_FILES, certify
    from suite.evaluation.recipe import slug
    from suite.models import ModelConfig
    from suite.report.certificates import certificate_table
    from suite.text import printable

    try:
        config = ModelConfig(spec=args.model, checkpoint=args.checkpoint, num_classes=args.num_classes,
                             allow_pickle=args.allow_pickle, pretrained=args.pretrained,
                             temperature=args.temperature, device=args.device)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error)) from error
    output = args.output or Path("runs") / "certify" / slug(args.model)
    eps = list(radii_of(args.eps, flag="--eps"))  # the flag's name in its errors, as evaluate's
    report = certify(config, args.dataset, norm=args.norm, loss=args.loss, eps=eps, n=args.n, split=args.split,
                     seed=args.seed, boxed=not args.unboxed, attacks=not args.no_attacks, output=output,
                     overwrite=args.overwrite)
    print("\n".join(printable(line) for line in certificate_table(report).splitlines()))
    for note in report["notes"]:
        print(f"- {printable(note)}")
    json_path, png_path = (output / name for name in CERTIFY_FILES)
    print(f"\ncertificate: {printable(str(json_path))}, {printable(str(png_path))}")
    return 0
