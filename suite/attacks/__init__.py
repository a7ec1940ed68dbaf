"""Registered attacks. Importing this package registers every attack (TextAttack itself is
imported only when a text attack runs)."""

from __future__ import annotations

from suite.attacks.base import ATTACKS, Attack, AttackOutput
from suite.attacks.image import baselines as _baselines  # noqa: F401  (registers apgd_*, fab_t, square, autoattack)
from suite.attacks.image import gradient as _gradient  # noqa: F401  (registers fgm_*, pgd_*, beta)
from suite.attacks.text import recipes as _recipes  # noqa: F401  (registers the TextAttack recipes)
from suite.attacks.text import transfer as _transfer  # noqa: F401  (registers transfer)
from suite.errors import ConfigError, format_validation_error


def build_attack(name: str, params: dict | None = None) -> Attack:
    """Build a registered attack from its name and hyperparameters, with one-line errors."""
    from pydantic import ValidationError

    cls = ATTACKS.get(name)
    try:
        return cls(**(params or {}))
    except ValidationError as error:
        raise ConfigError(f"attack {name!r}: {format_validation_error(error)}") from error


__all__ = ["ATTACKS", "Attack", "AttackOutput", "build_attack", "format_validation_error"]
