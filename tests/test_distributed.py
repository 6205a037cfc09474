"""Data parallelism (issue 8): a 2-process gloo run of experiments/smoke.yaml under torchrun, on CPU.

Checked: both ranks end every checkpoint with identical adapters (each rank's SHA-256 is saved in
the checkpoint); the metrics count every problem once; and the run matches a 1-process run of the
same spec and seed. Sampling is seeded per problem (sampling.py), so both runs draw the same
completions; what differs is the order of floating-point sums (each rank accumulates its own
groups' gradients, then the two halves are added), so adapters agree to ATOL, not bit for bit.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console
from safetensors.torch import load_file

from pettingllms_cli import distributed
from pettingllms_cli.spec import load_spec
from pettingllms_cli.training.loop import WALL_CLOCK_KEYS, train

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "experiments" / "smoke.yaml"
# Both runs see train.problems_per_step=2 problems a step (one per rank here) and 2 held-out ones.
# Summation order moves float32 gradients by ~1e-7 relative; Adam at lr 1e-2 turns that into
# weight differences far below ATOL, while a wrong token denominator or a missing all-reduce
# shows up as differences of order lr (1e-2).
ATOL = 1e-5
SMALLER = ["env.eval_problems=2", "train.max_new_tokens=6"]  # keeps the test near a minute; still one problem per rank
LOSS_RTOL = 1e-4

pytestmark = pytest.mark.usefixtures("one_thread")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("dp")
    two = root / "two"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", str(free_port()), "-m", "pettingllms_cli", "train", str(SPEC), "--out", str(two),
        *[arg for o in SMALLER for arg in ("--set", o)],
    ]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("done: held-out success") == 1, done.stdout  # rank 0 alone prints
    one = train(load_spec(SPEC, SMALLER), root / "one", console=Console(quiet=True))
    return one, two


def metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_KEYS} for r in rows]


def adapters(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    folder = run_dir / "checkpoints" / f"step_{step}"
    files = {a.name: load_file(a / "adapter_model.safetensors") for a in sorted(folder.iterdir()) if a.is_dir()}
    return {f"{agent}/{k}": v for agent, tensors in files.items() for k, v in tensors.items()}


def test_ranks_hold_identical_adapters(runs):
    _, two = runs
    for step in (1, 2):
        state = torch.load(two / "checkpoints" / f"step_{step}" / "trainer_state.pt", weights_only=True)
        shas = state["ranks_adapters_sha"]
        assert len(shas) == 2 and shas[0] == shas[1], shas


def test_metrics_count_every_problem_once(runs):
    one, two = runs
    rows_one, rows_two = metrics(one), metrics(two)
    assert [r["step"] for r in rows_two] == [1, 2]  # one line a step: rank 0 alone writes
    assert [r["episodes"] for r in rows_two] == [2, 2]  # problems_per_step, not rank 0's share
    assert [r["tokens_generated"] for r in rows_two] == [r["tokens_generated"] for r in rows_one]
    after_one, after_two = (json.loads((d / "eval_after.json").read_text()) for d in (one, two))
    assert after_two["episodes"] == 2
    assert [e["id"] for e in after_two["per_episode"]] == [e["id"] for e in after_one["per_episode"]]


def test_two_processes_match_one(runs):
    """Same samples (per-problem seeds), so discrete metrics are equal; losses and weights agree to float tolerance."""
    one, two = runs
    for a, b in zip(metrics(one), metrics(two), strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], float) and key.startswith(("loss/", "kl/", "entropy/", "grad_norm/", "clip_frac/")):
                assert b[key] == pytest.approx(a[key], rel=LOSS_RTOL, abs=1e-6), key
            else:
                assert b[key] == a[key], key
    first, second = adapters(one, 2), adapters(two, 2)
    assert first.keys() == second.keys()
    initial_gap = max(float((first[k] - adapters(one, 1)[k]).abs().max()) for k in first)
    assert initial_gap > 100 * ATOL  # step 2 moved the weights: the comparison below is not vacuous
    for k in first:
        torch.testing.assert_close(second[k], first[k], atol=ATOL, rtol=0, msg=k)
    before_one, before_two = (json.loads((d / "eval_before.json").read_text()) for d in (one, two))
    assert before_two["per_episode"] == before_one["per_episode"]


def test_helpers_are_no_ops_in_one_process():
    assert distributed.world_size() == 1 and distributed.is_main()
    assert distributed.shard([1, 2, 3]) == [1, 2, 3] == distributed.gather([1, 2, 3])
    assert distributed.all_reduce_sum([1.0, 2.0]).tolist() == [1.0, 2.0]
    assert distributed.on_main(lambda x: x + 1, 1) == 2


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shards_cover_every_item_once(n, monkeypatch):
    items = list(range(n))
    parts = []
    for r in range(2):
        monkeypatch.setattr(distributed, "rank", lambda r=r: r)
        monkeypatch.setattr(distributed, "world_size", lambda: 2)
        parts.append(distributed.shard(items))
    assert parts[0] + parts[1] == items and abs(len(parts[0]) - len(parts[1])) <= 1
