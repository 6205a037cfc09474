"""The `train` section: the training budget, sampling, checkpoints, logging and held-out scoring."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from pettingllms_cli.spec.limits import MAX_PROBLEMS, MAX_PROBLEMS_PER_STEP, MAX_STEPS
from pettingllms_cli.spec.strict import Strict


class TrainSpec(Strict):
    steps: int = Field(
        20, ge=1, le=MAX_STEPS, description=f"Optimizer steps (each over one batch of problems), 1 to {MAX_STEPS:,}."
    )
    problems_per_step: int = Field(
        4, ge=1, le=MAX_PROBLEMS_PER_STEP, description=f"Problems rolled out per step, 1 to {MAX_PROBLEMS_PER_STEP:,}."
    )
    max_new_tokens: int = Field(24, ge=1, le=4096, description="Tokens sampled per action at most.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature (log-probs use the same temperature).")
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Nucleus sampling: sample among the most likely tokens whose probabilities add up to top_p (after "
        "temperature and top_k). The update's log-probs are those of this truncated, renormalised distribution, the one "
        "sampled from (docs/config.md). 1: the whole vocabulary.",
    )
    top_k: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="Sample among the top_k most likely tokens only (log-probs as for top_p). 0: no limit.",
    )
    max_prompt_length: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Most tokens in a prompt: longer ones drop their oldest turns first (never the system prompt or the "
        "newest message), then keep their last max_prompt_length tokens, as TRL truncates on the left. Unset: the "
        "model's context less the tokens sampled.",
    )
    checkpoint_every: int = Field(
        5,
        ge=1,
        le=MAX_STEPS,
        description="Save adapters and optimizer state every N steps (and at the end); N up to train.steps' bound.",
    )
    save_total_limit: int | None = Field(
        None,
        ge=1,
        le=MAX_STEPS,
        description="Keep only the newest N checkpoints, deleting older ones after each save (the newest, which "
        "--resume reads, is never deleted). Unset: keep all.",
    )
    log_every: int = Field(
        1,
        ge=1,
        le=MAX_STEPS,
        description="Refresh the progress bar's status (success, tokens/s) every N steps; N up to train.steps' bound.",
    )
    max_skipped_in_a_row: int = Field(
        3,
        ge=1,
        le=MAX_STEPS,
        description="Stop the run when an agent's update is skipped (non-finite loss or gradient) this many steps in a row "
        "(up to train.steps' bound).",
    )
    eval_every: int | None = Field(
        None,
        description="Every N steps, score the first `eval_subset` held-out problems greedily and log "
        "`heldout_success_rate` (and `heldout_mean_attempts_to_success`) in metrics.jsonl; `compare` takes convergence "
        "from this held-out curve. 1 <= N <= steps. Unset: held-out scores only before and after training.",
    )
    eval_subset: int = Field(
        8,
        ge=1,
        le=MAX_PROBLEMS,
        description="Held-out problems scored every `eval_every` steps: the first N of the held-out set (fixed), "
        f"1 to {MAX_PROBLEMS:,}.",
    )
    stop_at_actions: int | None = Field(
        None,
        ge=1,
        le=10**15,
        description="Stop once the run's actions (sampled, play-outs and intents, summed over its steps: `actions_total`) "
        "reach N, 1 to 10^15; `steps` is then an upper bound. `compare --budget actions` sets it. Unset: run `steps` steps.",
    )
    stop_at_tokens: int | None = Field(
        None,
        ge=1,
        le=10**15,
        description="Stop once the run's sampled tokens (play-outs and intents in: `tokens_total`) reach N, 1 to 10^15; "
        "`steps` is then an upper bound. `compare --budget tokens` sets it. Unset: run `steps` steps.",
    )
    report_to: list[Literal["tensorboard", "wandb", "trackio"]] = Field(
        default_factory=list,
        description="Experiment trackers that also get every metrics.jsonl row (docs/tracking.md): any of tensorboard "
        "(event files in the run directory's tb/), wandb, trackio. Default: none.",
    )

    @model_validator(mode="after")
    def _eval_every_fits(self) -> TrainSpec:
        if self.eval_every is not None and not 1 <= self.eval_every <= self.steps:
            raise ValueError(
                f"eval_every: {self.eval_every} must be between 1 and train.steps ({self.steps}); "
                f"e.g. eval_every: {max(1, self.steps // 4)}, or leave it out to score held-out problems only before and after"
            )
        return self
