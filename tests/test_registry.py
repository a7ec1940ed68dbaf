"""The generic registry: decorator registration, lazy entries, helpful unknown-name errors."""

from __future__ import annotations

import pytest

from suite.errors import UnknownNameError
from suite.registry import Registry


def test_unknown_name_suggests_close_names_and_lists_all():
    registry: Registry = Registry("attack", list_command="advsuite ls attacks")
    for name in ("pgd_linf", "pgd_l2", "fgm"):
        registry.add(name, object())
    with pytest.raises(UnknownNameError) as caught:
        registry.get("pgd_lin")
    message = str(caught.value)
    assert "unknown attack 'pgd_lin'" in message
    assert "Did you mean: pgd_linf" in message
    assert "Available: fgm, pgd_l2, pgd_linf" in message
    assert "advsuite ls attacks" in message
    assert "\n" not in message


def test_decorator_registers_and_collisions_are_refused():
    registry: Registry = Registry("thing")

    @registry.register("a")
    def first():
        """First thing."""

    assert registry.get("a") is first
    assert registry.describe("a") == "First thing."
    with pytest.raises(ValueError, match="already registered"):
        registry.add("a", lambda: None)


def test_lazy_entries_import_on_first_get():
    registry: Registry = Registry("function")
    registry.add("dumps", "json:dumps", help="json dumps")
    import json

    assert registry.get("dumps") is json.dumps
    assert registry.describe("dumps") == "json dumps"


def test_shipped_registries_resolve():
    from suite.attacks import ATTACKS
    from suite.models.registry import BUILTIN_MODELS, MODEL_SCHEMES

    assert {"fgm_linf", "fgm_l2", "pgd_linf", "pgd_l2", "pgd_t_linf", "pgd_t_l2", "beta", "apgd_ce", "apgd_dlr", "apgd_t", "auto", "auto_plus", "ta_apgd_ce", "ta_apgd_t", "fab_t",
            "square", "autoattack", "deepwordbug", "arc", "apgd_rec", "apgd_rec_logits", "pgd_member"} <= set(ATTACKS.names())
    assert set(MODEL_SCHEMES.names()) == {"builtin", "ensemble", "hf", "timm"}
    assert {"digits-cnn", "sentiment-tiny", "digits-cnn-bat", "digits-bat"} <= set(BUILTIN_MODELS.names())
    for name in MODEL_SCHEMES:
        assert callable(MODEL_SCHEMES.get(name))
