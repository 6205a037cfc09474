"""Sampling seeded per prompt, inside one batched generate, so batch composition never changes the draws.

`generate(do_sample=True)` draws every row from the global RNG, so what a prompt gets depends on
which other prompts share its batch (and so on how problems are sharded over ranks). Here each
prompt owns a generator seeded from (step seed, problem, role, turn, episode), and tokens are
picked with the Gumbel-max trick: argmax(logits / T + Gumbel noise) is an exact sample of
softmax(logits / T), and the noise of row r at position t depends only on r's seed.
"""

from __future__ import annotations

import hashlib

import torch


def row_seed(*key: object) -> int:
    """A 63-bit seed from a key such as (base, problem_id, role, turn, episode); stable across processes.

    >>> row_seed(1, "p3", "verifier", 0) == row_seed(1, "p3", "verifier", 0) != row_seed(2, "p3", "verifier", 0)
    True
    """
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2**63


def base_seed() -> int:
    """One draw from the global torch RNG (which train seeds per step, alike on every rank)."""
    return int(torch.randint(0, 2**62, (1,)))


class GumbelSampler:
    """A `generate` logits processor: adds per-prompt Gumbel noise; run it with do_sample=False.

    Rows are prompt-major ([P * K, V], K samples per prompt); prompt i's K rows draw from its own
    generator, created on the logits' device at the first token.
    """

    def __init__(self, seeds: list[int], k: int, temperature: float):
        self.seeds, self.k, self.temperature = seeds, k, temperature
        self.generators: list[torch.Generator] | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.generators is None:
            self.generators = [torch.Generator(scores.device).manual_seed(s) for s in self.seeds]
        vocab = scores.shape[-1]
        u = torch.cat([torch.rand(self.k, vocab, generator=g, device=scores.device) for g in self.generators])  # [P*K, V]
        gumbel = -torch.log(-torch.log(u.clamp(min=1e-20)))
        return scores.float() / self.temperature + gumbel
