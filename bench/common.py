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


def quickstart_team(name: str):
    """The quickstart's caller + verifier on SmolLM2-135M (one LoRA each), with non-zero adapters."""
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.spec import parse_spec

    lora = {"r": 16, "alpha": 32}
    spec = parse_spec(
        {
            "name": name,
            "env": {"name": "math_tool_v0", "layout": "multi", "options": {"ops": "+-*/"}},
            "models": {"smol": {"source": "smollm2-135m-instruct", "dtype": "float32", "quantization": "none"}},
            "agents": {
                "caller": {"model": "smol", "roles": ["tool_caller"], "lora": lora},
                "verifier": {"model": "smol", "roles": ["verifier"], "lora": lora},
            },
        }
    )
    team = Team(spec)
    perturb_adapters(team)
    return team
