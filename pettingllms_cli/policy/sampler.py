"""The interface a rollout samples through: three methods, implemented by `Team` (PyTorch, in process),
`VllmSampler` (vllm_sampler.py) and the tests' fakes.
"""

from __future__ import annotations

from typing import Protocol

import torch

from pettingllms_cli.envs.messages import Message


class Sampler(Protocol):
    def encode(self, agent: str, messages: list[Message]) -> list[int]:
        """Token ids of a conversation as `agent` sees it; a final assistant message is continued (prompts.py)."""
        ...

    def sample_mixed(
        self,
        agents: list[str],
        prompts: list[list[int]],
        k: int,
        max_new_tokens: int,
        temperature: float,
        greedy: bool = False,
        seeds: list[int] | None = None,
    ) -> list[list[torch.Tensor]]:
        """K completions of each prompt, prompt i by agents[i]: [prompt][k] -> ids [T_i] on the CPU, EOS kept.

        With `seeds` (one per prompt) each prompt's draws depend on its seed alone, not on its batch.
        """
        ...

    def decode(self, agent: str, ids: torch.Tensor) -> str:
        """Text of generated ids, special tokens dropped."""
        ...
