"""What `pettingllms eval TARGET` names (a run directory, a checkpoint folder or a spec file), loaded and scored.

It lives with training because it reads checkpoints; the scoring itself is analysis/evaluate.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pettingllms_cli.analysis.evaluate import eval_problems, evaluate
from pettingllms_cli.analysis.rollout_settings import role_assigner
from pettingllms_cli.envs.loading import HELD_OUT_SEED
from pettingllms_cli.errors import UserError
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.spec import Experiment, load_spec
from pettingllms_cli.training.checkpoint import (
    STATE_FILE,
    TMP_RE,
    adapter_problem,
    check_agent_names,
    complete_checkpoints,
    load_adapters,
    read_state,
    weights_spec_changes,
)


# --- what `pettingllms eval TARGET` names ------------------------------------------------------
@dataclass
class Target:
    spec: Experiment
    checkpoint: Path | None  # None: the untrained base models
    kind: str  # "run" | "checkpoint" | "spec"


def resolve_target(path: Path) -> Target:
    """A spec file, a run directory (its newest complete checkpoint) or one checkpoint folder."""
    from pettingllms_cli.training.checkpoint import STATE_FILE

    if path.is_file():
        return Target(load_spec(path), None, "spec")
    if not path.is_dir():
        raise UserError(f"{path}: no such file or directory; pass a run directory, a checkpoint folder or a spec file")
    if (path / "spec.yaml").is_file() and not _looks_like_checkpoint(path):
        found = complete_checkpoints(path)
        if not found:
            raise UserError(
                f"{path}: the run has no complete checkpoint (interrupted before the first save?); "
                f"resume it with `pettingllms train --resume`, or evaluate {path / 'spec.yaml'} for the untrained base"
            )
        spec = load_spec(path / "spec.yaml")
        return Target(spec, _check_adapters(spec, found[-1][1]), "run")
    if _looks_like_checkpoint(path):
        spec_file = path.parent.parent / "spec.yaml"
        if TMP_RE.match(path.name) or not (path / STATE_FILE).is_file():
            why = "an unfinished write" if TMP_RE.match(path.name) else f"no {STATE_FILE}"
            raise UserError(f"{path}: partial checkpoint ({why}); use a complete step_N folder or the run directory")
        if not spec_file.is_file():
            raise UserError(f"{path}: checkpoint without its run's spec.yaml at {spec_file}; evaluate the run directory instead")
        spec = load_spec(spec_file)
        return Target(spec, _check_adapters(spec, path), "checkpoint")
    raise UserError(
        f"{path}: not a run directory (no spec.yaml) nor a checkpoint folder; "
        "pass a run directory, checkpoints/step_N or a spec file"
    )


def _check_adapters(spec: Experiment, folder: Path) -> Path:
    """Fail before any weight loads when the checkpoint cannot serve the spec: agents named otherwise, an
    adapter file missing or damaged, or a spec.yaml edited since (another LoRA rank or model)."""
    check_agent_names(folder, sorted(spec.agents))
    problem = adapter_problem(folder, sorted(spec.agents))
    if problem:
        raise UserError(f"{folder}: {problem}; use an earlier complete step_N folder")
    changed = weights_spec_changes(spec.model_dump(mode="json"), folder)
    if changed:
        raise UserError(
            f"{folder}: the run's spec.yaml differs from the spec this checkpoint was trained with ({'; '.join(changed[:3])}); "
            "restore spec.yaml"
        )
    return folder


def _looks_like_checkpoint(path: Path) -> bool:
    return (path / STATE_FILE).is_file() or path.name.startswith("step_") or path.parent.name == "checkpoints"


def run_eval(
    target: Path,
    data: str | None = None,
    split: str = "test",
    episodes: int | None = None,
    seed: int | None = None,
    temperature: float | None = None,
) -> dict:
    """Resolve, load and score TARGET; the result adds what was scored to `evaluate`'s dict."""
    resolved = resolve_target(target)
    spec = resolved.spec
    if data is not None:
        spec = spec.model_copy(update={"env": spec.env.model_copy(update={"data": data})})
    seed = HELD_OUT_SEED if seed is None else seed  # default: the problems train scored before and after
    problems = eval_problems(spec, split, seed, episodes or spec.env.eval_problems)  # before any weight loads
    team, roles = Team(spec), role_assigner(spec)
    if resolved.checkpoint is not None:
        load_adapters(team, resolved.checkpoint)
        roles.load_state_dict(read_state(resolved.checkpoint).get("roles"))  # who plays which role best
    result = evaluate(team, spec, problems, temperature=temperature, seed=seed, assignment=roles.best())
    step = resolved.checkpoint.name.removeprefix("step_") if resolved.checkpoint else "0"
    return {
        "target": str(target),
        "kind": resolved.kind,
        "checkpoint": str(resolved.checkpoint) if resolved.checkpoint else None,
        "step": int(step) if step.isdigit() else None,
        "spec": spec.name,
        "env": spec.env.name,
        "data": spec.env.data,
        "split": split,
        "seed": seed,
        **result,
    }
