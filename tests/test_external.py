"""External rollouts: a program in this module plays each episode through the endpoint with the plain `openai` client.

Each recorded call lands in the episode whose base URL it used, with the token ids the sampler drew; a program that
raises or hangs fails its episode alone; a step of a program that calls one agent trains that agent's adapter only;
an import path that does not import is one line, exit 2, before any weights load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import openai
import pytest
import torch
import yaml

from pettingllms_cli.envs import ENVS
from pettingllms_cli.errors import UserError
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.spec import parse_spec
from pettingllms_cli.training.checkpoint import load_adapters
from tests.scripted import make_envs, parallel_rollout, tree_rollout

ROOT = Path(__file__).resolve().parents[1]
HERE = "tests.test_external"
MARKS: dict[str, list[str]] = {}  # episode mark -> the completion ids its program got back


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=60)


def marked_team(problem: dict, base_url: str) -> dict:
    """Two calls per episode, each carrying the episode's own mark; pauses so that episodes interleave."""
    c, mark = client(base_url), uuid.uuid4().hex[:8]
    first = c.chat.completions.create(model="caller", messages=[{"role": "user", "content": f"{mark} {problem['question']}"}])
    time.sleep(0.05)
    second = c.chat.completions.create(model="verifier", messages=[{"role": "user", "content": f"{mark} check"}])
    MARKS[mark] = [first.id, second.id]
    return {"reward": float(len(second.choices[0].message.content) % 2), "rewards": {first.id: 0.25}}


def caller_only(problem: dict, base_url: str) -> float:
    """One agent called; a reward that varies with what it wrote, so its groups carry signal."""
    reply = client(base_url).chat.completions.create(model="caller", messages=[{"role": "user", "content": problem["question"]}])
    return float(len(reply.choices[0].message.content) % 3)


def by_mode(problem: dict, base_url: str) -> str:
    """Raises, hangs or answers, as the problem's `mode` says; the answer goes to the built-in check."""
    mode = problem["meta"]["mode"]
    if mode == "raise":
        raise RuntimeError("the program broke")
    if mode == "hang":
        time.sleep(30)
    client(base_url).chat.completions.create(model="caller", messages=[{"role": "user", "content": problem["question"]}])
    return str(problem["answer"])  # right: the episode succeeds


def never_calls(problem: dict, base_url: str) -> float:
    return 1.0


def write_data(path: Path, modes: list[str]) -> Path:
    path.write_text("".join(json.dumps({"question": f"{i}+1", "answer": i + 1, "mode": m}) + "\n" for i, m in enumerate(modes)))
    return path


def spec_tree(program: str, data: Path, **options) -> dict:
    tree = yaml.safe_load((ROOT / "experiments" / "smoke.yaml").read_text())
    tree["env"] = {
        "name": "external",
        "data": str(data),
        "max_turns": 1,
        "eval_problems": 1,
        "options": {"program": f"{HERE}:{program}", **options},
    }
    tree["agents"] = {
        "caller": {"model": "tiny", "roles": ["caller"], "lora": {"r": 4, "alpha": 8}},
        "verifier": {"model": "tiny", "roles": ["verifier"], "lora": {"r": 4, "alpha": 8}},
    }
    tree["algorithm"] = {"rollout": "parallel", "group_size": 4, "kl_coef": 0.0, "lr": 1.0e-2}
    tree["train"] = {"steps": 1, "problems_per_step": 2, "max_new_tokens": 6, "checkpoint_every": 1}
    return tree


@pytest.fixture(scope="module")
def team():
    torch.set_num_threads(1)
    return Team(parse_spec(spec_tree("marked_team", ROOT / "experiments" / "smoke.yaml")))


def rollout_of(team: Team, tree: dict, split: str = "train", k: int = 4, n: int = 2):
    spec = parse_spec(tree)
    team.spec = spec  # same agents and bases: only env.options differ between these specs
    problems = ENVS["external"].load_problems(spec.env.data, split, spec.seed, n, spec.env.options)
    torch.manual_seed(0)
    return spec, parallel_rollout(team, spec, make_envs(spec, problems), k)


def test_eight_concurrent_episodes_each_keep_their_own_calls(team, tmp_path, monkeypatch):
    data = write_data(tmp_path / "d.jsonl", ["ok"] * 5)
    MARKS.clear()
    batches, sample_mixed = [], team.sample_mixed

    def counted(agents, prompts, *args, **kwargs):
        batches.append(len(prompts))
        return sample_mixed(agents, prompts, *args, **kwargs)

    monkeypatch.setattr(team, "sample_mixed", counted)
    spec, rollout = rollout_of(team, spec_tree("marked_team", data, concurrency=8))
    assert len(rollout.episodes) == 8 and len(MARKS) == 8
    assert sum(batches) == 16 and max(batches) > 1  # concurrent episodes' calls were sampled together (batcher.py)
    by_problem = {}
    for episode in rollout.episodes:
        ids = [t["call"] for t in episode.transcript]
        [mark] = [m for m, got in MARKS.items() if got == ids]  # the very calls its program made, in its order
        by_problem.setdefault(episode.id, []).append(mark)
    assert sorted(len(v) for v in by_problem.values()) == [4, 4]
    for s in rollout.samples:  # each sample's prompt is its own episode's: the mark its program wrote
        mark = s.messages[0]["content"].split()[0]
        assert mark in MARKS and s.problem_id in [p for p, marks in by_problem.items() if mark in marks]
        assert s.group == (s.problem_id, s.agent, 0)
        tokenizer = team.tokenizer_of(s.agent)
        rendered = tokenizer.apply_chat_template(s.messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        assert s.prompt == list(rendered) and team.decode(s.agent, s.completion) == s.text  # ids as sampled
    callers = [s for s in rollout.samples if s.agent == "caller"]
    assert len(callers) == 8 and all(s.local_reward == 0.25 for s in callers)
    assert all(s.reward == spec.reward.team_weight * s.team_reward + spec.reward.local_weight * 0.25 for s in callers)
    assert rollout.tokens == sum(len(s.completion) for s in rollout.samples)


def test_a_raising_and_a_hanging_episode_fail_alone(team, tmp_path, capfd):
    data = write_data(tmp_path / "d.jsonl", ["raise", "hang", "ok", "ok", "ok"])
    tree = spec_tree("by_mode", data, timeout=3, failure_reward=-2.0)
    spec = parse_spec(tree)
    team.spec = spec
    problems = ENVS["external"].load_problems(spec.env.data, "train", spec.seed, 3, spec.env.options)
    assert [p.meta["mode"] for p in problems] == ["raise", "hang", "ok"]
    began = time.monotonic()
    rollout = tree_rollout(team, spec, make_envs(spec, problems), k=1, greedy=True)  # evaluation's path
    assert time.monotonic() - began < 20  # the hang was given up after its timeout
    errors = {e.id: e.state["error"] for e in rollout.episodes}
    assert "RuntimeError: the program broke" in errors["d-1"] and "timed out after 3 s" in errors["d-2"]
    assert errors["d-3"] is None and [e.success for e in rollout.episodes] == [False, False, True]
    assert [s.problem_id for s in rollout.samples] == ["d-3"]  # the failed ones made no call
    assert "the program broke" in capfd.readouterr().err


def test_every_episode_failing_stops_the_step(team, tmp_path):
    data = write_data(tmp_path / "d.jsonl", ["ok"] * 5)
    with pytest.raises(UserError, match="every episode failed.*returned without calling"):
        rollout_of(team, spec_tree("never_calls", data))


def test_an_episode_not_running_gets_404(team, tmp_path):
    from pettingllms_cli.analysis.rollout_settings import rollout_settings
    from pettingllms_cli.rollout.chat import Completer
    from pettingllms_cli.rollout.external import Book
    from pettingllms_cli.rollout.gateway import ServerThread, make_app

    team.spec = parse_spec(spec_tree("marked_team", write_data(tmp_path / "d.jsonl", ["ok"] * 5)))
    with ServerThread(make_app(Completer(team), Book(rollout_settings(team.spec), 0, False))) as server:
        with pytest.raises(openai.NotFoundError, match="not running"):
            client(f"{server.url}/episodes/nope/v1").chat.completions.create(
                model="caller", messages=[{"role": "user", "content": "x"}]
            )


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "pettingllms_cli", *args], cwd=ROOT, env=env, capture_output=True, text=True)


def test_one_step_trains_only_the_agents_called(tmp_path):
    spec_file = tmp_path / "ext.yaml"
    spec_file.write_text(yaml.safe_dump(spec_tree("caller_only", write_data(tmp_path / "d.jsonl", ["ok"] * 5))))
    done = cli("train", str(spec_file), "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stdout + done.stderr
    spec = parse_spec(yaml.safe_load(spec_file.read_text()))
    initial, trained = Team(spec), Team(spec)
    load_adapters(trained, tmp_path / "run" / "checkpoints" / "step_1")
    for agent, moved in (("caller", True), ("verifier", False)):
        before, after = initial.params[agent], trained.params[agent]
        assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True)) == moved, agent
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["actions_total"] == 8 and "loss/caller" in row


def test_an_import_path_that_does_not_import_is_one_line_exit_2(tmp_path):
    spec_file = tmp_path / "bad.yaml"
    tree = spec_tree("x", write_data(tmp_path / "d.jsonl", ["ok"] * 5))
    tree["env"]["options"]["program"] = "no_such_pkg.team:run"
    spec_file.write_text(yaml.safe_dump(tree))
    done = cli("train", str(spec_file), "--out", str(tmp_path / "run"))
    err = done.stderr.strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1 and "no_such_pkg.team" in err and "does not import" in err
    assert not (tmp_path / "run").exists()  # refused before the run directory, let alone weights


def tiny_example(name: str, folder: Path, steps: int = 1) -> Path:
    """experiments/<name>.yaml on the tiny model at the smallest budget that trains."""
    tree = yaml.safe_load((ROOT / "experiments" / f"{name}.yaml").read_text())
    tree["models"] = {"smol": {"source": "tiny-llama"}}
    tree["env"] |= {"eval_problems": 2}
    tree["algorithm"] |= {"group_size": 2}
    tree["train"] |= {"steps": steps, "problems_per_step": 2, "max_new_tokens": 4, "eval_every": 1, "eval_subset": 2}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def test_the_openai_team_example_trains_a_step(tmp_path):
    done = cli("train", str(tiny_example("external_openai", tmp_path)), "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stdout + done.stderr
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["actions_total"] == 8 and {"loss/planner", "loss/caller"} <= row.keys()  # 2 problems x K=2 x 2 calls
    assert "external episode failed" not in done.stderr


def test_compare_runs_the_team_against_the_one_agent_program(tmp_path):
    """The one-agent program listed first: the budget is still the team's (two roles), as for built-in envs."""
    from pettingllms_cli.analysis.budget import reference_arm, roles_of
    from pettingllms_cli.spec import load_spec

    team, solo = tiny_example("external_openai", tmp_path), tiny_example("external_openai_single", tmp_path, steps=4)
    assert [roles_of(load_spec(p)) for p in (solo, team)] == [1, 2]
    assert reference_arm([load_spec(solo), load_spec(team)]) == 1
    out = tmp_path / "out"
    done = cli("compare", str(solo), str(team), "--seeds", "1", "--out", str(out), "--allow-unequal")
    assert done.returncode == 0, done.stdout + done.stderr
    spent = {}
    for name in ("external_openai", "external_openai_single"):
        rows = [json.loads(line) for line in (out / name / "seed0" / "metrics.jsonl").read_text().splitlines()]
        spent[name] = sum(r["actions_total"] for r in rows)
    assert spent == {"external_openai": 8, "external_openai_single": 8}  # the solver took 2 steps of 4 calls
    assert "actions_total" in (out / "compare.json").read_text()
