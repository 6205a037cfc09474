"""What `compare` holds equal between arms (docs/metrics.md), and how it equalises compute.

Arms may differ only in what defines a team (`TEAM_KEYS`): the env layout, the agents and their
roles, specialization, role assignment, distillation, coordination and credit. Every other
field (models, LoRA settings, all of `algorithm` and `train`, `env.data`, `options`,
`max_turns`, `eval_problems`, the reward weights) must be equal, or `compare` refuses.

Compute (`--budget`): a team with R roles samples K actions per role, so per step and turn it
draws R*K actions per problem where a lone agent draws K. The arms are brought level with the
arm of the most roles, R_max:
- `actions` (default): an arm of R roles samples K*R_max/R candidates per group: same problems,
  same steps, larger groups (more samples per prompt for the advantage estimate, not more data).
  Per turn that is as many actions as the team's; per step only when the arms' episodes last as
  many turns (a team whose judges send calls back plays more turns than a lone agent that hands
  in at once), which is why the measured actions and tokens are reported beside.
- `tokens`: an arm of R roles runs R_max/R times the steps (same K, same problems per step), so
  it samples about as many tokens in all; the measured tokens are reported beside.
- `steps`: nothing is scaled (same steps, problems and K; the team samples R_max/R times more).
"""

from __future__ import annotations

import json
from pathlib import Path

from pettingllms_cli.envs import ENVS
from pettingllms_cli.errors import UserError
from pettingllms_cli.spec import Experiment

TEAM_KEYS = (
    "env.layout",
    "agents",
    "specialization",
    "assignment",
    "distill",
    "coordination",
    "reward.credit",
    "reward.team_signal",
    "reward.balance_verdicts",
)
NOT_COMPARED = ("name", "seed", "output_dir")  # compare sets seeds and run folders itself
BUDGETS = ("actions", "tokens", "steps")


def flatten(tree: object, prefix: str = "") -> dict[str, object]:
    """Dotted keys of nested mappings (lists are leaves).

    >>> flatten({"a": {"b": 1, "c": [2]}, "d": None})
    {'a.b': 1, 'a.c': [2], 'd': None}
    """
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, object] = {}
    for key, value in tree.items():
        out |= flatten(value, f"{prefix}.{key}" if prefix else str(key))
    return out


def _is_team_key(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in (*TEAM_KEYS, *NOT_COMPARED))


def compared_fields(spec: Experiment) -> dict[str, object]:
    """Every field that must be equal across arms; the agents' LoRA settings as one key (agents differ by team)."""
    fields = {k: v for k, v in flatten(spec.model_dump(mode="json")).items() if not _is_team_key(k)}
    loras = sorted({json.dumps(a.lora.model_dump(mode="json"), sort_keys=True) for a in spec.agents.values()})
    fields["agents.*.lora"] = [json.loads(x) for x in loras]
    return fields


def check_equal_arms(paths: list[Path], specs: list[Experiment]) -> None:
    """Refuse arms that differ in anything but what defines a team; the message names the key, the values and the fix."""
    per_arm = [compared_fields(s) for s in specs]
    for key in sorted(set().union(*per_arm)):
        values = [fields.get(key, "(unset)") for fields in per_arm]
        if any(v != values[0] for v in values[1:]):
            listed = ", ".join(f"{p}: {v}" for p, v in zip(paths, values, strict=True))
            raise UserError(
                f"arms differ in {key} ({listed}); only what defines a team may differ ({', '.join(TEAM_KEYS)}): "
                f"make {key} equal, or pass --allow-unequal"
            )


def roles_of(spec: Experiment) -> int:
    """R, the roles of the spec's layout (each samples K actions per problem and turn)."""
    return len(ENVS[spec.env.name].layouts[spec.env.layout])


def budget_overrides(paths: list[Path], specs: list[Experiment], budget: str) -> list[list[str]]:
    """Per arm, the `--set` overrides that level its compute with the arm of the most roles (module docstring)."""
    if budget not in BUDGETS:
        raise UserError(f"--budget {budget!r}: use one of {', '.join(BUDGETS)}")
    most = max(roles_of(s) for s in specs)
    overrides = []
    for path, spec in zip(paths, specs, strict=True):
        scale, rest = divmod(most, roles_of(spec))
        if rest:
            raise UserError(
                f"{path}: {roles_of(spec)} roles do not divide the {most} of the largest arm, so --budget {budget} "
                "cannot level them by a whole factor; compare arms whose role counts divide, or use --budget steps"
            )
        if budget == "actions" and scale > 1:
            overrides.append([f"algorithm.group_size={spec.algorithm.group_size * scale}"])
        elif budget == "tokens" and scale > 1:
            overrides.append([f"train.steps={spec.train.steps * scale}"])
        else:
            overrides.append([])
    return overrides


def describe_budget(budget: str) -> str:
    """One sentence on how the arms were levelled (for compare.json and compare.md)."""
    return {
        "actions": "equal candidates per group and turn: an arm of R roles samples K*R_max/R candidates per group "
        "(same problems and steps, larger groups); that is equal sampled actions per step only when the arms' episodes "
        "last as many turns, so the measured actions and tokens per arm are in the table",
        "tokens": "equal expected sampled tokens: an arm of R roles runs R_max/R times the steps (same K and problems "
        "per step); measured tokens are in the table, and its convergence step counts its own (R_max/R times more) steps",
        "steps": "equal steps, problems and group size; nothing scaled, so a team of R roles samples R times the actions",
    }[budget]
