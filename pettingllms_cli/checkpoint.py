"""Checkpoints: `checkpoints/step_N/<agent>/` (PEFT adapter), `trainer_state.pt`, written atomically.

A checkpoint is written into `step_N.tmp-<pid>` and renamed into place, so a folder named
`step_N` is always complete; leftovers of an interrupted write are ignored and cleaned up.

`trainer_state.pt` holds everything else a resumed run needs to continue exactly: the step,
every adapter's AdamW state, the RNG states (python, numpy, torch, CUDA), the data cursor and
a fingerprint of the training problems, the role assignment, the skip counters of the guards
and the spec the checkpoint was trained with. The learning rate is constant (no scheduler).
It loads with `torch.load(weights_only=True)`: no pickled code.
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
ADAPTER_FILE = "adapter_model.safetensors"
_STEP_RE = re.compile(r"^step_(\d+)$")
_TMP_RE = re.compile(r"^step_\d+\.tmp-(\d+)$")


# --- RNG --------------------------------------------------------------------------------------
def rng_state() -> dict:
    """Python, numpy, torch (and CUDA) generator states, as tensors and plain values."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --- save ---------------------------------------------------------------------------------------
def save_checkpoint(team: Team, run_dir: Path, step: int, extra: dict | None = None) -> Path:
    """Write every agent's adapter plus optimizer and RNG state for `step` (steps done), atomically.

    A failed write (full disk, unwritable folder) removes its temporary folder and raises a
    UserError that names the previous checkpoint, which is left untouched.
    """
    root = run_dir / "checkpoints"
    final = root / f"step_{step}"
    tmp = root / f"step_{step}.tmp-{os.getpid()}"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        _write_adapters(team, tmp)
        state = {
            "step": step,
            "optimizers": {name: opt.state_dict() for name, opt in team.optimizers.items()},
            "rng": rng_state(),
            **(extra or {}),
        }
        torch.save(state, tmp / STATE_FILE)  # written last: its presence marks a complete folder
        _fsync(tmp / STATE_FILE)
        if final.exists():
            shutil.rmtree(final)  # an incomplete leftover of the same step
        os.replace(tmp, final)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        previous = latest_checkpoint(run_dir)
        kept = f"the previous checkpoint {previous} is intact" if previous else "no earlier checkpoint exists"
        raise UserError(
            f"{final}: cannot write the checkpoint ({e.strerror or e}); {kept}. "
            "Free disk space or fix permissions, then rerun with --resume"
        ) from None
    return final


def _write_adapters(team: Team, folder: Path) -> None:
    staging = folder / ".adapters"
    for agent in sorted(team.spec.agents):
        adapter = team.spec.adapter_of(agent)
        team.model_of(agent).save_pretrained(staging, selected_adapters=[adapter])
        saved = staging / adapter if adapter != "default" else staging
        shutil.copytree(saved, folder / agent)
        shutil.rmtree(staging)


def _fsync(path: Path) -> None:
    with path.open("rb") as f:
        os.fsync(f.fileno())


def remove_stale(run_dir: Path) -> list[Path]:
    """Delete `step_N.tmp-<pid>` folders left by writers that no longer run; returns them."""
    root = run_dir / "checkpoints"
    removed = []
    for child in sorted(root.iterdir()) if root.is_dir() else []:
        match = _TMP_RE.match(child.name)
        if match and not _alive(int(match.group(1))):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # our own leftover from an earlier failed attempt
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- find and load --------------------------------------------------------------------------------
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


def latest_checkpoint(run_dir: Path, agents: list[str] | None = None) -> Path | None:
    """The newest complete checkpoint; with `agents`, one that also holds each agent's adapter."""
    for _, folder in reversed(complete_checkpoints(run_dir)):
        if all((folder / agent / ADAPTER_FILE).is_file() for agent in agents or []):
            return folder
    return None


def load_adapters(team: Team, folder: Path) -> None:
    """Load each agent's saved adapter weights into the team's live adapters."""
    for agent in sorted(team.spec.agents):
        weights = folder / agent / ADAPTER_FILE
        if not weights.is_file():
            raise UserError(f"{folder}: no adapter for agent {agent!r}; the checkpoint is partial or from another spec")
        set_peft_model_state_dict(team.model_of(agent), load_file(weights), adapter_name=team.spec.adapter_of(agent))


def read_state(folder: Path) -> dict:
    """The trainer state of a checkpoint, or a UserError that says what to do with a damaged one."""
    try:
        return torch.load(folder / STATE_FILE, weights_only=True)
    except Exception as e:  # a truncated or foreign file: name it, never a traceback
        why = f"{folder / STATE_FILE}: unreadable checkpoint ({type(e).__name__})"
        raise UserError(f"{why}; delete {folder} to resume from the one before") from None


def load_checkpoint(team: Team, folder: Path) -> dict:
    """Restore adapters, optimizers and RNG from a checkpoint; returns the trainer state."""
    state = read_state(folder)
    missing = sorted(set(team.optimizers) - set(state["optimizers"]))
    if missing:
        raise UserError(f"{folder}: no optimizer state for adapter(s) {missing}; the checkpoint is from another spec")
    load_adapters(team, folder)
    algo = team.spec.algorithm
    for name, opt in team.optimizers.items():
        opt.load_state_dict(state["optimizers"][name])
        for group in opt.param_groups:  # hyper-parameters follow the spec (they differ only after --force)
            group["lr"], group["weight_decay"] = algo.lr, algo.weight_decay
    set_rng_state(state["rng"])
    return state
