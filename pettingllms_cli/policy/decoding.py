"""Batched decoding for `Team`: the prompts' common prefix prefilled once, a key/value cache written in place,
tokens picked per row by a plain loop.

Why not `generate`: on a CPU a decode step is bound by reading the weights, so what the loop adds
around the forward is pure loss. Measured on SmolLM2-135M (16 rows, ~300-token prompts, 1 thread):
`DynamicCache` re-concatenates the whole cache at every step (17% of a step); each of the K
samples of a prompt, and each of the prompts sharing a few-shot preamble, prefilled the same
tokens again; and the log-probs that evaluation reports needed a second full forward afterwards.
Here the longest prefix all prompts share is run once per adapter and its cache copied to every
row, the cache has room reserved for the new tokens, and the log-prob of each picked token can
be taken from the logits the step already computed.

Picking a token: `argmax(logits)` for greedy, `argmax(logits / T + Gumbel noise)` from per-prompt
generators for seeded sampling (sampling.py), or `multinomial(softmax(logits / T))` from the global
RNG as `generate(do_sample=True)` draws it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, DynamicLayer

from pettingllms_cli.policy.sampling import GumbelSampler, truncate

MIN_SHARED_PREFIX = 8  # below this, a separate prefix forward costs more than it saves

Picker = Callable[[torch.Tensor], torch.Tensor]  # logits [N, V] float32 -> token ids [N]


class ReservedLayer(DynamicLayer):
    """A `DynamicLayer` with room for `extra` more tokens: `update` writes in place instead of concatenating."""

    def reserve(self, extra: int) -> None:
        n, heads, length, dim = self.keys.shape
        self.length = length
        self.key_buffer = self.keys.new_empty(n, heads, length + extra, dim)
        self.value_buffer = self.values.new_empty(n, heads, length + extra, self.values.shape[-1])
        self.key_buffer[:, :, :length] = self.keys
        self.value_buffer[:, :, :length] = self.values
        self.keys, self.values = self.key_buffer[:, :, :length], self.value_buffer[:, :, :length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + key_states.shape[-2]
        if end > self.key_buffer.shape[-2]:  # past the reservation: grow as DynamicLayer does
            return super().update(key_states, value_states, *args, **kwargs)
        self.key_buffer[:, :, self.length : end] = key_states
        self.value_buffer[:, :, self.length : end] = value_states
        self.length = end
        self.keys, self.values = self.key_buffer[:, :, :end], self.value_buffer[:, :, :end]
        return self.keys, self.values


def reserve(cache: Cache, extra: int) -> None:
    """Give each plain full-attention layer of the cache room for `extra` tokens (sliding-window layers keep their own)."""
    for layer in cache.layers:
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys.numel() > 0:
            layer.__class__ = ReservedLayer  # same state, in-place update
            layer.reserve(extra)


@dataclass
class Prefilled:
    cache: Cache
    logits: torch.Tensor  # [P*K, V] float32, next-token logits of each row
    mask: torch.Tensor  # [P*K, W] 1 on real tokens (prefix, the prompt's own tokens)
    position: torch.Tensor  # [P*K] position id of each row's last prompt token


def shared_prefix_length(prompts: list[list[int]]) -> int:
    """How many leading tokens all prompts share, keeping at least one own token per prompt (its logits start decoding).

    >>> shared_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 3]])
    2
    """
    first, limit = prompts[0], min(len(p) for p in prompts) - 1
    n = 0
    while n < limit and all(p[n] == first[n] for p in prompts):
        n += 1
    return n


def prefix_run_once(prompts: list[list[int]]) -> int:
    """How many leading tokens `prefill` runs once (per adapter) for all the prompts: their shared prefix, or 0 for a
    single prompt or a prefix shorter than MIN_SHARED_PREFIX (then every prompt runs all its tokens itself)."""
    shared = shared_prefix_length(prompts) if len(prompts) > 1 else 0
    return shared if shared >= MIN_SHARED_PREFIX else 0


def prefill(model: torch.nn.Module, prompts: list[list[int]], pad: int, k: int, adapters: list[str] | None) -> Prefilled:
    """Run the prompts (prompt i through adapters[i], or the active adapter) and expand each to its k rows.

    The shared prefix is run once per distinct adapter (its keys and values depend on the adapter),
    then each prompt's own tokens, left-padded after the prefix, on top of its cache.
    """
    device = model.device
    shared = prefix_run_once(prompts)
    cache = None
    if shared:
        distinct = sorted(set(adapters)) if adapters else None
        prefix = torch.tensor([prompts[0][:shared]] * (len(distinct) if distinct else 1), device=device)  # [A, S]
        cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1, adapter_names=distinct).cache
        owner = [distinct.index(a) for a in adapters] if distinct else [0] * len(prompts)
        cache.batch_select_indices(torch.tensor(owner, device=device))  # [P, ...]: each prompt's adapter's prefix
    own = [p[shared:] for p in prompts]
    width = max(map(len, own))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in own], device=device)  # [P, L], left-padded
    own_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in own], device=device)  # [P, L]
    mask = torch.cat([torch.ones(len(prompts), shared, dtype=own_mask.dtype, device=device), own_mask], dim=1)
    positions = (shared + own_mask.cumsum(-1) - 1).clamp(min=0)  # as generate numbers left-padded rows
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        cache=cache,
        use_cache=True,
        logits_to_keep=1,
        adapter_names=adapters,
    )
    out.cache.batch_repeat_interleave(k)
    return Prefilled(
        cache=out.cache,
        logits=out.logits[:, -1].float().repeat_interleave(k, 0),
        mask=mask.repeat_interleave(k, 0),
        position=positions[:, -1].repeat_interleave(k, 0),
    )


def decode(
    model: torch.nn.Module,
    start: Prefilled,
    pick: Picker,
    max_new_tokens: int,
    eos: int | None,
    pad: int,
    adapters: list[str] | None,
    logprobs: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Up to max_new_tokens per row, until every row has emitted EOS. Returns ids [N, T] and, with `logprobs`,
    each picked token's log-probability under the untempered logits [N, T]; after EOS a row holds `pad`."""
    reserve(start.cache, max_new_tokens)
    logits, mask, position = start.logits, start.mask, start.position
    done = torch.zeros(len(logits), dtype=torch.bool, device=logits.device)
    tokens, scores = [], []
    for step in range(max_new_tokens):
        token = pick(logits).masked_fill(done, pad)  # [N]
        tokens.append(token)
        if logprobs:  # log_softmax at the picked token, without materialising [N, V] log-probs
            scores.append(logits.gather(-1, token[:, None]).squeeze(-1) - torch.logsumexp(logits, -1))
        if eos is not None:
            done |= token == eos
        if step == max_new_tokens - 1 or bool(done.all()):
            break
        mask = F.pad(mask, (0, 1), value=1)
        position = position + 1
        out = model(
            input_ids=token[:, None],
            attention_mask=mask,
            position_ids=position[:, None],
            cache=start.cache,
            use_cache=True,
            adapter_names=adapters,
        )
        logits = out.logits[:, -1].float()
    return torch.stack(tokens, 1), (torch.stack(scores, 1) if logprobs else None)


def greedy_picker() -> Picker:
    return lambda logits: logits.argmax(-1)


def gumbel_picker(seeds: list[int], k: int, temperature: float, top_k: int = 0, top_p: float = 1.0) -> Picker:
    """Per-prompt seeded draws (sampling.py): argmax of logits / T (cut to top_k/top_p) plus each prompt's own noise."""
    sampler = GumbelSampler(seeds, k, temperature, top_k, top_p)
    return lambda logits: sampler(None, logits).argmax(-1)


def multinomial_picker(temperature: float, top_k: int = 0, top_p: float = 1.0) -> Picker:
    """What `generate(do_sample=True, top_k=top_k, top_p=top_p)` draws: the global torch RNG, one draw per row."""
    return lambda logits: torch.multinomial(
        F.softmax(truncate(logits / temperature, top_k, top_p), dim=-1), num_samples=1
    ).squeeze(1)


def cut_at_eos(ids: torch.Tensor, eos: int) -> torch.Tensor:
    """Keep tokens up to and including the first EOS."""
    hits = (ids == eos).nonzero()
    return ids[: int(hits[0]) + 1].clone() if len(hits) else ids.clone()
