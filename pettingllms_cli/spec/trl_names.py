"""Where a TRL (GRPOConfig, TrainingArguments) or PEFT (LoraConfig) setting lives in a spec, for "did you mean".

An unknown key that a TRL or PEFT user would type names our field in its error line; docs/config.md has the
whole table, with the settings we do not support and why.
"""

from __future__ import annotations

from pydantic import BaseModel

TRL_NAMES = {  # their name -> our dotted path (<agent>, <model>: the entry's name in `agents` / `models`)
    "learning_rate": "algorithm.lr",
    "lr_scheduler_type": "algorithm.lr_scheduler_type",
    "warmup_steps": "algorithm.warmup_steps",
    "warmup_ratio": "algorithm.warmup_ratio",
    "weight_decay": "algorithm.weight_decay",
    "max_grad_norm": "algorithm.max_grad_norm",
    "num_generations": "algorithm.group_size",
    "beta": "algorithm.kl_coef",
    "epsilon": "algorithm.clip_eps",
    "epsilon_high": "algorithm.clip_eps_high",
    "num_iterations": "algorithm.update_epochs",
    "scale_rewards": "algorithm.scale_rewards",
    "vllm_importance_sampling_cap": "algorithm.tis_cap",
    "max_completion_length": "train.max_new_tokens",
    "max_prompt_length": "train.max_prompt_length",
    "temperature": "train.temperature",
    "top_p": "train.top_p",
    "top_k": "train.top_k",
    "max_steps": "train.steps",
    "num_train_epochs": "train.steps",
    "per_device_train_batch_size": "train.problems_per_step",
    "save_steps": "train.checkpoint_every",
    "save_total_limit": "train.save_total_limit",
    "logging_steps": "train.log_every",
    "eval_steps": "train.eval_every",
    "report_to": "train.report_to",
    "use_vllm": "sampler",
    "vllm_gpu_memory_utilization": "vllm.gpu_memory_utilization",
    "vllm_max_model_length": "vllm.max_model_len",
    "output_dir": "output_dir",
    "seed": "seed",
    "model_name_or_path": "models.<model>.source",
    "bf16": "models.<model>.dtype",
    "fp16": "models.<model>.dtype",
    "torch_dtype": "models.<model>.dtype",
    "lora_alpha": "agents.<agent>.lora.alpha",
    "lora_dropout": "agents.<agent>.lora.dropout",
    "r": "agents.<agent>.lora.r",
    "target_modules": "agents.<agent>.lora.target_modules",
}


def did_you_mean(loc: tuple, root: type[BaseModel]) -> str | None:
    """Our name for an unknown key at `loc`: a TRL/PEFT setting's, or our own field's when it sits in another section.

    >>> from pettingllms_cli.spec.experiment import Experiment
    >>> did_you_mean(("learning_rate",), Experiment), did_you_mean(("train", "lr"), Experiment)
    ('algorithm.lr', 'algorithm.lr')
    """
    key = str(loc[-1])
    if key in TRL_NAMES and TRL_NAMES[key] != ".".join(str(p) for p in loc):
        return TRL_NAMES[key]
    for section, field in root.model_fields.items():  # our own key under the wrong section
        model = field.annotation
        if isinstance(model, type) and issubclass(model, BaseModel) and key in model.model_fields and section != loc[0]:
            return f"{section}.{key}"
    return None
