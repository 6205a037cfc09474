"""VllmSampler against the built-in sampler on SmolLM2 with two non-zero LoRA adapters (one vLLM engine for the module).

Run with vLLM installed: `make setup-vllm && .venv-vllm/bin/python -m pytest tests/test_vllm_sampler.py` (`make test`
does). Without vLLM every test but the install message is skipped, or fails under PETTINGLLMS_REQUIRE_VLLM=1 (conftest.py).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest
import torch

from pettingllms_cli.algorithms.offpolicy import logprob_gap
from pettingllms_cli.errors import UserError
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.policy.logprobs import group_logprobs, logprob_key, pad
from pettingllms_cli.policy.vllm_sampler import VllmSampler, vllm_problem
from pettingllms_cli.spec import load_spec
from pettingllms_cli.spec.sampler_settings import VllmSettings
from tests.conftest import EXPERIMENTS

ASK = [{"role": "user", "content": "Tom has 12 apples and buys 7 more. How many apples does Tom have?"}]
PREFILLED = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "The colour is"}]
GAP_TOLERANCE = 1e-3  # float32 on both sides: measured gaps are ~1e-5 nats per token


def perturb(team: Team, adapter: str, seed: int, scale: float = 0.02) -> None:
    """Add seeded noise to every LoRA weight of an adapter (B starts at zero: a fresh adapter is the base)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in team.params[adapter]:
            p.add_(torch.randn(p.shape, generator=g) * scale)


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Team, VllmSampler]]:
    team = Team(load_spec(EXPERIMENTS / "quickstart.yaml", []))  # caller + verifier on one SmolLM2 base
    for i, adapter in enumerate(sorted(team.params)):
        perturb(team, adapter, seed=i)
    sampler = VllmSampler(team, VllmSettings(enforce_eager=True, cpu_kv_cache_gib=0.5, max_model_len=1024))
    yield team, sampler
    sampler.close()


def prompts_of(team: Team) -> tuple[list[str], list[list[int]]]:
    agents = sorted(team.spec.agents)
    return agents, [team.encode(agents[0], ASK), team.encode(agents[1], PREFILLED)]


def test_without_vllm_the_problem_is_one_line_with_the_install_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    problem = vllm_problem()
    assert problem is not None and "\n" not in problem and "make setup-vllm" in problem and "pettingllms[vllm]" in problem
    with pytest.raises(UserError, match="vLLM is not installed"):
        VllmSampler(None)  # refused before the team is touched


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_sees_the_trainers_prompt_ids(pair):
    team, sampler = pair
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    agents, prompts = prompts_of(team)
    assert [sampler.encode(a, m) for a, m in zip(agents, [ASK, PREFILLED], strict=True)] == prompts
    engine = sampler.engines[team.spec.base_of(agents[0])]
    outs = engine.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], SamplingParams(max_tokens=1), use_tqdm=False)
    assert [list(o.prompt_token_ids) for o in outs] == prompts  # no BOS added, no re-tokenization


@pytest.mark.slow
@pytest.mark.vllm
def test_greedy_tokens_equal_the_builtin_samplers(pair):
    team, sampler = pair
    agents, prompts = prompts_of(team)
    hf = team.sample_mixed(agents, prompts, 2, 16, 1.0, greedy=True)
    got = sampler.sample_mixed(agents, prompts, 2, 16, 1.0, greedy=True)
    assert [[c.tolist() for c in row] for row in got] == [[c.tolist() for c in row] for row in hf]
    eos = team.tokenizer_of(agents[0]).eos_token_id
    assert all((c == eos).sum() <= 1 and (c[-1] == eos or len(c) == 16) for row in got for c in row)  # cut after EOS


@pytest.mark.slow
@pytest.mark.vllm
def test_after_an_update_vllm_follows_the_new_adapter(pair):
    team, sampler = pair
    agents, prompts = prompts_of(team)
    caller = agents[0]
    saved = [p.detach().clone() for p in team.params[caller]]
    try:
        check_updates_reach_vllm(team, sampler, agents, prompts, caller)
    finally:  # the caller's adapter as the other tests expect it (noise of 0.2 is larger than training makes)
        with torch.no_grad():
            for p, q in zip(team.params[caller], saved, strict=True):
                p.copy_(q)
        sampler.push_adapters([caller])


def check_updates_reach_vllm(team: Team, sampler: VllmSampler, agents: list[str], prompts: list[list[int]], caller: str) -> None:
    before = sampler.sample_mixed([caller], prompts[:1], 1, 16, 1.0, greedy=True)[0][0]
    old_request, old_folder = sampler.requests[caller], sampler.folders[caller]
    perturb(team, caller, seed=99, scale=0.2)  # what an optimizer step does, larger
    assert sampler.push_adapters(agents) == [caller]  # only the adapter that changed
    assert sampler.requests[caller].lora_int_id > old_request.lora_int_id and not old_folder.exists()
    after = sampler.sample_mixed([caller], prompts[:1], 1, 16, 1.0, greedy=True)[0][0]
    hf = team.sample_mixed([caller], prompts[:1], 1, 16, 1.0, greedy=True)[0][0]
    assert after.tolist() == hf.tolist() and after.tolist() != before.tolist()

    perturb(team, caller, seed=100, scale=0.2)  # changed and not pushed: the next sample pushes it first
    pushed_id = sampler.requests[caller].lora_int_id
    unpushed = sampler.sample_mixed([caller], prompts[:1], 1, 16, 1.0, greedy=True)[0][0]
    assert sampler.requests[caller].lora_int_id > pushed_id
    assert unpushed.tolist() == team.sample_mixed([caller], prompts[:1], 1, 16, 1.0, greedy=True)[0][0].tolist()


@pytest.mark.slow
@pytest.mark.vllm
def test_seeded_draws_do_not_depend_on_the_batch(pair):
    team, sampler = pair
    agents, prompts = prompts_of(team)
    together = sampler.sample_mixed(agents, prompts, 4, 12, 1.0, seeds=[11, 22])
    alone = sampler.sample_mixed(agents[1:], prompts[1:], 4, 12, 1.0, seeds=[22])
    swapped = sampler.sample_mixed(agents[::-1], prompts[::-1], 4, 12, 1.0, seeds=[22, 11])
    ids = lambda row: [c.tolist() for c in row]  # noqa: E731
    assert ids(together[1]) == ids(alone[0]) == ids(swapped[0]) and ids(together[0]) == ids(swapped[1])
    assert len({tuple(c) for c in ids(together[1])}) > 1  # the K samples of a prompt differ
    other = sampler.sample_mixed(agents[1:], prompts[1:], 4, 12, 1.0, seeds=[23])
    assert ids(other[0]) != ids(alone[0])


@pytest.mark.slow
@pytest.mark.vllm
def test_sampler_logprobs_match_the_trainers_recomputed_ones(pair):
    team, sampler = pair
    agents, prompts = prompts_of(team)
    temperature = 0.7  # the gap must hold after temperature scaling too (processed log-probs)
    sampler.take_logprobs()
    got = sampler.sample_mixed(agents, prompts, 4, 12, temperature, seeds=[5, 6])
    record = sampler.take_logprobs()
    for agent, prompt, row in zip(agents, prompts, got, strict=True):
        model = team.activate(agent)
        ids, mask = pad(row, team.tokenizer_of(agent).pad_token_id)
        with torch.no_grad():
            trainer, _ = group_logprobs(model.eval(), torch.tensor(prompt), ids, temperature)
        sampled = torch.zeros_like(trainer)
        for j, c in enumerate(row):
            sampled[j, : len(c)] = record[logprob_key(team.spec.adapter_of(agent), prompt, c)]
        gap = float(logprob_gap(sampled, trainer, mask))
        assert 0.0 <= gap < GAP_TOLERANCE, f"{agent}: sampler_logprob_gap {gap}"


@pytest.mark.slow
@pytest.mark.vllm
def test_an_nf4_base_is_refused_on_cpu_in_one_line(pair, monkeypatch):
    team, sampler = pair
    key = sorted(team.model_specs)[0]
    monkeypatch.setitem(team.model_specs, key, team.model_specs[key].model_copy(update={"quantization": "nf4"}))
    if torch.cuda.is_available():
        pytest.skip("on a GPU an nf4 base goes through vLLM's bitsandbytes path")
    with pytest.raises(UserError, match="nf4 base on vLLM needs its bitsandbytes path") as e:
        sampler._engine(key)
    assert "\n" not in str(e.value)
