"""Whether a function call matches a BFCL ground-truth call, by the rules of BFCL's Python AST checker.

The rules (bfcl-eval's `ast_checker`, Python language; docs/envs.md lists them with the `lenient` departures):
- the function name is exact; every argument the schema marks `required` is present; every argument given is
  in the schema and in the ground truth; a ground-truth argument left out must list `""` (may be omitted);
- types are exact (`bool` is not an `int`), except that an `int` is accepted where a `float` is expected; an
  array's items are checked against `items.type` (no int-for-float there); a value of the type of the accepted
  values (BFCL's "variable" case) passes the type check and is then compared as is;
- strings compare after removing spaces and `,./-_*^`, lower-cased, `'` read as `"`: quotes are not removed,
  so `units'` is not `units`; `""` is accepted where the accepted values list `""`;
- a list compares item by item with its string items normalised; a dict compares key by key with its string
  values normalised (strings inside its lists are not); a list of dicts compares dict by dict, in order;
- numbers compare exactly (`0` is not `1e-09`).

Where bfcl-eval would raise (an accepted value of a shape the checker does not expect), these rules reject.
"""

from __future__ import annotations

import math
import re

TYPES: dict[str, type] = {
    "string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list, "dict": dict, "any": str,
}  # fmt: skip
_STRIP = re.compile(r"[ ,./\-_*^]")
_QUOTES = re.compile(r"['\"]")


def standardize(text: str, lenient: bool = False) -> str:
    """BFCL's string normalisation; `lenient` also drops quotes.

    >>> standardize("New York, NY"), standardize("units'"), standardize("units'", lenient=True)
    ('newyorkny', 'units"', 'units')
    """
    out = _STRIP.sub("", text).lower()
    return _QUOTES.sub("", out) if lenient else out.replace("'", '"')


def call_problem(name: object, args: dict, gold: dict, schema: dict, lenient: bool = False) -> str | None:
    """Why a call does not match one ground-truth call (None when it does).

    >>> fn = {"name": "f", "parameters": {"properties": {"x": {"type": "float"}}, "required": ["x"]}}
    >>> call_problem("f", {"x": 2}, {"f": {"x": [2.0]}}, fn), call_problem("f", {}, {"f": {"x": ["", 2.0]}}, fn)
    (None, "missing required argument 'x'")
    """
    gold_name, accepted = next(iter(gold.items()))
    if name != gold_name:
        return f"function {name!r} does not answer this request"
    params = schema.get("parameters", {})
    props = params.get("properties", {})
    missing = [k for k in params.get("required", []) if k not in args]
    if missing:
        return f"missing required argument {missing[0]!r}"
    for key, value in args.items():
        if key not in props or key not in accepted:
            return f"unknown argument {key!r}"
        if not value_matches(value, accepted[key], props[key], lenient):
            return f"argument {key!r} has a wrong value"
    left_out = [k for k, options in accepted.items() if k not in args and "" not in options]
    return f"missing argument {left_out[0]!r}" if left_out else None


def value_matches(value: object, options: list, prop: dict, lenient: bool = False) -> bool:
    """One argument's value against its accepted values and its schema entry.

    >>> ints = {"type": "array", "items": {"type": "integer"}}
    >>> value_matches(0, [1e-09], {"type": "float"}), value_matches([1.0, 3.0], [[1, 3]], ints)
    (False, False)
    >>> value_matches("", ["", "cm"], {"type": "string"}), value_matches(10, [10.0], {"type": "float"})
    (True, True)
    """
    kind = prop.get("type")
    expected = TYPES.get(kind) if isinstance(kind, str) else None
    items = prop.get("items") if kind in ("array", "tuple") and isinstance(prop.get("items"), dict) else {}
    item_type = TYPES.get(items.get("type")) if isinstance(items.get("type"), str) else None
    if kind == "float" and type(value) is int:
        value = float(value)  # Python's own int -> float promotion, the one type relaxation
    variable = False
    if expected is not None:
        ok, variable = _type_ok(value, options, expected, item_type, lenient)
        if not ok:
            return False
    if not variable:
        if expected is dict:
            return _dict_ok(value, options, lenient)
        if expected is list and item_type is dict:
            return _list_of_dicts_ok(value, options, lenient)
        if expected is str:
            return standardize(value, lenient) in [standardize(o, lenient) for o in options if type(o) is str]
        if expected is list:
            return _list_ok(value, options, lenient)
    return _among(value, options, lenient)


def _answer_type(options: list) -> type | None:
    """The type of the first accepted value that is not `""` (None: only omission is listed)."""
    return next((type(o) for o in options if not (type(o) is str and o == "")), None)


def _type_ok(value: object, options: list, expected: type, item_type: type | None, lenient: bool) -> tuple[bool, bool]:
    """(type accepted, compare as a "variable": the accepted values are of another type than the schema's)."""
    answer_type = _answer_type(options)
    variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if item_type is None:
            return True, variable
        for option in options:  # the items must fit one accepted list; an accepted value that is no list waives it
            if type(option) is not list or all(_item_ok(v, option, item_type, lenient) for v in value):
                return True, variable
        return False, False
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, False


def _item_ok(item: object, option: list, item_type: type, lenient: bool) -> bool:
    if lenient and item_type is float and type(item) is int:
        return True
    return type(item) is item_type or type(item) is _answer_type(option)


def _norm(value: object, lenient: bool) -> object:
    return standardize(value, lenient) if type(value) is str else value


def _list_ok(value: list, options: list, lenient: bool) -> bool:
    got = [_norm(v, lenient) for v in value]
    for option in options:
        if isinstance(option, (list, str)) and _same_list(got, [_norm(o, lenient) for o in option], lenient):
            return True
    return False


def _same_list(got: list, want: list, lenient: bool) -> bool:
    return len(got) == len(want) and all(_among(g, [w], lenient) for g, w in zip(got, want, strict=True))


def _dict_ok(value: dict, options: list, lenient: bool) -> bool:
    return any(isinstance(o, dict) and _dict_fits(value, o, lenient) for o in options)


def _dict_fits(value: object, option: dict, lenient: bool) -> bool:
    if not isinstance(value, dict):
        return False
    for key, item in value.items():
        accepted = option.get(key)
        if not isinstance(accepted, list) or not _among(_norm(item, lenient), [_norm(a, lenient) for a in accepted], lenient):
            return False
    return all(key in value or (isinstance(acc, list) and "" in acc) for key, acc in option.items())


def _list_of_dicts_ok(value: list, options: list, lenient: bool) -> bool:
    for option in options:
        if isinstance(option, list) and len(option) == len(value):
            if all(isinstance(o, dict) and _dict_fits(v, o, lenient) for v, o in zip(value, option, strict=True)):
                return True
    return False


def _among(value: object, options: list, lenient: bool) -> bool:
    """Python equality (1 == 1.0, as BFCL's `in`); `lenient` also accepts a float within 1e-9 of it, relatively."""
    if value in options:
        return True
    if not lenient or type(value) is not float:
        return False
    return any(type(o) in (int, float) and math.isclose(value, o, rel_tol=1e-9) for o in options)
