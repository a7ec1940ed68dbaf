"""The leaderboard's static page and schema, copied beside a leaderboard file.

``leaderboard add`` copies ``index.html`` and ``schema.json`` beside a new leaderboard, and
keeps them current beside an existing one: ``schema.json`` is generated from the entries'
schema, and a leaderboard whose entries hold a newer field (``verified``) no longer validated
against the schema published beside it, so it is rewritten whenever it differs. ``index.html``
is replaced only where it is byte for byte a page advsuite shipped (:data:`SHIPPED_PAGES`): a
page of the user's own is never overwritten; an older page of the suite's does not show newer
fields (an entry added without its records, marked unverified).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from suite.paths import atomic_write

#: A source checkout first, then where a wheel installs the page and the schema.
PAGE_DIRS = (Path(__file__).resolve().parents[2] / "leaderboard", Path(sys.prefix) / "share" / "advsuite" / "leaderboard")
#: The SHA-256 of every index.html advsuite has shipped, newest first (a test checks the
#: current page is here: add its hash when the page changes).
SHIPPED_PAGES = frozenset({
    "8de338374dc785916a00ef859ac9f215c355f85475db866d38f29cf14d475026",
    "bf52d416d439cb494250c4da2723f199f4cee34d20ddd34208953b5bdf64671e",
    "90ea3162aeb592ee8f272877cf2433ce3d9fc11e5b48eb30693d60a195042718",
    "04f58df05d9fa72ca17adbbed4d8485d6d7c495b209422e010fbc5c7604f7f41",
    "e606b4656b8300c6c53bbad4621ae29b9efa374cf6fb1834793f071dcb137b5d",
    "f22a4419d7f1e9d87a45873f9dbc9c739ad8936d1b4bb3407e8edee340f7129b",
    "0ba10d8a6ef6429e69873bf0dfcc4e3ab9dd9c971d79fbe06c2c3961eecba16b",
    "ada5e5895483081466ebed2924c492250de93ab8764ae75378413e9164ec210d",
    "ab3a792e624711ba30f1eb574d1ede0cc1679533e36f304e4c201ee6367ff757",
    "6b50a85a3b1a1891c3d182459b8da32da98c7d0b59aa8a4582fc4723b3c0f2ee",
})
#: What a failed page write keeps.
PAGE_MISSING = "the leaderboard is written, only the page beside it is missing"


#: The page's own files, copied beside every leaderboard.
PAGE_FILES = ("index.html", "schema.json")


def install_page(directory: Path) -> list[Path]:
    """Copy ``index.html`` and ``schema.json`` into ``directory`` where they are missing or
    are older versions of the suite's own (module docstring); the files written."""
    source = next((d for d in PAGE_DIRS if (d / "index.html").is_file()), None)
    copied = []
    for name in PAGE_FILES:
        target = Path(directory) / name
        if source is None or (source / name).resolve() == target.resolve():
            continue
        data = (source / name).read_bytes()
        if target.exists():
            old = target.read_bytes()
            ours = name == "schema.json" or hashlib.sha256(old).hexdigest() in SHIPPED_PAGES
            if old == data or not ours:
                continue
        atomic_write(target, lambda handle, data=data: handle.write(data), PAGE_MISSING)
        copied.append(target)
    return copied
