"""Checkpoints: `checkpoints/step_N/<agent>/` (PEFT adapter), `trainer_state.pt`, written atomically.

A checkpoint is written into `step_N.tmp-<pid>` and renamed into place, so a folder named
`step_N` is always complete; leftovers of an interrupted write are ignored and cleaned up.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch
from peft import set_peft_model_state_dict
from safetensors.torch import load_file

from pettingllms_cli.errors import UserError
from pettingllms_cli.policy import Team

STATE_FILE = "trainer_state.pt"
_STEP_RE = re.compile(r"^step_(\d+)$")


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(team: Team, run_dir: Path, step: int, extra: dict | None = None) -> Path:
    """Write every agent's adapter plus optimizer and RNG state for `step` (steps done)."""
    root = run_dir / "checkpoints"
    final = root / f"step_{step}"
    tmp = root / f"step_{step}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    staging = tmp / ".adapters"
    for agent in sorted(team.spec.agents):
        adapter = team.spec.adapter_of(agent)
        model = team.model_of(agent)
        model.save_pretrained(staging, selected_adapters=[adapter])
        saved = staging / adapter if adapter != "default" else staging
        shutil.copytree(saved, tmp / agent)
    shutil.rmtree(staging)
    state = {
        "step": step,
        "optimizers": {name: opt.state_dict() for name, opt in team.optimizers.items()},
        "rng": rng_state(),
        **(extra or {}),
    }
    torch.save(state, tmp / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, folder) of complete checkpoints, oldest first."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_RE.match(child.name)
        if match and (child / STATE_FILE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = complete_checkpoints(run_dir)
    return found[-1][1] if found else None


def load_adapters(team: Team, folder: Path) -> None:
    """Load each agent's saved adapter weights into the team's live adapters."""
    for agent in sorted(team.spec.agents):
        weights = folder / agent / "adapter_model.safetensors"
        if not weights.is_file():
            raise UserError(f"{folder}: no adapter for agent {agent!r}; the checkpoint is partial or from another spec")
        set_peft_model_state_dict(team.model_of(agent), load_file(weights), adapter_name=team.spec.adapter_of(agent))


def load_checkpoint(team: Team, folder: Path) -> dict:
    """Restore adapters, optimizers and RNG from a checkpoint; returns the trainer state."""
    load_adapters(team, folder)
    state = torch.load(folder / STATE_FILE, weights_only=False)
    for name, opt in team.optimizers.items():
        opt.load_state_dict(state["optimizers"][name])
    set_rng_state(state["rng"])
    return state
