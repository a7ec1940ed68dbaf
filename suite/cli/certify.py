"""``advsuite certify``: WDRO certificate bounds of an image model over a grid of ε, with the
losses the Wasserstein attacks reach between them."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.cli.argtypes import nonnegative_int, output_dir
from suite.cli.common import positive_int, radii

EPILOG = """examples:
  advsuite certify --model builtin:digits-cnn-at --dataset builtin:digits --n 100 --norm l2 --eps 0.1,0.3,1
  advsuite certify --model timm:runs/mlp --dataset hf:./data.csv --unboxed --loss margin

Columns: E[loss] (clean); lower bound (eq. 17's distribution, only on an unbounded input domain);
lower (cone) (E + l eps, l the rate inside the activation cells: ReLU MLPs on R^n); lower est.
(E + l_N eps, an estimate); each attack's W1 loss; upper est. (E + L_N eps, NOT a bound); upper
bound (certified: the product of the layers' operator norms). See docs/wdro.md.
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("certify", help="W1 robustness certificate bounds of an image model", epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="timm:<name or dir>, builtin:<image model>")
    parser.add_argument("--dataset", help="builtin:<name>, hf:<name or local file/dir> (default: the model's own)")
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
    parser.add_argument("--device", help="cpu, cuda, cuda:1 (default: CUDA when present)")
    parser.add_argument("--output", type=output_dir, help="output dir (default: runs/certify/<model>)")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.data.config import DatasetConfig
    from suite.data.load import load_eval_set
    from suite.errors import ConfigError
    from suite.evaluation.certification import certification_report
    from suite.evaluation.recipe import slug
    from suite.models import ModelConfig, load_model
    from suite.report.certificates import certificate_table, write_certificate
    from suite.text import printable

    from pydantic import ValidationError

    from suite.errors import format_validation_error

    try:
        config = ModelConfig(spec=args.model, device=args.device)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error)) from error
    output = args.output or Path("runs") / "certify" / slug(args.model)
    _check_output(output)  # before anything loads or runs
    model = load_model(config)
    if model.modality != "image":
        raise ConfigError(f"certify works on image models; {args.model!r} takes {model.modality}")
    dataset = args.dataset or _default_dataset(args.model)
    eval_set = load_eval_set(DatasetConfig(spec=dataset, split=args.split, n=args.n), model.input_spec, args.seed)
    eps = args.eps if isinstance(args.eps, list) else [args.eps]
    report = certification_report(model, eval_set.examples, norm=args.norm, loss=args.loss, eps=eps,
                                  boxed=not args.unboxed, attacks=not args.no_attacks, seed=args.seed)
    report["dataset"] = {"spec": dataset, "split": args.split, "n": len(eval_set.examples),
                         "fingerprint": eval_set.fingerprint}
    json_path, png_path = write_certificate(report, output)
    print("\n".join(printable(line) for line in certificate_table(report).splitlines()))
    for note in report["notes"]:
        print(f"- {printable(note)}")
    print(f"\ncertificate: {printable(str(json_path))}, {printable(str(png_path))}")
    return 0


def _default_dataset(spec: str) -> str:
    from suite.errors import ConfigError

    if spec.startswith("builtin:digits"):
        return "builtin:digits"
    raise ConfigError(f"{spec!r}: name the data to certify on with --dataset")


#: What ``certify`` writes into its output directory (and may overwrite on a rerun).
CERTIFY_FILES = ("certificate.json", "certificate.png")


def _check_output(directory: Path) -> None:
    """Refuse an output path that is a file, or a directory holding files certify did not write."""
    from suite.errors import ConfigError

    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"--output {str(directory)!r} is a file, not a directory")
    if directory.is_dir():
        foreign = sorted(item.name for item in directory.iterdir() if item.name not in CERTIFY_FILES)
        if foreign:
            raise ConfigError(f"--output {str(directory)!r} holds files advsuite certify did not write "
                              f"({', '.join(foreign[:3])}{'...' if len(foreign) > 3 else ''}): choose another directory")
