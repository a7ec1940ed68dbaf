"""Reading a recipe file's YAML (:func:`read_recipe_yaml`): size-bounded, a key given twice
refused, numbers and booleans as YAML 1.2 reads them; every problem one :class:`ConfigError` line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from suite.errors import ConfigError

MAX_RECIPE_BYTES = 1 << 20  #: The largest recipe file read.


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last:
    ``{eps: 0.3, eps: 0.01}`` ran at 0.01)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        keys: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue  # '<<' merges (its keys may be overridden); a complex key is refused later
            key = self.construct_object(key_node)
            if key in keys:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice in one mapping",
                                                        key_node.start_mark)
            keys.add(key)
        return super().construct_mapping(node, deep)


# Numbers and booleans as YAML 1.2 reads them, not as PyYAML (YAML 1.1) does: ``010`` was 8, ``1:30``
# 90, ``0x10`` 16, ``4_0`` 40, ``yes``/``off`` booleans; ``1e-2`` a string. Other forms stay strings,
# leading zeros too (``010``, ``010.5``: octal to some readers, decimal to others), so a number field refuses them.
_INT, _FLOAT, _BOOL = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool"
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in (_INT, _FLOAT, _BOOL)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_UniqueKeyLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_UniqueKeyLoader.add_implicit_resolver(_INT, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789"))
_UniqueKeyLoader.add_implicit_resolver(_FLOAT, re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|(?:0|[1-9][0-9]*)(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def read_recipe_yaml(path: str | Path) -> Any:
    """The YAML document of the recipe file at ``path`` (not yet checked to be a recipe)."""
    path = Path(path)
    try:
        size = path.stat().st_size if path.is_file() else 0
        if size > MAX_RECIPE_BYTES:  # a recipe is a few KB; 10 MB of comments took 10 s to read
            raise ConfigError(f"recipe {str(path)!r} is {size / 2**20:.1f} MiB: a recipe is a few KB of YAML (at "
                              f"most {MAX_RECIPE_BYTES // 2**20} MiB); is this the file you meant?")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read recipe {str(path)!r}: {error.strerror if isinstance(error, OSError) else error}") from error
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"recipe {str(path)!r} is not valid YAML{where}: {getattr(error, 'problem', error)}") from error
    except RecursionError as error:
        raise ConfigError(f"recipe {str(path)!r} is nested too deeply to be a recipe") from error
    return data
