"""Fast paths give the numbers of the plain ones: shared-prompt log-probs and gradients, cached-prefill sampling."""

from __future__ import annotations

import pytest
import torch

from pettingllms_cli.policy import Team, group_logprobs, pad_right


@pytest.fixture(scope="module")
def team(request):
    import yaml

    from pettingllms_cli.spec import parse_spec
    from tests.conftest import EXPERIMENTS

    tree = yaml.safe_load((EXPERIMENTS / "smoke.yaml").read_text())
    team = Team(parse_spec(tree))
    # Non-zero LoRA B so the adapter matters and completions vary.
    with torch.no_grad():
        torch.manual_seed(1)
        for name, p in team.models["tiny"].named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    return team


def _batch():
    torch.manual_seed(0)
    prompt = torch.randint(3, 300, (17,))
    completions = [torch.randint(3, 300, (n,)) for n in (5, 3, 7, 1)]
    return prompt, *pad_right(completions, pad=0)


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


def test_cached_prefill_sampling_equals_plain_generate(team):
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [20, 21, 22, 23, 24, 25, 26, 27, 28]]
    got = team.sample("caller", prompts, k=2, max_new_tokens=6, temperature=1.0, greedy=True)
    model = team.activate("caller")
    tok = team.tokenizer_of("caller")
    for prompt, outs in zip(prompts, got, strict=False):
        ref = model.generate(
            input_ids=torch.tensor([prompt]),
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )[0, len(prompt) :]
        assert outs[0].tolist() == ref[: len(outs[0])].tolist()
        assert outs[0].tolist() == outs[1].tolist()
    assert len({tuple(o[0].tolist()) for o in got}) > 1, "completions should depend on the prompt"
