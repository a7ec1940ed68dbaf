"""One generic registry for models, datasets, attacks and recipes.

Entries are registered where they are defined, with a decorator::

    ATTACKS = Registry("attack", list_command="advsuite ls attacks")

    @ATTACKS.register("pgd_linf")
    class PGDLinf(...): ...

Entries may also be registered lazily as ``"module:attr"`` strings, so that listing names does
not import heavy modules (TextAttack, timm). An unknown name is answered with the closest
names, every available name, and the command that lists them.

Other installed packages (plugins) add entries through an entry-point group
(:meth:`Registry.use_entry_points`): the group is read when names are first needed, and a
plugin's module is imported only when its entry is first looked up, so startup stays light and
a broken plugin breaks nothing but its own entries. Every entry has an origin
(:meth:`Registry.origin`): ``advsuite`` for the suite's own, ``<distribution> <version>`` for a
plugin's.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import re
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any, Generic, TypeVar

from suite.errors import SuiteError, UnknownNameError

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: The origin of every entry the suite registers itself.
BUILTIN = "advsuite"

#: What a plugin's entry name may be: it ends up in specs (``scheme:name``), results keys and
#: directory names, so no colons, spaces, slashes or control characters.
PLUGIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class PluginError(SuiteError):
    """A plugin's entry that cannot be used: its import failed, or it is not what its group
    takes, or two plugins claim one name. Raised when the entry is used, never at startup."""


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
        self._origins: dict[str, str] = {}
        #: Entry-point group not read yet (read on first listing or lookup), and its checker.
        self._group: str | None = None
        self._check: Callable[[str, Any], T] | None = None
        self._plugins: dict[str, metadata.EntryPoint] = {}
        #: Names two plugins claim, with the one-line refusal.
        self._refused: dict[str, str] = {}

    def register(self, name: str, *, help: str | None = None) -> Callable[[T], T]:
        """Decorator registering ``obj`` under ``name``; a second registration is an error."""

        def decorator(obj: T) -> T:
            self.add(name, obj, help=help)
            return obj

        return decorator

    def add(self, name: str, obj: T | str, *, help: str | None = None) -> None:
        """Register ``obj`` (or a lazy ``"module:attr"`` string) under ``name``."""
        if name in self._plugins:
            if self._claims(name, obj):  # the plugin's module registering what its entry point names
                return
            logger.warning("%s %r of plugin %s is now built into advsuite; the plugin's entry is skipped",
                           self.kind, name, self._origins[name])
            self.remove(name)
        existing = self._entries.get(name)
        if existing is not None and existing is not obj and existing != obj:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = obj
        self._origins[name] = BUILTIN
        self._help[name] = _first_line(help or (getattr(obj, "__doc__", None) if not isinstance(obj, str) else None))

    def remove(self, name: str) -> None:
        """Unregister ``name`` (a plugin unloading, a test cleaning up); unknown names are ignored."""
        for table in (self._entries, self._help, self._origins, self._plugins, self._refused):
            table.pop(name, None)

    def use_entry_points(self, group: str, check: Callable[[str, Any], T] | None = None) -> None:
        """Also offer the entries installed packages declare in the entry-point ``group``.

        The group is read when names are first listed or looked up, never here. A plugin's
        object is loaded (its module imported) on the first :meth:`get` of its name, then passed
        through ``check(name, obj)``, which returns what to register or raises to refuse it;
        either failure is a one-line :class:`PluginError` naming the plugin's distribution.

        A plugin name that is built in is skipped with a warning naming both (the built-in keeps
        the name: results that say ``pgd_linf`` always mean the suite's own); a name two plugins
        claim is refused when used, naming both; a name that is not a plain word is skipped.
        """
        self._group = group
        self._check = check

    def _discover(self) -> None:
        if self._group is None:
            return
        group, self._group = self._group, None
        for entry_point in sorted(metadata.entry_points(group=group), key=lambda ep: (ep.name, _origin(ep))):
            self._add_plugin(entry_point)

    def _add_plugin(self, entry_point: metadata.EntryPoint) -> None:
        name, origin = entry_point.name, _origin(entry_point)
        if not PLUGIN_NAME.match(name):
            logger.warning("plugin %s: %s name %r is not a plain name (letters, digits, _ . -); skipped",
                           origin, self.kind, name)
        elif name in self._entries and self._origins[name] == BUILTIN:
            logger.warning("plugin %s: %s %r is built into advsuite; the plugin's %s is skipped",
                           origin, self.kind, name, entry_point.value)
        elif name in self._entries:  # a second plugin claims the name: neither may silently win
            self._origins[name] += f", {origin}"
            self._help[name] = "refused: registered by more than one plugin"
            self._refused[name] = (f"{self.kind} {name!r} is registered by more than one plugin "
                                   f"({self._origins[name]}); uninstall all but one")
        else:
            self._entries[name] = entry_point.value
            self._plugins[name] = entry_point
            self._origins[name] = origin
            self._help[name] = _first_line(_summary(entry_point))

    def _claims(self, name: str, obj: object) -> bool:
        """Whether plugin entry ``name`` points at ``obj`` (its module is registering it itself)."""
        where = f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', '')}"
        return self._plugins[name].value.replace(" ", "") == where

    def get(self, name: str) -> T:
        """Return the entry for ``name``, importing it first when it was registered lazily."""
        self._discover()
        if name in self._refused:
            raise PluginError(self._refused[name])
        if name not in self._entries:
            raise UnknownNameError(self.unknown_message(name))
        entry = self._entries[name]
        if isinstance(entry, str):
            entry = self._load_plugin(name) if name in self._plugins else _import(entry)
            self._entries[name] = entry
        return entry  # type: ignore[return-value]

    def _load_plugin(self, name: str) -> T:
        entry_point, origin = self._plugins[name], self._origins[name]
        where = f"{self.kind} {name!r} of plugin {origin} ({entry_point.value})"
        uninstall = f"fix or uninstall it: pip uninstall {_dist_name(entry_point)}"
        try:
            obj = entry_point.load()
        except Exception as error:  # any failure of foreign code is the plugin's, said in one line
            raise PluginError(f"{where} cannot be imported: {type(error).__name__}: {error}; {uninstall}") from error
        if self._check is not None:
            try:
                obj = self._check(name, obj)
            except (TypeError, ValueError) as error:
                raise PluginError(f"{where} is refused: {error}; {uninstall}") from error
        self._help[name] = _first_line(getattr(obj, "__doc__", None)) or self._help[name]
        return obj

    def unknown_message(self, name: str) -> str:
        """The one-line answer to an unknown ``name``."""
        return unknown_name_message(self.kind, name, self.names(), self.list_command)

    def describe(self, name: str) -> str:
        """First docstring line of the entry (without importing lazy entries; a plugin's entry
        not yet loaded is described by its distribution's summary)."""
        self._discover()
        return self._help.get(name, "")

    def origin(self, name: str) -> str:
        """Where ``name`` comes from: ``advsuite``, or the plugin's ``<distribution> <version>``."""
        self._discover()
        return self._origins.get(name, BUILTIN)

    def names(self) -> list[str]:
        self._discover()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._discover()
        return len(self._entries)


def unknown_name_message(kind: str, name: str, names: list[str], list_command: str | None = None) -> str:
    """The one-line answer to an unknown ``name`` of ``kind``: the closest of ``names``, all of
    them, and the command that lists them (what every registry says)."""
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    message = f"unknown {kind} {name!r}."
    if close:
        message += f" Did you mean: {', '.join(close)}?"
    message += f" Available: {', '.join(names) or '(none)'}."
    if list_command:
        message += f" See `{list_command}`."
    return message


def _import(entry: str) -> Any:
    module_name, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def _first_line(doc: str | None) -> str:
    return doc.strip().splitlines()[0] if doc and doc.strip() else ""


def _dist_name(entry_point: metadata.EntryPoint) -> str:
    dist = entry_point.dist
    return (dist.metadata["Name"] or "?") if dist is not None else "?"


def _origin(entry_point: metadata.EntryPoint) -> str:
    """``<distribution> <version>`` of the package that declared ``entry_point``."""
    dist = entry_point.dist
    return f"{_dist_name(entry_point)} {dist.version}" if dist is not None else "unknown distribution"


def _summary(entry_point: metadata.EntryPoint) -> str:
    """The plugin distribution's one-line summary: what ``advsuite ls`` shows before its module loads."""
    dist = entry_point.dist
    summary = dist.metadata["Summary"] if dist is not None else None
    return summary if summary and summary != "UNKNOWN" else ""
