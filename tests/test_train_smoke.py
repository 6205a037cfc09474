"""End-to-end `train` of experiments/smoke.yaml: metrics, finite losses, adapters that changed and reload."""

from __future__ import annotations

import json
import math

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file

from pettingllms_cli.models.loader import load_model
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.spec import parse_spec
from pettingllms_cli.training.loop import train

DESIGN_KEYS = ["step", "team_success_rate", "mean_attempts_to_success", "tokens_generated", "tokens_per_second", "seconds"]
PER_AGENT = ["reward", "loss", "kl", "entropy", "zero_std_frac"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    import yaml

    from tests.conftest import EXPERIMENTS

    spec = parse_spec(yaml.safe_load((EXPERIMENTS / "smoke.yaml").read_text()))
    run_dir = tmp_path_factory.mktemp("smoke") / "run"
    train(spec, run_dir)
    return spec, run_dir


def test_metrics_have_the_design_keys(smoke_run):
    spec, run_dir = smoke_run
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        for key in DESIGN_KEYS + [f"{k}/{a}" for k in PER_AGENT for a in spec.agents]:
            assert key in row, key
        assert all(math.isfinite(row[f"loss/{a}"]) for a in spec.agents)
        assert row["tokens_generated"] > 0 and row["tokens_per_second"] > 0


def test_run_directory_layout(smoke_run):
    _, run_dir = smoke_run
    for name in ("spec.yaml", "metrics.jsonl", "report.md", "eval_before.json", "eval_after.json"):
        assert (run_dir / name).is_file(), name
    for step in (1, 2):
        for agent in ("caller", "verifier"):
            assert (run_dir / f"checkpoints/step_{step}/{agent}/adapter_model.safetensors").is_file()
    assert "Held-out problems" in (run_dir / "report.md").read_text()


def _initial_adapters(spec):
    team = Team(spec)
    return {a: {k: v.detach().clone() for k, v in team.model_of(a).named_parameters() if f".{a}." in k} for a in spec.agents}


def test_every_adapter_changed_and_they_differ(smoke_run):
    spec, run_dir = smoke_run
    initial = _initial_adapters(spec)
    final = {a: load_file(run_dir / f"checkpoints/step_2/{a}/adapter_model.safetensors") for a in spec.agents}
    for agent in spec.agents:
        start = {k.replace(f".{agent}", ""): v for k, v in initial[agent].items()}
        changed = [k for k, v in final[agent].items() if not torch.equal(v, start[k])]
        assert changed, f"{agent}'s adapter did not change"
    diffs = [k for k in final["caller"] if not torch.equal(final["caller"][k], final["verifier"][k])]
    assert diffs, "the two agents ended with identical adapters"


def test_saved_adapters_reload_with_peft(smoke_run):
    spec, run_dir = smoke_run
    base, tokenizer = load_model(spec.models["tiny"])
    model = PeftModel.from_pretrained(base, run_dir / "checkpoints/step_2/caller")
    saved = load_file(run_dir / "checkpoints/step_2/caller/adapter_model.safetensors")
    live = {k.replace(".default", ""): v for k, v in model.named_parameters() if "lora_" in k}
    assert saved.keys() == live.keys()
    assert all(torch.equal(saved[k], live[k]) for k in saved)
    ids = torch.tensor([tokenizer("Question: 1+1")["input_ids"]])
    assert torch.isfinite(model(input_ids=ids).logits).all()


def test_existing_run_directory_is_not_overwritten(smoke_run):
    from pettingllms_cli.errors import UserError

    spec, run_dir = smoke_run
    with pytest.raises(UserError, match="--resume"):
        train(spec, run_dir)
