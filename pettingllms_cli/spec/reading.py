"""Reading a spec file into a plain tree and applying `--set` overrides, each failure one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pettingllms_cli.errors import UserError
from pettingllms_cli.spec.limits import MAX_DEPTH
from pettingllms_cli.spec.safe_yaml import DuplicateKey, TooDeep, load_text


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    """Set `a.b.0.c` in a tree of mappings and lists (a number indexes an existing list item)."""
    keys = dotted.split(".")
    node: Any = tree
    for depth, key in enumerate(keys):
        last = depth == len(keys) - 1
        if isinstance(node, list):
            if not key.isdigit() or int(key) >= len(node):
                raise UserError(f"--set {dotted}: {key!r} is not an index of the list (0..{len(node) - 1})")
            if last:
                node[int(key)] = value
            else:
                node = node[int(key)]
        elif isinstance(node, dict):
            if last:
                node[key] = value
            else:
                node = node.setdefault(key, {})
        else:
            raise UserError(f"--set {dotted}: {key!r} is inside a value that is neither a mapping nor a list")


def apply_overrides(tree: dict, overrides: list[str]) -> dict:
    """Apply `--set a.b=value` overrides; values are parsed as YAML (`--set train.steps=3`)."""
    for item in overrides:
        if "=" not in item:
            raise UserError(f"--set {item!r}: expected dotted.key=value")
        key, raw = item.split("=", 1)
        try:
            value = load_text(raw, MAX_DEPTH)
        except (DuplicateKey, TooDeep) as e:
            raise UserError(f"--set {item!r}: {getattr(e, 'problem', None) or e}") from None
        except yaml.YAMLError:
            value = raw
        _set_dotted(tree, key.strip(), value)
    return tree


def read_yaml(path: Path) -> dict:
    """Read a spec file as a mapping, or raise a one-line UserError naming the file."""
    if not path.is_file():
        raise UserError(f"{path}: no such spec file")
    try:
        text = path.read_text(encoding="utf-8")
        tree = load_text(text, MAX_DEPTH)
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a text file; a spec is UTF-8 YAML") from None
    except (DuplicateKey, TooDeep) as e:
        raise UserError(f"{path}: {getattr(e, 'problem', None) or e}") from None
    except RecursionError:  # past what the depth scan caught (a complex key): still one line
        raise UserError(f"{path}: nested too deeply to read; a spec needs about 5 levels") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise UserError(f"{path}:{where} YAML syntax error: {problem}") from None
    if tree is None:
        raise UserError(f"{path}: the file is empty; see experiments/smoke.yaml for a minimal spec")
    if not isinstance(tree, dict):
        raise UserError(f"{path}: a spec is a YAML mapping at the top level, not {type(tree).__name__}")
    return tree
