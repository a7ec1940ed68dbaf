"""Text that is safe to print to a terminal.

Model names, dataset paths, labels and leaderboard fields come from users and from files anyone
can write. Printed raw, an ESC sequence can rewrite the terminal (move the cursor, change the
title, hide text) and a bidirectional override (U+202E) can make ``evil.exe`` read as
``exe.live``. :func:`printable` shows every such character escaped instead, so what is printed
is what is there.
"""

from __future__ import annotations

import logging
import unicodedata

#: Bidirectional controls: embeddings, overrides and isolates, and the implicit marks.
BIDI = frozenset("\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _unsafe(char: str) -> bool:
    # Cc: C0 and C1 controls (ESC, CR, BEL, CSI...); Cf: format characters (bidi, zero width);
    # line and paragraph separators break a one-line message as a newline would; a lone
    # surrogate (Cs: JSON's "\ud800" parses to one) cannot be encoded, so printing it fails.
    return char in BIDI or unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs")


def printable(text: object) -> str:
    """``text`` with every control, format, bidi and lone surrogate character escaped (``\\x1b``, ``\\u202e``)."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(
        (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}") if _unsafe(char) else char
        for char in text
    )


class PrintableFilter(logging.Filter):
    """A logging filter that escapes control characters in every message it passes (install it
    on the handlers that write to a terminal)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.isprintable():
            record.msg, record.args = printable(message), None
        return True
