"""The update's stats are typed records (algorithms/stats.py): sums add field by field, the means are built once."""

from __future__ import annotations

import dataclasses

import pytest

from pettingllms_cli.algorithms.stats import AgentStats, Sums, agent_stats


def test_sums_add_field_by_field_and_the_means_divide_by_tokens_and_passes() -> None:
    first = Sums(tokens=4, trained_tokens=4, loss=2.0, entropy=8.0, gap=3.0, gap_tokens=3.0)
    second = Sums(loss=1.0, clip=2.0, kl=0.5)  # the second pass: its tokens were counted in the first
    total = first + second
    assert total == Sums(tokens=4, trained_tokens=4, loss=3.0, kl=0.5, entropy=8.0, clip=2.0, gap=3.0, gap_tokens=3.0)
    stats = agent_stats(total, passes=2, grad_norm=0.7, skipped=False, lr=None)
    assert (stats.loss, stats.kl, stats.entropy, stats.clip_frac) == (3.0 / 8, 0.5 / 8, 1.0, 2.0 / 8)
    assert stats.logprob_gap == 1.0 and stats.tis_weight is None  # no importance weights recorded
    assert (stats.tokens, stats.grad_norm, stats.skipped) == (4, 0.7, False)


def test_stats_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        AgentStats().loss = 1.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Sums().tokens = 1  # type: ignore[misc]
