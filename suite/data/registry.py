"""Dataset registries: built-in datasets by name."""

from __future__ import annotations

from suite.registry import Registry

#: ``name -> loader(split) -> RawSplit`` for ``builtin:<name>``.
BUILTIN_DATASETS: Registry = Registry("built-in dataset", list_command="advsuite ls datasets")
