"""``advsuite ls``: list registered models, datasets, attacks and recipes, and where each comes
from (``advsuite`` for the suite's own entries, ``<distribution> <version>`` for a plugin's)."""

from __future__ import annotations

import argparse

#: One row: what to type, where it comes from, what it is.
Row = tuple[str, str, str]


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "ls", help="list models, datasets, attacks or recipes (and where each comes from)",
        epilog="examples:\n  advsuite ls models\n  advsuite ls --verify   # check the built-in model cache",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", choices=("models", "datasets", "attacks", "recipes"))
    parser.add_argument("--verify", action="store_true",
                        help="check every cached built-in model's weights against their recorded sha256 "
                             "(exit 1 when one is damaged or has no recorded hash)")
    parser.set_defaults(handler=handle)


def _registry_rows(registry, prefix: str = "", suffix: str = "") -> list[Row]:
    return [(f"{prefix}{name}{suffix}", registry.origin(name), registry.describe(name)) for name in registry]


def _with_threat(description: str, threat) -> str:
    """A robust built-in's description, with the threat model it was trained for (RobustBench
    lists every model with its threat model): what it is evaluated at when no --eps is given."""
    return description if threat is None else f"{description} [trained for {threat.label}]"


def _rows(what: str) -> list[Row]:
    from suite.registry import BUILTIN

    if what == "models":
        from suite.models.registry import BUILTIN_MODELS, MODEL_SCHEMES

        from suite.models.card import BUILTIN_THREAT_MODELS

        builtins = [(name, origin, _with_threat(description, BUILTIN_THREAT_MODELS.get(name[len("builtin:"):])))
                    for name, origin, description in _registry_rows(BUILTIN_MODELS, prefix="builtin:")]
        return _registry_rows(MODEL_SCHEMES, suffix=":") + builtins
    if what == "datasets":
        import suite.data.builtin  # noqa: F401  (registers the built-in datasets)
        from suite.data.registry import BUILTIN_DATASETS

        hub = ("hf:", BUILTIN, "Hugging Face dataset by name, or a local csv/json/parquet file or dir")
        return [hub] + _registry_rows(BUILTIN_DATASETS, prefix="builtin:")
    if what == "attacks":
        from suite.attacks import ATTACKS

        return _registry_rows(ATTACKS)
    from suite.evaluation.recipes_dir import shipped_recipes

    return _registry_rows(shipped_recipes())


def verify() -> int:
    """Print one line per cached built-in model; 0 when all are ok, 1 otherwise."""
    from suite.models.builtin_cache import verify_cache
    from suite.paths import cache_path
    from suite.text import printable

    findings = verify_cache()
    if not findings:
        print(printable(f"no built-in model is cached in {cache_path('models')}"))
    width = max((len(name) for name, _ in findings), default=0)
    for name, finding in findings:
        print(printable(f"{name.ljust(width)}  {finding}"))
    return 0 if all(finding == "ok" for _, finding in findings) else 1


def handle(args: argparse.Namespace) -> int:
    from suite.errors import ConfigError
    from suite.text import printable

    if args.verify:
        if args.what not in (None, "models"):
            raise ConfigError(f"--verify checks the built-in model cache: use 'advsuite ls --verify', not "
                              f"'advsuite ls {args.what} --verify'")
        return verify()
    if args.what is None:
        raise ConfigError("advsuite ls needs what to list: models, datasets, attacks or recipes "
                          "(or --verify to check the built-in model cache)")
    rows = _rows(args.what)
    name_width = max((len(name) for name, _, _ in rows), default=0)
    origin_width = max((len(origin) for _, origin, _ in rows), default=0)
    for name, origin, description in rows:
        # A plugin's name, origin and summary come from its package metadata: escaped like all output.
        print(printable(f"{name.ljust(name_width)}  {origin.ljust(origin_width)}  {description}".rstrip()))
    return 0
