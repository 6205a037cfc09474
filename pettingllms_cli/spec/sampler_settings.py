"""The vLLM sampler's knobs, importable without vLLM so the experiment spec can hold them (docs/vllm.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


class VllmSettings(BaseModel):
    """How each base's vLLM engine is built; one engine per base model, beside the trainer."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    gpu_memory_utilization: float = Field(
        0.4,
        gt=0,
        le=0.95,
        description="GPU only: share of the GPU's memory one vLLM engine may take (weights + KV cache). The trainer's "
        "copy of the base, its adapters, optimizers and activations live in the rest, so this is below vLLM's own 0.9; "
        "with several bases, their shares must add up to less than 1 minus what training needs.",
    )
    cpu_kv_cache_gib: float = Field(
        1.0,
        gt=0,
        description="CPU only: GiB of RAM for each engine's KV cache (vLLM's VLLM_CPU_KVCACHE_SPACE, default 4 there). "
        "1 GiB holds about 23,000 tokens of SmolLM2-135M in float32.",
    )
    max_model_len: int | None = Field(
        None,
        ge=16,
        description="Longest prompt + completion in tokens the engine accepts; None: the model's own context length. "
        "A smaller value lets a small KV cache start (vLLM refuses to start if one full-length sequence does not fit).",
    )
    enable_prefix_caching: bool = Field(
        True,
        description="Reuse the KV cache of prompt blocks already computed: the K samples of a prompt, and prompts that "
        "share a few-shot preamble, prefill the shared tokens once (what the HF sampler does by hand).",
    )
    enforce_eager: bool = Field(
        False,
        description="Run the model eagerly: no torch.compile, no CUDA graphs. Faster to start (tens of seconds instead "
        "of minutes on a CPU), slower per token on a GPU. vLLM's default is False; tests and the CPU bench set True.",
    )
    lora_dir: str = Field(
        "/dev/shm",
        description="Where pushed adapters are written (a fresh folder per push, removed when replaced); a RAM-backed "
        "folder so a push costs no disk I/O.",
    )


def lora_rank_for(ranks: list[int]) -> int:
    """The smallest max_lora_rank vLLM accepts that fits every adapter's rank.

    >>> lora_rank_for([16, 4]), lora_rank_for([33])
    (16, 64)
    """
    need = max(ranks)
    return next(r for r in LORA_RANKS if r >= need)
