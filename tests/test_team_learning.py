"""Team learning (issue 4): difference credit, role assignment, distillation, group shapes, invariances, bad input."""

from __future__ import annotations

import copy

import pytest
import torch

from pettingllms_cli.algorithms.grpo import group_advantages
from pettingllms_cli.algorithms.optim import make_optimizers
from pettingllms_cli.algorithms.update import update
from pettingllms_cli.analysis.rollout_settings import role_assigner
from pettingllms_cli.envs.base import Problem
from pettingllms_cli.envs.math_tool import MathToolEnv
from pettingllms_cli.errors import UserError
from pettingllms_cli.models.tiny import tiny_model
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.rollout.roles import rotation
from pettingllms_cli.spec import parse_spec
from pettingllms_cli.training.update_settings import distill_settings, optim_settings, update_settings
from tests.conftest import run_cli
from tests.samples import caller_sample
from tests.scripted import ScriptedTeam as Scripted
from tests.scripted import parallel_rollout, tree_rollout

PROBLEMS = [
    Problem("p0", "Tom has 12 apples and buys 7 more. How many apples?", 19.0, {"expression": "12+7"}),
    Problem("p1", "Mia has 30 cups and breaks 4. How many cups are left?", 26.0, {"expression": "30-4"}),
]


def _math_role(messages: list[dict]) -> str:
    return "verifier" if messages[0]["content"].startswith("Check") else "tool_caller"


def ScriptedTeam(script):  # noqa: N802  the math team of these tests
    return Scripted(script, _math_role)


def copy_calculator(messages: list[dict]) -> str:
    """A verifier that states the calculator's result (nothing when there is none)."""
    calc = messages[1]["content"].rsplit("Calculator: ", 1)[-1]
    return calc.rsplit("= ", 1)[-1] if "= " in calc else ""


def _spec(tree: dict, **changes) -> object:
    tree = copy.deepcopy(tree)
    for dotted, value in changes.items():
        node = tree
        *keys, last = dotted.split("__")
        for key in keys:
            node = node.setdefault(key, {})
        node[last] = value
    return parse_spec(tree)


def _envs(spec):
    return [MathToolEnv(p, "multi", spec.env.max_turns, spec.env.options) for p in PROBLEMS]


# Right/garbage call; the verifier (and its play-out, candidate 0) copies the calculator, or says 5.
CALLS = {"tool_caller": ['12+7"}}</tool_call>', "xx"], "verifier": [copy_calculator, "5"]}


# --- (a) hierarchical reward -------------------------------------------------------------------
def test_difference_credit_gives_zero_to_an_action_that_changes_nothing(smoke_tree):
    spec = _spec(smoke_tree, reward__credit="difference", env__max_turns=1, algorithm__group_size=2)
    samples = tree_rollout(ScriptedTeam(CALLS), spec, _envs(spec)[:1], k=2).samples
    good, garbage = [s for s in samples if s.role == "tool_caller"]
    assert good.team_reward == 1.0 and good.local_reward == 1.0  # the verifier's play-out turned the right call into success
    assert garbage.team_reward == 0.0 and garbage.local_reward == 0.0  # no better than a no-op
    assert garbage.env_local_reward == pytest.approx(-0.1)  # the env's own local term is kept for logging
    copied, five = [s for s in samples if s.role == "verifier"]  # after the right call, the best branch
    assert (copied.team_reward, copied.local_reward) == (1.0, 1.0)  # a no-op answer would have failed
    assert (five.team_reward, five.local_reward) == (0.0, 0.0)  # wrong: no better than the no-op
    w = spec.reward
    assert all(s.reward == pytest.approx(w.team_weight * s.team_reward + w.local_weight * s.local_reward) for s in samples)


def test_credit_none_keeps_the_env_local_reward(smoke_tree):
    spec = _spec(smoke_tree, env__max_turns=1, algorithm__group_size=2)
    samples = tree_rollout(ScriptedTeam(CALLS), spec, _envs(spec)[:1], k=2).samples
    garbage = [s for s in samples if s.role == "tool_caller"][1]
    assert garbage.local_reward == pytest.approx(-0.1) == garbage.env_local_reward


def test_every_env_accepts_the_noop_action():
    """Every role of every env and layout takes the empty action (difference credit's no-op) without error, and it
    earns no team reward by itself. What the team reaches after it, once later roles act, is the play-out's
    business: tests/test_credit.py checks that a planner's choice against the no-op gets credit.

    The showcase `team` layouts define a reader's no-op as the team without a reader (envs/review.py): the call
    that ran stands as the answer. After correct earlier roles that answer is right, so it earns what accepting
    it earns, and never more."""
    from pettingllms_cli.envs import ENVS

    hands_in = {("function_call_v0", "team", "reader"), ("math_tool_v0", "team", "reader")}
    for name, env_cls in sorted(ENVS.items()):
        problem = env_cls.load_problems("generated", "test", 0, 1, {})[0]
        for layout in env_cls.layouts:
            env = env_cls(problem, layout, 1, {})
            for role in env.roles:  # later roles see the earlier roles' correct actions
                res = env.copy().step(role, "")
                if (name, layout, role) in hands_in:
                    assert res.team_reward == env.copy().step(role, env.reference_action(role)).team_reward == 1.0
                else:
                    assert res.team_reward == 0.0, (name, layout, role)
                env.step(role, env.reference_action(role))


# --- (b) role assignment -----------------------------------------------------------------------
def test_rotate_gives_each_agent_each_role_over_len_roles_episodes():
    roles, agents = ("planner", "coder", "tester"), ["a", "b"]
    plays = {(r, a) for e in range(len(roles)) for r, a in rotation(roles, agents, e).items()}
    assert plays == {(r, a) for r in roles for a in agents}


def test_rotate_in_rollouts_switches_who_acts(smoke_tree):
    spec = _spec(smoke_tree, assignment={"mode": "rotate"}, env__max_turns=1, algorithm__group_size=2)
    assignment = role_assigner(spec).assign(0, 2)
    assert assignment == [{"tool_caller": "caller", "verifier": "verifier"}, {"tool_caller": "verifier", "verifier": "caller"}]
    samples = tree_rollout(ScriptedTeam(CALLS), spec, _envs(spec), k=2, assignment=assignment).samples
    played = {(s.problem_id, s.role, s.agent) for s in samples}
    assert ("p0", "tool_caller", "caller") in played and ("p1", "tool_caller", "verifier") in played
    assert ("p1", "verifier", "caller") in played


def test_adaptive_tries_everyone_then_prefers_the_successful_agent(smoke_tree):
    spec = _spec(smoke_tree, assignment={"mode": "adaptive", "ucb_c": 0.1})
    roles = role_assigner(spec)
    first = roles.assign(0, 2)
    assert {a["tool_caller"] for a in first} == {"caller", "verifier"}  # untried agents go first
    for _ in range(10):
        batch = [{"tool_caller": "caller", "verifier": "verifier"}, {"tool_caller": "verifier", "verifier": "caller"}]
        roles.record(batch, [1.0, 0.0])
    assert all(a == {"tool_caller": "caller", "verifier": "verifier"} for a in roles.assign(1, 3))
    restored = role_assigner(spec)
    restored.load_state_dict(roles.state_dict())
    assert restored.assign(2, 3) == roles.assign(2, 3)


# --- tree vs parallel group shapes (docs/design.md) ------------------------------------------------
def test_tree_groups_are_problem_role_turn_and_parallel_groups_problem_agent(smoke_tree):
    spec = _spec(smoke_tree, env__max_turns=1, algorithm__group_size=3)
    script = {"tool_caller": ["xx"] * 3, "verifier": ["5"] * 3}
    tree = tree_rollout(ScriptedTeam(script), spec, _envs(spec), k=3).samples
    sizes = {}
    for s in tree:
        sizes[s.group] = sizes.get(s.group, 0) + 1
    assert sizes == {(p, r, 0): 3 for p in ("p0", "p1") for r in ("tool_caller", "verifier")}
    par = parallel_rollout(ScriptedTeam(script), spec, _envs(spec), k=3).samples
    sizes = {}
    for s in par:
        sizes[s.group] = sizes.get(s.group, 0) + 1
    assert sizes == {(p, a): 3 for p in ("p0", "p1") for a in ("caller", "verifier")}


# --- invariances on the tiny model ---------------------------------------------------------------
def _step(tree: dict, seed: int = 3):
    """One rollout + update of a fresh team; returns (actions, rewards, losses)."""
    spec = parse_spec(tree)
    team = Team(spec)
    torch.manual_seed(seed)
    rollout = tree_rollout(team, spec, _envs(spec), spec.algorithm.group_size, assignment=role_assigner(spec).assign(0, 2))
    adv = group_advantages(torch.tensor([s.reward for s in rollout.samples]), [s.group for s in rollout.samples]).tolist()
    stats = update(team, make_optimizers(team, optim_settings(team.spec)), rollout.samples, adv, update_settings(team.spec))
    actions = sorted((s.problem_id, s.role, s.agent, s.text) for s in rollout.samples)
    return actions, sorted(s.reward for s in rollout.samples), {a: st.loss for a, st in stats.items()}, rollout, adv


def test_shared_and_per_agent_give_identical_step0_losses(smoke_tree):
    small = _spec(smoke_tree, env__max_turns=1, algorithm__group_size=2, algorithm__kl_coef=0.0).model_dump()
    _, _, per_agent_losses, rollout, adv = _step(small)
    shared = parse_spec({**small, "specialization": "shared"})
    team = Team(shared)
    shared_losses = {
        a: st.loss
        for a, st in update(
            team, make_optimizers(team, optim_settings(team.spec)), rollout.samples, adv, update_settings(team.spec)
        ).items()
    }
    assert per_agent_losses.keys() == shared_losses.keys()
    for agent in per_agent_losses:
        assert shared_losses[agent] == pytest.approx(per_agent_losses[agent], abs=1e-6)


def test_agent_order_in_the_yaml_does_not_change_results(smoke_tree):
    tree = _spec(smoke_tree, env__max_turns=1, algorithm__group_size=2, assignment={"mode": "rotate"}).model_dump()
    flipped = {**tree, "agents": dict(reversed(list(tree["agents"].items())))}
    assert list(flipped["agents"]) != list(tree["agents"])
    a, b = _step(tree), _step(flipped)
    assert a[:3] == b[:3]


# --- (c) separate bases, (e) distillation across tokenizers ----------------------------------------
def _hetero_tree(smoke_tree) -> dict:
    tree = copy.deepcopy(smoke_tree)
    tree["models"] = {"llama": {"source": "tiny-llama"}, "qwen": {"source": "tiny-qwen2"}}
    tree["agents"]["caller"]["model"] = "llama"
    tree["agents"]["verifier"]["model"] = "qwen"
    tree["specialization"] = "separate"
    tree["distill"] = [{"source": "caller", "targets": ["verifier"], "top_k": 2, "weight": 1.0}]
    return tree


def test_separate_gives_each_agent_its_own_base(smoke_tree):
    same = copy.deepcopy(smoke_tree)
    same["specialization"] = "separate"
    team = Team(parse_spec(same))
    assert set(team.models) == {"caller", "verifier"} and team.model_of("caller") is not team.model_of("verifier")
    assert "model_memory_mb/caller" in team.memory_mb()


def test_distillation_lowers_the_targets_nll_on_the_sources_trajectories(smoke_tree):
    from pettingllms_cli.algorithms.distill import distill, nll

    spec = parse_spec(_hetero_tree(smoke_tree))
    team = Team(spec)
    assert team.tokenizer_of("caller") is not team.tokenizer_of("verifier")
    env = _envs(spec)[0]
    obs = env.observe("tool_caller")
    texts = [obs[-1]["content"] + '12+7"}}</tool_call>', obs[-1]["content"] + "xx"]
    samples = [
        caller_sample(
            group=("p0",), completion=torch.tensor([1]), text=t, reward=r, team_reward=r, messages=obs, team_success=True
        )
        for t, r in zip(texts, (1.0, 0.5), strict=True)
    ]  # team_success: distillation imitates only samples after which the team succeeded
    before = nll(team, "verifier", samples)[0].item()
    optimizers = make_optimizers(team, optim_settings(team.spec))
    for step in range(3):
        losses = distill(team, optimizers, samples, step, distill_settings(team.spec))
    after = nll(team, "verifier", samples)[0].item()
    assert set(losses) == {"distill_loss/verifier"}
    assert after < before


# --- (d) 4-bit ----------------------------------------------------------------------------------------
def test_nf4_base_is_smaller_and_trains(smoke_tree):
    pytest.importorskip("bitsandbytes")
    tree = _spec(smoke_tree, env__max_turns=1, algorithm__group_size=2, algorithm__kl_coef=0.0).model_dump()
    tree["models"]["tiny"]["quantization"] = "nf4"
    _, _, losses, _, _ = _step(tree)
    team = Team(parse_spec(tree))
    full = Team(parse_spec({**tree, "models": {"tiny": {"source": "tiny-llama"}}}))
    assert team.memory_mb()["model_memory_mb/tiny"] < full.memory_mb()["model_memory_mb/tiny"]
    assert all(torch.isfinite(torch.tensor(v)) for v in losses.values())


def test_nf4_adapters_still_learn_after_sampling(smoke_tree):
    """Sampling (eval mode, no grad) must not change how a 4-bit base computes: every LoRA layer gets a gradient after it."""
    pytest.importorskip("bitsandbytes")
    tree = copy.deepcopy(smoke_tree)
    tree["models"]["tiny"]["quantization"] = "nf4"
    team = Team(parse_spec(tree))
    prompt = team.encode("caller", [{"role": "user", "content": "What is 2+3?"}])
    before = team.sample("caller", [prompt], 2, 4, 1.0, greedy=True)[0][0]
    model = team.activate("caller")
    ids = torch.tensor([prompt + before.tolist()])
    model.train()
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    adapter = f".{team.spec.adapter_of('caller')}."
    missing = [n for n, p in model.named_parameters() if p.requires_grad and adapter in n and p.grad is None]
    assert not missing, missing[:3]
    assert team.sample("caller", [prompt], 2, 4, 1.0, greedy=True)[0][0].tolist() == before.tolist()


# --- bad input, caught before weights load -----------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"distill": [{"source": "caller", "targets": ["ghost"]}]}, "no agent 'ghost'"),
        ({"distill": [{"source": "caller", "targets": ["caller"]}]}, "cannot distil into itself"),
        ({"models": {"tiny": {"source": "gemma3-270m"}}}, "no chat template"),
        ({"models": {"tiny": {"source": "tiny-llama", "prompt_template": "Q: {question}"}}}, "{conversation}"),
    ],
)
def test_bad_team_options_are_caught_by_the_spec(smoke_tree, changes, message):
    with pytest.raises(UserError) as err:
        parse_spec({**smoke_tree, **changes})
    assert message in str(err.value)


def test_adaptive_with_one_agent_is_refused(smoke_tree):
    tree = copy.deepcopy(smoke_tree)
    tree["env"]["layout"] = "single"
    tree["agents"] = {"solo": {"model": "tiny", "roles": ["solver"]}}
    tree["assignment"] = {"mode": "adaptive"}
    with pytest.raises(UserError, match="at least two agents"):
        parse_spec(tree)


def test_nf4_without_bitsandbytes_is_refused(smoke_tree, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a))
    tree = copy.deepcopy(smoke_tree)
    tree["models"]["tiny"]["quantization"] = "nf4"
    with pytest.raises(UserError, match="needs bitsandbytes"):
        parse_spec(tree)


def test_nf4_on_a_model_bitsandbytes_cannot_quantize_is_refused_by_validate(tmp_path, smoke_tree, monkeypatch, capsys):
    """A pre-quantized checkpoint is refused from its config.json alone: the folder holds no weights at all."""
    import json

    import yaml
    from transformers import GPT2Config

    tiny_model("tiny-llama")[0].config.save_pretrained(tmp_path / "gptq")
    config = json.loads((tmp_path / "gptq" / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (tmp_path / "gptq" / "config.json").write_text(json.dumps(config))
    GPT2Config(n_layer=1, n_embd=32, n_head=2).save_pretrained(tmp_path / "gpt2")  # Conv1D layers: quantizable

    def validate(folder: str) -> int:
        tree = copy.deepcopy(smoke_tree)
        tree["models"]["tiny"] = {"source": str(tmp_path / folder), "quantization": "nf4"}
        (tmp_path / "exp.yaml").write_text(yaml.safe_dump(tree))
        return run_cli(["validate", str(tmp_path / "exp.yaml")], monkeypatch)

    assert validate("gptq") == 2
    assert "already quantized (gptq); use quantization: none" in capsys.readouterr().err
    assert validate("gpt2") == 0


def test_a_model_without_chat_template_and_prompt_template_fails_at_load(tmp_path):
    from pettingllms_cli.models.loader import load_model
    from pettingllms_cli.spec import ModelSpec

    model, tokenizer = tiny_model("tiny-llama")
    tokenizer.chat_template = None
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(UserError, match="no chat template") as refused:
        load_model(ModelSpec(source=str(tmp_path)))
    _, tok = load_model(ModelSpec(source=str(tmp_path), prompt_template="{conversation}\nassistant: "))
    assert tok.chat_template is None
    from pettingllms_cli.spec.experiment import chat_template_problem

    assert str(refused.value) == chat_template_problem(ModelSpec(source=str(tmp_path)), False)  # validate's check, at load


def test_nf4_has_one_check_for_nothing_to_quantize():
    """The check `validate` runs on the meta-device model is the one `load_model` runs on the loaded one."""
    from pettingllms_cli.models.loader import nf4_layers_problem

    class HeadOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8)

        def get_output_embeddings(self):
            return self.head

    assert "has no nn.Linear layer bitsandbytes can quantize" in nf4_layers_problem(HeadOnly(), "head-only")
    assert nf4_layers_problem(tiny_model("tiny-llama")[0], "tiny-llama") is None


def test_eval_plays_the_best_assignment_found(smoke_tree):
    """`best()`: static owners until a role has history; then the agent with the best recent success, no exploration."""
    spec = _spec(smoke_tree, assignment={"mode": "rotate"})
    roles = role_assigner(spec)
    assert roles.best() == spec.role_owner()  # nothing played yet
    swapped = {"tool_caller": "verifier", "verifier": "caller"}
    roles.record([swapped, spec.role_owner()], [1.0, 0.0])
    assert roles.best() == swapped
    static = role_assigner(_spec(smoke_tree))
    static.record([swapped], [1.0])
    assert static.best() == spec.role_owner()  # static runs always evaluate their own roles


def test_ucb_counts_the_same_window_as_its_means(smoke_tree):
    """a: 10 episodes, the last 2 all successes; b: 2 episodes, one success. Over the window both have n = 2,
    so a's better mean wins; counting a's 10 all-time episodes would shrink its bonus and pick b."""
    spec = _spec(smoke_tree, assignment={"mode": "adaptive", "ucb_c": 1.0, "window": 2})
    roles = role_assigner(spec)
    a_plays = {"tool_caller": "caller", "verifier": "verifier"}
    b_plays = {"tool_caller": "verifier", "verifier": "caller"}
    roles.record([a_plays] * 8, [0.0] * 8)
    roles.record([a_plays] * 2 + [b_plays] * 2, [1.0, 1.0, 1.0, 0.0])
    assert roles.tries["caller/tool_caller"] == 10 and len(roles.history["caller/tool_caller"]) == 2
    assert roles.assign(0, 1)[0]["tool_caller"] == "caller"
