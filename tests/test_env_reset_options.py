"""`TurnEnv.reset(seed=...)` seeds the env's own randomness as PettingZoo's does, and envs read their options typed
(`opts`), each default written once in the env's `Options` (issue 31)."""

from __future__ import annotations

import pytest

from pettingllms_cli.envs import ENVS
from pettingllms_cli.envs.base import Outcome, Problem, TurnEnv
from pettingllms_cli.envs.code import CodeEnv
from pettingllms_cli.envs.function_call import FunctionCallEnv
from pettingllms_cli.envs.math_tool import CALL_PREFIX, MathToolEnv
from pettingllms_cli.envs.sokoban import SokobanEnv

DICE = Problem("d0", "Roll.", 0)


class DiceEnv(TurnEnv):
    """An env with randomness of its own: each episode opens with a die of a million faces."""

    name = "dice_test"
    layouts = {"single": ("roller",)}

    def _reset_task(self) -> None:
        self.face = self.rng.randint(1, 1_000_000)

    def observe(self, role: str) -> list:
        return [{"role": "user", "content": f"{self.problem.question} {self.face}"}]

    def _act(self, role: str, text: str) -> Outcome:
        return Outcome(0.0, 0.0)

    @classmethod
    def load_problems(cls, data: str, split: str, seed: int, n: int, options: dict | None = None) -> list[Problem]:
        return [Problem(f"{split}-{i}", "Roll.", 0) for i in range(n)]


def test_the_same_seed_gives_the_same_observations_and_another_seed_others():
    env = DiceEnv(DICE, "single")
    first, again, other = env.reset(seed=3), env.reset(seed=3), env.reset(seed=4)
    assert first == again and first != other
    assert DiceEnv(DICE, "single").reset(seed=3) == first  # a fresh env too


def test_without_a_seed_the_problem_seeds_the_env_and_resets_go_on():
    a, b = DiceEnv(DICE, "single"), DiceEnv(DICE, "single")
    assert a.observe("roller") == b.observe("roller")  # reproducible from the problem alone
    before = a.observe("roller")
    a.reset()
    assert a.observe("roller") != before  # an unseeded reset goes on along the stream; it does not restart it
    assert DiceEnv(Problem("d1", "Roll.", 0), "single").observe("roller") != b.observe("roller")


def test_the_pettingzoo_wrapper_passes_its_seed_to_the_env(monkeypatch):
    pytest.importorskip("pettingzoo")
    from pettingllms_cli.envs.pettingzoo_env import aec_env

    monkeypatch.setitem(ENVS.resolved, "dice_test", DiceEnv)
    seen = []
    for seed in (5, 5, 6):
        env = aec_env("dice_test", layout="single", problems=1)
        env.reset(seed=seed)
        seen.append(env.observe("roller"))
    assert seen[0] == seen[1] and seen[0] != seen[2]


@pytest.mark.parametrize("name", ["math_tool_v0", "function_call_v0", "sokoban_v0"])
def test_a_seed_leaves_the_built_in_envs_as_they_were(name):
    """The built-ins have no randomness of their own: a seeded reset shows what an unseeded one does."""
    env_cls = ENVS[name]
    problem = env_cls.load_problems("generated", "train", 0, 1)[0]
    layout = "multi" if "multi" in env_cls.layouts else next(iter(env_cls.layouts))
    env = env_cls(problem, layout)
    assert env.reset(seed=123) == env_cls(problem, layout).reset()


@pytest.mark.parametrize("env_cls", [MathToolEnv, FunctionCallEnv, CodeEnv, SokobanEnv])
def test_opts_are_the_options_model_with_its_defaults(env_cls):
    problem = env_cls.load_problems("generated", "train", 0, 1)[0]
    env = env_cls(problem, next(iter(env_cls.layouts)))
    assert env.opts == env_cls.Options()  # nothing given: every default, from the one place it is written


def test_options_given_or_changed_by_reset_are_what_the_env_reads():
    problem = Problem("p0", "Ann has 12 pens and buys 7 more. How many pens?", 19.0, {"expression": "12+7"})
    env = MathToolEnv(problem, "multi", 1, {"format_bonus": 1, "ops": "+"})
    assert env.opts.format_bonus == 1.0 and isinstance(env.opts.format_bonus, float)
    assert sum(m["role"] == "assistant" for m in env.observe("tool_caller")) == 2  # one worked example (+), the prefill
    assert env.step("tool_caller", CALL_PREFIX + '12+7"}}</tool_call>').local_reward == pytest.approx(0.1 + 1.0)
    env.reset(options={"format_bonus": 0.0})
    assert env.step("tool_caller", CALL_PREFIX + '12+7"}}</tool_call>').local_reward == pytest.approx(0.1)


def test_generated_problems_use_the_ops_option_default():
    from pettingllms_cli.envs.math_problems import OPS

    assert MathToolEnv.Options().ops == OPS
    assert MathToolEnv.load_problems("generated", "train", 0, 8) == MathToolEnv.load_problems("generated", "train", 0, 8, {})
