"""Reading a spec's YAML without surprises: a key given twice, nesting past a bound, aliases that expand to millions of
values (a "YAML bomb") and NaN/inf numbers are each one error naming the key, instead of a silent last-one-wins, a
RecursionError, a hang or a run that fails later naming the wrong field.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, ScalarNode

MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *defaults`: the keys after it override the merged ones, as YAML says


class DuplicateKey(ConstructorError):
    """A mapping names one key twice; `problem` names the key and both lines."""


class TooDeep(yaml.YAMLError):
    """Nesting past the bound: PyYAML and pydantic recurse once per level."""


class SpecLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key given twice in one mapping is a DuplicateKey error."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == MERGE_TAG:
                continue
            key, line = self.construct_object(key_node), key_node.start_mark.line + 1
            if key in seen:
                problem = f"key {key!r} appears twice (line {seen[key]} and line {line}); keep one"
                raise DuplicateKey(None, None, problem, key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_text(text: str, max_depth: int) -> Any:
    """The YAML document in `text`, refused (TooDeep) past `max_depth` levels before any recursion starts."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):  # a flat event stream: no recursion, linear in the text
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > max_depth:
                raise TooDeep(f"nested deeper than {max_depth} levels (line {event.start_mark.line + 1}); a spec needs about 5")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return yaml.load(text, Loader=SpecLoader)  # noqa: S506 - SpecLoader is a SafeLoader


def tree_problem(tree: Any, max_nodes: int) -> str | None:
    """`dotted.key: what is wrong` for the first NaN/inf number, or when aliases expand the tree past `max_nodes`.

    >>> tree_problem({"algorithm": {"lr": float("inf")}}, 100)
    'algorithm.lr: must be a finite number, not inf'
    >>> tree_problem({"a": [1, 2, 3]}, 3)
    '(top level): more than 3 values once YAML aliases are expanded; write the spec out without nested aliases'
    """
    stack: list[tuple[str, Any]] = [("", tree)]
    visited = 0
    while stack:
        path, value = stack.pop()
        visited += 1
        if visited > max_nodes:
            expanded = f"more than {max_nodes:,} values once YAML aliases are expanded"
            return f"(top level): {expanded}; write the spec out without nested aliases"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{path}: must be a finite number, not {value}"
        if isinstance(value, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{path}.{i}" if path else str(i), v) for i, v in enumerate(value))
    return None
