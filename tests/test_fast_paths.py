"""Fast paths give the numbers of the plain ones: shared-prompt log-probs and gradients, cached-prefill sampling,
mixed-adapter batches."""

from __future__ import annotations

import pytest
import torch

from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.policy.logprobs import group_logprobs, pad


def make_team(specialization: str = "per_agent") -> Team:
    """The smoke spec's two agents on tiny-llama, with LoRA B drawn non-zero so each adapter matters and completions vary."""
    import yaml

    from pettingllms_cli.spec import parse_spec
    from tests.conftest import EXPERIMENTS

    tree = yaml.safe_load((EXPERIMENTS / "smoke.yaml").read_text())
    team = Team(parse_spec({**tree, "specialization": specialization}))
    with torch.no_grad():
        torch.manual_seed(1)
        for _, model in sorted(team.models.items()):
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.5)
    return team


@pytest.fixture(scope="module")
def team():
    return make_team()


def _batch():
    torch.manual_seed(0)
    prompt = torch.randint(3, 300, (17,))
    completions = [torch.randint(3, 300, (n,)) for n in (5, 3, 7, 1)]
    return prompt, *pad(completions, 0)


def _loss_and_grads(model, prompt, ids, mask, shared):
    model.zero_grad(set_to_none=True)
    logp, _ = group_logprobs(model, prompt, ids, temperature=0.7, shared_prompt=shared)
    loss = (logp * mask * torch.linspace(-1, 1, ids.shape[0])[:, None]).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), grads


def test_shared_prompt_equals_separate_forwards(team):
    model = team.activate("caller")
    prompt, ids, mask = _batch()
    logp_a, grads_a = _loss_and_grads(model, prompt, ids, mask, shared=True)
    logp_b, grads_b = _loss_and_grads(model, prompt, ids, mask, shared=False)
    assert torch.allclose(logp_a * mask, logp_b * mask, atol=1e-5)
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        assert torch.allclose(grads_a[name], grads_b[name], atol=1e-5), name


def test_completion_only_logprobs_equal_full_logits(team):
    model = team.activate("verifier")
    prompt, ids, mask = _batch()
    with torch.no_grad():
        logp, _ = group_logprobs(model, prompt, ids, temperature=1.0)
        full = model(input_ids=torch.cat([prompt[None].expand(len(ids), -1), ids], 1)).logits
        ref = torch.log_softmax(full[:, len(prompt) - 1 : -1], -1).gather(-1, ids[..., None]).squeeze(-1)
    assert torch.allclose(logp * mask, ref * mask, atol=1e-5)


def plain_greedy(team, agent: str, prompt: list[int], max_new_tokens: int) -> torch.Tensor:
    """The reference: HF `generate`'s greedy completion of one prompt under `agent`'s adapter."""
    model = team.activate(agent)
    tok = team.tokenizer_of(agent)
    return model.generate(
        input_ids=torch.tensor([prompt]),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )[0, len(prompt) :]


def test_cached_prefill_sampling_equals_plain_generate(team):
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [20, 21, 22, 23, 24, 25, 26, 27, 28]]
    got = team.sample("caller", prompts, k=2, max_new_tokens=6, temperature=1.0, greedy=True)
    for prompt, outs in zip(prompts, got, strict=False):
        ref = plain_greedy(team, "caller", prompt, 6)
        assert outs[0].tolist() == ref[: len(outs[0])].tolist()
        assert outs[0].tolist() == outs[1].tolist()
    assert len({tuple(o[0].tolist()) for o in got}) > 1, "completions should depend on the prompt"


# Each prompt appears under both agents, so a batch that ignored the row's adapter would fail.
MIXED_PROMPTS = [
    [5, 6, 7, 8, 9, 10, 11],
    [12, 13, 14],
    [5, 6, 7, 8, 9, 10, 11],
    [20, 21, 22, 23, 24, 25, 26, 27, 28],
    [12, 13, 14],
]
MIXED_AGENTS = ["caller", "caller", "verifier", "verifier", "verifier"]


def _per_agent_samples(team, greedy, seeds):
    """The reference: one `sample` call per agent, put back in the mixed order."""
    got = [None] * len(MIXED_PROMPTS)
    for agent in sorted(set(MIXED_AGENTS)):
        idx = [i for i, a in enumerate(MIXED_AGENTS) if a == agent]
        own_seeds = [seeds[i] for i in idx] if seeds is not None else None
        outs = team.sample(agent, [MIXED_PROMPTS[i] for i in idx], 3, 8, 1.0, greedy=greedy, seeds=own_seeds)
        for i, o in zip(idx, outs, strict=True):
            got[i] = o
    return got


@pytest.mark.parametrize("specialization", ["per_agent", "shared", "separate"])
@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "seeded"])
def test_mixed_adapter_sampling_equals_per_agent_calls(specialization, greedy, team, one_thread):
    team = team if specialization == "per_agent" else make_team(specialization)
    seeds = None if greedy else [101, 102, 103, 104, 105]
    mixed = team.sample_mixed(MIXED_AGENTS, MIXED_PROMPTS, 3, 8, 1.0, greedy=greedy, seeds=seeds)
    ref = _per_agent_samples(team, greedy, seeds)
    assert [[o.tolist() for o in outs] for outs in mixed] == [[o.tolist() for o in outs] for outs in ref]
    assert [len(outs) for outs in mixed] == [3] * len(MIXED_PROMPTS)
    if specialization != "shared":  # one adapter plays both agents under `shared`
        assert mixed[0][0].tolist() != mixed[2][0].tolist(), "the same prompt should get each agent's own completion"


def test_mixed_adapter_logprobs_equal_per_agent_forwards(team, one_thread):
    from types import SimpleNamespace

    from pettingllms_cli.analysis.evaluate import action_logprobs

    torch.manual_seed(2)
    samples = [
        SimpleNamespace(agent=agent, prompt=torch.randint(3, 300, (lp,)).tolist(), completion=torch.randint(3, 300, (lc,)))
        for agent, lp, lc in [("caller", 9, 4), ("verifier", 13, 6), ("caller", 5, 7), ("verifier", 9, 1)]
    ]
    got = action_logprobs(team, samples)
    for agent in ("caller", "verifier"):
        model = team.activate(agent)
        model.eval()
        with torch.no_grad():
            means = [
                float(group_logprobs(model, torch.tensor(s.prompt), s.completion[None], temperature=1.0)[0].mean())
                for s in samples
                if s.agent == agent
            ]
        model.train()
        assert got[f"action_logprob/{agent}"] == pytest.approx(sum(means) / len(means), abs=1e-5)
    assert abs(got["action_logprob/caller"] - got["action_logprob/verifier"]) > 1e-3


def test_nf4_read_path_equals_mapped_path_and_leaves_no_mapping():
    """The pread nf4 loader gives the weights and logits of the memory-mapped one, and keeps no fp32 file mapped."""
    pytest.importorskip("bitsandbytes")
    from pathlib import Path

    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from pettingllms_cli.models.loader import _own_unquantized_tensors, keep_4bit_layout, load_model, resolve
    from pettingllms_cli.spec import ModelSpec

    def mappings() -> int:  # fp32 bases built by other tests may map the file too
        return sum(line.endswith(".safetensors") for line in Path("/proc/self/maps").read_text().splitlines())

    before = mappings()
    model, _ = load_model(ModelSpec(source="tiny-llama", quantization="nf4"))
    assert mappings() == before, "the fp32 weights file should not stay mapped"
    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(resolve("tiny-llama"), dtype=torch.float32, quantization_config=quantization)
    _own_unquantized_tensors(ref)
    keep_4bit_layout(ref)
    ours, theirs = model.state_dict(), ref.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert model.generation_config.to_dict() == ref.generation_config.to_dict()
    ids = torch.randint(3, 300, (2, 9))
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, ref(input_ids=ids).logits)


# A few-shot preamble all prompts share (>= decoding.MIN_SHARED_PREFIX tokens), then each prompt's own tokens.
PREAMBLE = list(range(40, 60))
PREFIXED_PROMPTS = [PREAMBLE + [5, 6, 7], PREAMBLE + [12], PREAMBLE + [20, 21, 22, 23, 24], PREAMBLE + [5, 6, 7]]


def test_shared_prefix_sampling_equals_plain_generate(team, one_thread):
    """The preamble prefilled once and the own tokens on top of its cache give plain generate's greedy tokens."""
    from pettingllms_cli.policy.decoding import shared_prefix_length

    assert shared_prefix_length(PREFIXED_PROMPTS) == len(PREAMBLE)
    got = team.sample("caller", PREFIXED_PROMPTS, k=2, max_new_tokens=6, temperature=1.0, greedy=True)
    for prompt, outs in zip(PREFIXED_PROMPTS, got, strict=True):
        ref = plain_greedy(team, "caller", prompt, 6)
        assert outs[0].tolist() == ref[: len(outs[0])].tolist() == outs[1].tolist()


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "seeded"])
def test_shared_prefix_mixed_adapters_equal_per_agent_calls(greedy, team, one_thread):
    """Under mixed adapters the preamble is run once per adapter: each row still gets its own agent's tokens."""
    agents = ["caller", "verifier", "caller", "verifier"]
    seeds = None if greedy else [7, 8, 9, 10]
    mixed = team.sample_mixed(agents, PREFIXED_PROMPTS, 2, 6, 1.0, greedy=greedy, seeds=seeds)
    for i, agent in enumerate(agents):
        alone = team.sample(agent, [PREFIXED_PROMPTS[i]], 2, 6, 1.0, greedy=greedy, seeds=[seeds[i]] if seeds else None)[0]
        assert [o.tolist() for o in mixed[i]] == [o.tolist() for o in alone], (i, agent)
    if greedy:  # prompts 0 and 3 are the same, played by different agents
        assert mixed[0][0].tolist() != mixed[3][0].tolist(), "the same prompt should get each agent's own tokens"


def test_unseeded_sampling_draws_as_generate(team, one_thread):
    """Without seeds, rows draw from the global RNG exactly as `generate(do_sample=True)` did."""
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17, 18]]
    torch.manual_seed(3)
    got = team.sample("caller", prompts, k=2, max_new_tokens=6, temperature=0.8)
    model = team.activate("caller")
    tok = team.tokenizer_of("caller")
    torch.manual_seed(3)
    ref = model.generate(
        input_ids=torch.tensor(prompts).repeat_interleave(2, 0),
        max_new_tokens=6,
        do_sample=True,
        temperature=0.8,
        top_k=0,
        top_p=1.0,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )[:, len(prompts[0]) :]
    flat = [o for outs in got for o in outs]
    assert [o.tolist() for o in flat] == [r[: len(o)].tolist() for r, o in zip(ref, flat, strict=True)]


def test_recorded_logprobs_equal_a_forward(team, one_thread):
    """The log-probs recorded while sampling are what a separate forward over prompt + completion gives."""
    from pettingllms_cli.policy.logprobs import logprob_key

    with team.recording_logprobs() as recorded:
        got = team.sample_mixed(["caller", "verifier", "caller"], PREFIXED_PROMPTS[:3], 2, 6, 1.0, seeds=[1, 2, 3])
    assert team.logprob_record is None and len(recorded) >= 3
    for agent, prompt, outs in zip(["caller", "verifier", "caller"], PREFIXED_PROMPTS, got, strict=False):
        model = team.activate(agent)
        model.eval()
        with torch.no_grad():
            for ids in outs:
                logp, _ = group_logprobs(model, torch.tensor(prompt), ids[None], temperature=1.0)
                key = logprob_key(team.spec.adapter_of(agent), prompt, ids)
                assert recorded[key] == pytest.approx(float(logp.mean()), abs=1e-4)
        model.train()
