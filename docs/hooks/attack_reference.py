"""MkDocs hook: the attack reference page, generated from the attack registry at build time.

``on_files`` adds ``reference/attacks.md`` to the site, rendered from ``suite.attacks.ATTACKS``:
every registered attack's name, summary (the first paragraph of its docstring, which names the
paper), threat model, typed hyperparameters with their defaults, and full docstring. Nothing
generated is committed, so the page cannot drift from the code. Attack classes are described
from their pydantic fields; an instance is built only to read its default threat model, which
for text attacks touches no TextAttack code and no network.
"""

from __future__ import annotations

import inspect
import types
import typing
from fractions import Fraction
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

PAGE = "reference/attacks.md"
_CONSTRAINTS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated attack reference to the site's files."""
    files.append(File.generated(config, PAGE, content=render()))
    return files


def render() -> str:
    """The whole reference page, in Markdown."""
    from suite.attacks import ATTACKS

    classes = {name: ATTACKS.get(name) for name in ATTACKS.names()}
    order = sorted(classes, key=lambda name: (getattr(classes[name], "modality", ""), name))
    lines = [
        "# Attack reference",
        "",
        "Generated at build time from the attack registry (`suite.attacks.ATTACKS`) by",
        "`docs/hooks/attack_reference.py`: this page is the code's own description of every attack.",
        "How the attacks compare is in [Attacks](../attacks/index.md) and [Measured](../attacks/measured.md).",
        "Parameters go in a recipe's `attacks:` entry (`{name: pgd_linf, eps: 0.03, steps: 50}`);",
        "`advsuite ls attacks` lists the same names.",
        "",
        "| attack | modality | access | metric | threat model (default) | summary |",
        "|---|---|---|---|---|---|",
    ]
    lines += [_index_row(name, classes[name]) for name in order]
    for name in order:
        lines += ["", *_section(name, classes[name])]
    return "\n".join(lines) + "\n"


def _index_row(name: str, cls: type[BaseModel]) -> str:
    summary = _shorten(_summary(cls).replace("\n", " ").replace("|", "/"), 140)
    threats = "; ".join(_threats(cls)) or "-"
    return (f"| [`{name}`](#{name}) | {getattr(cls, 'modality', '-')} | {getattr(cls, 'access', '-')} "
            f"| {getattr(cls, 'metric', '-')} | {threats} | {summary} |")


def _section(name: str, cls: type[BaseModel]) -> list[str]:
    requires = getattr(cls, "requires", None)
    lines = [
        f"## `{name}`",
        "",
        _summary(cls).replace("\n", " "),
        "",
        f"- **Threat model (default):** {'; '.join(_threats(cls)) or 'set by its parameters'}",
        f"- **Modality, access, metric:** {getattr(cls, 'modality', '-')}, {getattr(cls, 'access', '-')}, "
        f"{getattr(cls, 'metric', '-')}" + (f" (runs on: {requires} models only)" if requires else ""),
        f"- **Defined in:** `{cls.__module__}.{cls.__qualname__}`",
        "",
    ]
    if cls.model_fields:
        lines += ["| parameter | type | default | constraint |", "|---|---|---|---|"]
        lines += [_field_row(field_name, field) for field_name, field in cls.model_fields.items()]
    else:
        lines.append("No parameters.")
    lines += ["", "```text", _docstring(cls), "```"]
    return lines


def _field_row(field_name: str, field: FieldInfo) -> str:
    constraints = [f"{_CONSTRAINTS[key]} {_number(getattr(item, key))}"
                   for item in field.metadata for key in _CONSTRAINTS if getattr(item, key, None) is not None]
    return (f"| `{field.alias or field_name}` | {_type_name(field.annotation)} | {_default(field)} "
            f"| {', '.join(constraints) or '-'} |")


def _threats(cls: type[BaseModel]) -> list[str]:
    """Default threat model of the attack, one per norm it can take (``norm``: a Literal)."""
    norms = [field for name, field in cls.model_fields.items() if (field.alias or name) == "norm"]
    choices = typing.get_args(norms[0].annotation) if norms else ()
    params: list[dict[str, Any]] = [{"norm": norm} for norm in choices] or [{}]
    labels = []
    for kwargs in params:
        try:
            labels.append(_threat_text(cls(**kwargs).threat))  # type: ignore[attr-defined]
        except Exception:  # a required parameter (transfer's source): described by its fields
            return []
    return labels


def _threat_text(threat: Any) -> str:
    """``L∞ ε = 8/255``, ``W1 L2 ε = 0.5, κ = 1``, ``word-level``."""
    if threat.level is not None:
        return f"{threat.level}-level"
    text = {"linf": "L∞", "l2": "L2", "l1": "L1"}.get(threat.norm, str(threat.norm))
    if threat.eps is not None:
        text += f" ε = {_number(threat.eps)}"
    if threat.p is not None:
        text = f"W{threat.p:g} {text}" + (f", κ = {threat.kappa:g}" if threat.kappa is not None else "")
    return text


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width].rsplit(" ", 1)[0] + " …"


def _summary(cls: type[BaseModel]) -> str:
    return _docstring(cls).split("\n\n")[0].strip()


def _docstring(cls: type[BaseModel]) -> str:
    return inspect.cleandoc(cls.__doc__) if cls.__doc__ else "(no docstring)"


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return f"`{field.default_factory()!r}`"  # type: ignore[call-arg]
    if field.default is PydanticUndefined:
        return "required"
    if isinstance(field.default, float):
        return _number(field.default)
    if isinstance(field.default, str):
        return f"`{field.default}`"
    return f"`{field.default!r}`"


def _number(value: Any) -> str:
    """``8/255`` where a float is a whole number of 1/255 steps (pixel units), else ``%g``."""
    if isinstance(value, float) and not value.is_integer():
        fraction = Fraction(value).limit_denominator(255)
        if fraction.denominator == 255 and float(fraction) == value:
            return f"{fraction.numerator}/255"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _type_name(annotation: Any) -> str:
    """``int or None``, ``'fp32' / 'fp16'``: readable, and free of the ``|`` that splits table cells."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " / ".join(f"`{arg}`" for arg in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in args)
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type) and not args:
        return annotation.__name__
    return str(annotation).replace("typing.", "").replace("|", "or")
