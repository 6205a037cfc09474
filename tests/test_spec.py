"""Spec validation: good files pass, each kind of bad input is one line + exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pettingllms_cli.errors import UserError
from pettingllms_cli.spec import apply_overrides, load_spec, parse_spec

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"


def _write(tmp_path: Path, tree_or_text) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(tree_or_text if isinstance(tree_or_text, str) else yaml.safe_dump(tree_or_text))
    return path


def test_smoke_spec_loads_with_defaults(smoke_spec):
    assert smoke_spec.algorithm.group_size == 4
    assert smoke_spec.role_owner() == {"tool_caller": "caller", "verifier": "verifier"}
    assert smoke_spec.adapter_of("caller") == "caller"


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_experiment_validates(path):
    spec = load_spec(path)
    assert path.read_text().startswith("# pettingllms train experiments/"), "first line must be the command that runs it"
    assert spec.name


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda t: t.update(unknown_key=1), "unknown_key"),
        (lambda t: t["train"].update(steps="many"), "train.steps"),
        (lambda t: t["env"].update(name="nope_v9"), "unknown env"),
        (lambda t: t["agents"]["caller"].update(model="ghost"), "agents.caller.model"),
        (lambda t: t["agents"]["caller"].update(roles=["planner"]), "no role 'planner'"),
        (lambda t: t["agents"]["verifier"].update(roles=["tool_caller"]), "already played by agent"),
        (lambda t: t["algorithm"].update(group_size=1), "group_size must be at least 2"),
        (lambda t: t["agents"]["caller"].update(roles=["verifier"]) or t["agents"].pop("verifier"), "no agent plays role"),
    ],
)
def test_bad_spec_names_the_field(smoke_tree, mutate, field):
    mutate(smoke_tree)
    with pytest.raises(UserError) as err:
        parse_spec(smoke_tree, "exp.yaml")
    message = str(err.value)
    assert message.startswith("exp.yaml: ")
    assert field in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "empty"),
        ("name: [unclosed\n", "YAML syntax error"),
        ("- a\n- b\n", "mapping"),
        (b"\xff\xfe\x00junk", "not a text file"),
    ],
)
def test_unreadable_files(tmp_path, text, expected):
    path = tmp_path / "spec.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UserError, match=expected):
        load_spec(path)


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="no such spec file"):
        load_spec(tmp_path / "nope.yaml")


def test_overrides_parse_yaml_values(smoke_tree):
    apply_overrides(smoke_tree, ["train.steps=7", "algorithm.lr=0.5", "env.options.format_bonus=0"])
    spec = parse_spec(smoke_tree)
    assert (spec.train.steps, spec.algorithm.lr, spec.env.options["format_bonus"]) == (7, 0.5, 0)


def test_overrides_index_lists():
    tree = {"distill": [{"every": 5}], "train": {"steps": 1}}
    apply_overrides(tree, ["distill.0.every=1", "train.steps=2", "a.a=3"])
    assert tree == {"distill": [{"every": 1}], "train": {"steps": 2}, "a": {"a": 3}}
    for bad in ("distill.3.every=1", "distill.x=1", "train.steps.deeper=1"):
        with pytest.raises(UserError, match="--set"):
            apply_overrides(tree, [bad])


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pettingllms_cli", *args], capture_output=True, text=True, timeout=120)


def test_cli_exit_code_2_one_line_no_traceback(tmp_path, smoke_tree):
    smoke_tree["agents"]["caller"]["roles"] = ["planner"]
    bad = _write(tmp_path, smoke_tree)
    for command in (["validate", str(bad)], ["train", str(bad), "--out", str(tmp_path / "run")]):
        result = _cli(*command)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert "agents.caller.roles" in result.stderr
    assert not (tmp_path / "run").exists(), "a bad spec must fail before the run directory is made"


def test_cli_validate_and_schema():
    ok = _cli("validate", str(EXPERIMENTS / "smoke.yaml"))
    assert ok.returncode == 0 and "ok" in ok.stdout
    schema = _cli("schema")
    assert schema.returncode == 0
    assert "group_size" in schema.stdout and "PPO clip epsilon" in schema.stdout


@pytest.mark.parametrize(
    ("options", "named"),
    [({"opz": "+"}, "env.options.opz"), ({"format_bonus": "lots"}, "env.options.format_bonus"), ({"ops": ""}, "env.options.ops")],
)
def test_env_options_are_typed_per_env(smoke_tree, options, named):
    smoke_tree["env"]["options"] = options
    with pytest.raises(UserError) as err:
        parse_spec(smoke_tree)
    assert named in str(err.value) and "takes: ops, format_bonus" in str(err.value)


def test_a_misspelled_env_option_is_exit_2_naming_it(tmp_path, smoke_tree):
    smoke_tree["env"]["options"] = {"format_bonsu": 0.1}
    result = _cli("validate", str(_write(tmp_path, smoke_tree)))
    assert result.returncode == 2 and "env.options.format_bonsu" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_split_spec_keeps_every_name_where_callers_import_it():
    """The sections live in their own modules; the package and spec.experiment still give every public name."""
    import pettingllms_cli.spec as spec
    import pettingllms_cli.spec.experiment as experiment

    for name in spec.__all__:
        assert getattr(spec, name) is getattr(experiment, name)
    for name in ("read_yaml", "chat_template_problem", "model_problem", "apply_overrides", "Experiment"):
        assert callable(getattr(experiment, name))
    package = Path(spec.__file__).parent
    long = {p.name: n for p in package.glob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, f"spec modules past 400 lines: {long}"
