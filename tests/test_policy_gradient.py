"""The update and the sampler do what they claim (issue 16): signs of the policy gradient, KL at step 0,
and Gumbel-max sampling at temperature T."""

from __future__ import annotations

import math

import pytest
import torch

from pettingllms_cli.algorithms import update as update_module
from pettingllms_cli.algorithms.optim import make_optimizers
from pettingllms_cli.algorithms.update import update
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.policy.logprobs import group_logprobs
from pettingllms_cli.policy.sampling import GumbelSampler
from pettingllms_cli.rollout.records import Sample
from pettingllms_cli.training.update_settings import optim_settings, update_settings
from tests.samples import caller_sample

pytestmark = pytest.mark.usefixtures("one_thread")


def _samples(team: Team) -> tuple[torch.Tensor, list[Sample]]:
    prompt = team.encode("caller", [{"role": "user", "content": "What is 12+7?"}])
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 200, (2, 4), generator=generator)  # two completions of 4 tokens, no EOS, no padding
    samples = [caller_sample(prompt=prompt, completion=ids[i]) for i in range(2)]
    return torch.tensor(prompt), samples


ADVANTAGES = [1.0, -1.0]  # of `_samples`, in order


def _logp(team: Team, prompt: torch.Tensor, samples: list[Sample], shared: bool) -> list[float]:
    model = team.activate("caller")
    with torch.no_grad():
        logp, _ = group_logprobs(model, prompt, torch.stack([s.completion for s in samples]), 1.0, shared_prompt=shared)
    return logp.sum(-1).tolist()


@pytest.mark.parametrize("shared", [True, False], ids=["shared_prompt", "plain"])
def test_an_update_raises_positive_and_lowers_negative_advantage_completions(smoke_spec, monkeypatch, shared):
    team = Team(smoke_spec)
    prompt, samples = _samples(team)
    if not shared:  # the update's forward through the plain path: prompt and completion concatenated per row
        # the whole prompt per row: a shared preamble's cache is not read (its leaves get no gradient, its backward is a no-op)
        plain = lambda model, p, c, t, shared_prompt=True, prefix=None: group_logprobs(model, p, c, t, shared_prompt=False)  # noqa: E731
        monkeypatch.setattr(update_module, "group_logprobs", plain)
    before = _logp(team, prompt, samples, shared)
    assert before == pytest.approx(_logp(team, prompt, samples, not shared), abs=1e-4)  # both paths score alike
    stats = update(team, make_optimizers(team, optim_settings(team.spec)), samples, ADVANTAGES, update_settings(team.spec))
    after = _logp(team, prompt, samples, shared)
    assert after[0] > before[0] + 1e-3  # positive advantage: more likely
    assert after[1] < before[1] - 1e-3  # negative advantage: less likely
    assert math.isfinite(stats["caller"].loss) and not stats["caller"].skipped


def test_kl_is_zero_at_the_first_step(smoke_spec):
    """LoRA B starts at zero, so the adapted policy equals the frozen base and the k3 KL logged as kl/<agent> is 0."""
    assert smoke_spec.algorithm.kl_coef > 0
    team = Team(smoke_spec)
    _, samples = _samples(team)
    optimizers = make_optimizers(team, optim_settings(team.spec))
    stats = update(team, optimizers, samples, ADVANTAGES, update_settings(team.spec))
    assert stats["caller"].kl == 0.0
    second = update(
        team, optimizers, samples, ADVANTAGES, update_settings(team.spec)
    )  # the first step moved the adapter: now the KL is positive
    assert second["caller"].kl > 0.0


def _chi_square(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_gumbel_sampler_draws_with_softmax_of_logits_over_t():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5])  # a toy vocabulary of 5
    t, n = 2.0, 20_000
    sampler = GumbelSampler(seeds=[123], k=n, temperature=t)
    drawn = sampler(torch.zeros(n, 1, dtype=torch.long), logits.expand(n, -1)).argmax(-1)  # [n]
    counts = torch.bincount(drawn, minlength=5).float()
    critical = 18.47  # chi-square, 4 degrees of freedom, p = 0.001
    assert _chi_square(counts, torch.softmax(logits / t, -1)) < critical
    assert _chi_square(counts, torch.softmax(logits / t**2, -1)) > critical  # dividing by T twice is caught
    assert _chi_square(counts, torch.softmax(logits, -1)) > critical  # so is not dividing at all
