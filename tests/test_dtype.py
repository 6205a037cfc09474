"""`models.<m>.dtype` (issue 33): `auto` follows the hardware's bf16 unit, bf16 trains with fp32 adapters and a small
sampler/trainer gap, the resolved dtype is recorded in the run directory and --resume refuses a silent change."""

from __future__ import annotations

import json
import math
from pathlib import Path
from unittest import mock

import pytest
import torch
from safetensors.torch import load_file

from pettingllms_cli.errors import UserError
from pettingllms_cli.models.precision import FAST_BF16_ENV, resolve_precision, slow_path_warning
from pettingllms_cli.spec import ModelSpec
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.yaml"
FAST = ["algorithm.group_size=4", "train.problems_per_step=1", "env.eval_problems=1", "train.max_new_tokens=6", "env.max_turns=1"]
CPU = torch.device("cpu")
# Sampler (decode loop, batched, cached) against trainer (group_logprobs) mean token log-prob of one completion, both bf16.
# fp32 gives < 1e-6 here; bf16 rounds each op's output to 8 bits of mantissa, 4e-5 measured on tiny-llama.
BF16_GAP_BOUND = 1e-3


@pytest.fixture(autouse=True)
def detect_hardware(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAST_BF16_ENV, raising=False)  # the injected capability decides, not the environment


def amx() -> str:
    return "AMX-BF16"


def no_bf16_unit() -> None:
    return None


def test_auto_is_bf16_on_a_cpu_with_amx_and_fp32_without() -> None:
    spec = ModelSpec(source="smollm2-135m")
    assert spec.dtype == "auto"
    fast = resolve_precision(spec, CPU, cpu_unit=amx)
    assert (fast.dtype, fast.torch_dtype) == ("bfloat16", torch.bfloat16) and "AMX-BF16" in fast.why
    slow = resolve_precision(spec, CPU, cpu_unit=no_bf16_unit)
    assert (slow.dtype, slow.torch_dtype) == ("float32", torch.float32) and "no fast bf16" in slow.why


def test_auto_keeps_tiny_test_models_and_explicit_dtypes() -> None:
    assert resolve_precision(ModelSpec(source="tiny-llama"), CPU, cpu_unit=amx).dtype == "float32"
    assert resolve_precision(ModelSpec(source="smollm2-135m", dtype="float32"), CPU, cpu_unit=amx).dtype == "float32"
    assert resolve_precision(ModelSpec(source="smollm2-135m", dtype="bfloat16"), CPU, cpu_unit=no_bf16_unit).dtype == "bfloat16"


def test_the_environment_can_say_what_the_hardware_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAST_BF16_ENV, "1")
    assert resolve_precision(ModelSpec(source="smollm2-135m"), CPU, cpu_unit=no_bf16_unit).dtype == "bfloat16"
    monkeypatch.setenv(FAST_BF16_ENV, "0")
    assert resolve_precision(ModelSpec(source="smollm2-135m"), CPU, cpu_unit=amx).dtype == "float32"


def test_bfloat16_without_a_bf16_unit_warns_of_the_slow_path() -> None:
    spec = ModelSpec(source="smollm2-135m", dtype="bfloat16")
    warning = slow_path_warning(spec, CPU, cpu_unit=no_bf16_unit)
    assert warning is not None and "slow path" in warning and "auto" in warning and "\n" not in warning
    assert slow_path_warning(spec, CPU, cpu_unit=amx) is None
    assert slow_path_warning(ModelSpec(source="smollm2-135m"), CPU, cpu_unit=no_bf16_unit) is None  # auto picks fp32 there


def test_float16_on_a_cpu_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(UserError, match=r"float16 on a CPU.*dtype: auto or float32"):
        resolve_precision(ModelSpec(source="smollm2-135m", dtype="float16"), CPU)
    code = run_cli(["validate", str(SMOKE), "--set", "models.tiny.dtype=float16"], monkeypatch)
    err = capsys.readouterr().err
    assert code == 2 and "models.tiny.dtype: float16 on a CPU" in err and "Traceback" not in err


def train_in_process(run_dir: Path, *extra: str, resume: bool = False, force: bool = False) -> Path:
    from rich.console import Console

    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.loop import train

    spec = load_spec(SMOKE, [*FAST, *extra])
    with mock.patch("pettingllms_cli.training.loop.write_report"):  # plots take seconds and are not under test here
        return train(spec, run_dir, resume=resume, force=force, console=Console(quiet=True))


def test_a_bf16_training_step_is_finite_with_fp32_adapters(tmp_path: Path, one_thread: None) -> None:
    run = train_in_process(tmp_path / "run", "models.tiny.dtype=bfloat16", "train.steps=1")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [v for k, v in rows[0].items() if k.startswith("loss/")]
    assert losses and all(v is not None and math.isfinite(v) for v in losses)
    for agent in ("caller", "verifier"):
        weights = load_file(run / "checkpoints" / "step_1" / agent / "adapter_model.safetensors")
        assert weights and all(t.dtype == torch.float32 for t in weights.values())
    state = torch.load(run / "checkpoints" / "step_1" / "trainer_state.pt", weights_only=True)
    moments = [v for opt in state["optimizers"].values() for s in opt["state"].values() for v in s.values() if v.dim() > 0]
    assert moments and all(m.dtype == torch.float32 for m in moments)
    resolved = json.loads((run / "resolved.json").read_text())["models"]
    assert resolved == {"tiny": {"dtype": "bfloat16", "why": "set in the spec"}}


def test_bf16_sampler_and_trainer_logprobs_agree(one_thread: None) -> None:
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.policy.logprobs import group_logprobs, logprob_key, pad
    from pettingllms_cli.spec import load_spec

    spec = load_spec(SMOKE, ["models.tiny.dtype=bfloat16"])
    team = Team(spec)
    prompts = [[1, 5, 9, 33, 70, 12, 44, 8, 99, 100, 3], [1, 5, 9, 33, 70, 12, 44, 8, 7]]
    with team.recording_logprobs() as recorded:
        completions = team.sample("caller", prompts, 4, 12, 1.0, seeds=[1, 2])
    model = team.activate("caller")
    assert next(model.get_base_model().parameters()).dtype == torch.bfloat16
    gaps = []
    for prompt, rows in zip(prompts, completions, strict=True):
        ids, _ = pad(rows, team.tokenizer_of("caller").pad_token_id)
        with torch.no_grad():
            logp, _ = group_logprobs(model, torch.tensor(prompt), ids, 1.0)  # [K, Lc]
        for row, ids_row in enumerate(rows):
            trainer = float(logp[row, : len(ids_row)].mean())
            gaps.append(abs(trainer - recorded[logprob_key(spec.adapter_of("caller"), prompt, ids_row)]))
    assert len(gaps) == 8 and max(gaps) < BF16_GAP_BOUND


def test_resume_refuses_a_silent_dtype_change(tmp_path: Path, one_thread: None) -> None:
    from pettingllms_cli.analysis.report import compute_dtypes

    run = train_in_process(tmp_path / "run", "train.steps=1")
    assert json.loads((run / "resolved.json").read_text())["models"]["tiny"]["dtype"] == "float32"
    assert "tiny: float32 (auto: a tiny test model" in (compute_dtypes(run) or "")
    # As if the run had trained on a machine where `auto` chose bf16: resuming here would switch to fp32 unasked.
    (run / "resolved.json").write_text(json.dumps({"models": {"tiny": {"dtype": "bfloat16", "why": "auto: CPU with AMX-BF16"}}}))
    with pytest.raises(UserError, match=r"trained models\.tiny\.dtype in bfloat16, but here it resolves to float32.*--force"):
        train_in_process(run, "train.steps=2", resume=True)
    assert not (run / "checkpoints" / "step_2").exists()

    train_in_process(run, "train.steps=2", resume=True, force=True)
    record = json.loads((run / "resumes.jsonl").read_text())
    assert record["forced"] and record["changes"] == {"models.tiny.dtype": ["bfloat16", "float32"]}
    assert json.loads((run / "resolved.json").read_text())["models"]["tiny"]["dtype"] == "float32"


def test_a_bf16_base_runs_its_lora_products_in_bf16_and_trains_fp32_weights(one_thread: None) -> None:
    from pettingllms_cli.models.precision import lora_in_base_dtype
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.spec import load_spec

    team = Team(load_spec(SMOKE, ["models.tiny.dtype=bfloat16"]))
    model = team.activate("caller")
    lora_b = [p for n, p in model.named_parameters() if "lora_B.caller" in n]
    with torch.no_grad():
        for p in lora_b:
            p.normal_(0, 0.05)  # B starts at zero: the LoRA product would add nothing
    seen: list[torch.dtype] = []
    layer = next(m for n, m in model.named_modules() if n.endswith("q_proj.lora_A.caller"))
    layer.register_forward_hook(lambda module, inputs, output: seen.extend([inputs[0].dtype, output.dtype]))
    ids = torch.tensor([[1, 5, 9, 33, 70, 12]])
    default = model(input_ids=ids).logits.float()  # PEFT's own path: the LoRA input cast to fp32
    with lora_in_base_dtype(model):
        logits = model(input_ids=ids).logits
    assert seen == [torch.float32, torch.float32, torch.bfloat16, torch.bfloat16]
    assert logits.dtype == torch.bfloat16 and torch.allclose(logits.float(), default, atol=0.05)
    logits.float().logsumexp(-1).sum().backward()  # the backward follows the forward's dtypes, outside the context
    assert all(p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32 for p in lora_b)
    assert any(bool(p.grad.abs().sum() > 0) for p in lora_b)
