"""`algorithm.tis_cap`: truncated importance sampling against a sampler's own log-probs (docs/vllm.md).

No vLLM here: the sampler's log-probs are fabricated from the trainer's, on the tiny random model of
experiments/smoke.yaml. Equal log-probs give weight 1 and the plain loss and gradient; log-probs far
below the trainer's are truncated at the cap; tokens the sampler did not record keep weight 1.
"""

from __future__ import annotations

import pytest
import torch

from pettingllms_cli.algorithms.optim import make_optimizers
from pettingllms_cli.algorithms.stats import Sums
from pettingllms_cli.algorithms.update import batch_loss, sampler_rows, update
from pettingllms_cli.errors import UserError
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.policy.logprobs import logprob_key
from pettingllms_cli.rollout.records import Sample
from pettingllms_cli.spec import parse_spec
from pettingllms_cli.training.update_settings import optim_settings, update_settings
from tests.test_update_epochs import ADVANTAGES, one_prompt_samples

pytestmark = pytest.mark.usefixtures("one_thread")
CAP = 2.0


def _team(smoke_tree: dict, tis_cap: float | None = CAP) -> Team:
    algorithm = {**smoke_tree["algorithm"], "kl_coef": 0.0, "tis_cap": tis_cap}
    return Team(parse_spec({**smoke_tree, "sampler": "vllm", "algorithm": algorithm}))  # Team never starts vLLM


def _record(batch: list[Sample], logp: torch.Tensor, shift: float, rows: int | None = None) -> dict[tuple, torch.Tensor]:
    """What a sampler's `take_logprobs()` would give: the trainer's log-probs plus `shift`, for the first `rows` rows."""
    return {
        logprob_key("caller", s.prompt, torch.as_tensor(s.completion)): logp[i, : len(s.completion)] + shift
        for i, s in enumerate(batch[:rows])
    }


def _loss_and_grads(team: Team, batch: list[Sample], record: dict | None) -> tuple[torch.Tensor, list[torch.Tensor], Sums]:
    team.models[team.spec.base_of("caller")].zero_grad(set_to_none=True)
    rows = None if record is None else sampler_rows("caller", batch, record)
    loss, _, st = batch_loss(team, update_settings(team.spec), "caller", batch, ADVANTAGES, sampler=rows)
    loss.backward()
    grads = [p.grad.clone() for p in team.params["caller"]]
    return loss.detach(), grads, st


def _trainer_logp(team: Team, batch: list[Sample]) -> torch.Tensor:
    _, logp, _ = batch_loss(team, update_settings(team.spec), "caller", batch, ADVANTAGES)
    return logp


def test_sampler_logprobs_equal_to_the_trainers_give_weight_1_and_the_plain_loss_and_gradient(smoke_tree):
    team = _team(smoke_tree)
    batch = one_prompt_samples(team)
    plain_loss, plain_grads, _ = _loss_and_grads(team, batch, None)
    loss, grads, st = _loss_and_grads(team, batch, _record(batch, _trainer_logp(team, batch), 0.0))
    assert st.tis / st.tis_tokens == pytest.approx(1.0, abs=1e-6)
    assert st.tis_tokens == 6
    assert torch.allclose(loss, plain_loss, atol=1e-6)
    assert any(g.abs().sum() > 0 for g in plain_grads)
    assert all(torch.allclose(g, h, atol=1e-7) for g, h in zip(grads, plain_grads, strict=True))


def test_sampler_logprobs_far_below_the_trainers_are_truncated_at_the_cap(smoke_tree):
    team = _team(smoke_tree)
    batch = one_prompt_samples(team)
    plain_loss, plain_grads, _ = _loss_and_grads(team, batch, None)
    loss, grads, st = _loss_and_grads(team, batch, _record(batch, _trainer_logp(team, batch), -20.0))  # ratio e^20
    assert st.tis / st.tis_tokens == pytest.approx(CAP)
    assert torch.allclose(loss, CAP * plain_loss, atol=1e-5)  # every token's term doubled
    assert all(torch.allclose(g, CAP * h, atol=1e-6) for g, h in zip(grads, plain_grads, strict=True))


def test_tokens_the_sampler_did_not_record_keep_weight_1_and_update_logs_the_mean_weight(smoke_tree):
    team = _team(smoke_tree)
    batch = one_prompt_samples(team)
    record = _record(batch, _trainer_logp(team, batch), -20.0, rows=1)  # only the 4-token completion
    stats = update(team, make_optimizers(team, optim_settings(team.spec)), batch, ADVANTAGES, update_settings(team.spec), record)
    assert stats["caller"].tis_weight == pytest.approx((4 * CAP + 2 * 1.0) / 6)  # logged as tis_weight/caller
    assert stats["caller"].logprob_gap == pytest.approx(20.0, abs=1e-4)
    assert stats["verifier"].tis_weight is None  # no samples, no weight


def test_without_tis_cap_the_sampler_logprobs_leave_the_loss_alone(smoke_tree):
    team = _team(smoke_tree, tis_cap=None)
    batch = one_prompt_samples(team)
    plain_loss, _, _ = _loss_and_grads(team, batch, None)
    loss, _, st = _loss_and_grads(team, batch, _record(batch, _trainer_logp(team, batch), -20.0))
    assert torch.equal(loss, plain_loss) and st.tis_tokens == 0


@pytest.mark.parametrize(
    "sets, message",
    [
        ({"algorithm": {"tis_cap": 2.0}}, "algorithm.tis_cap: .*sampler: hf.*remove algorithm.tis_cap, or set sampler: vllm"),
        ({"sampler": "vllm", "algorithm": {"tis_cap": 0}}, "algorithm.tis_cap: .*greater than 0"),
    ],
)
def test_a_tis_cap_the_spec_cannot_use_is_one_line_naming_the_fix(smoke_tree, sets, message):
    tree = {**smoke_tree, **sets, "algorithm": {**smoke_tree["algorithm"], **sets["algorithm"]}}
    with pytest.raises(UserError, match=message) as err:
        parse_spec(tree, "exp.yaml")
    assert "\n" not in str(err.value)
