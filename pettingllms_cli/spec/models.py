"""The `models` and `agents` sections: named bases, and the agents that train a LoRA adapter on one."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pettingllms_cli.spec.strict import Strict


class ModelSpec(Strict):
    source: str = Field(description="A built-in alias (`pettingllms models list`), a hub id, a local folder or a `.gguf` file.")
    revision: str | None = Field(
        None,
        description="For a hub id: the branch, tag or commit to load (default: its default branch); no other source takes one.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="The frozen base's compute dtype. `auto`: bfloat16 where the hardware computes it fast (a CUDA GPU with "
        "bf16, a CPU with AMX or AVX512-BF16), else float32; the run records what it chose (resolved.json, the report). "
        "`float32` reproduces runs bit for bit; `float16` only on a GPU. LoRA weights, their optimizer state and the "
        "loss's log-softmax stay float32 (docs/dtype.md).",
    )
    quantization: Literal["none", "nf4"] = Field("none", description="`nf4` loads the base in 4 bit with bitsandbytes (QLoRA).")
    prompt_template: str | None = Field(
        None,
        description=(
            "For bases without a chat template: a format string with `{conversation}`; "
            "each message is rendered as `role: content`."
        ),
    )


class LoraSpec(Strict):
    r: int = Field(16, ge=1, le=512, description="LoRA rank.")
    alpha: float = Field(32, gt=0, description="LoRA scaling numerator (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the LoRA input.")
    target_modules: list[str] | Literal["all-linear"] = Field("all-linear", description="Modules that get adapters.")


class AgentSpec(Strict):
    model: str = Field(description="Name of an entry in `models`.")
    roles: list[str] = Field(min_length=1, description="Env roles this agent plays (static assignment).")
    lora: LoraSpec = Field(default_factory=LoraSpec, description="This agent's LoRA adapter.")


def chat_template_problem(model: ModelSpec, has_chat_template: bool) -> str | None:
    """A base without a chat template needs a prompt_template: checked here for built-ins (their table says
    whether they have one) and by models/loader.py `load_model` for every base (its tokenizer says)."""
    if has_chat_template or model.prompt_template is not None:
        return None
    return (
        f"model {model.source!r} has no chat template; set its prompt_template, e.g. "
        '"{conversation}\\nassistant: " (a format string with {conversation})'
    )


def model_problem(model: ModelSpec) -> str | None:
    """Why a model spec cannot work, found without loading weights (nf4 needs bitsandbytes; template-less built-ins)."""
    import importlib.util

    from pettingllms_cli.spec.builtin_models import BUILTINS

    if model.quantization == "nf4" and importlib.util.find_spec("bitsandbytes") is None:
        return "quantization nf4 needs bitsandbytes: run `pip install bitsandbytes`, or use quantization: none"
    builtin = BUILTINS.get(model.source)
    if builtin is not None and (problem := chat_template_problem(model, builtin.chat_template)):
        return problem
    if model.prompt_template is not None and "{conversation}" not in model.prompt_template:
        return "prompt_template must contain {conversation}"
    return None
