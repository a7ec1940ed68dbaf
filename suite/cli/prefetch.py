"""``advsuite prefetch``: fill the local caches with what text attacks and models need, while
online, or before many processes start (a built-in trains once, and they all load it)."""

from __future__ import annotations

import argparse
from pathlib import Path

EPILOG = """examples:
  advsuite prefetch --attacks pwws textfooler_minilm     # NLTK data, embeddings, Hub models
  advsuite prefetch --list --attacks bae                  # what would be fetched, and what is cached
  advsuite prefetch --wordnet-from /usr/share/wordnet     # offline: Debian's wordnet-base package
  advsuite prefetch --models builtin:digits-bat hf:textattack/bert-base-uncased-imdb  # train / download
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("prefetch", help="download what text attacks need (NLTK, embeddings, Hub); "
                                   "make models ready (--models)",
                                   epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attacks", nargs="+", default=[], metavar="NAME", help="text attacks to prepare")
    parser.add_argument("--models", nargs="+", default=[], metavar="SPEC",
                        help="models to make ready: built-ins are trained and cached, hf:/timm: ones downloaded")
    parser.add_argument("--wordnet-from", type=Path, metavar="DIR",
                        help="install WordNet 3.0 from a local dict dir (Debian: /usr/share/wordnet), no network")
    parser.add_argument("--list", action="store_true", help="only show each resource and whether it is cached")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.attacks import build_attack
    from suite.attacks.text.resources import prefetch
    from suite.errors import ConfigError, ResourceMissingError, SuiteError, WriteError, first_line, is_write_fault
    from suite.models import load_model
    from suite.paths import cache_path
    from suite.text import printable

    if not args.attacks and not args.models and args.wordnet_from is None:
        raise ConfigError("name attacks to prefetch (--attacks pwws ...), models (--models SPEC ...) "
                          "or a WordNet dir (--wordnet-from DIR)")
    if args.list and args.models:
        raise ConfigError("--list shows the attacks' resources; `advsuite ls --verify` checks the cached built-in "
                          "models")
    configs = [_model_config(spec) for spec in args.models]  # every spec checked before anything runs
    if args.wordnet_from is not None:
        print(f"WordNet installed in {_install_wordnet(args.wordnet_from)}")
    failed = []
    for name in args.attacks:
        resources = getattr(build_attack(name), "resources", None)
        if resources is None:
            print(f"{name}: needs nothing beyond the suite's dependencies")
            continue
        for resource in resources:
            if args.list:
                state = ("cached " if resource.available(install=False) else
                         "from Debian's wordnet-base at first use" if resource.installable() else "MISSING")
                print(f"{name}: {state}  {resource.describe()}")
                continue
            try:
                print(f"{name}: {prefetch(resource)}")
            except ResourceMissingError as error:
                if is_write_fault(error.__cause__):  # fetched, but the cache could not store it
                    raise WriteError(error.__cause__.filename or cache_path(), error.__cause__,
                                     "the resources fetched before it are cached") from error
                failed.append(f"{name}: {error}")
                print(f"{name}: FAILED {error}")
    for config in configs:  # like the attacks' resources: each model that fails is said, and the rest go on
        try:
            print(f"{printable(config.spec)}: ready (weights {load_model(config).weights_hash()})")
        except WriteError:
            raise  # the disk: nothing after it would fare better
        except SuiteError as error:
            failed.append(f"{config.spec}: {first_line(error)}")
            print(printable(f"{config.spec}: FAILED {first_line(error)}"))
    if failed:
        what = "resource(s) or model(s)" if configs else "resource(s)"
        raise ResourceMissingError(f"{len(failed)} {what} could not be fetched; first: {failed[0]}")
    return 0


def _model_config(spec: str):
    """The model ``spec`` names: a one-line error, before any model loads, for a spec that is
    malformed or names an unknown scheme or built-in."""
    from pydantic import ValidationError

    from suite.errors import ConfigError, format_validation_error
    from suite.models import BUILTIN_MODELS, MODEL_SCHEMES, ModelConfig
    from suite.registry import UnknownNameError

    try:
        config = ModelConfig(spec=spec)
    except ValidationError as error:
        raise ConfigError(f"--models {spec!r}: {format_validation_error(error)}") from error
    scheme, _, name = config.spec.partition(":")
    if scheme not in MODEL_SCHEMES:
        raise UnknownNameError(MODEL_SCHEMES.unknown_message(scheme))
    if scheme == "builtin" and name not in BUILTIN_MODELS:
        raise UnknownNameError(BUILTIN_MODELS.unknown_message(name))
    return config


def _install_wordnet(source: Path) -> Path:
    """Install WordNet from ``source``; the system refusing a write is one line (the install is
    staged in a temporary directory, removed on failure: nothing is left in the cache)."""
    from suite.attacks.text.resources import install_wordnet
    from suite.paths import cache_path, writing

    with writing(cache_path("nltk_data", "corpora", "wordnet"), "WordNet is not installed and nothing was left "
                 "in the cache"):
        return install_wordnet(source)
