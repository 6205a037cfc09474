"""A SQL query of 20 rows of `zeroblob(1000000)` gives a training step that finishes (issue 25 item 3).

The writer's reply is forced to the hostile pass's query: its sampled tokens are that call, so the step trains on
it as on any sample. The reporter then reads the query's 20 MB result through the real team, samples, and both
adapters take a gradient step. Before results were capped, that prompt held megabytes and the forward pass tried to
allocate 40 GB.
"""

from __future__ import annotations

import json
import math

import torch

from pettingllms_cli.envs.sql_query import CALL_PREFIX, SqlEnv
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.spec import parse_spec
from pettingllms_cli.tools.calls import ToolCall, render_tool_call
from pettingllms_cli.training.loop import train

# SELECT comes from the writer's prefill; the subquery makes exactly 20 rows whatever the tables hold.
ZEROBLOBS = (
    "SELECT zeroblob(1000000) FROM (WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c LIMIT 20) SELECT n FROM c)"
)
CALL = render_tool_call(ToolCall("sql", {"query": ZEROBLOBS}))


class ForcedWriter(Team):
    """The real team, except that every writer sample is the zeroblob call; records each reporter prompt's length."""

    reporter_prompts: list[tuple[int, int | None, str]] = []  # (tokens, budget, the tool result it shows)

    def encode(self, agent, messages):
        ids = super().encode(agent, messages)
        if agent == "reporter":
            self.reporter_prompts.append((len(ids), self.prompt_budget(agent), messages[1]["content"]))
        return ids

    def sample_mixed(self, agents, prompts, k, max_new_tokens, temperature, greedy=False, seeds=None):
        sampled = super().sample_mixed(agents, prompts, k, max_new_tokens, temperature, greedy, seeds)
        forced = torch.tensor(self.tokenizer_of("writer")(CALL.removeprefix(CALL_PREFIX), add_special_tokens=False).input_ids)
        return [[forced.clone() for _ in row] if agent == "writer" else row for agent, row in zip(agents, sampled, strict=True)]


def test_the_query_returns_twenty_megabyte_blobs_cut_in_the_rendering():
    env = SqlEnv(SqlEnv.load_problems("generated", "train", 0, 1)[0], layout="multi")
    outcome = env.step("query_writer", CALL)
    assert outcome.info["rows"] == 20 and "1.0 MB blob cut" in env.observe("reporter")[1]["content"]


def test_a_training_step_on_twenty_zeroblobs_finishes_within_the_context(smoke_tree, tmp_path, monkeypatch):
    smoke_tree["env"] = {"name": "sql_v0", "layout": "multi", "data": "generated", "max_turns": 1, "eval_problems": 1}
    smoke_tree["agents"] = {
        "writer": {"model": "tiny", "roles": ["query_writer"], "lora": {"r": 4, "alpha": 8}},
        "reporter": {"model": "tiny", "roles": ["reporter"], "lora": {"r": 4, "alpha": 8}},
    }
    smoke_tree["algorithm"] = {**smoke_tree["algorithm"], "group_size": 2}
    smoke_tree["train"] = {**smoke_tree["train"], "steps": 1, "problems_per_step": 1, "checkpoint_every": 1}
    monkeypatch.setattr("pettingllms_cli.training.loop.Team", ForcedWriter)
    monkeypatch.setattr(ForcedWriter, "reporter_prompts", [])
    run = train(parse_spec(smoke_tree), tmp_path / "run")

    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["step"] == 1
    for agent in ("writer", "reporter"):
        assert isinstance(row[f"loss/{agent}"], float) and math.isfinite(row[f"loss/{agent}"])
    shown = [p for p in ForcedWriter.reporter_prompts if "blob cut" in p[2]]
    assert shown, "the reporter never saw the zeroblob result"
    assert all(budget is not None and tokens <= budget for tokens, budget, _ in shown)
