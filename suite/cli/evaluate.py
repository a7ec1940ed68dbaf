"""``advsuite evaluate``: one model, one dataset, a list of attacks."""

from __future__ import annotations

import argparse
from pathlib import Path

from suite.cli.argtypes import adversary_list, attack_list, nonnegative_int, output_dir, spec
from suite.cli.common import (add_channels_last_flag, add_deterministic_flag, add_directory_flags, add_image_model_flags,
                              batch_size, positive_int, print_report, radii)

EPILOG = """examples:
  advsuite evaluate --model builtin:sentiment-tiny --attacks deepwordbug --limit 20 --log-samples
  advsuite evaluate --model builtin:digits-cnn-at --dataset builtin:digits --eps 0.15 --n 32
  advsuite evaluate --model builtin:digits-cnn --dataset builtin:digits --norm l2 --eps 0.5
  advsuite evaluate --model builtin:digits-cnn --dataset builtin:digits --attacks pgd_linf --eps 0.1 --n 64
  advsuite evaluate --model hf:textattack/bert-base-uncased-rotten-tomatoes --dataset hf:rotten_tomatoes --n 100
  advsuite evaluate --model timm:resnet18.a1_in1k --dataset hf:./imagenet-val-sample --attacks pgd_linf --eps 0.0039
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="evaluate one model on one dataset", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", required=True, help="hf:<hub id or dir>, timm:<name or dir>, builtin:<name>")
    parser.add_argument("--dataset", type=spec, help="builtin:<name>, hf:<hub name or local file/dir> (default: the dataset the "
                        "model card names; built-in models: their own)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--n", "--limit", dest="n", type=positive_int, metavar="N",
                        help="quick run: evaluate a seeded subsample of N examples (--limit is lm-eval's name for it)")
    parser.add_argument("--attacks", type=attack_list, help="comma-separated attack names (default: deepwordbug for text, auto for images)")
    parser.add_argument("--eps", type=radii, metavar="EPS[,EPS...]",
                        help="radius of every attack, the default ones included; several (--eps 0.01,0.03,0.1) run "
                        "every attack at each, with a worst case per radius and a plot of robust accuracy vs eps "
                        "(default: the threat model the model declares, e.g. a robust built-in's, else each attack's "
                        "own default, with a warning)")
    parser.add_argument("--norm", choices=("linf", "l2"),
                        help="norm of the default attacks (and of any listed attack that takes a norm)")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"),
                        help="image attacks search under this autocast precision, weaker than fp32 (the results "
                        "warn); adversarial inputs are still scored in float32 (default: fp32)")
    parser.add_argument("--adversary", type=adversary_list, help="text attacks: comma-separated adversary temperatures among none, cal, opt "
                        "(default none,cal; cal/opt are fitted on --adversary-split)")
    parser.add_argument("--adversary-split", help="labelled split to fit adversary temperatures on "
                        "(default: the evaluated examples)")
    parser.add_argument("--batch-size", type=batch_size, default="auto", metavar="N|auto",
                        help="examples per attack batch; results do not depend on it (default auto: the largest "
                        "that fits on CUDA, probed per attack and halved on out-of-memory; 32 on the CPU)")
    parser.add_argument("--seed", type=nonnegative_int, default=0)
    parser.add_argument("--output", type=output_dir, help="output dir (default: runs/<model>__<dataset>-<config hash>)")
    add_directory_flags(parser)
    add_deterministic_flag(parser)
    add_channels_last_flag(parser)
    parser.add_argument("--log-samples", action="store_true",
                        help="also write samples.md: every example with its clean and adversarial input "
                        "(text, or PNG files of images under samples/)")
    model = parser.add_argument_group("model options")
    model.add_argument("--revision", help="Hub revision of an hf: model")
    add_image_model_flags(model)
    model.add_argument("--trust-remote-code", action="store_true", help="allow Hub model code to run (off by default)")
    model.add_argument("--device", help="cpu, cuda, cuda:1 (default: CUDA when present)")
    data = parser.add_argument_group("dataset options")
    data.add_argument("--dataset-config", help="Hub dataset configuration (e.g. sst2 for glue)")
    data.add_argument("--text-column")
    data.add_argument("--image-column")
    data.add_argument("--label-column")
    parser.set_defaults(handler=handle)


def build_task(args: argparse.Namespace):
    """The TaskConfig the flags describe (validated; one-line errors)."""
    from pydantic import ValidationError

    from suite.errors import ConfigError, format_validation_error
    from suite.evaluation.api import attack_configs, radii as radii_of
    from suite.evaluation.recipe import TaskConfig

    names = [name.strip() for name in (args.attacks or "").split(",") if name.strip()]
    configs = attack_configs(names, args.eps, flag="--eps")
    _refuse_radius_for_text(args, names)
    model = {
        "spec": args.model, "revision": args.revision, "checkpoint": args.checkpoint, "num_classes": args.num_classes,
        "allow_pickle": args.allow_pickle, "pretrained": args.pretrained, "temperature": args.temperature,
        "trust_remote_code": args.trust_remote_code, "device": args.device,
    }
    dataset = {
        "spec": args.dataset, "split": args.split, "n": args.n, "config": args.dataset_config,
        "text_column": args.text_column, "image_column": args.image_column, "label_column": args.label_column,
    }
    adversary = None
    if args.adversary is not None or args.adversary_split is not None:
        kinds = [kind.strip() for kind in (args.adversary or "none,cal").split(",") if kind.strip()]
        adversary = {"kinds": kinds, "split": args.adversary_split}
    try:
        return TaskConfig(name="evaluate", model=model, dataset=dataset, attacks=configs, batch_size=args.batch_size,
                          adversary=adversary, eps=radii_of(args.eps, flag="--eps"), norm=args.norm,
                          precision=args.precision)
    except ValidationError as error:
        raise ConfigError(format_validation_error(error)) from error


def _refuse_radius_for_text(args: argparse.Namespace, names: list[str]) -> None:
    """``--eps``/``--norm`` for the default attacks of a text model: refused before anything
    loads (text attacks take no radius; listed attacks were checked by ``attack_configs``)."""
    from suite.errors import ConfigError
    from suite.evaluation.recipe import DEFAULT_ATTACKS
    from suite.models.registry import spec_modality

    if names or (args.eps is None and args.norm is None) or spec_modality(args.model) != "text":
        return
    flag = "--eps" if args.eps is not None else "--norm"
    raise ConfigError(f"{flag} does not apply to {', '.join(DEFAULT_ATTACKS['text'])} (the default text attack): "
                      "text attacks take no radius")


def resolve_dataset(args: argparse.Namespace) -> str | None:
    """Fill ``args.dataset`` from the model when it is not given, or ask for it in one line.

    Returns the line that says where the dataset came from (``None`` when it was given), for
    the caller to log once the rest of the command is known to be valid.
    """
    if args.dataset:
        return None
    from suite.errors import ConfigError
    from suite.models.card import default_dataset

    found = default_dataset(args.model, args.revision)
    if found is None:
        raise ConfigError(f"model {args.model!r} names no dataset (no model card with 'datasets:' could be read): "
                          "pass --dataset, e.g. --dataset hf:rotten_tomatoes (text) or hf:ylecun/mnist (images)")
    args.dataset, source = found
    return f"dataset {args.dataset} (named by {source}; --dataset overrides)"


def handle(args: argparse.Namespace) -> int:
    from suite.evaluation.options import RunOptions
    from suite.evaluation.recipe import slug
    from suite.evaluation.tasks import run_tasks

    import logging

    found = resolve_dataset(args)
    task = build_task(args)
    if found:  # said only once the command is known to be valid: an error stays one line
        logging.getLogger(__name__).info("%s", found)
    output = args.output or Path("runs") / f"{slug(args.model)}__{slug(args.dataset)}-{task.fingerprint(args.seed)[:8]}"
    options = RunOptions(seed=args.seed, batch_size=args.batch_size, output=output, overwrite=args.overwrite,
                         wait=args.wait, log_samples=args.log_samples, deterministic=args.deterministic,
                         channels_last=args.channels_last)
    results = run_tasks([task], options)
    if results:  # the main process of a multi-process launch reports
        print_report(results, options, args.log_samples)
    return 0
