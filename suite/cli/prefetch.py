"""``advsuite prefetch``: fill the local cache with what text attacks need, while online."""

from __future__ import annotations

import argparse
from pathlib import Path

EPILOG = """examples:
  advsuite prefetch --attacks pwws textfooler_minilm     # NLTK data, embeddings, Hub models
  advsuite prefetch --list --attacks bae                  # what would be fetched, and what is cached
  advsuite prefetch --wordnet-from /usr/share/wordnet     # offline: Debian's wordnet-base package
"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("prefetch", help="download the resources text attacks need (NLTK, embeddings, Hub)",
                                   epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attacks", nargs="+", default=[], metavar="NAME", help="text attacks to prepare")
    parser.add_argument("--wordnet-from", type=Path, metavar="DIR",
                        help="install WordNet 3.0 from a local dict dir (Debian: /usr/share/wordnet), no network")
    parser.add_argument("--list", action="store_true", help="only show each resource and whether it is cached")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from suite.attacks import build_attack
    from suite.attacks.text.resources import prefetch
    from suite.errors import ConfigError, ResourceMissingError, WriteError, is_write_fault
    from suite.paths import cache_path

    if not args.attacks and args.wordnet_from is None:
        raise ConfigError("name attacks to prefetch (--attacks pwws ...) or a WordNet dir (--wordnet-from DIR)")
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
    if failed:
        raise ResourceMissingError(f"{len(failed)} resource(s) could not be fetched; first: {failed[0]}")
    return 0


def _install_wordnet(source: Path) -> Path:
    """Install WordNet from ``source``; the system refusing a write is one line (the install is
    staged in a temporary directory, removed on failure: nothing is left in the cache)."""
    from suite.attacks.text.resources import install_wordnet
    from suite.paths import cache_path, writing

    with writing(cache_path("nltk_data", "corpora", "wordnet"), "WordNet is not installed and nothing was left "
                 "in the cache"):
        return install_wordnet(source)
