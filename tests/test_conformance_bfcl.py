"""function_call_v0 judges calls as BFCL does (issue 34): identical verdicts on every published record we hold.

bfcl-eval (PyPI) cannot serve as the oracle here: its `ast_checker` imports every model handler (anthropic,
openai, cohere, ...) and the package pins numpy 1.26.4, which the project's numpy 2 excludes. So the oracle
below writes out the documented rules of its Python AST checker (gorilla's `simple_function_checker` and
helpers, read from bfcl-eval 2026.3.23) step by step, in the order the checker applies them, and every
candidate must get the same verdict from `score_call` under `scoring: bfcl`.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from pettingllms_cli.envs import ENVS
from pettingllms_cli.envs.base import Problem
from pettingllms_cli.envs.checker import check_env
from pettingllms_cli.envs.function_call import SAMPLE, FunctionCallEnv, _reference_args, load_bfcl, score_call
from pettingllms_cli.tools.calls import ToolCall

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SHARED_BFCL = SHARED / "bfcl" / "simple_python_200.json"
needs_shared = pytest.mark.skipif(not SHARED_BFCL.is_file(), reason="../shared/data is not checked out beside the repo")


# --- the oracle: BFCL's documented rules, one step at a time -------------------------------------------------
PY = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list, "tuple": list, "dict": dict, "any": str}


def bfcl_norm(s: str) -> str:
    """Spaces and , . / - _ * ^ removed, lower case, single quotes turned into double quotes."""
    return re.sub(r"[ ,./\-_*^]", "", s).lower().replace("'", '"')


def first_type(options: list):
    for o in options:
        if o != "":
            return type(o)
    return None


def bfcl_type(value, options: list, want: type, inner: type | None) -> tuple[bool, bool]:
    """(valid, is_variable) as BFCL's type checker decides them."""
    answer = first_type(options)
    is_var = answer is not None and answer != want
    if type(value) == want:  # noqa: E721 - BFCL compares types with ==
        if inner is None:
            return True, is_var
        for option in options:
            ok = True
            if type(option) == list:  # noqa: E721
                ok = all(bfcl_type(v, option, inner, None)[0] for v in value)
            if ok:
                return True, is_var
        return False, False
    if answer is not None and type(value) == answer:  # noqa: E721
        return True, True
    return False, False


def bfcl_dict(value: dict, options: list) -> bool:
    """Some accepted dict: every given key listed with the value among its normalised answers, every left-out key omittable."""
    for option in options:
        if option == "":
            continue
        given = all(k in option and norm_if_str(v) in [norm_if_str(a) for a in option[k]] for k, v in value.items())
        if given and all(k in value or "" in acc for k, acc in option.items()):
            return True
    return False


def norm_if_str(v):
    return bfcl_norm(v) if type(v) is str else v


def bfcl_value_ok(value, options: list, prop: dict) -> bool:
    kind = prop["type"]
    want = PY[kind]
    inner = PY[prop["items"]["type"]] if kind in ("array", "tuple") else None
    if kind == "float" and type(value) == int:  # noqa: E721
        value = float(value)
    valid, is_var = bfcl_type(value, options, want, inner)
    if not valid:
        return False
    if not is_var:
        if want is dict:
            return bfcl_dict(value, options)
        if want is list and inner is dict:
            return any(len(o) == len(value) and all(bfcl_dict(v, [d]) for v, d in zip(value, o, strict=True)) for o in options)
        if want is str:
            return bfcl_norm(value) in [bfcl_norm(o) for o in options if type(o) == str]  # noqa: E721
        if want is list:
            got = [bfcl_norm(v) if type(v) == str else v for v in value]  # noqa: E721
            return got in [[bfcl_norm(x) if type(x) == str else x for x in o] for o in options]  # noqa: E721
    return value in options


def bfcl_accepts(name: str, args: dict, gold: dict, fn: dict) -> bool:
    gold_name, answer = next(iter(gold.items()))
    if name != gold_name:
        return False
    props, required = fn["parameters"]["properties"], fn["parameters"].get("required", [])
    if any(r not in args for r in required):
        return False
    for key, value in args.items():
        if key not in props or key not in answer or not bfcl_value_ok(value, answer[key], props[key]):
            return False
    return all(key in args or "" in options for key, options in answer.items())


# --- candidates: the reference, each listed answer, and mutations of each kind ---------------------------------
def mutations(value, prop: dict):
    """Values a model might give instead of `value`, named by kind."""
    kind = prop.get("type")
    if isinstance(value, str):
        yield from (("quote", value + "'"), ("dquote", f'"{value}"'), ("upper", value.upper()), ("spaced", f" {value} "))
        yield from (("punct", value.replace(" ", "_")), ("empty", ""), ("numeric_string", "42"), ("other", value + "x"))
    if isinstance(value, bool):
        yield from (("flip", not value), ("int_for_bool", int(value)), ("string_bool", str(value).lower()))
    elif isinstance(value, int):
        yield from (("float_of_int", float(value)), ("off_by_one", value + 1), ("string_int", str(value)), ("bool", True))
    elif isinstance(value, float):
        yield from (("int_for_float", int(value)), ("tiny_diff", value * (1 + 1e-12)), ("abs_window", value + 1e-10))
        yield from (("zero", 0), ("string_float", str(value)))
    if isinstance(value, list):
        yield from (("reversed", value[::-1]), ("empty_list", []), ("shorter", value[:-1]))
        yield ("floats_for_items", [float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value])
        yield ("ints_for_items", [int(v) if isinstance(v, float) else v for v in value])
        yield ("upper_items", [v.upper() if isinstance(v, str) else v for v in value])
        yield ("quoted_items", [v + "'" if isinstance(v, str) else v for v in value])
    if isinstance(value, dict):
        for key, item in value.items():
            for name, changed in mutations(item, {}):
                yield f"dict_{name}", {**value, key: changed}
        yield from (("dict_missing_key", dict(list(value.items())[1:])), ("dict_extra_key", {**value, "zz": 1}))
    if kind is None:
        return
    yield ("null", None)


def candidates(problem: Problem):
    """(kind, name, args) per candidate for the record's first ground-truth call."""
    fn = {f["name"]: f for f in problem.meta["functions"]}
    name, answer = next(iter(problem.answer[0].items()))
    props = fn[name]["parameters"]["properties"]
    required = frozenset(fn[name]["parameters"].get("required", []))
    ref = _reference_args(answer, required)
    yield "reference", name, ref
    yield "wrong_name", name + "_x", ref
    yield "unknown_argument", name, {**ref, "zz_unknown": 1}
    for key, options in answer.items():
        for i, option in enumerate(options):
            if option == "":
                yield f"omit_{i}", name, {k: v for k, v in ref.items() if k != key}
            else:
                yield f"listed_{i}", name, {**ref, key: _reference_args({key: [option]})[key]}
        yield "drop", name, {k: v for k, v in ref.items() if k != key}
        value = ref.get(key, next((o for o in options if o != ""), None))
        for kind, changed in mutations(copy.deepcopy(value), props.get(key, {})):
            yield kind, name, {**ref, key: changed}


def records() -> list[Problem]:
    found = load_bfcl(SAMPLE)
    return found + (load_bfcl(SHARED_BFCL) if SHARED_BFCL.is_file() else [])


def test_verdicts_are_bfcls_on_every_candidate():
    problems, checked, accepted, disagree = records(), 0, 0, []
    for problem in problems:
        fns = {f["name"]: f for f in problem.meta["functions"]}
        gold = problem.answer[0]
        for kind, name, args in candidates(problem):
            fn = fns.get(name, fns[next(iter(gold))])
            ours = score_call(ToolCall(name, args), gold, fn)[0]
            theirs = bfcl_accepts(name, args, gold, fn)
            checked, accepted = checked + 1, accepted + theirs
            if ours != theirs:
                disagree.append((problem.id, kind, args, ours, theirs))
    assert not disagree, f"{len(disagree)} of {checked} disagree, e.g. {disagree[:3]}"
    print(f"{checked} candidates over {len(problems)} records, {accepted} accepted by both")
    assert checked > 200 * 20 if SHARED_BFCL.is_file() else checked > 24 * 20
    assert 0.1 < accepted / checked < 0.9  # both verdicts occur: the mutations do test something


@needs_shared
def test_every_published_reference_solves_in_every_layout():
    report = check_env(FunctionCallEnv, data=str(SHARED_BFCL), limit=1000)
    assert report.ok, report.failures[:3]


# --- the issue's named cases -------------------------------------------------------------------------------------
FN = {
    "name": "calculate_triangle_area",
    "parameters": {
        "type": "dict",
        "properties": {
            "base": {"type": "integer"},
            "height": {"type": "float"},
            "unit": {"type": "string"},
            "sides": {"type": "array", "items": {"type": "integer"}},
        },
        "required": ["base"],
    },
}
# `sides` may not be omitted: where `""` is listed, BFCL waives the item check (any accepted value that is no list does).
GOLD = {"calculate_triangle_area": {"base": [10], "height": [1e-09, ""], "unit": ["units", ""], "sides": [[1, 3]]}}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"base": 10, "sides": [1, 3], "unit": "units'"}, False),  # quotes are not stripped
        ({"base": 10, "sides": [1, 3], "height": 0}, False),  # no float tolerance
        ({"base": 10, "sides": [1.0, 3.0]}, False),  # array item types are checked
        ({"base": 10, "sides": [1, 3], "unit": ""}, True),  # "" for an omittable string
        ({"base": 10, "sides": [1, 3], "unit": "Units "}, True),  # case and spacing
        ({"base": 10.0, "sides": [1, 3]}, False),  # float for an integer
        ({"height": 1e-09, "sides": [1, 3]}, False),  # a required argument missing
        ({"base": 10, "height": 1e-09, "sides": [1, 3]}, True),
    ],
)
def test_issue_cases(args, expected):
    assert score_call(ToolCall(FN["name"], args), GOLD, FN)[0] is expected
    assert bfcl_accepts(FN["name"], args, GOLD, FN) is expected


def test_lenient_scoring_is_the_documented_departures_only():
    ok = {"base": 10, "sides": [1, 3]}
    lenient = [({**ok, "unit": "units'"}, True), ({**ok, "height": 1e-09 * (1 + 1e-12)}, True)]
    lenient += [({"base": 10, "sides": [1.0, 3.0]}, False), ({**ok, "height": 0}, False), ({"height": 1e-09}, False)]
    for args, expected in lenient:
        assert score_call(ToolCall(FN["name"], args), GOLD, FN, lenient=True)[0] is expected, args


def test_unknown_scoring_value_is_refused_naming_the_choices():
    with pytest.raises(Exception, match="bfcl.*lenient"):
        FunctionCallEnv.Options.model_validate({"scoring": "loose"})


# --- issue 25 item 5: a required argument whose answers start with "" ------------------------------------------
def _record_200_shape(tmp_path: Path) -> Path:
    """The shape of BFCL's simple_python_200: `fuel_efficiency` is required, its answers are ["", 20.0]."""
    fn = {
        "name": "calculate_emissions",
        "description": "Calculates the annual carbon dioxide emissions of a car.",
        "parameters": {
            "type": "dict",
            "properties": {
                "distance": {"type": "integer", "description": "Miles driven per year."},
                "fuel_type": {"type": "string", "description": "Type of fuel."},
                "fuel_efficiency": {"type": "float", "description": "Miles per gallon."},
                "efficiency_reduction": {"type": "integer", "description": "Yearly efficiency loss, percent."},
            },
            "required": ["distance", "fuel_type", "fuel_efficiency"],
        },
    }
    gold = {"calculate_emissions": {"distance": [12000], "fuel_type": ["gas"], "fuel_efficiency": ["", 20.0],
                                    "efficiency_reduction": [""]}}  # fmt: skip
    question = [[{"role": "user", "content": "How much CO2 does a 20 mpg gas car emit over 12,000 miles a year?"}]]
    path = tmp_path / "bfcl200.json"
    ids = ("simple_python_200", "simple_python_200_copy")  # two records: a training and a held-out split
    path.write_text("".join(json.dumps({"id": i, "question": question, "function": [fn]}) + "\n" for i in ids))
    (tmp_path / "bfcl200_answer.json").write_text("".join(json.dumps({"id": i, "ground_truth": [gold]}) + "\n" for i in ids))
    return path


def test_required_argument_listed_as_omittable_solves_in_every_layout(tmp_path):
    path = _record_200_shape(tmp_path)
    problem = load_bfcl(path)[0]
    for layout, writer in {"multi": "caller", "single": "caller", "team": "planner", "solo": "caller"}.items():
        env = FunctionCallEnv(problem, layout=layout)
        env.reset(seed=0)
        assert '"fuel_efficiency": 20.0' in env.reference_action(writer)
    report = check_env(ENVS["function_call_v0"], data=str(path), limit=10)
    assert report.ok, report.failures
