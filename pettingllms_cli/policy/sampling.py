"""Sampling seeded per prompt, inside one batched generate, so batch composition never changes the draws.

`generate(do_sample=True)` draws every row from the global RNG, so what a prompt gets depends on
which other prompts share its batch (and so on how problems are sharded over ranks). Here each
prompt owns a generator seeded from (step seed, problem, role, turn, episode), and tokens are
picked with the Gumbel-max trick: argmax(logits / T + Gumbel noise) is an exact sample of
softmax(logits / T), and the noise of row r at position t depends only on r's seed.

`train.top_k` / `train.top_p` truncate that distribution before the draw (`truncate`, transformers' own
warpers), and the update scores the sampled tokens under the same truncation (policy/logprobs.py), so the
log-probs it trains on are those of the distribution actually sampled from.
"""

from __future__ import annotations

import hashlib

import torch
from transformers import TopKLogitsWarper, TopPLogitsWarper


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


def truncate(scores: torch.Tensor, top_k: int = 0, top_p: float = 1.0, keep: torch.Tensor | None = None) -> torch.Tensor:
    """`scores` ([N, V], already divided by the temperature) with the tokens outside top_k, then top_p, set to -inf.

    The order and rule are `generate`'s and vLLM's (top_k first, then the smallest set whose probability reaches
    top_p, at least one token). `keep` ([N] token ids) is never masked: a token that was sampled keeps a finite
    log-prob when the set is recomputed after the weights moved (a later update pass, the frozen reference).

    >>> truncate(torch.tensor([[0.0, 1.0, 2.0]]), top_k=2).tolist()
    [[-inf, 1.0, 2.0]]
    """
    if top_k == 0 and top_p >= 1.0:
        return scores
    with torch.no_grad():  # only which tokens survive: no gradient through the sort
        kept = scores.detach().float()
        if top_k > 0:
            kept = TopKLogitsWarper(top_k)(None, kept)
        if top_p < 1.0:
            kept = TopPLogitsWarper(top_p)(None, kept)
        removed = torch.isneginf(kept) & ~torch.isneginf(scores.detach())
        if keep is not None:
            removed[torch.arange(len(keep), device=removed.device), keep] = False
    return scores.masked_fill(removed, float("-inf"))


class GumbelSampler:
    """A `generate` logits processor: adds per-prompt Gumbel noise; run it with do_sample=False.

    Rows are prompt-major ([P * K, V], K samples per prompt); prompt i's K rows draw from its own
    generator, created on the logits' device at the first token.
    """

    def __init__(self, seeds: list[int], k: int, temperature: float, top_k: int = 0, top_p: float = 1.0):
        self.seeds, self.k, self.temperature = seeds, k, temperature
        self.top_k, self.top_p = top_k, top_p
        self.generators: list[torch.Generator] | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.generators is None:
            self.generators = [torch.Generator(scores.device).manual_seed(s) for s in self.seeds]
        vocab = scores.shape[-1]
        u = torch.cat([torch.rand(self.k, vocab, generator=g, device=scores.device) for g in self.generators])  # [P*K, V]
        gumbel = -torch.log(-torch.log(u.clamp(min=1e-20)))
        return truncate(scores.float() / self.temperature, self.top_k, self.top_p) + gumbel
