"""One generic registry for models, datasets, attacks and recipes.

Entries are registered where they are defined, with a decorator::

    ATTACKS = Registry("attack", list_command="advsuite ls attacks")

    @ATTACKS.register("pgd_linf")
    class PGDLinf(...): ...

Entries may also be registered lazily as ``"module:attr"`` strings, so that listing names does
not import heavy modules (TextAttack, timm). An unknown name is answered with the closest
names, every available name, and the command that lists them.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from suite.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """A name → object mapping with decorator registration and helpful lookup errors.

    Args:
        kind: What the entries are ("model", "attack", ...), used in messages.
        list_command: The command that lists the entries, quoted in errors.
    """

    def __init__(self, kind: str, list_command: str | None = None) -> None:
        self.kind = kind
        self.list_command = list_command
        self._entries: dict[str, T | str] = {}
        self._help: dict[str, str] = {}

    def register(self, name: str, *, help: str | None = None) -> Callable[[T], T]:
        """Decorator registering ``obj`` under ``name``; a second registration is an error."""

        def decorator(obj: T) -> T:
            self.add(name, obj, help=help)
            return obj

        return decorator

    def add(self, name: str, obj: T | str, *, help: str | None = None) -> None:
        """Register ``obj`` (or a lazy ``"module:attr"`` string) under ``name``."""
        existing = self._entries.get(name)
        if existing is not None and existing is not obj and existing != obj:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj
        doc = help or (getattr(obj, "__doc__", None) if not isinstance(obj, str) else None) or ""
        self._help[name] = doc.strip().splitlines()[0] if doc.strip() else ""

    def remove(self, name: str) -> None:
        """Unregister ``name`` (a plugin unloading, a test cleaning up); unknown names are ignored."""
        self._entries.pop(name, None)
        self._help.pop(name, None)

    def get(self, name: str) -> T:
        """Return the entry for ``name``, importing it first when it was registered lazily."""
        if name not in self._entries:
            raise UnknownNameError(self.unknown_message(name))
        entry = self._entries[name]
        if isinstance(entry, str):
            module_name, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(module_name), attr)
            self._entries[name] = entry
        return entry  # type: ignore[return-value]

    def unknown_message(self, name: str) -> str:
        """The one-line answer to an unknown ``name``."""
        names = self.names()
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        message = f"unknown {self.kind} {name!r}."
        if close:
            message += f" Did you mean: {', '.join(close)}?"
        message += f" Available: {', '.join(names) or '(none)'}."
        if self.list_command:
            message += f" See `{self.list_command}`."
        return message

    def describe(self, name: str) -> str:
        """First docstring line of the entry (without importing lazy entries)."""
        return self._help.get(name, "")

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

