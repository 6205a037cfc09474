"""Shared fixtures: specs built from experiments/smoke.yaml, run directories in tmp."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
REQUIRE_VLLM = "PETTINGLLMS_REQUIRE_VLLM"  # =1 (set by `make test` for its .venv-vllm run): a missing vLLM fails `vllm` tests
# --set overrides that shrink a smoke run to the least work that still trains.
FAST = ["algorithm.group_size=2", "train.problems_per_step=1", "env.eval_problems=1", "train.max_new_tokens=4", "env.max_turns=1"]


def run_cli(args: list[str], monkeypatch) -> int:
    """Run `pettingllms ARGS` in-process; returns the exit code."""
    from pettingllms_cli.cli import main

    monkeypatch.setattr(sys, "argv", ["pettingllms", *args])
    try:
        main()
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A `vllm`-marked test needs vLLM: skipped where it is not installed (.venv), an error if PETTINGLLMS_REQUIRE_VLLM=1."""
    if item.get_closest_marker("vllm") is None or importlib.util.find_spec("vllm") is not None:
        return
    if os.environ.get(REQUIRE_VLLM) == "1":
        pytest.fail(f"vLLM is not installed and {REQUIRE_VLLM}=1: run these with .venv-vllm (make setup-vllm)", pytrace=False)
    pytest.skip("vLLM is not installed: make setup-vllm, then .venv-vllm/bin/python -m pytest -m vllm tests/")


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Run torch on one thread, so results are bit-identical whatever the machine's load."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def smoke_tree() -> dict:
    import yaml

    return yaml.safe_load((EXPERIMENTS / "smoke.yaml").read_text())


@pytest.fixture
def smoke_spec(smoke_tree):
    from pettingllms_cli.spec import parse_spec

    return parse_spec(smoke_tree)
