"""Completion-only log-probs of one prompt's K completions (`group_logprobs`: the update, distillation, chat's scores).

`run_prefix` runs the leading tokens that several prompts share (a few-shot preamble) once, with gradients, for
every group of an update to read: each group then runs only its own prompt tokens and its completions, and
`PromptPrefix.backward` sends the groups' summed gradient through the preamble once (the same gradient as running
it in every group, without its forward and backward per group).

`pad(seqs, pad_id, side)` stacks variable-length ids with the mask of real tokens: right-padded for
completions here, left-padded for the whole sequences evaluation scores (its log-probs are its own, in
analysis/evaluate.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, DynamicLayer, DynamicSlidingWindowLayer

from pettingllms_cli.models.precision import lora_in_base_dtype
from pettingllms_cli.policy.decoding import prefix_run_once
from pettingllms_cli.policy.sampling import truncate


def logprob_key(adapter: str, prompt: list[int], completion: torch.Tensor) -> tuple:
    """What identifies a recorded log-prob: the adapter that sampled it and the token ids it scored."""
    return (adapter, tuple(prompt), tuple(completion.tolist()))


def pad(
    seqs: list[torch.Tensor] | list[list[int]], pad_id: int, side: Literal["right", "left"] = "right"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack variable-length ids into [N, T] with the mask of real tokens (long 0/1), padded on `side`.

    >>> ids, mask = pad([[5, 6], [7]], 0, side="left")
    >>> ids.tolist(), mask.tolist()
    ([[5, 6], [0, 7]], [[1, 1], [0, 1]])
    """
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        cols = slice(0, len(s)) if side == "right" else slice(width - len(s), width)
        ids[i, cols] = torch.as_tensor(s, dtype=torch.long)
        mask[i, cols] = 1
    return ids, mask


FORKABLE_LAYERS = (DynamicLayer, DynamicSlidingWindowLayer)  # cache layers whose update rebinds, never writes in place


@dataclass
class PromptPrefix:
    """The leading prompt tokens `ids` run once with gradients; `fork` gives each group a cache to continue from.

    The cache's keys and values are leaves detached from the forward that made them (`graph`): each group's
    backward leaves its gradient on them, and `backward` carries the sum through that forward once.
    """

    ids: list[int]
    cache: Cache
    graph: list[torch.Tensor]  # the forward's keys and values, layer by layer
    leaves: list[torch.Tensor]  # their detached copies, which the cache holds

    def fork(self) -> Cache:
        """A cache of the prefix that a group's forward can extend without touching this one (the tensors are shared)."""
        fork = copy.copy(self.cache)
        fork.layers = [copy.copy(layer) for layer in self.cache.layers]
        return fork

    def backward(self) -> None:
        """Send the gradient the groups left on the prefix's keys and values through the prefix forward."""
        pairs = [(out, leaf.grad) for out, leaf in zip(self.graph, self.leaves, strict=True) if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([out for out, _ in pairs], [grad for _, grad in pairs])


def run_prefix(model: torch.nn.Module, prompts: list[list[int]]) -> PromptPrefix | None:
    """The prefix the prompts share (`decoding.prefix_run_once`: at least MIN_SHARED_PREFIX tokens, one own token
    left in each prompt), run once through the active adapter; None for fewer than two prompts, a shorter prefix, or
    a model whose cache layers cannot be shared between forwards."""
    shared = prefix_run_once(prompts) if len(prompts) > 1 else 0
    if not shared:
        return None
    device = next(model.parameters()).device
    with lora_in_base_dtype(model):
        cache = model(input_ids=torch.tensor([prompts[0][:shared]], device=device), use_cache=True, logits_to_keep=1).cache
    if not all(type(layer) in FORKABLE_LAYERS for layer in cache.layers):
        return None
    graph, leaves = [], []
    for layer in cache.layers:
        for name in ("keys", "values"):
            out = getattr(layer, name)
            leaf = out.detach().requires_grad_(out.requires_grad)
            setattr(layer, name, leaf)
            graph.append(out)
            leaves.append(leaf)
    return PromptPrefix(ids=list(prompts[0][:shared]), cache=cache, graph=graph, leaves=leaves)


def group_logprobs(
    model: torch.nn.Module,
    prompt: torch.Tensor,
    completions: torch.Tensor,
    temperature: float,
    shared_prompt: bool = True,
    top_k: int = 0,
    top_p: float = 1.0,
    prefix: PromptPrefix | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs (and detached entropies) of K completions of one prompt.

    prompt: [Lp]; completions: [K, Lc] right-padded. Returns ([K, Lc], [K, Lc]).
    With `top_k`/`top_p` (train's), they are those of the truncated distribution the tokens were sampled from
    (sampling.py `truncate`; the sampled token itself is never cut).
    With `shared_prompt`, the prompt is run once and its key/value cache is expanded to the K
    completions (gradients flow through it); logits are computed only for completion tokens.
    With `prefix` (`run_prefix`, whose ids the prompt starts with), only the prompt's tokens after it are run, on a
    fork of its cache.
    """
    k = completions.shape[0]
    device = next(model.parameters()).device
    prompt, completions = prompt.to(device), completions.to(device)
    with lora_in_base_dtype(model):  # a bf16 base's LoRA products in bf16 (the backward follows the forward's dtypes)
        if shared_prompt:
            start, cache = (len(prefix.ids), prefix.fork()) if prefix is not None else (0, None)
            out = model(input_ids=prompt[None, start:], cache=cache, use_cache=True, logits_to_keep=1)
            cache = out.cache
            cache.batch_repeat_interleave(k)
            rest = model(input_ids=completions, cache=cache, use_cache=True).logits  # [K, Lc, V]
            logits = torch.cat([out.logits[:, -1:].expand(k, -1, -1), rest[:, :-1]], dim=1)
        else:
            full = torch.cat([prompt[None].expand(k, -1), completions], dim=1)  # [K, Lp+Lc]
            logits = model(input_ids=full).logits[:, len(prompt) - 1 : -1]
    scaled = logits.float() / temperature  # [K, Lc, V], fp32 whatever the base's dtype
    cut = bool(top_k) or top_p < 1.0
    if cut:
        scaled = truncate(scaled.flatten(0, 1), top_k, top_p, keep=completions.flatten()).view_as(scaled)
    logp_all = F.log_softmax(scaled, dim=-1)
    logp = logp_all.gather(-1, completions[..., None]).squeeze(-1)
    with torch.no_grad():
        plogp = logp_all.exp() * logp_all
        entropy = -(plogp.nan_to_num() if cut else plogp).sum(-1)  # a cut token's 0 * -inf is 0
    return logp, entropy
