"""Resuming a run: what the loop carries from step to step, and restoring it from the newest usable checkpoint.

`--resume` restores the newest checkpoint that loads (adapters, AdamW states, RNG states, data
cursor, skip counters, role statistics; past a damaged one to the one before) and cuts
`metrics.jsonl` back to its step. A spec that differs from spec.yaml or from the checkpoint's own
is refused unless `--force`; spec.yaml changes only once the checkpoint has loaded; every resume
is appended to `resumes.jsonl`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import torch
from rich.console import Console

from pettingllms_cli import distributed
from pettingllms_cli.envs import Problem
from pettingllms_cli.envs.loading import problems_fingerprint
from pettingllms_cli.errors import UserError
from pettingllms_cli.jsonio import append_jsonl
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.rollout.roles import RoleAssigner
from pettingllms_cli.spec import Experiment
from pettingllms_cli.training.checkpoint import load_checkpoint, remove_stale, usable_checkpoint
from pettingllms_cli.training.rundir import spec_changes, truncate_metrics, write_spec


@dataclass
class Learner:
    """What the loop trains and checkpoints: the adapters (on their bases), their optimizers, the role assignment."""

    team: Team
    optimizers: dict[str, torch.optim.Optimizer]
    roles: RoleAssigner


@dataclass
class RunState:
    """What the loop carries from one step to the next (saved in every checkpoint)."""

    step: int = 0  # steps done
    skipped_in_a_row: dict[str, int] = field(default_factory=dict)  # agent -> consecutive skipped updates
    verdicts: dict[str, list[int]] = field(default_factory=dict)  # judge -> [actions due approval, due sending back] so far


def resume_state(
    learner: Learner, spec: Experiment, run_dir: Path, train_problems: list[Problem], changes: dict, force: bool, console: Console
) -> RunState:
    """Restore the newest complete checkpoint (if any), cut metrics.jsonl back to it, log the resume."""
    for leftover in remove_stale(run_dir):
        console.print(f"removed {leftover.name}: a checkpoint write that was interrupted")
    checkpoint, saved, skipped = usable_checkpoint(run_dir, sorted(spec.agents))
    if (checkpoint is None or saved is None) and skipped:  # checkpoints exist, none loads: restarting would hide it
        raise UserError(f"{run_dir}: no usable checkpoint ({'; '.join(skipped)}); restore one, or start again with --overwrite")
    for note in skipped:
        console.print(f"{note}; resuming from an earlier checkpoint", markup=False, highlight=False)
    if checkpoint is None or saved is None:
        console.print(f"{run_dir}: no complete checkpoint yet; starting from step 0", markup=False, highlight=False)
        truncate_metrics(run_dir / "metrics.jsonl", 0)
        write_spec(run_dir, spec)
        return RunState()
    changes = {**changes, **checkpoint_spec_changes(checkpoint, saved, spec, force)}
    old_data, new_data = saved.get("data", {}).get("fingerprint"), problems_fingerprint(train_problems)
    if old_data != new_data:
        if not force:
            raise UserError(f"{checkpoint}: env.data changed since this checkpoint (other problems); restore it or add --force")
        changes = {**changes, "data": (old_data, new_data)}
    load_checkpoint(
        learner.team, learner.optimizers, checkpoint, saved
    )  # a misfit (another LoRA rank) fails here, before spec.yaml changes
    write_spec(run_dir, spec)
    truncate_metrics(run_dir / "metrics.jsonl", saved["step"])
    if saved["step"] < spec.train.steps:
        (run_dir / "eval_after.json").unlink(missing_ok=True)  # it will describe the longer run
    else:
        console.print(f"{checkpoint.name} reached train.steps={spec.train.steps}: nothing to train; raise --max-steps to go on")
    record = {"time": _now(), "from_step": saved["step"], "steps": spec.train.steps, "forced": bool(changes), "changes": changes}
    append_jsonl(run_dir / "resumes.jsonl", record)
    forced = f" with --force ({len(changes)} change(s))" if changes else ""
    console.print(f"resuming {run_dir} from {checkpoint.name}{forced}", markup=False, highlight=False)
    learner.roles.load_state_dict(saved.get("roles"))  # adaptive role-assignment statistics
    return RunState(saved["step"], dict(saved.get("skipped_in_a_row", {})), dict(saved.get("verdicts", {})))


def checkpoint_spec_changes(checkpoint: Path, saved: dict, spec: Experiment, force: bool) -> dict:
    """Fields where the spec differs from the one the checkpoint was trained with; refused without --force.

    spec.yaml can have been edited or replaced since, so the checkpoint's own copy is the reference.
    """
    if not isinstance(saved.get("spec"), dict):
        return {}  # a checkpoint from before specs were saved in them
    changes = spec_changes(saved["spec"], spec.model_dump(mode="json"))
    if changes and not force:
        listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in list(changes.items())[:4])
        raise UserError(
            f"{checkpoint}: trained with a different spec ({listed}); resume with the spec it was trained with, "
            "or add --force to continue with this one"
        )
    return changes


def resume_everywhere(
    learner: Learner, spec: Experiment, run_dir: Path, train_problems: list[Problem], changes: dict, force: bool, console: Console
) -> RunState:
    """Rank 0 restores the checkpoint and trims the run's files; the other ranks then load the same checkpoint."""
    state = distributed.on_main(resume_state, learner, spec, run_dir, train_problems, changes, force, console)
    if not distributed.is_main() and state.step > 0:
        folder = run_dir / "checkpoints" / f"step_{state.step}"
        saved = load_checkpoint(learner.team, learner.optimizers, folder)
        learner.roles.load_state_dict(saved.get("roles"))
    return state


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
