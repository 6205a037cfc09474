"""Completion-only log-probs: of one prompt's K completions (the update), and of mixed rows (evaluation).

One padding helper serves both: `pad(seqs, pad_id, side)` stacks variable-length ids with the
mask of real tokens, right-padded for completions, left-padded for whole sequences.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from pettingllms_cli.models.precision import lora_in_base_dtype


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


def group_logprobs(
    model: torch.nn.Module, prompt: torch.Tensor, completions: torch.Tensor, temperature: float, shared_prompt: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs (and detached entropies) of K completions of one prompt.

    prompt: [Lp]; completions: [K, Lc] right-padded. Returns ([K, Lc], [K, Lc]).
    With `shared_prompt`, the prompt is run once and its key/value cache is expanded to the K
    completions (gradients flow through it); logits are computed only for completion tokens.
    """
    k = completions.shape[0]
    device = next(model.parameters()).device
    prompt, completions = prompt.to(device), completions.to(device)
    with lora_in_base_dtype(model):  # a bf16 base's LoRA products in bf16 (the backward follows the forward's dtypes)
        if shared_prompt:
            out = model(input_ids=prompt[None], use_cache=True, logits_to_keep=1)
            cache = out.cache
            cache.batch_repeat_interleave(k)
            rest = model(input_ids=completions, cache=cache, use_cache=True).logits  # [K, Lc, V]
            logits = torch.cat([out.logits[:, -1:].expand(k, -1, -1), rest[:, :-1]], dim=1)
        else:
            full = torch.cat([prompt[None].expand(k, -1), completions], dim=1)  # [K, Lp+Lc]
            logits = model(input_ids=full).logits[:, len(prompt) - 1 : -1]
    logp_all = F.log_softmax(logits.float() / temperature, dim=-1)  # [K, Lc, V], fp32 whatever the base's dtype
    logp = logp_all.gather(-1, completions[..., None]).squeeze(-1)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy
