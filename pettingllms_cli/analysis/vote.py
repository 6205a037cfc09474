"""A lone agent given the team's evaluation compute: K sampled episodes per problem, combined two ways.

- `majority`: the answer (the episode's last action, a tool call read as its name and arguments) that most of the K
  episodes gave, the earliest on a tie; scored as that answer scored. It needs no answer key, so a deployed agent can
  do it: this is the compute-matched baseline.
- `oracle`: solved when any of the K episodes was (pass@K). It reads the answer key to pick, which no deployed agent
  can: an upper bound, always labelled `best_of_k_oracle`, never presented as what the policy does.

`matched_k` picks K from the greedy evaluations of two arms: the fewest lone episodes per problem whose sampled actions
and tokens are both at least the team's, and at least `LEAST_K` so a vote can break a tie.
"""

from __future__ import annotations

import json
import math

from pettingllms_cli.tools.calls import ToolCall, parse_tool_call

LEAST_K = 3  # with 2 samples a vote is the first sample whenever they differ


def answer_key(record: dict) -> str:
    """What an episode answered, so two episodes that gave the same answer vote together: its last action, read as a
    tool call (name and arguments, key order ignored) when it holds one, else its whitespace-collapsed text.

    >>> a = {"actions": ['<tool_call>{"name": "f", "arguments": {"x": 1, "y": 2}}</tool_call>']}
    >>> b = {"actions": ['ok <tool_call>{"name":"f","arguments":{"y":2,"x":1}}</tool_call>']}
    >>> answer_key(a) == answer_key(b), answer_key({"actions": [" 42 \\n"]}), answer_key({"actions": []})
    (True, 'text:42', 'text:')
    """
    last = record["actions"][-1] if record["actions"] else ""
    call = parse_tool_call(last)
    if isinstance(call, ToolCall):
        return "call:" + json.dumps([call.name, call.arguments], sort_keys=True, default=str)
    return "text:" + " ".join(last.split())


def combine(samples: list[list[dict]]) -> dict:
    """Majority vote and any-of-K over K evaluations of the same problems, in the same order (`per_episode` records).

    >>> right = {"actions": ["a"], "success": True}
    >>> wrong = {"actions": ["b"], "success": False}
    >>> c = combine([[wrong, right], [right, right], [wrong, wrong]])  # problem 0: b, a, b; problem 1: a, a, b
    >>> c["majority_successes"], c["oracle_successes"], c["per_problem"][0]
    (1, 2, {'majority': False, 'oracle': True, 'votes': 2, 'k': 3})
    """
    if not samples or len({len(s) for s in samples}) != 1:
        raise ValueError("every evaluation must score the same problems")
    per_problem = []
    for records in zip(*samples, strict=True):
        keys = [answer_key(r) for r in records]
        winner = max(keys, key=lambda key: (keys.count(key), -keys.index(key)))  # most votes, then the earliest
        chosen = records[keys.index(winner)]
        per_problem.append(
            {
                "majority": bool(chosen["success"]),
                "oracle": any(r["success"] for r in records),
                "votes": keys.count(winner),
                "k": len(records),
            }
        )
    n = len(per_problem)
    majority = sum(p["majority"] for p in per_problem)
    oracle = sum(p["oracle"] for p in per_problem)
    return {
        "k": len(samples),
        "episodes": n,
        "majority_successes": majority,
        "majority_success": majority / n if n else 0.0,
        "oracle_successes": oracle,
        "oracle_success": oracle / n if n else 0.0,
        "per_problem": per_problem,
    }


def per_problem(evaluation: dict) -> tuple[float, float] | None:
    """Sampled actions and tokens per problem of one evaluation (evaluate's dict); None for one that kept neither.

    >>> per_problem({"per_episode": [{"actions": ["a", "b"]}, {"actions": ["c"]}], "tokens_generated": 30})
    (1.5, 15.0)
    """
    if "per_episode" not in evaluation or "tokens_generated" not in evaluation:
        return None
    episodes = evaluation["per_episode"]
    n = max(len(episodes), 1)
    return sum(len(e["actions"]) for e in episodes) / n, evaluation["tokens_generated"] / n


def matched_k(team: tuple[float, float], lone: tuple[float, float]) -> dict:
    """The K that gives the lone agent at least the team's evaluation compute per problem, and how it was matched;
    `team` and `lone` are (sampled actions, tokens) per problem of their greedy evaluations (`per_problem`).

    >>> matched_k((2.0, 50.0), (1.0, 12.0))["k"], matched_k((1.0, 5.0), (1.0, 12.0))["k"]
    (5, 3)
    """
    (team_actions, team_tokens), (lone_actions, lone_tokens) = team, lone
    need = max(team_actions / max(lone_actions, 1e-9), team_tokens / max(lone_tokens, 1e-9))
    k = max(LEAST_K, math.ceil(need - 1e-9))
    return {
        "k": k,
        "team_actions_per_problem": team_actions,
        "team_tokens_per_problem": team_tokens,
        "lone_actions_per_problem": lone_actions,
        "lone_tokens_per_problem": lone_tokens,
        "how": (
            f"K = {k}: the fewest lone episodes per problem whose sampled actions ({lone_actions:.2f} each) and tokens "
            f"({lone_tokens:.1f} each, greedy) reach the team's greedy evaluation ({team_actions:.2f} actions, "
            f"{team_tokens:.1f} tokens a problem), and at least {LEAST_K} so a vote can break a tie"
        ),
    }
