"""The team's policies: base models in memory, a LoRA adapter per agent (PEFT named adapters),
batched sampling and completion-only log-probs.

`per_agent`: agents on one base share its weights and each has its own named adapter;
`shared`: one adapter per base plays every role. Agents naming different models get
different bases (mixed architectures and tokenizers), all in one process.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import PreTrainedTokenizerBase

from pettingllms_cli.envs.base import Message
from pettingllms_cli.models.loader import load_model
from pettingllms_cli.spec import Experiment, LoraSpec, ModelSpec


def lora_config(lora: LoraSpec) -> LoraConfig:
    return LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=lora.target_modules, task_type="CAUSAL_LM"
    )


class Team:
    """Bases, adapters and one optimizer per adapter, addressed by agent name."""

    def __init__(self, spec: Experiment):
        self.spec = spec
        self.models: dict[str, PeftModel] = {}
        self.tokenizers: dict[str, PreTrainedTokenizerBase] = {}
        self.model_specs: dict[str, ModelSpec] = {}
        # Agents in sorted order, and adapters seeded alike: results do not depend on YAML order.
        for agent in sorted(spec.agents):
            self._add_adapter(agent)
        self.params = self._adapter_params()
        self.optimizers = {
            adapter: torch.optim.AdamW(params, lr=spec.algorithm.lr, weight_decay=spec.algorithm.weight_decay)
            for adapter, params in self.params.items()
        }

    def _add_adapter(self, agent: str) -> None:
        a = self.spec.agents[agent]
        adapter = self.spec.adapter_of(agent)
        model = self.models.get(a.model)
        if model is not None and adapter in model.peft_config:
            return
        with torch.random.fork_rng():
            torch.manual_seed(self.spec.seed)
            if model is None:
                base, self.tokenizers[a.model] = load_model(self.spec.models[a.model])
                self.models[a.model] = get_peft_model(base, lora_config(a.lora), adapter_name=adapter)
                self.model_specs[a.model] = self.spec.models[a.model]
            else:
                model.add_adapter(adapter, lora_config(a.lora))
        self.models[a.model].train()

    # --- addressing ---------------------------------------------------------------------------
    def model_of(self, agent: str) -> PeftModel:
        return self.models[self.spec.agents[agent].model]

    def tokenizer_of(self, agent: str) -> PreTrainedTokenizerBase:
        return self.tokenizers[self.spec.agents[agent].model]

    def activate(self, agent: str) -> PeftModel:
        """Make the agent's adapter the active one on its base and return that model."""
        model = self.model_of(agent)
        adapter = self.spec.adapter_of(agent)
        model.set_adapter(adapter)
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.requires_grad_(f".{adapter}." in name)
        return model

    def _adapter_params(self) -> dict[str, list[torch.nn.Parameter]]:
        """adapter name -> its LoRA parameters."""
        params: dict[str, list[torch.nn.Parameter]] = {}
        for agent in sorted(self.spec.agents):
            adapter = self.spec.adapter_of(agent)
            if adapter not in params:
                model = self.model_of(agent)
                params[adapter] = [p for n, p in model.named_parameters() if "lora_" in n and f".{adapter}." in n]
        return params

    # --- prompts ------------------------------------------------------------------------------
    def encode(self, agent: str, messages: list[Message]) -> list[int]:
        """Token ids of a conversation; a final assistant message is a prefix the model continues."""
        tokenizer = self.tokenizer_of(agent)
        prefill = messages[-1]["role"] == "assistant"
        template = self.spec.models[self.spec.agents[agent].model].prompt_template
        if template is not None or tokenizer.chat_template is None:
            text = render_plain(messages, template)
            return tokenizer(text, add_special_tokens=True)["input_ids"]
        ids = tokenizer.apply_chat_template(
            messages, continue_final_message=prefill, add_generation_prompt=not prefill, tokenize=True, return_dict=False
        )
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    def decode(self, agent: str, ids: torch.Tensor) -> str:
        return self.tokenizer_of(agent).decode(ids, skip_special_tokens=True)

    # --- sampling -----------------------------------------------------------------------------
    @torch.inference_mode()
    def sample(
        self, agent: str, prompts: list[list[int]], k: int, max_new_tokens: int, temperature: float, greedy: bool = False
    ) -> list[list[torch.Tensor]]:
        """K completions for each prompt, in one batched generate. Returns [prompt][k] -> ids [T_i].

        Each distinct prompt is prefilled once and its key/value cache expanded to its K samples,
        so the prompt (often 10x the completion) is not recomputed K times.
        """
        model = self.activate(agent)
        tokenizer = self.tokenizer_of(agent)
        pad = tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # [P, L], left-padded
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])  # [P, L]
        was_training = model.training
        model.eval()
        cache = None
        if width > 1:
            positions = (mask.cumsum(-1) - 1).clamp(min=0)  # as generate numbers left-padded rows
            prefill = model(
                input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1], use_cache=True, logits_to_keep=1
            )
            cache = prefill.cache
            cache.batch_repeat_interleave(k)
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if not greedy else {"do_sample": False}
        out = model.generate(
            input_ids=ids.repeat_interleave(k, 0),
            attention_mask=mask.repeat_interleave(k, 0),
            cache=cache,
            max_new_tokens=max_new_tokens,
            pad_token_id=pad,
            eos_token_id=tokenizer.eos_token_id,
            **sampling,
        )
        model.train(was_training)
        completions = [cut_at_eos(row, tokenizer.eos_token_id) for row in out[:, width:]]
        return [completions[i * k : (i + 1) * k] for i in range(len(prompts))]


def cut_at_eos(ids: torch.Tensor, eos: int) -> torch.Tensor:
    """Keep tokens up to and including the first EOS."""
    hits = (ids == eos).nonzero()
    return ids[: int(hits[0]) + 1].clone() if len(hits) else ids.clone()


def render_plain(messages: list[Message], template: str | None) -> str:
    """A conversation as plain text for bases without a chat template."""
    lines = [m["content"] if m["role"] == "assistant" else f"{m['role']}: {m['content']}" for m in messages]
    conversation = "\n".join(lines)
    return (template or "{conversation}").format(conversation=conversation)


def pad_right(seqs: list[torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack variable-length ids into [K, T] with a mask of real tokens."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.float32)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1.0
    return ids, mask


def group_logprobs(
    model: torch.nn.Module, prompt: torch.Tensor, completions: torch.Tensor, temperature: float, shared_prompt: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs (and detached entropies) of K completions of one prompt.

    prompt: [Lp]; completions: [K, Lc] right-padded. Returns ([K, Lc], [K, Lc]).
    With `shared_prompt`, the prompt is run once and its key/value cache is expanded to the K
    completions (gradients flow through it); logits are computed only for completion tokens.
    """
    k = completions.shape[0]
    if shared_prompt:
        out = model(input_ids=prompt[None], use_cache=True, logits_to_keep=1)
        cache = out.cache
        cache.batch_repeat_interleave(k)
        rest = model(input_ids=completions, cache=cache, use_cache=True).logits  # [K, Lc, V]
        logits = torch.cat([out.logits[:, -1:].expand(k, -1, -1), rest[:, :-1]], dim=1)
    else:
        full = torch.cat([prompt[None].expand(k, -1), completions], dim=1)  # [K, Lp+Lc]
        logits = model(input_ids=full).logits[:, len(prompt) - 1 : -1]
    logp_all = F.log_softmax(logits.float() / temperature, dim=-1)  # [K, Lc, V]
    logp = logp_all.gather(-1, completions[..., None]).squeeze(-1)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy
