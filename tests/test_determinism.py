"""Determinism (issue 7): the same spec and seed on CPU give identical metrics and adapters."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest
import torch
from rich.console import Console
from safetensors.torch import load_file

from pettingllms_cli.spec import load_spec
from pettingllms_cli.training.loop import WALL_CLOCK_KEYS, problems_for_step, step_seed, train
from tests.conftest import FAST

ROOT = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("one_thread")


def run(run_dir: Path, *extra: str) -> Path:
    spec = load_spec(ROOT / "experiments" / "smoke.yaml", [*FAST, "train.steps=2", *extra])
    with mock.patch("pettingllms_cli.training.loop.write_report"):  # plots are not under test
        return train(spec, run_dir, console=Console(quiet=True))


def metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_KEYS} for r in rows]


def adapters(run_dir: Path) -> dict[str, torch.Tensor]:
    folder = run_dir / "checkpoints" / "step_2"
    return {
        f"{a.name}/{k}": v
        for a in sorted(folder.iterdir())
        if a.is_dir()
        for k, v in load_file(a / "adapter_model.safetensors").items()
    }


def test_same_spec_and_seed_give_identical_runs(tmp_path: Path) -> None:
    first, second = run(tmp_path / "a"), run(tmp_path / "b")
    assert len(metrics(first)) == 2 and metrics(first) == metrics(second)
    a, b = adapters(first), adapters(second)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any("lora_B" in k and a[k].abs().sum() > 0 for k in a), "the adapters never moved: the comparison proves nothing"
    before = [json.loads((d / "eval_before.json").read_text()) for d in (first, second)]
    assert before[0]["transcripts"] == before[1]["transcripts"]


def test_another_seed_draws_other_batches_and_samples() -> None:
    spec = load_spec(ROOT / "experiments" / "smoke.yaml", FAST)
    other = spec.model_copy(update={"seed": 1})
    problems = list(range(100))
    assert problems_for_step(problems, spec, 0) != problems_for_step(problems, other, 0)
    assert step_seed(0, 1) != step_seed(1, 1)


def test_batches_depend_on_the_step_only(smoke_spec) -> None:
    """The data cursor is a pure function of (seed, step): extending train.steps never reshuffles a run."""
    problems = list(range(10))
    longer = smoke_spec.model_copy(update={"train": smoke_spec.train.model_copy(update={"steps": 1000})})
    seen = [p for step in range(10) for p in problems_for_step(problems, smoke_spec, step)]
    assert seen == [p for step in range(10) for p in problems_for_step(problems, longer, step)]
    assert sorted(seen[: len(problems)]) == problems, "an epoch visits every problem once"
    assert seen[: len(problems)] != seen[len(problems) :], "each epoch has its own order"
