"""Rows of several adapters in one forward on their shared base, at the cost of one adapter's forward.

PEFT's mixed-adapter batch (`model(..., adapter_names=[adapter of each row])`) serves each row through its own
LoRA, but in every LoRA layer, at every decode step, it lists each adapter's rows in Python, gathers them, runs
that adapter's two matmuls and scatters the result back: work that grows with the rows and the adapters. Inside
`per_row_lora`, each plain LoRA `Linear` computes the same sum with two matmuls whatever the mix:

    base(x) + ((x @ A_cat.T) * M) @ B_cat.T

where A_cat stacks the batch's adapters' A matrices ([sum r, in]), B_cat their B matrices times each adapter's
scaling ([out, sum r]), and M ([rows, sum r], 1 on the row's own adapter's r columns, else 0) keeps each row's
own product. A_cat and B_cat are built once per sampling call in the base's dtype (the LoRA weights do not move
while it samples); M once per distinct row list, shared by every layer. Layers PEFT builds otherwise (DoRA and
other variants, LoRA biases, embeddings) keep PEFT's own mixed path. Inference only: mixed batches are (PEFT
refuses `adapter_names` in training mode).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from peft.tuners.lora.layer import VARIANT_KWARG_KEYS
from peft.tuners.lora.layer import Linear as LoraLinear

PATCHED = "_mixed_batch_forward"  # the method PEFT's LoRA layer runs when the forward is given adapter_names


class Masks:
    """M for each layout of adapter blocks and each row list seen, made once (every layer of a forward shares it)."""

    def __init__(self, dtype: torch.dtype, device: torch.device):
        self.dtype, self.device = dtype, device
        self.made: dict[tuple, tuple[list[str], torch.Tensor]] = {}

    def of(self, blocks: tuple[tuple[str, int], ...], rows: list[str]) -> torch.Tensor:
        key = (blocks, id(rows))
        hit = self.made.get(key)
        if hit is not None and hit[0] is rows:  # the same list object, not one that reused its id
            return hit[1]
        columns, at = {}, 0
        for adapter, r in blocks:
            columns[adapter] = (at, at + r)
            at += r
        mask = torch.zeros(len(rows), at, dtype=self.dtype)
        for i, adapter in enumerate(rows):  # "__base__" or an adapter this layer lacks: no LoRA term
            if adapter in columns:
                mask[i, slice(*columns[adapter])] = 1
        mask = mask.to(self.device)
        self.made[key] = (rows, mask)
        return mask


def plain(layer: LoraLinear, adapters: list[str]) -> bool:
    """Whether every adapter of the batch is vanilla LoRA on this layer (no variant, no bias), so the fused sum holds."""
    present = [a for a in adapters if a in layer.lora_A]
    return (
        bool(present) and not any(a in layer.lora_variant for a in present) and all(layer.lora_B[a].bias is None for a in present)
    )


def fused_forward(layer: LoraLinear, adapters: list[str], dtype: torch.dtype, masks: Masks):
    """The layer's mixed-batch forward as one masked product over the batch's adapters (see the module docstring)."""
    present = [a for a in adapters if a in layer.lora_A]
    blocks = tuple((a, layer.lora_A[a].weight.shape[0]) for a in present)
    with torch.no_grad():
        a_cat = torch.cat([layer.lora_A[a].weight for a in present]).to(dtype)  # [sum r, in]
        b_cat = torch.cat([layer.lora_B[a].weight * layer.scaling[a] for a in present], dim=1).to(dtype)  # [out, sum r]

    def forward(x: torch.Tensor, *args, adapter_names: list[str], **kwargs) -> torch.Tensor:
        base_kwargs = {k: v for k, v in kwargs.items() if k not in VARIANT_KWARG_KEYS}  # LoRA variants' (as PEFT drops)
        result = layer.base_layer(x, *args, **base_kwargs)
        mask = masks.of(blocks, adapter_names)  # [rows, sum r]
        shape = (mask.shape[0],) + (1,) * (x.dim() - 2) + (mask.shape[1],)  # broadcast over the positions
        low = F.linear(x.to(dtype), a_cat) * mask.view(shape)
        return result + F.linear(low, b_cat).to(result.dtype)

    return forward


@contextmanager
def per_row_lora(model: torch.nn.Module, adapters: list[str], dtype: torch.dtype) -> Iterator[int]:
    """Within the block, the model's forwards with `adapter_names=` run each plain LoRA layer as one masked product
    of the batch's `adapters` (their weights as they are on entry, in `dtype`). Yields how many layers it fused."""
    distinct = sorted(set(adapters))
    masks = Masks(dtype, next(model.parameters()).device)
    fused = [m for m in model.modules() if isinstance(m, LoraLinear) and plain(m, distinct)]
    for layer in fused:
        setattr(layer, PATCHED, fused_forward(layer, distinct, dtype, masks))  # the instance's, over the class's
    try:
        yield len(fused)
    finally:
        for layer in fused:
            delattr(layer, PATCHED)
