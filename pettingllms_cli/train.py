"""The training loop, top to bottom: rollout -> reward -> advantage -> loss -> step -> log -> checkpoint."""

from __future__ import annotations

import json
import random
import shutil
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pettingllms_cli.algorithms import group_advantages, zero_std_groups
from pettingllms_cli.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from pettingllms_cli.envs import ENVS, Problem
from pettingllms_cli.errors import UserError
from pettingllms_cli.evaluate import episode_metrics, evaluate, make_envs
from pettingllms_cli.policy import Team
from pettingllms_cli.report import write_report
from pettingllms_cli.rollout import Rollout, Sample, parallel_rollout, tree_rollout
from pettingllms_cli.spec import Experiment, dump_spec
from pettingllms_cli.update import AgentStats, update


def train(spec: Experiment, run_dir: Path, resume: bool = False, overwrite: bool = False, console: Console | None = None) -> Path:
    console = console or Console()
    prepare_run_dir(spec, run_dir, resume, overwrite)
    seed_everything(spec.seed)
    team = Team(spec)
    train_problems, eval_problems = load_problems(spec)

    start = 0
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if checkpoint is not None:
        start = load_checkpoint(team, checkpoint)["step"]
        truncate_metrics(run_dir / "metrics.jsonl", start)
        console.print(f"resuming {run_dir} from {checkpoint.name}")
    if start == 0 or not (run_dir / "eval_before.json").is_file():
        write_json(run_dir / "eval_before.json", evaluate(team, spec, eval_problems))

    with progress_bar(console) as bar:
        task = bar.add_task(spec.name, total=spec.train.steps, completed=start, status="")
        for step in range(start, spec.train.steps):
            began = time.perf_counter()
            torch.manual_seed(spec.seed * 1_000_003 + step)  # sampling depends on (seed, step) only
            problems = problems_for_step(train_problems, spec, step)
            rollout = collect(team, spec, problems)  # rollout + reward
            dropped = assign_advantages(spec, rollout.samples)  # advantage per group
            stats = update(team, [s for s in rollout.samples if s.group not in dropped])  # loss + optimizer step
            metrics = step_metrics(spec, step + 1, rollout, stats, time.perf_counter() - began)
            append_jsonl(run_dir / "metrics.jsonl", metrics)  # log
            if (step + 1) % spec.train.checkpoint_every == 0 or step + 1 == spec.train.steps:
                save_checkpoint(team, run_dir, step + 1)  # checkpoint
            bar.update(task, advance=1, status=status_line(metrics))

    after = evaluate(team, spec, eval_problems)
    write_json(run_dir / "eval_after.json", after)
    write_report(run_dir)
    console.print(
        f"done: held-out success {read_json(run_dir / 'eval_before.json')['team_success_rate']:.2f} -> "
        f"{after['team_success_rate']:.2f}; run directory {run_dir}"
    )
    return run_dir


# --- setup ----------------------------------------------------------------------------------
def prepare_run_dir(spec: Experiment, run_dir: Path, resume: bool, overwrite: bool) -> None:
    """Create the run directory (or check it for --resume) and write the resolved spec."""
    spec_file = run_dir / "spec.yaml"
    if resume and spec_file.is_file():
        saved = yaml.safe_load(spec_file.read_text())
        now = spec.model_dump(mode="json")
        for tree in (saved, now):
            tree.get("train", {}).pop("steps", None)
        if saved != now:
            raise UserError(f"{run_dir}: --resume with a different spec than the run's spec.yaml; use the same spec or another --out")
    elif run_dir.exists() and any(run_dir.iterdir()) and not resume:
        if not overwrite:
            raise UserError(f"{run_dir} already holds a run; pass --resume to continue it, --overwrite to replace it, or --out DIR")
        shutil.rmtree(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        spec_file.write_text(dump_spec(spec))
    except OSError as e:
        raise UserError(f"{run_dir}: cannot write the run directory ({e.strerror}); choose another --out") from None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def load_problems(spec: Experiment) -> tuple[list[Problem], list[Problem]]:
    env_cls = ENVS[spec.env.name]
    n_train = max(spec.train.steps * spec.train.problems_per_step, 64)
    train_problems = env_cls.load_problems(spec.env.data, "train", spec.seed, n_train)
    eval_problems = env_cls.load_problems(spec.env.data, "test", spec.seed, spec.env.eval_problems)
    return train_problems, eval_problems


def problems_for_step(problems: list[Problem], spec: Experiment, step: int) -> list[Problem]:
    """The step's batch: epochs over a seeded permutation, so the cursor is a function of the step."""
    n = spec.train.problems_per_step
    batch = []
    for i in range(step * n, (step + 1) * n):
        epoch, pos = divmod(i, len(problems))
        order = list(range(len(problems)))
        random.Random(spec.seed * 7919 + epoch).shuffle(order)
        batch.append(problems[order[pos]])
    return batch


# --- one step -------------------------------------------------------------------------------
def collect(team: Team, spec: Experiment, problems: list[Problem]) -> Rollout:
    envs = make_envs(spec, problems)
    started = time.perf_counter()
    if spec.algorithm.rollout == "tree":
        rollout = tree_rollout(team, spec, envs, spec.algorithm.group_size)
    else:
        rollout = parallel_rollout(team, spec, envs, spec.algorithm.group_size)
    rollout.seconds = time.perf_counter() - started
    return rollout


def assign_advantages(spec: Experiment, samples: list[Sample]) -> set:
    """Set each sample's group-normalised advantage; return the groups filtered out (zero std)."""
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    groups = [s.group for s in samples]
    advantages = group_advantages(rewards, groups, scale=spec.algorithm.scale_rewards)
    for s, a in zip(samples, advantages.tolist()):
        s.advantage = a
    return zero_std_groups(rewards, groups) if spec.algorithm.filter_zero_std else set()


def step_metrics(spec: Experiment, step: int, rollout: Rollout, stats: dict[str, AgentStats], seconds: float) -> dict:
    """One metrics.jsonl line (DESIGN.md §6 keys)."""
    metrics: dict = {"step": step, **episode_metrics(rollout.episodes)}
    metrics["sample_success_rate"] = _mean([s.team_reward > 0 for s in rollout.samples])
    by_agent: dict[str, list[Sample]] = defaultdict(list)
    for s in rollout.samples:
        by_agent[s.agent].append(s)
    flat = zero_std_groups(torch.tensor([s.reward for s in rollout.samples]), [s.group for s in rollout.samples])
    for agent in sorted(spec.agents):
        own = by_agent.get(agent, [])
        groups = {s.group for s in own}
        st = stats[agent]
        metrics[f"reward/{agent}"] = _mean([s.reward for s in own])
        metrics[f"reward_team/{agent}"] = _mean([s.team_reward for s in own])
        metrics[f"reward_local/{agent}"] = _mean([s.local_reward for s in own])
        metrics[f"loss/{agent}"] = st.loss
        metrics[f"kl/{agent}"] = st.kl
        metrics[f"entropy/{agent}"] = st.entropy
        metrics[f"clip_frac/{agent}"] = st.clip_frac
        metrics[f"grad_norm/{agent}"] = st.grad_norm
        metrics[f"zero_std_frac/{agent}"] = len(groups & flat) / len(groups) if groups else 0.0
        metrics[f"skipped_updates/{agent}"] = int(st.skipped)
    metrics["tokens_generated"] = rollout.tokens
    metrics["tokens_per_second"] = rollout.tokens / seconds if seconds > 0 else 0.0
    metrics["sampling_tokens_per_second"] = rollout.tokens / rollout.seconds if rollout.seconds > 0 else 0.0
    metrics["seconds"] = round(seconds, 3)
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in metrics.items()}


def _mean(values: list) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def status_line(m: dict) -> str:
    return f"success {m['team_success_rate']:.2f}  sampled {m['sample_success_rate']:.2f}  {m['tokens_per_second']:.0f} tok/s"


def progress_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"), console=console,
    )


# --- files ----------------------------------------------------------------------------------
def append_jsonl(path: Path, record: dict) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def truncate_metrics(path: Path, step: int) -> None:
    """Keep only the lines of steps <= `step`, so a resumed run neither loses nor repeats a step."""
    if path.is_file():
        lines = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
        path.write_text("".join(line + "\n" for line in lines))


def write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, default=str))


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())
