"""`reward.balance_verdicts`: a judge that gives one verdict whatever the case gains nothing in expectation.

The showcase's judges collapsed to "No" (README "Results"): most sampled calls deserve to be sent back, so a
judge that cannot yet tell cases apart is pushed to "No" more often than to "Yes". These tests check that judged
actions carry the verdict the facts called for, that weighting by those cases cancels the pushes of a constant
verdict while keeping those of a right one, and that the counts survive a checkpoint.
"""

from __future__ import annotations

import json

import torch

from pettingllms_cli.analysis.budget import check_equal_arms
from pettingllms_cli.envs.function_call import FunctionCallEnv
from pettingllms_cli.envs.review import DUE, judged
from pettingllms_cli.rollout.records import Sample
from pettingllms_cli.spec import parse_spec
from pettingllms_cli.training.advantages import compute_advantages, tally_verdicts
from pettingllms_cli.training.checkpoint import STATE_FILE
from pettingllms_cli.training.loop import train
from tests.samples import caller_sample
from tests.test_showcase_envs import calc, foreign_number, math_env, wrong_op


def test_judged_actions_carry_the_verdict_the_facts_called_for():
    cases = []
    for call, reader_due in ((lambda e: e.reference_action("planner"), True), (lambda e: calc(wrong_op(e)), False)):
        env = math_env()
        env.step("planner", call(env))
        cases.append((env.step("validator", "No.").info[DUE], True))  # valid either way: the question's numbers
        env = math_env()
        env.step("planner", call(env))
        env.step("validator", "Yes.")
        cases.append((env.step("reader", "Yes.").info[DUE], reader_due))
    env = math_env()
    env.step("planner", calc(foreign_number(env)))
    cases.append((env.step("validator", "Yes.").info[DUE], False))
    env = FunctionCallEnv(FunctionCallEnv.load_problems("generated", "train", 0, 1)[0], "team", 3)
    env.step("planner", env.reference_action("planner"))
    cases.append((env.step("validator", "Yes.").info[DUE], True))
    cases.append((env.step("reader", "No.").info[DUE], True))
    assert [got for got, _ in cases] == [want for _, want in cases]
    assert DUE not in math_env().step("planner", "").info  # not a judgement


def _judge_samples(due: list[bool]) -> list[Sample]:
    """A judge that cannot tell cases apart: in each case (group) one candidate says yes, the other no, paid as judged."""
    samples = []
    for g, d in enumerate(due):
        for said in (True, False):
            r = judged(said, d)
            samples.append(
                Sample(
                    agent="verifier",
                    role="validator",
                    turn=0,
                    problem_id=f"p{g}",
                    group=(f"p{g}", "validator", 0),
                    prompt=[1],
                    completion=torch.tensor([2]),
                    text="Yes." if said else "No.",
                    reward=r,
                    team_reward=0.0,
                    local_reward=r,
                    verdict_due=d,
                )
            )
    return samples


def _spec(smoke_tree: dict, balance: bool):
    return parse_spec({**smoke_tree, "reward": {**smoke_tree["reward"], "balance_verdicts": balance}})


def test_a_constant_verdict_gains_nothing_when_balanced_and_a_right_one_still_does(smoke_tree):
    due = [True, False, False, False]  # 1 call deserves to run, 3 to be sent back: "No" is right 3 times in 4
    for balance, push_to_yes in ((False, "negative"), (True, "zero")):
        spec = _spec(smoke_tree, balance)
        samples = _judge_samples(due)
        advantages, _ = compute_advantages(spec, samples, tally_verdicts(spec, {}, samples))
        yes = sum(a for s, a in zip(samples, advantages, strict=True) if s.text == "Yes.")
        assert (yes < -0.5) if push_to_yes == "negative" else abs(yes) < 1e-6, (balance, yes)
        right = [a for s, a in zip(samples, advantages, strict=True) if (s.text == "Yes.") == s.verdict_due]
        assert all(a > 0 for a in right)  # the verdict that follows the case is still reinforced in every case


def test_cases_add_up_over_steps_and_other_roles_are_untouched(smoke_tree):
    spec = _spec(smoke_tree, True)
    samples = _judge_samples([True, False])
    seen = tally_verdicts(spec, {"verifier": [0, 4]}, samples)
    assert seen == {"verifier": [2, 6]}  # this step's 2 + 0 judged actions due approval, 2 + 4 due sending back
    group = ("p9", "tool_caller", 0)
    plain = [
        caller_sample(problem_id="p9", group=group, text="x", reward=1.0, team_reward=1.0),
        caller_sample(problem_id="p9", group=group, text="y"),
    ]
    advantages, _ = compute_advantages(spec, plain, seen)
    assert [round(a, 3) for a in advantages] == [0.707, -0.707]  # GRPO's own advantages
    assert tally_verdicts(_spec(smoke_tree, False), {}, samples) == {}  # off: nothing counted


def test_a_lone_agent_and_a_balanced_team_are_an_equal_budget_pair():
    from pathlib import Path

    import yaml

    experiments = Path(__file__).resolve().parents[1] / "experiments"
    single = parse_spec(yaml.safe_load((experiments / "showcase_math_single.yaml").read_text()))
    team = parse_spec(yaml.safe_load((experiments / "showcase_math_team_balanced.yaml").read_text()))
    assert team.reward.balance_verdicts and not single.reward.balance_verdicts
    check_equal_arms([Path("single.yaml"), Path("team.yaml")], [single, team])  # a team-defining key: no error


def test_the_judges_counts_are_saved_with_each_checkpoint_and_resumed(smoke_tree, tmp_path):
    tree = {**smoke_tree, "reward": {**smoke_tree["reward"], "balance_verdicts": True}}
    tree["env"] = {"name": "math_tool_v0", "layout": "team", "data": "generated", "max_turns": 2, "eval_problems": 1}
    tree["agents"] = {
        r: {"model": "tiny", "roles": [r], "lora": {"r": 4, "alpha": 8}} for r in ("planner", "validator", "reader")
    }
    tree["algorithm"] = {**tree["algorithm"], "group_size": 2}
    tree["train"] = {**tree["train"], "steps": 1, "problems_per_step": 2, "max_new_tokens": 4, "checkpoint_every": 1}
    run = train(parse_spec(tree), tmp_path / "run")
    saved = torch.load(run / "checkpoints" / "step_1" / STATE_FILE, weights_only=False)
    assert set(saved["verdicts"]) <= {"validator", "reader"} and sum(saved["verdicts"]["validator"]) >= 2
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    approve, send_back = saved["verdicts"]["validator"]
    assert row["due_approve_frac/validator"] == round(approve / (approve + send_back), 6)  # one step: the same cases
    assert "due_approve_frac/planner" not in row
    tree["train"] = {**tree["train"], "steps": 2}  # resume: step 2 adds its judged actions to step 1's
    train(parse_spec(tree), tmp_path / "run", resume=True)
    resumed = torch.load(run / "checkpoints" / "step_2" / STATE_FILE, weights_only=False)["verdicts"]["validator"]
    assert resumed[0] >= approve and resumed[1] >= send_back and sum(resumed) > approve + send_back
