"""What `compare` holds equal between arms (docs/metrics.md), and how it equalises compute.

Arms may differ only in what defines a team (`TEAM_KEYS`): the env layout, the agents and their
roles, specialization, role assignment, distillation, coordination and credit. Every other
field (models, LoRA settings, all of `algorithm` and `train`, `env.data`, `options`,
`max_turns`, `eval_problems`, the reward weights) must be equal, or `compare` refuses.

Compute (`--budget`): the budget is what the reference arm spends in its `train.steps` steps, seed by
seed; the reference arm is the arm with the most roles (the first of them when several tie), the team
in a team-against-lone-agent compare. Every other arm keeps its own group size and batch and trains
until its running total reaches that budget (`train.stop_at_actions` / `stop_at_tokens`, with
`train.steps` raised to an upper bound it cannot need), so its total lies within one of its steps of
the reference arm's (compare checks this):
- `actions` (default): `actions_total`, every action sampled: candidates, play-outs and intents.
- `tokens`: `tokens_total`, every token sampled, play-outs and intents included.
- `steps`: nothing levelled: same steps, problems and K; a team of R roles samples R times the actions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, get_args

from pettingllms_cli.envs import ENVS
from pettingllms_cli.errors import UserError
from pettingllms_cli.spec import Experiment
from pettingllms_cli.spec.limits import MAX_STEPS

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
NOT_COMPARED = ("name", "seed", "output_dir", "train.report_to", "train.save_total_limit")  # run folders, seeds, bookkeeping
Budget = Literal["actions", "tokens", "steps"]  # what `--budget` holds equal (the module docstring)
BUDGETS: tuple[str, ...] = get_args(Budget)


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
    """R, the roles of the spec's layout (each samples K actions per problem and turn); where the layout names none
    (an `external` program decides who acts), the roles the spec's agents play."""
    declared = ENVS[spec.env.name].layouts[spec.env.layout]
    return len(declared) or len({role for agent in spec.agents.values() for role in agent.roles})


TOTAL_OF = {"actions": "actions_total", "tokens": "tokens_total"}  # the whole-run total each budget holds equal
STOP_FIELD = {"actions": "train.stop_at_actions", "tokens": "train.stop_at_tokens"}


def check_budget(budget: str) -> None:
    """A budget from Python (`api.compare`): the CLI's `--budget` is checked by typer against the same `Budget`."""
    if budget not in BUDGETS:
        raise UserError(f"--budget {budget!r}: use one of {', '.join(BUDGETS)}")


def reference_arm(specs: list[Experiment]) -> int:
    """The arm whose spending in `train.steps` steps is the budget: the most roles, the first of them on a tie."""
    most = max(roles_of(s) for s in specs)
    return next(i for i, s in enumerate(specs) if roles_of(s) == most)


def budget_overrides(spec: Experiment, budget: Budget, total: int) -> list[str]:
    """The `--set` overrides that make an arm stop once it has spent `total` (the reference arm's, for this seed).

    `train.steps` becomes an upper bound it cannot need: every step samples at least K candidates for each of its
    problems, each of at least one token.
    """
    if budget == "steps":
        return []
    least_per_step = spec.algorithm.group_size * spec.train.problems_per_step
    bound = min(MAX_STEPS, max(spec.train.steps, -(-total // least_per_step)))
    return [f"{STOP_FIELD[budget]}={total}", f"train.steps={bound}"]


def describe_budget(budget: Budget, reference: str) -> str:
    """One sentence on how the arms were levelled (for compare.json and compare.md)."""
    if budget == "steps":
        return "equal steps, problems and group size; nothing levelled, so a team of R roles samples about R times the actions"
    what = {"actions": "actions (sampled, play-outs and intents)", "tokens": "sampled tokens (play-outs and intents in)"}
    return (
        f"equal {what[budget]}: the budget of each seed is what {reference} (the arm with the most roles) spent in its "
        f"train.steps steps; every other arm, at its own group size and batch, trained until its running {TOTAL_OF[budget]} "
        "reached that budget, so the arms' totals agree within one step's worth (checked)"
    )
