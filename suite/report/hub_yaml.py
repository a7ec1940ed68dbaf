"""The YAML of exported model cards and ``.eval_results/`` files (:mod:`suite.report.hub`):
written so that a terminal or an editor shows every character as itself, and YAML errors in a
few words."""

from __future__ import annotations

from typing import Any

import yaml


def card_text(card: Any) -> str:
    """``str(card)``, its YAML by :func:`dump` (huggingface_hub's writes bidi characters raw)."""
    text = str(card)  # also puts the metadata in the card's original order
    if printable_yaml(card.data.to_yaml()):
        return text
    eol = "\r\n" if text.startswith("---\r\n") else "\n"
    return f"---{eol}{dump(card.data.to_dict(), line_break=eol).strip()}{eol}---{eol}{card.text}"


def dump(data: Any, **options: Any) -> str:
    """``data`` as YAML, its Unicode as is unless PyYAML would write a bidi or zero-width character
    raw (U+202E reverses a line): then all non-ASCII is escaped (``\\u202E``), read back the same."""
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, **options)
    return text if printable_yaml(text) else yaml.safe_dump(data, sort_keys=False, allow_unicode=False, **options)


def printable_yaml(text: str) -> bool:
    return text.replace("\n", "").replace("\r", "").isprintable()


def problem(error: yaml.YAMLError, offset: int) -> str:
    """A YAML error in a few words: the problem and its line (``offset`` lines before the YAML)."""
    mark = getattr(error, "problem_mark", None)
    said = getattr(error, "problem", None) or " ".join(str(error).split())[:160]
    return said if mark is None else f"{said}, line {mark.line + 1 + offset}"
