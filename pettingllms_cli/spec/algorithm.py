"""The `algorithm` section: AT-GRPO's group size, clipping, KL and optimizer settings."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from pettingllms_cli.spec.limits import MAX_STEPS
from pettingllms_cli.spec.strict import Strict

MAX_GROUP_SIZE = 256  # K samples are generated in one batch per group; far past this they cannot fit in memory


class AlgorithmSpec(Strict):
    name: Literal["at_grpo"] = Field(
        "at_grpo",
        description="The training algorithm (TRL picks it by trainer class): `at_grpo`, GRPO with one group per (problem, "
        "role, turn), the one there is. The report header names it; any other name is an error listing those there are.",
    )
    rollout: Literal["tree", "parallel"] = Field(
        "tree",
        description="`tree`: K branches per (problem, role, turn), continue from the best; `parallel`: K independent episodes.",
    )
    group_size: int = Field(8, description=f"K, samples per group (2 to {MAX_GROUP_SIZE}).")
    clip_eps: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="PPO clip epsilon. It binds only from the second pass over a step's samples (`update_epochs` > 1): "
        "the first pass runs at the sampling policy, where every ratio is 1. TRL's epsilon.",
    )
    clip_eps_high: float | None = Field(
        None,
        gt=0,
        lt=10,
        description="Upper clip epsilon (clip-higher, DAPO; TRL's epsilon_high): the ratio is clipped to "
        "[1 - clip_eps, 1 + clip_eps_high], so a token whose probability was low may gain more per step. Unset: clip_eps.",
    )
    update_epochs: int = Field(
        1,
        ge=1,
        le=16,
        description="Passes over each step's samples, each an optimizer step per adapter, with the PPO ratio taken against "
        "the log-probs of the policy that sampled them (TRL's num_iterations, verl's ppo_epochs). 1: one on-policy step.",
    )
    kl_coef: float = Field(
        0.0, ge=0, description="Weight of the k3 KL to the frozen base (adapter disabled); 0 skips the reference pass."
    )
    lr: float = Field(2e-4, gt=0, description="AdamW learning rate for each adapter (TRL's learning_rate).")
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = Field(
        "constant",
        description="How the learning rate moves over `train.steps` (transformers' get_scheduler; after a warmup, "
        "`linear` falls to 0 at the last step, `cosine` along a half cosine). One schedule step per training step, "
        "whatever `update_epochs`; --resume continues it (the checkpoint holds the scheduler's state).",
    )
    warmup_steps: int = Field(
        0,
        ge=0,
        le=MAX_STEPS,
        description="Training steps over which the learning rate rises linearly from 0 to `lr` (the first step trains "
        "at 0, as transformers' schedules do). 0: no warmup.",
    )
    warmup_ratio: float = Field(
        0.0, ge=0, lt=1, description="Warmup as a share of `train.steps` (rounded up); set this or warmup_steps, not both."
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient-norm clip per adapter.")
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group",
        description="What divides the group-centred rewards. `group`: the group's std (GRPO); at K=2 any two different "
        "rewards become +-0.707, so a 0.1 format difference pushes as hard as a team success. `batch`: the std of all the "
        "step's rewards (every rank's), one scale for every group. `none`: only centred (Dr. GRPO), so an advantage is as "
        "large as the reward difference. Default `group`: measured (one seed each, held-out of 24) on the quickstart from 11: "
        "group 24, batch 24, none 22; on the selection showcase pair, lone from 0 / team from 6: group 1 / 7, batch 1 / 7, "
        "none 2 / 7; so neither alternative did better (docs/credit.md). true/false from older specs mean group/none.",
    )
    filter_zero_std: bool = Field(False, description="Drop groups whose rewards are all equal before the update.")
    tis_cap: float | None = Field(
        None,
        gt=0,
        description="Truncated importance sampling, `sampler: vllm` only: multiply each completion token's "
        "policy-gradient loss by min(pi_trainer / pi_sampler, tis_cap), the trainer's log-prob at sampling time over "
        "vLLM's, detached (1 for tokens vLLM did not record), to correct for vLLM and the trainer disagreeing on the "
        "samples' probabilities. Typically 2 (verl, TRL); logs `tis_weight/<agent>`. Unset: no correction (docs/vllm.md).",
    )

    @model_validator(mode="after")
    def _one_warmup(self) -> AlgorithmSpec:
        if self.warmup_steps and self.warmup_ratio:
            raise ValueError(
                f"warmup_steps ({self.warmup_steps}) and warmup_ratio ({self.warmup_ratio}) both set; keep one of them"
            )
        return self

    @field_validator("scale_rewards", mode="before")
    @classmethod
    def _scale_rewards_was_a_boolean(cls, value: Any) -> Any:
        """Specs saved when scale_rewards was true/false still load (and compare as the same run)."""
        return {True: "group", False: "none"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("group_size")
    @classmethod
    def _k_at_least_two(cls, k: int) -> int:
        if k < 2:
            raise ValueError("group_size must be at least 2: GRPO compares samples within a group")
        if k > MAX_GROUP_SIZE:
            raise ValueError(
                f"group_size {k} is past {MAX_GROUP_SIZE}: the K samples of a group are generated in one batch "
                "and would not fit in memory; GRPO uses 4 to 64"
            )
        return k
