"""Data parallelism through the real launchers (issue 8): `accelerate launch`, `compare` and `--resume` on 2 ranks.

All on CPU (gloo), 2 processes, experiments/smoke.yaml shrunk by test_distributed.SMALLER.

- `accelerate launch` starts several processes on one machine only with `--multi_gpu` (it then runs torchrun's
  launcher, gloo on CPU); with `--cpu` and no `--mpirun_hostfile` it starts ONE process, which
  `distributed.init` refuses with a message instead of silently training alone.
- The accelerate run is also the uninterrupted reference of the resume test: both are 2-process runs of the same
  spec, the same rank layout and summation order, so the resumed run must match it to 1e-6 (as in test_resume.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import run_cli
from tests.test_compare import write_specs
from tests.test_distributed import ATOL, SMALLER, adapters, free_port, metrics

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "experiments" / "smoke.yaml"
STEPS = 5  # enough steps that a stop signalled after step 1 lands well before the end
LONGER = [*SMALLER, f"train.steps={STEPS}"]  # smoke.yaml checkpoints every step
RESUME_ATOL = 1e-6  # same ranks, same summation order: only a resume that restores state wrongly differs
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

pytestmark = pytest.mark.usefixtures("one_thread")


def torchrun() -> list[str]:
    where = ["--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", *where]


def accelerate(*flags: str) -> list[str]:
    """`accelerate launch` with every choice passed as a flag, so no config file is needed."""
    fixed = ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    return [sys.executable, "-m", "accelerate.commands.launch", *flags, *fixed]


def train_args(out: Path, overrides: list[str]) -> list[str]:
    return ["-m", "pettingllms_cli", "train", str(SPEC), "--out", str(out), *[a for o in overrides for a in ("--set", o)]]


def launch(command: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout)


def ranks_shas(run_dir: Path, step: int) -> list[str]:
    state = torch.load(run_dir / "checkpoints" / f"step_{step}" / "trainer_state.pt", weights_only=True)
    return state["ranks_adapters_sha"]


def checkpoint_tensors(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    """Adapters and AdamW moments of a checkpoint, name -> tensor."""
    tensors = adapters(run_dir, step)
    state = torch.load(run_dir / "checkpoints" / f"step_{step}" / "trainer_state.pt", weights_only=True)
    for adapter, opt in state["optimizers"].items():
        for idx, moments in opt["state"].items():
            tensors |= {f"opt/{adapter}/{idx}/{k}": v for k, v in moments.items() if torch.is_tensor(v)}
    return tensors


# --- accelerate launch ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def accelerated(tmp_path_factory) -> Path:
    """A 2-process run of smoke.yaml for STEPS steps under `accelerate launch --multi_gpu` (CPU: torchrun + gloo)."""
    out = tmp_path_factory.mktemp("accelerate") / "run"
    done = launch([*accelerate("--multi_gpu", "--num_processes", "2"), *train_args(out, LONGER)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("done: held-out success") == 1, done.stdout  # rank 0 alone prints
    return out


def test_accelerate_launch_trains_on_two_ranks(accelerated):
    for step in range(1, STEPS + 1):
        shas = ranks_shas(accelerated, step)
        assert len(shas) == 2 and shas[0] == shas[1], (step, shas)  # two ranks, identical adapters
    rows = metrics(accelerated)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))  # one line a step: rank 0 alone writes
    assert [r["episodes"] for r in rows] == [2] * STEPS  # train.problems_per_step, not rank 0's share
    after = json.loads((accelerated / "eval_after.json").read_text())
    assert after["episodes"] == 2 and len({e["id"] for e in after["per_episode"]}) == 2  # each held-out problem once


def test_accelerate_launch_cpu_with_several_processes_is_refused():
    """Without --multi_gpu (or mpirun), accelerate starts one process for --num_processes 2: refuse, say what works."""
    done = launch([*accelerate("--cpu", "--num_processes", "2"), "-m", "pettingllms_cli", "validate", str(SPEC)], timeout=120)
    assert done.returncode != 0  # accelerate turns our exit code 2 into its own failure
    ours = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(ours) == 1 and "accelerate launch --multi_gpu --num_processes N" in ours[0], done.stderr[-2000:]


def test_mpi_style_variables_join_the_group():
    """mpirun (what `accelerate launch --cpu --mpirun_hostfile` uses) names ranks PMI_RANK/PMI_SIZE, not RANK/WORLD_SIZE."""
    code = (
        "from pettingllms_cli import distributed as d; d.init(); "
        "print(d.rank(), d.world_size(), d.local_rank(), d.all_reduce_sum([d.rank() + 1]).tolist()); d.shutdown()"
    )
    base = {k: v for k, v in ENV.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    base |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "PMI_SIZE": "2"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={**base, "PMI_RANK": str(r), "MPI_LOCALRANKID": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert [out.strip() for out, _ in outs] == ["0 2 0 [3.0]", "1 2 1 [3.0]"]


def test_fewer_problems_than_ranks(tmp_path):
    """One problem a step on 2 ranks: rank 1's shard is empty, yet it joins every collective and holds the same adapters."""
    out = tmp_path / "run"
    small = ["env.eval_problems=1", "train.max_new_tokens=6", "train.problems_per_step=1", "train.steps=2"]
    done = launch([*torchrun(), *train_args(out, small)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for step in (1, 2):
        shas = ranks_shas(out, step)
        assert len(shas) == 2 and shas[0] == shas[1], (step, shas)
    assert [r["episodes"] for r in metrics(out)] == [1, 1]
    assert json.loads((out / "eval_after.json").read_text())["episodes"] == 1


# --- compare on two ranks ---------------------------------------------------------------------------
def table(out: Path) -> dict:
    """compare.json without wall-clock seconds (any of them), the run folder and the status (trained or reused)."""
    result = json.loads((out / "compare.json").read_text())
    result["rows"] = [{k: v for k, v in r.items() if not k.startswith("wall_seconds")} for r in result["rows"]]
    drop = {"run_dir", "status"}
    result["runs"] = {
        name: [{k: v for k, v in r.items() if k not in drop and not k.startswith("wall_seconds")} for r in rs]
        for name, rs in result["runs"].items()
    }
    return result


def test_compare_on_two_ranks_matches_one(tmp_path, monkeypatch):
    """`compare` under torchrun writes its reports once, reuses its runs when called again, and gives the same
    table as one process.

    Sampling is seeded per problem, so both draw the same completions: success rates, attempts, tokens and
    convergence steps are equal exactly; the adapters agree to test_distributed.ATOL (summation order); held-out
    scores are greedy, and no argmax is within ATOL of a tie here, so they are equal too. The lone arm's K sampled
    episodes a problem (the majority-of-K and oracle rows) are scored by `compare` itself, collectively on both ranks.
    """
    solo, team = write_specs(tmp_path)
    for path in (solo, team):  # two problems a step: one per rank
        tree = yaml.safe_load(path.read_text())
        tree["train"]["problems_per_step"] = 2
        path.write_text(yaml.safe_dump(tree))
    args = ["compare", str(solo), str(team), "--seeds", "2", "--max-steps", "2"]
    two, one = tmp_path / "two", tmp_path / "one"
    done = launch([*torchrun(), "-m", "pettingllms_cli", *args, "--out", str(two)], timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("wrote ") == 1  # rank 0 alone prints (and writes) the reports
    assert sorted(p.name for p in two.iterdir()) == ["compare.html", "compare.json", "compare.md", "smoke", "solo"]
    scored = sorted(two.glob("*/seed*/compare_eval.json"))
    before = {p: p.stat().st_mtime_ns for p in scored}
    again = launch([*torchrun(), "-m", "pettingllms_cli", *args, "--out", str(two)], timeout=200)
    assert again.returncode == 0 and again.stdout.count("reusing") == 4, again.stdout[-3000:] + again.stderr[-3000:]
    assert len(scored) == 4 and {p: p.stat().st_mtime_ns for p in scored} == before  # rank 0 decided: no rank re-scored
    statuses = [r["status"] for rs in json.loads((two / "compare.json").read_text())["runs"].values() for r in rs]
    assert statuses == ["reused"] * 4
    assert run_cli([*args, "--out", str(one)], monkeypatch) == 0

    assert table(two) == table(one)
    rows = table(two)["rows"]
    arms = [r for r in rows if r["kind"] == "arm"]
    assert [r["spec"] for r in arms] == ["solo", "smoke"] and all(r["tokens_total"] > 0 for r in arms)
    assert [r["kind"] for r in rows[2:]] == ["untrained", "untrained", "majority_of_k", "best_of_k_oracle"]
    for name in ("solo", "smoke"):
        for seed in (0, 1):
            first, second = adapters(one / name / f"seed{seed}", 2), adapters(two / name / f"seed{seed}", 2)
            assert first.keys() == second.keys()
            for k in first:
                torch.testing.assert_close(second[k], first[k], atol=ATOL, rtol=0, msg=f"{name}/seed{seed}/{k}")


# --- resume on two ranks --------------------------------------------------------------------------
def worker_of_rank(launcher_pid: int, rank: int) -> int:
    """The pid of the training process of `rank` among the launcher's children (Linux /proc)."""
    children = Path(f"/proc/{launcher_pid}/task/{launcher_pid}/children").read_text().split()
    for pid in map(int, children):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in environ:
            return pid
    raise AssertionError(f"no child of {launcher_pid} has RANK={rank}")


def test_stop_one_rank_then_resume_matches_uninterrupted_run(accelerated, tmp_path):
    """SIGTERM to rank 1 alone: every rank stops after the step, rank 0 checkpoints, all exit 0; `--resume` ends
    like the uninterrupted 2-process run.

    The signal goes to one worker, not to torchrun: torchrun answers its own SIGTERM by forwarding it to the
    workers (they still checkpoint) but then exits 1, and kills them after --shutdown_timeout (30 s).
    """
    run = tmp_path / "run"
    log = (tmp_path / "stdout.txt").open("w+"), (tmp_path / "stderr.txt").open("w+")
    proc = subprocess.Popen([*torchrun(), *train_args(run, LONGER)], cwd=ROOT, env=ENV, stdout=log[0], stderr=log[1])
    try:
        deadline = time.monotonic() + 180
        while not (run / "checkpoints" / "step_1" / "trainer_state.pt").exists():
            assert proc.poll() is None, Path(log[1].name).read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint in 180 s"
            time.sleep(0.02)
        os.kill(worker_of_rank(proc.pid, 1), signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, Path(log[1].name).read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    stopped = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    k = len(stopped)
    assert 1 <= k < STEPS and stopped == list(range(1, k + 1)), stopped
    assert (run / "checkpoints" / f"step_{k}" / "trainer_state.pt").is_file() and not (run / "eval_after.json").exists()
    printed = Path(log[0].name).read_text()
    assert f"a signal to another rank: stopped after step {k}/{STEPS}" in printed
    assert "resume with: torchrun --nproc_per_node 2 -m pettingllms_cli train " in printed  # the launcher, not 1 process

    done = launch([*torchrun(), *train_args(run, LONGER), "--resume"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    resumes = [json.loads(line) for line in (run / "resumes.jsonl").read_text().splitlines()]
    assert [r["from_step"] for r in resumes] == [k] and not resumes[0]["forced"]
    assert metrics(run) == metrics(accelerated)  # each step once, and the same numbers
    assert ranks_shas(run, STEPS) == ranks_shas(run, STEPS)[:1] * 2
    got, want = checkpoint_tensors(run, STEPS), checkpoint_tensors(accelerated, STEPS)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=RESUME_ATOL, rtol=0, msg=name)
    after, reference = (json.loads((d / "eval_after.json").read_text()) for d in (run, accelerated))
    assert after["per_episode"] == reference["per_episode"]
