"""What the bench scripts share: adapters with non-zero weights, so a LoRA forward does real work."""

from __future__ import annotations

import torch


def perturb_adapters(team, std: float = 0.02, seed: int = 0) -> None:
    """Fill every LoRA B matrix with N(0, std) noise (B starts at zero, which PEFT may skip as a no-op)."""
    with torch.no_grad():
        torch.manual_seed(seed)
        for model in team.models.values():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, std)
