"""An env defined outside the package (here, in this test module) trains through `env.name: module:Class`, and a
path that does not import or names no env class is one line, exit 2 (issue 30 item 5; docs/envs.md, "Your own env")."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pettingllms_cli.envs import ENVS
from pettingllms_cli.envs.base import Outcome, Problem, TurnEnv
from pettingllms_cli.envs.checker import check_env
from pettingllms_cli.spec import parse_spec
from tests.conftest import FAST

ROOT = Path(__file__).resolve().parents[1]
PATH = "tests.test_own_env:EchoEnv"


class EchoEnv(TurnEnv):
    """Say the number: a reader reads it out, a writer writes it; solved when the writer's text is the number."""

    name = "echo_v0"
    layouts = {"multi": ("reader", "writer"), "single": ("writer",)}

    def observe(self, role: str) -> list[dict[str, str]]:
        said = "".join(f"\n{t['role']}: {t['text']}" for t in self.transcript)
        return [{"role": "user", "content": f"You are the {role}. The number is {self.problem.question}.{said}"}]

    def _act(self, role: str, text: str) -> Outcome:
        solved = role == "writer" and text.strip() == str(self.problem.answer)
        return Outcome(local_reward=float(solved), team_reward=float(solved), solved=solved)

    def reference_action(self, role: str) -> str:
        return str(self.problem.answer)

    def corrupted_actions(self, role: str) -> list[str]:
        return [str(self.problem.answer + 1)] if role == "writer" else []

    @classmethod
    def load_problems(cls, data: str, split: str, seed: int, n: int, options: dict | None = None) -> list[Problem]:
        rng = random.Random(f"{seed}-{split}")
        numbers = [rng.randrange(10, 99) for _ in range(n)]
        return [Problem(id=f"{split}-{i}", question=str(x), answer=x) for i, x in enumerate(numbers)]


def spec_tree(name: str) -> dict:
    tree = yaml.safe_load((ROOT / "experiments" / "smoke.yaml").read_text())
    tree["env"] = {"name": name, "layout": "multi", "data": "generated", "max_turns": 1, "eval_problems": 1}
    tree["agents"] = {
        "reader": {"model": "tiny", "roles": ["reader"], "lora": {"r": 4, "alpha": 8}},
        "writer": {"model": "tiny", "roles": ["writer"], "lora": {"r": 4, "alpha": 8}},
    }
    return tree


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "pettingllms_cli", *args], cwd=ROOT, env=env, capture_output=True, text=True)


def test_import_path_resolves_to_the_class_and_passes_the_checker() -> None:
    spec = parse_spec(spec_tree(PATH))
    assert ENVS[spec.env.name] is EchoEnv
    report = check_env(EchoEnv, limit=2)
    assert report.ok and report.passed > 0, report.failures


def test_env_from_a_test_module_trains_one_step(tmp_path: Path) -> None:
    spec_file = tmp_path / "echo.yaml"
    spec_file.write_text(yaml.safe_dump(spec_tree(PATH)))
    sets = [a for s in FAST for a in ("--set", s)]
    done = cli("train", str(spec_file), "--out", str(tmp_path / "run"), "--max-steps", "1", *sets)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1] and {"loss/reader", "loss/writer"} <= rows[0].keys()


def test_validate_and_envs_check_take_an_import_path(tmp_path: Path) -> None:
    spec_file = tmp_path / "echo.yaml"
    spec_file.write_text(yaml.safe_dump(spec_tree(PATH)))
    assert cli("validate", str(spec_file)).returncode == 0
    checked = cli("envs", "check", PATH, "--limit", "2")
    assert checked.returncode == 0 and "0 failed" in checked.stdout, checked.stdout + checked.stderr


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("no_such_pkg.envs:MyEnv", "module 'no_such_pkg.envs' does not import (ModuleNotFoundError"),
        ("tests.test_own_env:Missing", "has no 'Missing'"),
        ("tests.test_own_env:spec_tree", "is not an env class"),
        ("tests.test_own_env:Problem", "is not an env class"),
    ],
)
def test_bad_import_path_is_one_line_exit_2(tmp_path: Path, name: str, says: str) -> None:
    spec_file = tmp_path / "bad.yaml"
    spec_file.write_text(yaml.safe_dump(spec_tree(name)))
    for done in (cli("validate", str(spec_file)), cli("envs", "check", name)):
        err = done.stderr.strip()
        assert done.returncode == 2 and len(err.splitlines()) == 1 and says in err and name in err, err
        assert "Traceback" not in err


def test_entry_point_names_an_env_like_a_builtin(monkeypatch) -> None:
    from importlib.metadata import EntryPoint

    from pettingllms_cli.envs import registry

    points = [EntryPoint(name="echo_v0", value=PATH, group=registry.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(registry, "entry_points", lambda group: [p for p in points if p.group == group])
    envs = registry.EnvRegistry(dict(ENVS))
    assert envs.entry_point_names() == ["echo_v0"]
    assert envs["echo_v0"] is EchoEnv and envs.resolved == {"echo_v0": EchoEnv}  # loaded on first lookup, then kept
    assert "echo_v0" not in envs and sorted(envs) == sorted(ENVS)  # iterating lists the built-ins only
    with pytest.raises(KeyError, match="unknown env 'echo_v1'"):
        envs["echo_v1"]
