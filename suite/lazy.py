"""Deferred imports, so that ``advsuite ls``, ``validate`` and ``--help`` start without torch.

Importing torch takes about two seconds, and most of the suite's modules import it at the top
for the functions they define, not for anything they do at import time. The CLI therefore puts
a *deferred* torch in ``sys.modules`` before it runs a command (the idea of SPEC 1, "Lazy
loading of submodules and functions", scientific-python.org/specs/spec-0001): ``import torch``
binds the name at once, and torch's own code runs on the first attribute access
(``torch.zeros``, ``from torch import nn``, ``import torch.nn``), in place, so the module
every importer holds becomes the real one. A command that never touches torch never loads it.

Module-level code on the CLI's import path must therefore not touch torch attributes (no
``from torch import nn``, no ``torch.float16`` in a module-level constant, no class deriving
from ``nn.Module``); ``bench/cli_startup.py`` shows a regression.

``importlib.util.LazyLoader`` does not do here: every later ``import torch`` statement reads
``torch.__spec__`` (is the module still initialising?), and with LazyLoader that read loads it.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

#: Modules the CLI defers: the ones that cost seconds to import.
DEFERRED = ("torch",)


class _DeferredModule(ModuleType):
    """A module whose code runs on the first access to anything but ``__spec__``."""

    def __getattribute__(self, attr: str):
        if attr == "__spec__":  # read by every `import` of an already imported module
            return object.__getattribute__(self, attr)
        _load(self)
        return getattr(self, attr)


def _load(module: ModuleType) -> None:
    # A plain module from here on: the accesses torch's own code makes while it runs are normal.
    module.__class__ = ModuleType
    spec = module.__spec__
    try:
        spec.loader.exec_module(module)
    except BaseException:
        # As a failed import does: the next `import` tries again, and raises the real error.
        sys.modules.pop(spec.name, None)
        raise


def defer_import(name: str) -> ModuleType | None:
    """Put ``name`` in ``sys.modules`` as a module that is loaded on first attribute access.

    Args:
        name: A top-level module name (a submodule would import its parent to be found).

    Returns:
        The module (already loaded, or deferred), or ``None`` when it is not installed (the
        first real ``import`` then raises as usual).
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _DeferredModule
    sys.modules[name] = module
    return module


def is_loaded(name: str) -> bool:
    """Whether ``name`` has been imported for real (not merely deferred)."""
    # ``type`` reads no attribute, so asking does not load a deferred module.
    module = sys.modules.get(name)
    return module is not None and type(module) is not _DeferredModule
