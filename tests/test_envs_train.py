"""One short training step per new env with the tiny random model, and every shipped experiment validates."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pettingllms_cli.envs import ENVS
from pettingllms_cli.spec import load_spec, parse_spec
from pettingllms_cli.training.loop import train

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
slow = pytest.mark.slow  # ~25-50 s each on 2 busy cores; CI runs them, the default quick run keeps two
# (env, layout): multi where a tool (sandbox, SQL) sits between the roles, single elsewhere to keep it fast.
CASES = [
    ("function_call_v0", "single"),
    ("sokoban_v0", "multi"),
    pytest.param("code_v0", "multi", marks=slow),
    pytest.param("sql_v0", "multi", marks=slow),
    pytest.param("sudoku4x4_v0", "single", marks=slow),
    pytest.param("plan_path_v0", "single", marks=slow),
]


def train_one_step(
    smoke_tree: dict, run_dir: Path, env: str, layout: str, max_turns: int, max_new_tokens: int
) -> tuple[list[str], list[dict]]:
    """One tiny-model training step of `env` under `layout` (an agent a role, K=2): its agents and metrics.jsonl rows."""
    tree = dict(smoke_tree)
    tree["env"] = {"name": env, "layout": layout, "data": "generated", "max_turns": max_turns, "eval_problems": 1}
    tree["agents"] = {
        role: {"model": "tiny", "roles": [role], "lora": {"r": 4, "alpha": 8}} for role in ENVS[env].layouts[layout]
    }
    tree["algorithm"] = {**tree["algorithm"], "group_size": 2}
    tree["train"] = {**tree["train"], "steps": 1, "problems_per_step": 1, "max_new_tokens": max_new_tokens}
    run = train(parse_spec(tree), run_dir)
    return list(tree["agents"]), [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(("env", "layout"), CASES)
def test_one_training_step(smoke_tree, tmp_path, env, layout):
    agents, rows = train_one_step(smoke_tree, tmp_path / "run", env, layout, max_turns=1, max_new_tokens=8)
    assert [r["step"] for r in rows] == [1]
    assert all(math.isfinite(rows[0][f"loss/{role}"]) for role in agents)
    assert rows[0]["tokens_generated"] > 0


@pytest.mark.parametrize(
    "path", sorted(p.name for p in EXPERIMENTS.glob("*_single.yaml")) + sorted(p.name for p in EXPERIMENTS.glob("*_multi.yaml"))
)
def test_shipped_experiment_validates(path):
    spec = load_spec(EXPERIMENTS / path)
    # A showcase arm is named for its side of the comparison (single, team), not its layout (solo, team).
    named = "single" if path.startswith("showcase_") and spec.env.layout == "solo" else spec.env.layout
    assert ENVS.resolve(spec.env.name).name == spec.env.name and named in path  # `external` resolves, unlisted
    header = (EXPERIMENTS / path).read_text().splitlines()[0]
    assert header == f"# pettingllms train experiments/{path}"
