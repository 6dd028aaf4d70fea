"""The YAML and JSON files users write settings in (job specs, daemon configs), read strictly: every
mapping key given once -- a key given twice (`dataset: a` then `dataset: b`) is refused naming it and
its line, instead of the last one silently winning -- and a YAML error told in one line."""

from __future__ import annotations

import json
from typing import Any

import yaml


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a mapping holding one key twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` merges a mapping in: its keys may be given again, and win
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                first = first_line.get(key)
            except TypeError:
                continue  # an unhashable key: construct_mapping below names it
            if first is None:
                first_line[key] = line
            else:
                raise yaml.YAMLError(f"line {line}: key {key!r} is given twice (first on line {first}); give it once")
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _UniqueKeyLoader.construct_mapping,
)


def load_yaml(text: str) -> Any:
    """`text` as yaml.safe_load reads it; yaml.YAMLError also for a key given twice in one mapping."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects


def load_json(text: str) -> Any:
    """`text` as json.loads reads it; ValueError (json.JSONDecodeError's base) for a key given twice."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        mapping: dict[str, Any] = {}
        for key, value in pairs:
            if key in mapping:
                raise ValueError(f"key {key!r} is given twice in one object; give it once")
            mapping[key] = value
        return mapping

    return json.loads(text, object_pairs_hook=unique)


def describe_yaml_error(error: yaml.YAMLError) -> str:
    """A YAML error as one line: the problem and where (`line L, column C`), without PyYAML's several lines
    and the quoted snippet."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        mark = error.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        context = f" ({error.context})" if error.context else ""
        return f"{where}{error.problem}{context}"
    return " ".join(str(error).split())
