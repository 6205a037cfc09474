"""The update runs the preamble an adapter's groups share once (policy/logprobs.py `run_prefix`), with the same
gradient as running it in every group's forward."""

from __future__ import annotations

import pytest
import torch

from pettingllms_cli.algorithms import update as update_module
from pettingllms_cli.algorithms.optim import make_optimizers
from pettingllms_cli.algorithms.update import batch_loss, update
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.policy.decoding import MIN_SHARED_PREFIX, prefix_run_once
from pettingllms_cli.policy.logprobs import run_prefix
from pettingllms_cli.training.update_settings import optim_settings, update_settings
from tests.samples import caller_sample

pytestmark = pytest.mark.usefixtures("one_thread")

QUESTIONS = ["What is 12+7?", "What is 3*4?", "What is 100-25?"]


def _team(spec) -> Team:
    """The smoke team with LoRA B drawn non-zero, so both LoRA matrices get a gradient through the prompt."""
    team = Team(spec)
    with torch.no_grad():
        torch.manual_seed(1)
        for name, p in team.model_of("caller").named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return team


def _groups(team: Team) -> tuple[list, list[float]]:
    """Three problems' groups of two completions each (advantages +1, -1); their prompts share the chat preamble."""
    generator = torch.Generator().manual_seed(0)
    samples, advantages = [], []
    for i, question in enumerate(QUESTIONS):
        prompt = team.encode("caller", [{"role": "user", "content": question}])
        for a in (1.0, -1.0):
            ids = torch.randint(5, 200, (3,), generator=generator)
            group = (f"p{i}", "tool_caller", 0)
            samples.append(caller_sample(prompt=prompt, completion=ids, problem_id=f"p{i}", group=group))
            advantages.append(a)
    return samples, advantages


def _grads(team: Team, samples, advantages, shared: bool, prefix_backward: bool = True) -> list[torch.Tensor]:
    settings = update_settings(team.spec)
    model = team.activate("caller")
    model.zero_grad(set_to_none=True)
    prompts = [s.prompt for s in samples[::2]]
    prefix = run_prefix(model, prompts) if shared else None
    assert (prefix is not None) == shared
    for g in range(0, len(samples), 2):
        loss, _, _ = batch_loss(team, settings, "caller", samples[g : g + 2], advantages[g : g + 2], prefix=prefix)
        loss.backward()
    if prefix is not None and prefix_backward:
        prefix.backward()
    return [p.grad.clone() for p in team.params[team.spec.adapter_of("caller")]]


def test_the_prompts_share_a_preamble_long_enough_to_run_once(smoke_spec):
    samples, _ = _groups(Team(smoke_spec))
    prompts = [s.prompt for s in samples[::2]]
    assert prefix_run_once(prompts) >= MIN_SHARED_PREFIX
    assert all(len(p) > prefix_run_once(prompts) for p in prompts)  # each keeps its own tokens


def test_the_preamble_run_once_gives_the_per_group_gradient(smoke_spec):
    team = _team(smoke_spec)
    samples, advantages = _groups(team)
    reference = _grads(team, samples, advantages, shared=False)
    shared = _grads(team, samples, advantages, shared=True)
    for ref, got in zip(reference, shared, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-7)
    # the preamble's part of the gradient is real: left out, the gradient differs
    partial = _grads(team, samples, advantages, shared=True, prefix_backward=False)
    assert max(float((p - r).abs().max()) for p, r in zip(partial, reference, strict=True)) > 1e-5


def test_an_update_with_the_shared_preamble_steps_as_without_it_and_runs_fewer_tokens(smoke_spec, monkeypatch):
    def step(share: bool) -> tuple[list[torch.Tensor], int]:
        team = _team(smoke_spec)
        samples, advantages = _groups(team)
        embedded = []
        embedding = team.model_of("caller").get_input_embeddings()
        handle = embedding.register_forward_hook(lambda _m, args, _out: embedded.append(args[0].numel()))
        if not share:
            monkeypatch.setattr(update_module, "run_prefix", lambda model, prompts: None)
        update(team, make_optimizers(team, optim_settings(team.spec)), samples, advantages, update_settings(team.spec))
        monkeypatch.undo()
        handle.remove()
        return [p.detach().clone() for p in team.params[team.spec.adapter_of("caller")]], sum(embedded)

    (with_prefix, tokens_shared), (without, tokens_plain) = step(True), step(False)
    for got, ref in zip(with_prefix, without, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-6)
    samples, _ = _groups(Team(smoke_spec))
    preamble = prefix_run_once([s.prompt for s in samples[::2]])
    passes = smoke_spec.algorithm.update_epochs
    # the preamble is embedded once per pass instead of once per group (the KL's reference pass runs it per group)
    assert tokens_plain - tokens_shared == passes * (len(QUESTIONS) - 1) * preamble
