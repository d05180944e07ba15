"""Reading the YAML files alight reads (recipes, alight.yaml, the user config): safe, and strict about keys.

PyYAML keeps the last of two equal keys without a word, so a recipe with `env:` twice would silently lose the
first block. Here a duplicate key is an error naming the key and both lines.

Imports only errors (bottom layer).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agentlightning_cli.errors import AlightError


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping holding the same key twice."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    written = {id(k) for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"}
    loader.flatten_mapping(node)  # `<<: *base` then a key of base: an override, not a duplicate
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if id(key_node) not in written:
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key; the constructor below reports it
            continue
        line = key_node.start_mark.line + 1
        if first is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} on lines {first} and {line}", key_node.start_mark)
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str, where: str | Path) -> Any:
    """Parse YAML text; bad syntax or a duplicate key raises AlightError naming `where` and the line(s)."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.constructor.ConstructorError as exc:
        if exc.problem and exc.problem.startswith("duplicate key"):
            raise AlightError(f"{where}: {exc.problem}", "keep one of them (YAML would silently use the last)") from exc
        raise AlightError(f"{where}: not valid YAML: {exc}") from exc
    except yaml.YAMLError as exc:
        raise AlightError(f"{where}: not valid YAML: {exc}", "fix the syntax") from exc


def read_yaml(path: Path) -> Any:
    """Read and parse a YAML file (see load_yaml); an unreadable file is an AlightError too."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AlightError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return load_yaml(text, path)
