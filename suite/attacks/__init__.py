"""Registered attacks. Importing this package registers every attack (TextAttack itself is
imported only when a text attack runs), and names the entry-point group ``advsuite.attacks``
through which other packages add theirs (read on first listing or lookup; docs/plugins.md)."""

from __future__ import annotations

from suite.attacks.base import ATTACKS, Attack, AttackOutput, InfeasibleError, Threat, build_attack
from suite.attacks.image import apgd as _apgd  # noqa: F401  (registers apgd_ce, apgd_dlr, apgd_t)
from suite.attacks.image import arc as _arc  # noqa: F401  (registers arc)
from suite.attacks.image import auto as _auto  # noqa: F401  (registers auto, auto_plus)
from suite.attacks.image import baselines as _baselines  # noqa: F401  (registers ta_apgd_*, fab_t, autoattack)
from suite.attacks.image import beta as _beta  # noqa: F401  (registers beta)
from suite.attacks.image import fgm as _fgm  # noqa: F401  (registers fgm_*)
from suite.attacks.image import pgd as _pgd  # noqa: F401  (registers pgd_*, pgd_t_*)
from suite.attacks.image import square as _square  # noqa: F401  (registers square)
from suite.attacks.image import rec as _rec  # noqa: F401  (registers apgd_rec, apgd_rec_logits, pgd_member)
from suite.attacks.image import wda as _wda  # noqa: F401  (registers wda)
from suite.attacks.image import wda_pp as _wda_pp  # noqa: F401  (registers wda_pp)
from suite.attacks.text import recipes as _recipes  # noqa: F401  (registers the TextAttack recipes)
from suite.attacks.text import transfer as _transfer  # noqa: F401  (registers transfer)


def _plugin_attack(name: str, cls: object) -> type[Attack]:
    """A plugin's ``advsuite.attacks`` entry point: an :class:`Attack` subclass, named by the
    entry point (as :func:`~suite.attacks.base.register_attack` names the built-in ones)."""
    if not (isinstance(cls, type) and issubclass(cls, Attack)):
        raise TypeError(f"{cls!r} is not a subclass of suite.attacks.Attack")
    if getattr(cls, "modality", None) not in ("image", "text"):
        raise TypeError(f"{cls.__qualname__} sets no modality ('image' or 'text')")
    declared = cls.__dict__.get("name")
    if declared is not None and declared != name:
        raise ValueError(f"{cls.__qualname__} calls itself {declared!r}, its entry point {name!r}")
    cls.name = name
    return cls


ATTACKS.use_entry_points("advsuite.attacks", check=_plugin_attack)

__all__ = ["ATTACKS", "Attack", "AttackOutput", "InfeasibleError", "Threat", "build_attack"]
