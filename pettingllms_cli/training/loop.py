"""The training loop, top to bottom: rollout -> reward -> advantage -> loss -> step -> log -> checkpoint.

Reliability promises (tested in tests/test_resume.py, test_determinism.py, test_guards.py,
test_signals.py, test_run_lock.py, test_damage.py):
- One writer: the run holds the run directory's lock (lock.py) from start to end; a
  second train, `--resume` or `--overwrite` on it is refused with the holder's pid.
- Resume (resume.py): `--resume` restores the newest checkpoint that loads and cuts `metrics.jsonl`
  back to its step, so a run killed at any moment and resumed ends like an uninterrupted one.
- Determinism: every step reseeds torch from (seed, step) and picks its problems as a pure
  function of (seed, step), so on CPU the same spec and seed give the same metrics (except the
  wall-clock fields in `WALL_CLOCK_KEYS`) and the same adapters. On GPU, cuBLAS/cuDNN kernels
  and sampling are not bit-reproducible, so repeats and resumes agree only approximately.
- Graceful stop: SIGINT/SIGTERM finish the current step, write a checkpoint and return; in the
  final held-out eval (after the last checkpoint) they stop at once and say how to finish.
- Budget: with `train.stop_at_actions` / `stop_at_tokens` set (`compare` sets them), the run stops after the
  step whose running total reaches it, checkpoints that step and finishes; `train.steps` is then an upper bound.
- Guards: a non-finite loss or gradient skips that agent's update (update.py); after
  `train.max_skipped_in_a_row` in a row the run stops with a message. The output folder is
  probed and the disk space checked before training starts.
"""

from __future__ import annotations

import contextlib
import random
import shlex
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console

from pettingllms_cli import distributed
from pettingllms_cli.algorithms.distill import distill
from pettingllms_cli.algorithms.optim import make_optimizers
from pettingllms_cli.algorithms.update import AgentStats, update
from pettingllms_cli.analysis.evaluate import evaluate
from pettingllms_cli.analysis.report import read_metrics, write_report
from pettingllms_cli.analysis.rollout_settings import role_assigner, rollout_settings
from pettingllms_cli.envs import Problem
from pettingllms_cli.envs.loading import HELD_OUT_SEED, load_split, problems_fingerprint
from pettingllms_cli.errors import UserError
from pettingllms_cli.jsonio import append_jsonl, clean_metrics, read_json, write_json
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.policy.sampler import Sampler
from pettingllms_cli.policy.vllm_sampler import VllmSampler
from pettingllms_cli.rollout.collect import collect
from pettingllms_cli.spec import Experiment
from pettingllms_cli.training.advantages import compute_advantages, tally_verdicts, without_groups
from pettingllms_cli.training.checkpoint import (
    STATE_FILE,
    check_disk_space,
    latest_checkpoint,
    save_checkpoint,
)
from pettingllms_cli.training.dtypes import record_dtypes
from pettingllms_cli.training.graceful import GracefulStop, StopNow
from pettingllms_cli.training.lock import writer_lock
from pettingllms_cli.training.metrics import budget_reached, heldout_metrics, running_totals, step_metrics, team_metrics
from pettingllms_cli.training.progress import progress_bar, status_line
from pettingllms_cli.training.ranks import ranks_adapters_sha, reduce_step, shard_problems, stopped_anywhere
from pettingllms_cli.training.resume import Learner, RunState, resume_everywhere
from pettingllms_cli.training.rundir import prepare_run_dir
from pettingllms_cli.training.tracking import Trackers, check_trackers
from pettingllms_cli.training.update_settings import distill_settings, optim_settings, update_settings

WALL_CLOCK_KEYS = (  # vary run to run
    "seconds",
    "tokens_per_second",
    "sampling_tokens_per_second",
    "peak_rss_mb",
    "cuda_peak_mb",
    "heldout_seconds",
    "on_policy_seconds",
    "training_seconds",
)
TRAIN_POOL = 10_000  # training problems drawn from; fixed so that extending train.steps keeps the data order


def train(
    spec: Experiment,
    run_dir: Path,
    resume: bool = False,
    overwrite: bool = False,
    console: Console | None = None,
    force: bool = False,
    resume_command: str | None = None,
) -> Path:
    console = console or Console()
    if not distributed.is_main():
        console = Console(quiet=True)  # rank 0 alone prints
    if resume_command is None:
        resume_command = shlex.join(["pettingllms", "train", f"{run_dir}/spec.yaml", "--out", f"{run_dir}", "--resume"])
    problems = load_problems(spec)  # bad data fails here, before the run directory or any model exists
    check_trackers(spec.train.report_to)  # a missing wandb/trackio too
    with writer_lock(run_dir, f"then resume with: {resume_command}"):  # one writer per run directory
        return train_locked(spec, run_dir, resume, overwrite, console, force, resume_command, problems)


def train_locked(
    spec: Experiment,
    run_dir: Path,
    resume: bool,
    overwrite: bool,
    console: Console,
    force: bool,
    resume_command: str,
    problems: tuple[list[Problem], list[Problem]],
) -> Path:
    """`train` once this process holds the run directory's writer lock."""
    changes = distributed.on_main(prepare_run_dir, spec, run_dir, resume, overwrite, force)  # rank 0 alone writes files
    changes |= distributed.on_main(record_dtypes, spec, run_dir, resume, force)  # resolved.json; --resume keeps the dtype
    with GracefulStop() as stop, contextlib.ExitStack() as closing:
        seed_everything(spec.seed)
        with distributed.main_first():  # rank 0 fills the model cache before the others read it
            team = Team(spec)  # bases and adapters
        sampler = make_sampler(team, spec, closing)  # where rollouts sample
        optimizers = make_optimizers(team, optim_settings(spec))  # one AdamW per adapter
        updating, distilling = update_settings(spec), distill_settings(spec)  # what the algorithms read of the spec
        roles = role_assigner(spec)  # who plays which role in each episode
        settings = rollout_settings(spec)  # what the rollout reads of the spec
        distributed.on_main(check_disk_space, team, optimizers, run_dir)
        train_problems, eval_problems = problems  # (training pool, held-out), loaded before the run directory
        has_before = distributed.on_main(lambda: read_json(run_dir / "eval_before.json") is not None)  # damaged: redo
        if not has_before and not stopped_anywhere(stop):
            before = evaluate(team, spec, eval_problems, assignment=roles.best())  # the untrained team (each rank its shard)
            if distributed.is_main():
                write_json(run_dir / "eval_before.json", before)
        learner = Learner(team, optimizers, roles)
        state = resume_everywhere(learner, spec, run_dir, train_problems, changes, force, console) if resume else RunState()
        sampler.push_adapters()  # a resume loaded other adapters
        trackers = closing.enter_context(Trackers(spec, run_dir, state.step))  # train.report_to
        spent = distributed.on_main(spent_so_far, run_dir, state.step)  # train.stop_at_*: the steps already done count
        by_budget = spec.train.stop_at_actions is not None or spec.train.stop_at_tokens is not None  # steps: upper bound

        with progress_bar(console) as bar:
            total = None if by_budget else spec.train.steps  # a budget's step count is known only when it is reached
            task = bar.add_task(spec.name, total=total, completed=min(state.step, spec.train.steps), status="")
            for step in range(state.step, spec.train.steps):
                if stopped_anywhere(stop) or budget_reached(spec, spent):
                    break
                began = time.perf_counter()
                torch.manual_seed(step_seed(spec.seed, step))  # sampling depends on (seed, step) only
                problems = problems_for_step(train_problems, spec, step)
                assignment = roles.assign(step, len(problems))  # role -> agent of each episode, alike on every rank
                # rollout: this rank's share of the step (the one split over ranks)
                rollout = collect(sampler, settings, *shard_problems(problems, assignment))
                trainable = rollout.samples + rollout.intents  # actions, and intents under `parallel` + intent protocol
                # advantages, beside the samples (reduced over ranks: the judges' tally, a batch std)
                verdicts = tally_verdicts(spec, state.verdicts, trainable)  # reward.balance_verdicts: judges' cases so far
                advantages, dropped = compute_advantages(spec, trainable, verdicts)
                sampler_logp = sampler.take_logprobs()  # the sampled tokens' log-probs; None when the trainer sampled
                # update: loss and optimizer step per adapter (gradients summed over ranks inside)
                stats = update(team, optimizers, *without_groups(trainable, advantages, dropped), updating, sampler_logp)
                sampler.push_adapters()  # vLLM samples the next step with the updated adapters
                whole = reduce_step(rollout)  # every rank's share: metrics, roles and distillation see the whole step
                played = whole.on_policy or whole.episodes  # on-policy success: a role's best-of-K would flatter it
                roles.record(whole.assignment, [float(e.success) for e in played])  # adaptive roles learn
                distilled = distill(team, optimizers, whole.samples, step, distilling)  # cross-agent distillation, every N steps
                sampler.push_adapters()  # distillation stepped optimizers too
                state = advance(state, stats, verdicts)
                # log
                metrics = step_metrics(spec, state.step, whole, stats, time.perf_counter() - began)
                metrics |= team_metrics(team, roles, whole, distilled)  # reward parts, roles per episode, memory, distillation
                metrics |= heldout_metrics(team, roles, spec, eval_problems, state.step)  # every train.eval_every steps
                metrics = clean_metrics(metrics)  # NaN/inf -> null, floats rounded (docs/metrics.md)
                spent = running_totals([spent, metrics])  # every rank logged the whole step: all agree
                if distributed.is_main():
                    append_jsonl(run_dir / "metrics.jsonl", metrics)  # log
                    trackers.log(metrics)
                stop_if_stuck(spec, state, run_dir)
                # checkpoint
                last = state.step == spec.train.steps or budget_reached(spec, spent)
                checkpoint_due = state.step % spec.train.checkpoint_every == 0 or last
                ranks_sha = ranks_adapters_sha(team) if checkpoint_due else []  # ranks must agree
                if checkpoint_due and distributed.is_main():
                    save(learner, spec, run_dir, state, train_problems, ranks_sha)  # checkpoint
                shown = state.step % spec.train.log_every == 0 or last  # train.log_every
                bar.update(task, advance=1, **({"status": status_line(metrics)} if shown else {}))
        if stopped_anywhere(stop):
            if distributed.is_main():
                why = f"{stop.requested or 'a signal to another rank'}: "
                stop_with_checkpoint(learner, spec, run_dir, state, train_problems, why, resume_command, console)
            return run_dir
        if not finish_or_stop(learner, spec, run_dir, eval_problems, stop, resume_command, console):
            return run_dir
        trackers.end(run_dir, state.step)  # the held-out scores and the report's plots
    distributed.barrier()  # the other ranks return once rank 0's files exist (compare reads them next)
    return run_dir


# --- setup ----------------------------------------------------------------------------------
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed % 2**63)


def spent_so_far(run_dir: Path, steps: int) -> dict[str, int]:
    """What the first `steps` steps spent (metrics.jsonl), so a resumed run stops at the same budget (train.stop_at_*)."""
    return running_totals([r for r in read_metrics(run_dir) if r["step"] <= steps])


def make_sampler(team: Team, spec: Experiment, closing: contextlib.ExitStack) -> Sampler:
    """The team itself (`sampler: hf`), or vLLM engines beside it, stopped when `closing` exits however the run ends."""
    if spec.sampler == "vllm":
        return closing.enter_context(contextlib.closing(VllmSampler(team, spec.vllm)))
    return team


def step_seed(seed: int, step: int) -> int:
    """The torch seed of one step: a function of (seed, step) only, so a resumed step samples alike."""
    return (seed * 1_000_003 + step) % 2**63


def load_problems(spec: Experiment) -> tuple[list[Problem], list[Problem]]:
    """(training pool, held-out problems); unusable data is one UserError naming the file (envs/loading.py)."""
    env = spec.env
    return load_split(env.name, env.data, "train", spec.seed, TRAIN_POOL, env.options), held_out_problems(spec)


def held_out_problems(spec: Experiment) -> list[Problem]:
    """The held-out problems train scores: one fixed set (HELD_OUT_SEED) whatever the run's seed, so seeds pair."""
    env = spec.env
    return load_split(env.name, env.data, "test", HELD_OUT_SEED, env.eval_problems, env.options)


def problems_for_step(problems: list[Problem], spec: Experiment, step: int) -> list[Problem]:
    """The step's batch: epochs over seeded permutations, so the cursor is a function of the step.

    No problem appears twice in one step: a batch that crosses an epoch boundary would otherwise
    draw a problem of the old epoch's tail again from the new epoch's head (two copies share an id
    and seeds, so they would merge into one group of 2K identical samples). With more
    `problems_per_step` than problems, each step holds every problem once.
    """
    size, n = len(problems), spec.train.problems_per_step
    if n >= size:
        order = list(range(size))
        random.Random(spec.seed * 7919 + step).shuffle(order)
        return [problems[i] for i in order]
    batch, orders = [], {}
    for i in range(step * n, (step + 1) * n):
        epoch, pos = divmod(i, size)
        if epoch not in orders:
            orders[epoch] = epoch_order(size, n, spec.seed, epoch)
        batch.append(problems[orders[epoch][pos]])
    return batch


def epoch_order(size: int, n: int, seed: int, epoch: int) -> list[int]:
    """The order of problem indices in `epoch` (batches of n < size): a seeded shuffle, with the problems
    that share its first batch with the previous epoch's tail moved to its end.

    >>> order = [epoch_order(5, 3, 0, e) for e in range(3)]
    >>> stream = [i for o in order for i in o]
    >>> all(len(set(stream[s : s + 3])) == 3 for s in range(0, 15, 3))
    True
    >>> all(sorted(o) == [0, 1, 2, 3, 4] for o in order)
    True
    """
    order: list[int] = []
    for e in range(epoch + 1):
        tail = set(order[size - (e * size) % n :]) if e and (e * size) % n else set()  # in the boundary batch
        order = list(range(size))
        random.Random(seed * 7919 + e).shuffle(order)
        order = [i for i in order if i not in tail] + [i for i in order if i in tail]
    return order


# --- one step -------------------------------------------------------------------------------
def advance(state: RunState, stats: dict[str, AgentStats], verdicts: dict[str, list[int]] | None = None) -> RunState:
    """One more step done; each agent's run of consecutive skipped updates grows or resets; the judges' cases so far."""
    streaks = {agent: state.skipped_in_a_row.get(agent, 0) + 1 if st.skipped else 0 for agent, st in sorted(stats.items())}
    return RunState(state.step + 1, streaks, verdicts or state.verdicts)


def stop_if_stuck(spec: Experiment, state: RunState, run_dir: Path) -> None:
    """Guard: stop the run when an agent's update was skipped `max_skipped_in_a_row` steps in a row."""
    limit = spec.train.max_skipped_in_a_row
    stuck = sorted(agent for agent, n in state.skipped_in_a_row.items() if n >= limit)
    if stuck:
        last = latest_checkpoint(run_dir)
        then = f"then continue from {last.name} with --resume --force" if last else "then start again"
        raise UserError(
            f"agent(s) {', '.join(stuck)}: update skipped {limit} steps in a row at step {state.step} "
            f"(non-finite loss or gradient); lower algorithm.lr or use dtype float32/bfloat16 instead of float16, {then}"
        )


# --- checkpoint and finish ------------------------------------------------------------------
def save(
    learner: Learner,
    spec: Experiment,
    run_dir: Path,
    state: RunState,
    train_problems: list[Problem],
    ranks_sha: list[str] | None = None,
) -> Path:
    """Checkpoint everything a resume needs besides adapters, optimizers and RNG (checkpoint.py adds those)."""
    extra = {
        "skipped_in_a_row": state.skipped_in_a_row,
        "verdicts": state.verdicts,  # reward.balance_verdicts: the judges' cases so far
        "data": {
            "cursor": state.step * spec.train.problems_per_step,  # problems consumed; problems_for_step(step) continues
            "pool": len(train_problems),
            "fingerprint": problems_fingerprint(train_problems),
        },
        "roles": learner.roles.state_dict(),  # role-assignment statistics (adaptive)
        "spec": spec.model_dump(mode="json"),
        "ranks_adapters_sha": ranks_sha or [],  # one per data-parallel rank (all equal); empty when not computed
    }
    return save_checkpoint(learner.team, learner.optimizers, run_dir, state.step, extra)


def stop_with_checkpoint(
    learner: Learner,
    spec: Experiment,
    run_dir: Path,
    state: RunState,
    train_problems: list[Problem],
    why: str,
    resume_command: str,
    console: Console,
) -> None:
    """Graceful stop: make sure a checkpoint of the last finished step exists, then say how to resume."""
    folder = run_dir / "checkpoints" / f"step_{state.step}"
    if not (folder / STATE_FILE).is_file():
        folder = save(learner, spec, run_dir, state, train_problems)
    console.print(
        f"{why}stopped after step {state.step}/{spec.train.steps}, checkpoint {folder}; resume with: {resume_command}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def finish_or_stop(
    learner: Learner,
    spec: Experiment,
    run_dir: Path,
    eval_problems: list[Problem],
    stop: GracefulStop,
    resume_command: str,
    console: Console,
) -> bool:
    """`finish`, unless a signal stops it: the last checkpoint is written, so stop at once and say how to finish."""
    try:
        stop.at_once()
        finish(learner, spec, run_dir, eval_problems, console)
    except StopNow as e:
        console.print(
            f"{e.signal_name}: stopped during the final held-out eval; training is done and checkpointed, "
            f"eval_after.json and the report are not written: finish them with: {resume_command}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return False
    return True


def finish(learner: Learner, spec: Experiment, run_dir: Path, eval_problems: list[Problem], console: Console) -> None:
    """Score the trained team on the held-out problems and write the report."""
    after = evaluate(learner.team, spec, eval_problems, assignment=learner.roles.best())  # every rank scores its shard
    if not distributed.is_main():
        return
    write_json(run_dir / "eval_after.json", after)
    write_report(run_dir)
    before = read_json(run_dir / "eval_before.json") or {}
    was = f"{before['team_success_rate']:.2f}" if isinstance(before.get("team_success_rate"), float | int) else "?"
    console.print(
        f"done: held-out success {was} -> {after['team_success_rate']:.2f}; run directory {run_dir}",
        markup=False,
        highlight=False,
    )
