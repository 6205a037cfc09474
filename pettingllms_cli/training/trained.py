"""A trained team as `play` and `export` use it: the run's checkpoint (the newest, or `--checkpoint N`), its spec and
the role assignment its training found, loaded into a `Team` on request."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pettingllms_cli.analysis.rollout_settings import role_assigner
from pettingllms_cli.errors import UserError
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.rollout.roles import Assignment
from pettingllms_cli.spec import Experiment
from pettingllms_cli.training.checkpoint import complete_checkpoints, load_adapters, read_state
from pettingllms_cli.training.eval_target import resolve_target


@dataclass
class Trained:
    spec: Experiment
    checkpoint: Path  # checkpoints/step_N
    step: int | None
    run_dir: Path | None  # None: a checkpoint folder outside a run layout

    def assignment(self) -> Assignment:
        """role -> agent: the best its role assignment found (the static roles unless `assignment` was learned)."""
        roles = role_assigner(self.spec)
        roles.load_state_dict(read_state(self.checkpoint).get("roles"))
        return roles.best()

    def team(self) -> Team:
        """The bases with this checkpoint's adapters loaded."""
        team = Team(self.spec)
        load_adapters(team, self.checkpoint)
        return team


def trained(run: Path, checkpoint: int | None = None) -> Trained:
    """RUN (a run directory or a checkpoints/step_N folder) at its newest complete checkpoint, or at step `checkpoint`."""
    run = Path(run)
    if run.is_file():
        raise UserError(f"{run}: a file, not a run; pass the --out folder of `pettingllms train` (or its checkpoints/step_N)")
    if checkpoint is not None:
        if not (run / "spec.yaml").is_file():
            raise UserError(f"{run}: not a run directory (no spec.yaml); --checkpoint needs the --out folder of `train`")
        folder = run / "checkpoints" / f"step_{checkpoint}"
        if not folder.is_dir():
            steps = ", ".join(str(n) for n, _ in complete_checkpoints(run)) or "none"
            raise UserError(f"{run}: no checkpoint step_{checkpoint} (complete ones: {steps}); pick one with --checkpoint N")
        run = folder
    target = resolve_target(run)
    step = target.checkpoint.name.removeprefix("step_")
    run_dir = target.checkpoint.parent.parent if target.checkpoint.parent.name == "checkpoints" else None
    return Trained(target.spec, target.checkpoint, int(step) if step.isdigit() else None, run_dir)
