"""Checkpoints: `checkpoints/step_N/<agent>/` (PEFT adapter), `trainer_state.pt`, written atomically.

A checkpoint is written into `step_N.tmp-<pid>` and renamed into place, so a folder named
`step_N` is always complete; leftovers of an interrupted write are ignored and cleaned up.

`trainer_state.pt` holds everything else a resumed run needs to continue exactly: the step,
every adapter's AdamW state, the RNG states (python, numpy, torch, CUDA), the data cursor and
a fingerprint of the training problems, the role assignment, the skip counters of the guards,
every adapter's learning-rate schedule (`algorithm.lr_scheduler_type`) and the spec the checkpoint
was trained with. It loads with `torch.load(weights_only=True)`: no pickled code. `train.save_total_limit`
prunes the oldest after each save (`prune`).
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
from safetensors import safe_open
from safetensors.torch import load_file

from pettingllms_cli.algorithms.optim import restore_schedule
from pettingllms_cli.errors import UserError
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.training.rundir import spec_changes

STATE_FILE = "trainer_state.pt"
ADAPTER_FILE = "adapter_model.safetensors"
_STEP_RE = re.compile(r"^step_(\d+)$")
TMP_RE = re.compile(r"^step_\d+\.tmp-(\d+)$")  # a checkpoint write that never finished (group: its pid)


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
def save_checkpoint(
    team: Team, optimizers: dict[str, torch.optim.Optimizer], run_dir: Path, step: int, extra: dict | None = None
) -> Path:
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
            "optimizers": {name: opt.state_dict() for name, opt in optimizers.items()},
            "schedulers": {name: sched.state_dict() for name, sched in getattr(optimizers, "schedulers", {}).items()},
            "rng": rng_state(),
            **(extra or {}),
        }
        torch.save(state, tmp / STATE_FILE)  # written last: its presence marks a complete folder
        _fsync(tmp / STATE_FILE)
        if final.exists():
            shutil.rmtree(final)  # an incomplete leftover of the same step
        os.replace(tmp, final)
        prune(run_dir, step, team.spec.train.save_total_limit)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        previous = latest_checkpoint(run_dir)
        kept = f"the previous checkpoint {previous} is intact" if previous else "no earlier checkpoint exists"
        raise UserError(
            f"{final}: cannot write the checkpoint ({e.strerror or e}); {kept}. "
            "Free disk space or fix permissions, then rerun with --resume"
        ) from None
    return final


def prune(run_dir: Path, step: int, limit: int | None) -> list[Path]:
    """Delete the oldest complete checkpoints before `step` so that `limit` remain with it (`step`'s own, which
    --resume reads next, and any newer one are kept); returns them."""
    if limit is None:
        return []
    older = [folder for n, folder in complete_checkpoints(run_dir) if n < step]
    doomed = older[: max(0, len(older) - (limit - 1))]
    for folder in doomed:
        shutil.rmtree(folder)
    return doomed


def _write_adapters(team: Team, folder: Path) -> None:
    staging = folder / ".adapters"
    for agent in sorted(team.spec.agents):
        adapter = team.spec.adapter_of(agent)
        team.model_of(agent).save_pretrained(staging, selected_adapters=[adapter])
        saved = staging / adapter if adapter != "default" else staging
        shutil.copytree(saved, folder / agent)
        shutil.rmtree(staging)


def measure_checkpoint(team: Team, optimizers: dict[str, torch.optim.Optimizer], run_dir: Path) -> int:
    """Bytes one checkpoint of this team takes on disk (in 4 KiB blocks), measured by writing one and deleting it.

    Before the first step AdamW holds no moments yet, so the measured state holds moments shaped
    like the adapters, as every later checkpoint does.
    """
    scratch = run_dir / "checkpoints" / f"step_0.tmp-{os.getpid()}"  # an interrupted write: remove_stale cleans it
    try:
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        _write_adapters(team, scratch)
        moments = {name: _with_moments(opt) for name, opt in optimizers.items()}
        state = {"step": 0, "optimizers": moments, "rng": rng_state(), "spec": team.spec.model_dump(mode="json")}
        torch.save(state, scratch / STATE_FILE)
        return sum(-(-f.stat().st_size // 4096) * 4096 for f in scratch.rglob("*") if f.is_file())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _with_moments(opt: torch.optim.Optimizer) -> dict:
    """The optimizer's state_dict, with two AdamW moments per parameter when it has taken no step yet."""
    state = opt.state_dict()
    if not state["state"]:
        params = [p for group in opt.param_groups for p in group["params"]]
        state["state"] = {
            i: {"step": torch.tensor(1.0), "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
            for i, p in enumerate(params)
        }
    return state


def _fsync(path: Path) -> None:
    with path.open("rb") as f:
        os.fsync(f.fileno())


def remove_stale(run_dir: Path) -> list[Path]:
    """Delete `step_N.tmp-<pid>` folders left by writers that no longer run; returns them."""
    root = run_dir / "checkpoints"
    removed = []
    for child in sorted(root.iterdir()) if root.is_dir() else []:
        match = TMP_RE.match(child.name)
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


def saved_agents(folder: Path) -> list[str]:
    """The agents a checkpoint holds a folder for (complete or not)."""
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")) if folder.is_dir() else []


def check_agent_names(folder: Path, agents: list[str]) -> None:
    """Refuse a checkpoint whose agents carry other names than the spec's (an agent renamed), in one line."""
    saved = saved_agents(folder)
    if any(a not in saved for a in agents) and set(saved) - set(agents):
        raise UserError(
            f"{folder}: the agent names differ: the checkpoint holds {', '.join(saved)}, the spec names "
            f"{', '.join(sorted(agents))}; use the run's own agent names (as in the spec it was trained with)"
        )


def adapter_problem(folder: Path, agents: list[str]) -> str | None:
    """Why `folder` cannot give each agent its adapter (missing, or cut short by a crash or a full disk), or None."""
    for agent in sorted(agents):
        weights = folder / agent / ADAPTER_FILE
        if not weights.is_file():
            return f"partial checkpoint, no adapter for agent {agent!r}"
        try:
            with safe_open(weights, "pt") as f:  # checks that the header's tensors lie inside the file
                f.keys()
        except Exception as e:  # SafetensorError, OSError: a damaged file
            return f"damaged adapter file {agent}/{ADAPTER_FILE} ({type(e).__name__})"
    return None


def load_adapters(team: Team, folder: Path) -> None:
    """Load each agent's saved adapter weights into the team's live adapters; a misfit is one line, not a traceback."""
    agents = sorted(team.spec.agents)
    check_agent_names(folder, agents)
    problem = adapter_problem(folder, agents)
    if problem:
        raise UserError(f"{folder}: {problem}; use an earlier checkpoints/step_N folder")
    for agent in agents:
        try:
            weights = load_file(folder / agent / ADAPTER_FILE)
            set_peft_model_state_dict(team.model_of(agent), weights, adapter_name=team.spec.adapter_of(agent))
        except RuntimeError as e:  # size mismatch: another LoRA rank, target modules or base model than the spec's
            first = str(e).strip().splitlines()[-1].strip()[:160]
            raise UserError(
                f"{folder / agent}: the saved adapter does not fit agent {agent!r} of the spec ({first}); the spec's "
                "lora or model differs from the one it was trained with: restore it, or start a new run with another --out"
            ) from None


def read_state(folder: Path) -> dict:
    """The trainer state of a checkpoint, or a UserError that says what to do with a damaged one."""
    state, problem = _load_state(folder)
    if problem is not None:
        raise UserError(f"{folder / STATE_FILE}: {problem}; delete {folder} to resume from the one before")
    return state


def _load_state(folder: Path) -> tuple[dict, str | None]:
    """(trainer state, None), or ({}, why it cannot be used): truncated, foreign, or loading but not what we write."""
    try:
        state = torch.load(folder / STATE_FILE, weights_only=True)
    except Exception as e:  # a truncated or foreign file: name it, never a traceback
        return {}, f"unreadable checkpoint ({type(e).__name__})"
    problem = state_problem(state)
    return (state, None) if problem is None else ({}, f"damaged checkpoint ({problem})")


STATE_SHAPE = {"optimizers": dict, "rng": dict, "roles": (dict, type(None)), "skipped_in_a_row": dict, "verdicts": dict}
STATE_SHAPE |= {"data": dict, "spec": dict, "schedulers": dict}  # each key's type where present; step, optimizers, rng must be


def state_problem(state: object) -> str | None:
    """What makes a loaded trainer state unusable (not a dict, a key missing or of the wrong type), or None.

    >>> state_problem([]), state_problem({"step": True, "optimizers": {}, "rng": {}})
    ('a list, not a dict', 'step is a bool, not an int')
    """
    if not isinstance(state, dict):
        return f"a {type(state).__name__}, not a dict"
    if type(state.get("step")) is not int:
        return f"step is a {type(state.get('step')).__name__}, not an int" if "step" in state else "no step"
    for key, kind in STATE_SHAPE.items():
        if key in ("optimizers", "rng") and key not in state:
            return f"no {key}"
        if key in state and not isinstance(state[key], kind):
            return f"{key} is a {type(state[key]).__name__}"
    if any(not isinstance(v, dict) for v in state["optimizers"].values()):
        return "an optimizer state that is not a dict"
    missing = [k for k in ("python", "numpy", "torch") if k not in state["rng"]]
    return f"rng lacks {', '.join(missing)}" if missing else None


def usable_checkpoint(run_dir: Path, agents: list[str]) -> tuple[Path | None, dict | None, list[str]]:
    """The newest checkpoint that loads, its trainer state, and a note for each newer one skipped as damaged.

    A checkpoint folder is renamed into place only once complete, but its files can still be
    damaged afterwards (a disk error, a truncated copy): --resume then falls back to the one before.
    """
    skipped = []
    for step, folder in reversed(complete_checkpoints(run_dir)):
        check_agent_names(folder, agents)
        problem = adapter_problem(folder, agents)
        state, trouble = _load_state(folder) if problem is None else ({}, None)
        if trouble is not None:
            problem = f"{STATE_FILE}: {trouble}"
        elif problem is None and state["step"] != step:
            problem = f"{STATE_FILE} holds step {state['step']}"
        if problem is None:
            return folder, state, skipped
        skipped.append(f"skipped {folder.name}: {problem}")
    return None, None, skipped


# fix the base the adapters train on, or their shape
WEIGHT_FIELDS = re.compile(r"^(models\.[^.]+\.(source|revision)|agents\.[^.]+\.(model|lora\..+)|specialization)$")


def weights_spec_changes(spec_now: dict, folder: Path) -> list[str]:
    """`key: old -> new` for each field that shapes the adapters and differs from the spec `folder` was trained with."""

    saved = read_state(folder).get("spec")
    if not isinstance(saved, dict):
        return []  # a checkpoint from before specs were saved in them
    changes = spec_changes(saved, spec_now)
    return [f"{k}: {old!r} -> {new!r}" for k, (old, new) in changes.items() if WEIGHT_FIELDS.match(k)]


def load_checkpoint(team: Team, optimizers: dict[str, torch.optim.Optimizer], folder: Path, state: dict | None = None) -> dict:
    """Restore adapters, optimizers and RNG from a checkpoint; returns the trainer state."""
    state = read_state(folder) if state is None else state
    missing = sorted(set(optimizers) - set(state["optimizers"]))
    if missing:
        raise UserError(f"{folder}: no optimizer state for adapter(s) {missing}; the checkpoint is from another spec")
    load_adapters(team, folder)
    algo = team.spec.algorithm
    for name, opt in optimizers.items():
        try:
            opt.load_state_dict(state["optimizers"][name])
        except (ValueError, RuntimeError, KeyError) as e:  # other parameter groups: the adapters' layout changed
            raise UserError(
                f"{folder}: the optimizer state of adapter {name!r} does not fit the spec ({type(e).__name__}); "
                "the spec's lora or model differs from the one it was trained with: restore it, or start a new run"
            ) from None
        for group in opt.param_groups:  # hyper-parameters follow the spec (they differ only after --force)
            group["lr"], group["weight_decay"] = algo.lr, algo.weight_decay
    for name, sched in getattr(optimizers, "schedulers", {}).items():
        restore_schedule(sched, state.get("schedulers", {}).get(name), state["step"], algo.lr)
    try:
        set_rng_state(state["rng"])
    except (TypeError, ValueError, KeyError, IndexError, RuntimeError, AttributeError) as e:  # hand-edited RNG states
        raise UserError(
            f"{folder / STATE_FILE}: damaged RNG state ({type(e).__name__}); delete {folder} to resume from the one before"
        ) from None
    return state


# --- room for them ----------------------------------------------------------------------------------
def check_disk_space(team: Team, optimizers: dict[str, torch.optim.Optimizer], run_dir: Path) -> None:
    """Refuse to start when the checkpoints this run still writes will not fit.

    The size of one is measured by writing one (adapters, AdamW moments, RNG) to a scratch folder;
    on resume, the checkpoints already on disk are counted out (they already use their space).
    """
    spec = team.spec
    done = max((step for step, _ in complete_checkpoints(run_dir)), default=0)
    saves = saves_left(done, spec.train.steps, spec.train.checkpoint_every)
    saves = min(saves, (spec.train.save_total_limit or saves) + 1)  # pruned after each write: one more at the peak
    if saves == 0:
        return
    try:
        per_checkpoint = measure_checkpoint(team, optimizers, run_dir)
    except OSError as e:
        why = e.strerror or e
        raise UserError(f"{run_dir}: cannot write a checkpoint ({why}); free disk space or choose another --out") from None
    need = saves * per_checkpoint + 2**20
    free = shutil.disk_usage(run_dir).free
    if free < need:
        raise UserError(
            f"{run_dir}: {free / 2**20:.1f} MiB free, but {saves} checkpoint(s) of {per_checkpoint / 2**10:.0f} KiB "
            f"need about {need / 2**20:.1f} MiB; free disk space, raise train.checkpoint_every or choose another --out"
        )


def saves_left(done: int, steps: int, every: int) -> int:
    """Checkpoints a run at step `done` still writes: every `every` steps and the last one.

    A graceful stop writes one more only in place of a later scheduled one (the last step always is).

    >>> saves_left(0, 16, 4), saves_left(12, 20, 4), saves_left(16, 16, 4), saves_left(0, 10, 4)
    (4, 2, 0, 3)
    """
    return sum(1 for s in range(done + 1, steps + 1) if s % every == 0 or s == steps)


# --- files ----------------------------------------------------------------------------------
