"""The team's policies: base models in memory, a LoRA adapter per agent (PEFT named adapters), and
batched sampling through them (`Team` implements the `Sampler` interface the rollout uses).

Prompts are rendered by prompts.py, tokens picked by decoding.py, log-probs in logprobs.py; the
optimizers and the role assignment belong to the training loop, not here.

`per_agent`: agents on one base share its weights and each has its own named adapter;
`shared`: one adapter per base plays every role; `separate`: each agent loads its own copy
of its base. Agents naming different models get different bases (mixed architectures and
tokenizers), all in one process. Bases are keyed by `spec.base_of(agent)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import PreTrainedTokenizerBase

from pettingllms_cli import distributed
from pettingllms_cli.envs.messages import Message
from pettingllms_cli.models.loader import load_model
from pettingllms_cli.models.precision import lora_in_base_dtype
from pettingllms_cli.policy import decoding, prompts
from pettingllms_cli.policy.decoding import cut_at_eos
from pettingllms_cli.policy.logprobs import logprob_key
from pettingllms_cli.policy.row_lora import per_row_lora
from pettingllms_cli.spec import Experiment, LoraSpec, ModelSpec


def lora_config(lora: LoraSpec) -> LoraConfig:
    return LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=lora.target_modules, task_type="CAUSAL_LM"
    )


class Team:
    """Bases and adapters addressed by agent name, and batched sampling through them."""

    def __init__(self, spec: Experiment):
        self.spec = spec
        self.models: dict[str, PeftModel] = {}
        self.tokenizers: dict[str, PreTrainedTokenizerBase] = {}
        self.model_specs: dict[str, ModelSpec] = {}
        self.logprob_record: dict[tuple, float] | None = None  # see `recording_logprobs`
        # Agents in sorted order, and adapters seeded alike: results do not depend on YAML order.
        for agent in sorted(spec.agents):
            self._add_adapter(agent)
        self.params = self._adapter_params()  # adapter -> its LoRA parameters (what an optimizer steps)

    def _add_adapter(self, agent: str) -> None:
        a = self.spec.agents[agent]
        adapter = self.spec.adapter_of(agent)
        key = self.spec.base_of(agent)  # the model entry, or the agent itself under `separate`
        model = self.models.get(key)
        if model is not None and adapter in model.peft_config:
            return
        with torch.random.fork_rng():
            torch.manual_seed(self.spec.seed)
            if model is None:
                base, self.tokenizers[key] = load_model(self.spec.models[a.model])
                place_on_rank_device(base)
                self.models[key] = get_peft_model(base, lora_config(a.lora), adapter_name=adapter)
                self.model_specs[key] = self.spec.models[a.model]
            else:
                model.add_adapter(adapter, lora_config(a.lora))
        self.models[key].train()

    # --- addressing ---------------------------------------------------------------------------
    def model_of(self, agent: str) -> PeftModel:
        return self.models[self.spec.base_of(agent)]

    def tokenizer_of(self, agent: str) -> PreTrainedTokenizerBase:
        return self.tokenizers[self.spec.base_of(agent)]

    def memory_mb(self) -> dict[str, float]:
        """`model_memory_mb/<base>`: each base's parameters and buffers (4-bit weights count 4 bits)."""
        return {f"model_memory_mb/{key}": model.get_memory_footprint() / 2**20 for key, model in sorted(self.models.items())}

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

    # --- the Sampler interface (policy/sampler.py) ----------------------------------------------
    def encode(self, agent: str, messages: list[Message]) -> list[int]:
        """Token ids of a conversation in the agent's base's tokenizer and template (policy/prompts.py)."""
        template = self.spec.models[self.spec.agents[agent].model].prompt_template
        return prompts.encode(self.tokenizer_of(agent), messages, template, self.prompt_budget(agent))

    def prompt_budget(self, agent: str) -> int | None:
        """Most prompt tokens: the base's context less the most tokens one sample generates (None: no known context)."""
        context = getattr(self.model_of(agent).config, "max_position_embeddings", None)
        if self.spec.sampler == "vllm" and self.spec.vllm.max_model_len:
            context = min(context or self.spec.vllm.max_model_len, self.spec.vllm.max_model_len)
        cap = self.spec.train.max_prompt_length  # the user's cap (prompts.fit drops old turns, then cuts on the left)
        if not context:
            return cap
        return min(max(1, context - max(self.spec.train.max_new_tokens, self.spec.coordination.intent_tokens)), cap or context)

    def decode(self, agent: str, ids: torch.Tensor) -> str:
        return self.tokenizer_of(agent).decode(ids, skip_special_tokens=True)

    def push_adapters(self, agents: list[str] | None = None) -> list[str]:
        """No-op: the team samples with the very adapters it trains, so nothing is ever stale. Returns [] (none sent)."""
        return []

    def take_logprobs(self) -> None:
        """None: the team's sampled tokens' log-probs are the trainer's own, so there is no sampler/trainer gap."""
        return None

    # --- sampling -----------------------------------------------------------------------------
    def sample(
        self,
        agent: str,
        prompts: list[list[int]],
        k: int,
        max_new_tokens: int,
        temperature: float,
        greedy: bool = False,
        seeds: list[int] | None = None,
    ) -> list[list[torch.Tensor]]:
        """K completions for each prompt by one agent, in one batched generate. Returns [prompt][k] -> ids [T_i] (on the CPU)."""
        return self.sample_mixed([agent] * len(prompts), prompts, k, max_new_tokens, temperature, greedy, seeds)

    def sample_mixed(
        self,
        agents: list[str],
        prompts: list[list[int]],
        k: int,
        max_new_tokens: int,
        temperature: float,
        greedy: bool = False,
        seeds: list[int] | None = None,
    ) -> list[list[torch.Tensor]]:
        """K completions for each prompt, prompt i by agents[i]. Returns [prompt][k] -> ids [T_i] (on the CPU).

        Rows whose agents share a base run in one batched generate, each row through its own
        adapter (PEFT mixed-adapter batches, each LoRA layer one masked product over the batch's adapters:
        row_lora.py); agents on different bases get one generate per base.
        Each row gets the tokens a per-agent `sample` call gives it (greedy, or with `seeds`), up to
        float rounding in the wider batch. Mixed batches are inference-only: PEFT refuses
        `adapter_names` in training mode, so updates stay one adapter at a time.
        """
        completions: list[list[torch.Tensor]] = [[] for _ in prompts]
        for key in sorted({self.spec.base_of(a) for a in agents}):
            rows = [i for i, a in enumerate(agents) if self.spec.base_of(a) == key]
            own_seeds = [seeds[i] for i in rows] if seeds is not None else None
            got = self._generate(
                [agents[i] for i in rows], [prompts[i] for i in rows], k, max_new_tokens, temperature, greedy, own_seeds
            )
            for i, samples in zip(rows, got, strict=True):
                completions[i] = samples
        return completions

    @contextmanager
    def recording_logprobs(self) -> Iterator[dict[tuple, float]]:
        """Within the block, every sampled completion's mean token log-probability (temperature 1) is recorded,
        keyed by `logprob_key`: evaluation reads its `action_logprob/<agent>` from it instead of a second forward."""
        self.logprob_record = {}
        try:
            yield self.logprob_record
        finally:
            self.logprob_record = None

    def _record(
        self, adapters: list[str], prompts: list[list[int]], k: int, completions: list[torch.Tensor], logps: torch.Tensor
    ) -> None:
        """Store each row's mean log-prob over its kept tokens (EOS included); rows are prompt-major, K per prompt."""
        for row, ids in enumerate(completions):
            if len(ids):
                key = logprob_key(adapters[row // k], prompts[row // k], ids)
                self.logprob_record[key] = float(logps[row, : len(ids)].mean())

    @torch.inference_mode()
    def _generate(
        self,
        agents: list[str],
        prompts: list[list[int]],
        k: int,
        max_new_tokens: int,
        temperature: float,
        greedy: bool,
        seeds: list[int] | None,
    ) -> list[list[torch.Tensor]]:
        """K completions of each prompt, prompt i by agents[i] (all on one base), in one batched decode (decoding.py).

        The prefix all prompts share (a few-shot preamble) is prefilled once, each prompt's own
        tokens once, and the cache expanded to its K samples, so no prompt token is computed
        twice. With `seeds` (one per prompt), each prompt's draws come from its own generator
        (sampling.py): the same whatever else is in the batch, so sharding problems over ranks
        does not change them. While `recording_logprobs` is on, each completion's mean token
        log-probability is recorded from the logits the decode computed anyway.
        """
        model, tokenizer = self.model_of(agents[0]), self.tokenizer_of(agents[0])
        adapters: list[str] | None = [self.spec.adapter_of(a) for a in agents]
        names = adapters
        if len(set(adapters)) == 1:  # one adapter: the plain LoRA forward, without PEFT's per-row gather and scatter
            self.activate(agents[0])
            adapters = None
        pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
        expanded = [a for a in adapters for _ in range(k)] if adapters else None  # [P*K], prompt-major like the rows
        if greedy:
            pick = decoding.greedy_picker()
        elif seeds is not None:  # Gumbel-max on per-prompt noise: argmax is an exact sample
            pick = decoding.gumbel_picker(seeds, k, temperature, self.spec.train.top_k, self.spec.train.top_p)
        else:
            pick = decoding.multinomial_picker(temperature, self.spec.train.top_k, self.spec.train.top_p)
        was_training = model.training
        model.eval()  # PEFT accepts adapter_names only in eval mode
        mixed = per_row_lora(model, adapters, model.dtype) if adapters else nullcontext()  # one product per layer
        try:
            with lora_in_base_dtype(model), mixed:  # a bf16 base's LoRA products in bf16: no fp32 round trip per layer
                start = decoding.prefill(model, prompts, pad, k, adapters)
                record = self.logprob_record is not None
                out, logps = decoding.decode(model, start, pick, max_new_tokens, eos, pad, expanded, logprobs=record)
        finally:
            model.train(was_training)
        completions = [cut_at_eos(row, eos) for row in out.cpu()]
        if logps is not None:
            self._record(names, prompts, k, completions, logps.cpu())
        return [completions[i * k : (i + 1) * k] for i in range(len(prompts))]


def place_on_rank_device(model: torch.nn.Module) -> None:
    """Move a base to this process's GPU (`cuda:LOCAL_RANK`) when there is one; bitsandbytes bases stay where they loaded."""
    target = distributed.device()
    if target.type == "cuda" and not getattr(model, "is_loaded_in_4bit", False):
        model.to(target)
