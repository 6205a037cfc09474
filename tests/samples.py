"""Samples built by hand for the update, advantage and metrics tests."""

from __future__ import annotations

import torch

from pettingllms_cli.rollout.records import Sample


def caller_sample(**fields) -> Sample:
    """The caller's sample with the fields a test names; the rest are neutral: turn 0 of problem p0, no reward."""
    neutral = {
        "agent": "caller",
        "role": "tool_caller",
        "turn": 0,
        "problem_id": "p0",
        "group": ("p0", "tool_caller", 0),
        "prompt": [1],
        "completion": torch.tensor([2]),
        "text": "",
        "reward": 0.0,
        "team_reward": 0.0,
        "local_reward": 0.0,
    }
    return Sample(**(neutral | fields))
