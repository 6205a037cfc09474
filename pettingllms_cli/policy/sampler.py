"""The interface a rollout samples through, implemented by `Team` (PyTorch, in process),
`VllmSampler` (vllm_sampler.py) and the tests' fakes.

Three methods sample (`encode`, `sample_mixed`, `decode`); two keep a separate engine in step with
the trainer (`push_adapters`, `take_logprobs`), and are no-ops where the sampler is the trainer itself.
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

    def push_adapters(self, agents: list[str] | None = None) -> list[str]:
        """Bring the sampler's copy of these agents' adapters (None: every agent's) up to the trainer's; returns the
        adapters sent.

        Called after every optimizer step. The built-in sampler samples with the trainer's own adapters: nothing to send.
        """
        ...

    def take_logprobs(self) -> dict[tuple, torch.Tensor] | None:
        """The sampled tokens' own log-probs since the last call (by `logprob_key`), then forgotten; None when the
        sampler is the trainer (its log-probs are the trainer's, so there is no gap to measure or correct)."""
        ...
