"""Completion-only log-probs of one prompt's K completions (`group_logprobs`: the update, distillation, chat's scores).

`pad(seqs, pad_id, side)` stacks variable-length ids with the mask of real tokens: right-padded for
completions here, left-padded for the whole sequences evaluation scores (its log-probs are its own, in
analysis/evaluate.py).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from pettingllms_cli.models.precision import lora_in_base_dtype
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


def group_logprobs(
    model: torch.nn.Module,
    prompt: torch.Tensor,
    completions: torch.Tensor,
    temperature: float,
    shared_prompt: bool = True,
    top_k: int = 0,
    top_p: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs (and detached entropies) of K completions of one prompt.

    prompt: [Lp]; completions: [K, Lc] right-padded. Returns ([K, Lc], [K, Lc]).
    With `top_k`/`top_p` (train's), they are those of the truncated distribution the tokens were sampled from
    (sampling.py `truncate`; the sampled token itself is never cut).
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
