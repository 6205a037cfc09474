"""Which dtype a base computes in: `models.<m>.dtype`, with `auto` resolved from what the hardware does fast.

`auto` gives bf16 where matmuls have a bf16 unit (a CUDA GPU with bf16; a CPU with AMX or
AVX512-BF16) and fp32 elsewhere: on a CPU without them oneDNN emulates bf16 through fp32, which
measured 6-8x slower than fp32 on an AVX2 CPU. Only the frozen base takes the dtype; LoRA weights,
their optimizer state and the log-softmax of the loss stay fp32 (docs/dtype.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from peft.helpers import disable_input_dtype_casting

from pettingllms_cli.errors import UserError
from pettingllms_cli.models.tiny import TINY_CONFIGS
from pettingllms_cli.spec import ModelSpec

FAST_BF16_ENV = "PETTINGLLMS_FAST_BF16"  # "1"/"0": say whether this machine has fast bf16 instead of detecting it
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Precision:
    dtype: str  # float32 | bfloat16 | float16: what the base computes in
    why: str  # one phrase: the spec asked for it, or what `auto` found

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def cpu_bf16_unit() -> str | None:
    """The CPU's bf16 matmul unit as torch's cpuinfo reports it (AMX, AVX512-BF16), or None."""
    if torch.cpu._is_amx_tile_supported():
        return "AMX-BF16"
    if torch.cpu._is_avx512_bf16_supported():
        return "AVX512-BF16"
    return None


def fast_bf16(device: torch.device, cpu_unit: Callable[[], str | None] = cpu_bf16_unit) -> str | None:
    """Why `device` computes bf16 fast (e.g. "CPU with AMX-BF16"), or None where bf16 is emulated or missing."""
    forced = os.environ.get(FAST_BF16_ENV)
    if forced in ("0", "1"):
        return f"{FAST_BF16_ENV}=1" if forced == "1" else None
    if device.type == "cuda":
        return f"GPU {torch.cuda.get_device_name(device)} with bf16" if torch.cuda.is_bf16_supported() else None
    unit = cpu_unit() if device.type == "cpu" else None
    return f"CPU with {unit}" if unit else None


def resolve_precision(spec: ModelSpec, device: torch.device, cpu_unit: Callable[[], str | None] = cpu_bf16_unit) -> Precision:
    """The dtype the base of `spec` computes in on `device`; `float16` on a CPU is refused (UserError)."""
    problem = dtype_problem(spec, device)
    if problem:
        raise UserError(f"model {spec.source!r}: {problem}")
    if spec.dtype != "auto":
        return Precision(spec.dtype, "set in the spec")
    if spec.source in TINY_CONFIGS:
        return Precision("float32", "auto: a tiny test model (bf16 buys no speed at its size; fp32 keeps tests bit-exact)")
    fast = fast_bf16(device, cpu_unit)
    return Precision("bfloat16", f"auto: {fast}") if fast else Precision("float32", f"auto: no fast bf16 on {device.type}")


def dtype_problem(spec: ModelSpec, device: torch.device) -> str | None:
    """Why the spec's dtype cannot run on `device`: float16 has no fast CPU kernels and overflows in training there."""
    if spec.dtype == "float16" and device.type != "cuda":
        return "float16 on a CPU has no fast kernels and overflows in training; use dtype: auto or float32"
    return None


def slow_path_warning(spec: ModelSpec, device: torch.device, cpu_unit: Callable[[], str | None] = cpu_bf16_unit) -> str | None:
    """One line when the spec asks for bf16 on hardware that only emulates it (oneDNN through fp32: several times slower)."""
    if spec.dtype != "bfloat16" or fast_bf16(device, cpu_unit):
        return None
    where = "this CPU has no AMX/AVX512-BF16" if device.type == "cpu" else f"{device.type} reports no bf16 support"
    return (
        f"warning: model {spec.source!r} computes in bfloat16 but {where}: bf16 matmuls take an emulated slow path "
        "(several times slower than fp32); use dtype: auto or float32"
    )


@contextmanager
def lora_in_base_dtype(model: torch.nn.Module) -> Iterator[None]:
    """On a bf16 (or fp16) base, the LoRA products run in that dtype too, from the fp32 LoRA weights (autocast casts
    them; gradients flow back to them in fp32). PEFT's default casts every LoRA layer's input to fp32 and its output
    back: on a bf16 CPU forward of 16 x 262 tokens those casts cost about 3 s, as much as the bf16 matmuls."""
    dtype = getattr(model, "dtype", torch.float32)
    if dtype == torch.float32 or getattr(model, "is_loaded_in_4bit", False):  # nf4: bitsandbytes sets its compute dtype
        yield
        return
    with torch.autocast(model.device.type, dtype=dtype), disable_input_dtype_casting(model):
        yield
