"""How a team learns together: rewards and credit, role assignment, distillation, and the intent round."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pettingllms_cli.spec.limits import MAX_PROBLEMS, MAX_PROBLEMS_PER_STEP, MAX_STEPS
from pettingllms_cli.spec.strict import Strict


def deferred_roles_text() -> str:
    """Every env's `deferred_roles`, from the envs' own declarations (the one place they are listed).

    >>> deferred_roles_text().split("; ")[0]
    'code_v0: tester'
    """
    from pettingllms_cli.envs import ENVS  # no torch: `validate` and `schema` stay fast

    declared = {name: sorted(env.deferred_roles) for name, env in sorted(ENVS.items()) if env.deferred_roles}
    return "; ".join(f"{name}: {', '.join(roles)}" for name, roles in declared.items())


class RewardSpec(Strict):
    team_weight: float = Field(1.0, ge=0, description="Weight of the team outcome in every agent's reward.")
    local_weight: float = Field(0.5, ge=0, description="Weight of the role's own (local) reward.")
    credit: Literal["none", "difference"] = Field(
        "none",
        description="Local term: `none` uses the env's own local reward; `difference` uses the team outcome of the "
        "agent's action minus the team outcome of a no-op (empty) action in the same state, played on the same way "
        "(see team_signal), so an action that does not change the team outcome earns 0. Needs a no-op for every role.",
    )
    team_signal: Literal["deferred", "turn_end", "immediate"] = Field(
        "deferred",
        description="The team outcome an action is credited with. `deferred`: for roles whose action only matters once "
        f"later roles act (the env's deferred_roles: {deferred_roles_text()}), each of the K candidates' "
        "branches is played on to the end of the turn with one sample per later role (batched; one problem's play-outs "
        "share seeds) and scored there; other roles get the team reward right after their action. `turn_end`: every "
        "role but the turn's last is played on. Cost: K*(R-1-i) extra sampled actions per problem and turn for the "
        "role at position i of R (two roles: x1.5 tokens), + R-1-i for the no-op under `difference`; not trained; "
        "none with one role. `immediate`: never played on (no extra samples; stale for deferred roles).",
    )
    balance_verdicts: bool = Field(
        False,
        description="Judges (the `team` layouts' validator and reader) learn as if calls that should run and calls that "
        "should be sent back came equally often: each judged action's advantage is weighted n / (2 n_c), n_c of the "
        "agent's n judged actions so far having called for that verdict, so a judge that always says no (or always yes) "
        "gains nothing in expectation over steps that hold both kinds of case. Other roles are unchanged (docs/credit.md).",
    )


class AssignmentSpec(Strict):
    mode: Literal["static", "rotate", "adaptive"] = Field(
        "static",
        description="Who plays which role each episode: `static` (agents' `roles`), `rotate` (role j of episode e goes to "
        "agent (j + e) mod n, agents sorted by name), `adaptive` (UCB on each agent's recent team success per role).",
    )
    ucb_c: float = Field(1.0, ge=0, description="`adaptive`: weight of the UCB exploration bonus c * sqrt(ln N / n).")
    window: int = Field(
        32,
        ge=1,
        le=MAX_PROBLEMS,
        description=f"`adaptive`: recent episodes per (agent, role) whose mean success is the estimate (1 to {MAX_PROBLEMS:,}).",
    )


class DistillSpec(Strict):
    source: str = Field(description="Agent whose best trajectories become supervised targets.")
    targets: list[str] = Field(min_length=1, description="Agents trained to reproduce them (text level: any tokenizer).")
    every: int = Field(
        1, ge=1, le=MAX_STEPS, description=f"Distil every N steps (after that step's RL update), 1 to {MAX_STEPS:,}."
    )
    top_k: int = Field(
        4,
        ge=1,
        le=MAX_PROBLEMS_PER_STEP,
        description=f"The source's best samples (by reward) used per distillation step (1 to {MAX_PROBLEMS_PER_STEP:,}), "
        "among those that led the team to "
        "success and were not cut off at max_new_tokens.",
    )
    require_success: bool = Field(
        True,
        description="Only samples after which the team had solved the problem qualify; false: any sample with reward > 0 "
        "(e.g. before the team ever succeeds; a well-formed but wrong action then qualifies too).",
    )
    keep_truncated: bool = Field(
        False,
        description="Samples cut off at max_new_tokens qualify too, taught without EOS so the target does not learn to "
        "stop there (false: they are left out, since half an answer is not one to imitate).",
    )
    weight: float = Field(0.1, gt=0, description="Weight of the distillation NLL (token mean) in the target's extra step.")


class CoordinationSpec(Strict):
    protocol: Literal["none", "intent"] = Field(
        "none",
        description="`intent`: each turn opens with an intent round; every role, in turn order, states what it will do as "
        "<intent>...</intent>, and all roles see the turn's intents when they act. The env logs `intent_agreement`.",
    )
    intent_tokens: int = Field(24, ge=1, le=256, description="Most tokens an intent may take.")
    agreement_bonus: float = Field(
        0.0, ge=0, description="Reward added to an action that agrees with its role's intent (0: agreement is only logged)."
    )
