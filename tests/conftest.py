"""Shared fixtures: specs built from experiments/smoke.yaml, run directories in tmp."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"


@pytest.fixture
def smoke_tree() -> dict:
    import yaml

    return yaml.safe_load((EXPERIMENTS / "smoke.yaml").read_text())


@pytest.fixture
def smoke_spec(smoke_tree):
    from pettingllms_cli.spec import parse_spec

    return parse_spec(smoke_tree)
