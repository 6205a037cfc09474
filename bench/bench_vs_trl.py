"""The same single-agent GRPO work through TRL's `GRPOTrainer` and through pettingllms, in one process.

    python bench/bench_vs_trl.py [--quick] [--steps N] [--dtype auto|float32|bfloat16]

Both sides: SmolLM2-135M-Instruct from the pettingllms cache, its base in one dtype (`--dtype`, default `auto`:
bf16 on a GPU or a CPU with AMX/AVX512-BF16, else fp32; LoRA weights fp32 on both sides), LoRA r=8 / alpha=16
on all linear layers, the same chat prompts (math word problems with one worked example per
operation, ~190 tokens), K=8 completions of one prompt per step, at most 32 new tokens,
temperature 1 (top-k 0, top-p 1), PPO-clip eps 0.2, no KL (TRL beta=0, ours kl_coef=0), token-mean
loss (TRL `dapo`), AdamW at a constant lr, grad-norm clip 1, one optimizer step per batch and
the same deterministic reward. TRL's gradient checkpointing and its bf16 autocast are turned off
(ours uses neither): its model is loaded in the dtype ours computes in, as ours is. The first step of
each side is a warm-up and is not timed; trained completion tokens (EOS included) are counted over the
timed steps.

Last line: `speedup_vs_trl=<pettingllms tokens/s over TRL tokens/s>`.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
import warnings
from dataclasses import dataclass, field

import torch

from pettingllms_cli import distributed
from pettingllms_cli.envs.math_tool import CALLER_SYSTEM, SHOTS, generate_problems
from pettingllms_cli.models.loader import pull
from pettingllms_cli.models.precision import DTYPES, resolve_precision
from pettingllms_cli.spec import ModelSpec, parse_spec
from pettingllms_cli.tools.calculator import calculate, format_number

MODEL = "smollm2-135m-instruct"
K = 8  # completions per prompt (group size); one prompt per step
MAX_NEW_TOKENS = 32
TEMPERATURE = 1.0
LORA_R, LORA_ALPHA = 8, 16
LR = 1e-5  # small, so neither side's completions drift far from the base during the bench
CLIP_EPS = 0.2
SEED = 0
AGENT, ROLE = "solver", "solver"


# --- the shared work ----------------------------------------------------------------------------
def make_prompts(n: int) -> list[tuple[list[dict], float]]:
    """n chat prompts (system, worked examples, question) and their answers; the same for both sides."""
    shots = []
    for question, expression in SHOTS.values():
        solved = f"{expression} = {format_number(calculate(expression))}"
        shots += [{"role": "user", "content": question}, {"role": "assistant", "content": solved}]
    problems = generate_problems(SEED, n, "bench")
    return [
        ([{"role": "system", "content": CALLER_SYSTEM}, *shots, {"role": "user", "content": p.question}], float(p.answer))
        for p in problems
    ]


def reward(text: str, answer: float) -> float:
    """1 for the right number, 0.1 for any number, plus 0.001 per character (so groups rarely tie).

    >>> reward("12+7 = 19", 19.0)
    1.109
    """
    numbers = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", text)]
    return (1.0 if answer in numbers else 0.0) + (0.1 if numbers else 0.0) + 0.001 * len(text)


@dataclass
class Timing:
    name: str
    tokens: list[int] = field(default_factory=list)  # completion tokens per timed step
    seconds: list[float] = field(default_factory=list)  # wall time per timed step
    parts: dict[str, float] = field(default_factory=dict)  # seconds per phase over the timed steps

    @property
    def tokens_per_second(self) -> float:
        return sum(self.tokens) / sum(self.seconds)

    def line(self) -> str:
        parts = "  ".join(f"{k} {v / len(self.seconds):.2f}s" for k, v in self.parts.items())
        return (
            f"{self.name:>12}: {len(self.seconds)} steps, {sum(self.tokens)} tokens, "
            f"{sum(self.seconds) / len(self.seconds):.2f} s/step, {self.tokens_per_second:.1f} tok/s  ({parts} per step)"
        )


# --- pettingllms --------------------------------------------------------------------------------
def bench_pettingllms(prompts: list[tuple[list[dict], float]], warmup: int, check_prompt: list[int], dtype: str) -> Timing:
    """Team.sample -> reward -> compute_advantages -> update, one prompt x K per step, as train.py does."""
    from pettingllms_cli.algorithms.optim import make_optimizers
    from pettingllms_cli.algorithms.update import update
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.rollout.records import Sample
    from pettingllms_cli.training.advantages import compute_advantages
    from pettingllms_cli.training.update_settings import optim_settings, update_settings

    spec = parse_spec(
        {
            "name": "bench",
            "seed": SEED,
            "env": {"name": "math_tool_v0", "layout": "single"},
            "models": {"smol": {"source": MODEL, "dtype": dtype, "quantization": "none"}},
            "agents": {AGENT: {"model": "smol", "roles": [ROLE], "lora": {"r": LORA_R, "alpha": LORA_ALPHA, "dropout": 0.0}}},
            "algorithm": {"group_size": K, "clip_eps": CLIP_EPS, "kl_coef": 0.0, "lr": LR, "max_grad_norm": 1.0},
            "train": {"max_new_tokens": MAX_NEW_TOKENS, "temperature": TEMPERATURE},
        }
    )
    torch.manual_seed(SEED)
    team = Team(spec)
    optimizers = make_optimizers(team, optim_settings(spec))
    if team.encode(AGENT, prompts[0][0]) != check_prompt:
        raise SystemExit("Team.encode and the chat template disagree on the prompt; the bench would not compare the same work")
    timing = Timing("pettingllms", parts={"sample": 0.0, "update": 0.0})
    zero_std = 0
    for step, (messages, answer) in enumerate(prompts):
        began = time.perf_counter()
        prompt = team.encode(AGENT, messages)
        completions = team.sample(AGENT, [prompt], K, MAX_NEW_TOKENS, TEMPERATURE)[0]
        sampled = time.perf_counter()
        samples = []
        for ids in completions:
            text = team.decode(AGENT, ids)
            r = reward(text, answer)
            group = (f"p{step}", ROLE, 0)
            samples.append(
                Sample(agent=AGENT, role=ROLE, turn=0, problem_id=f"p{step}", group=group, prompt=prompt, completion=ids,
                       text=text, reward=r, team_reward=r, local_reward=0.0)
            )  # fmt: skip
        advantages, _ = compute_advantages(spec, samples)
        zero_std += all(a == 0 for a in advantages)
        update(team, optimizers, samples, advantages, update_settings(spec))
        ended = time.perf_counter()
        if step >= warmup:
            timing.tokens.append(sum(len(c) for c in completions))
            timing.seconds.append(ended - began)
            timing.parts["sample"] += sampled - began
            timing.parts["update"] += ended - sampled
    if zero_std:
        print(f"note: pettingllms skipped the forward of {zero_std} all-equal-reward group(s); TRL does not skip them")
    return timing


# --- TRL ----------------------------------------------------------------------------------------
def bench_trl(prompts: list[tuple[list[dict], float]], warmup: int, check_prompt: list[int], dtype: str) -> Timing:
    """GRPOTrainer on the same prompts: one prompt x K generations per optimizer step."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    folder = pull(MODEL)
    tokens_per_step: list[int] = []

    def trl_reward(prompts, completions, completion_ids, answer, **kwargs) -> list[float]:
        tokens_per_step.append(sum(len(ids) for ids in completion_ids))
        return [reward(c[0]["content"], a) for c, a in zip(completions, answer, strict=True)]

    step_ends: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if not step_ends:
                step_ends.append(time.perf_counter())  # start of the first step

        def on_step_end(self, args, state, control, **kwargs):
            step_ends.append(time.perf_counter())

    out_dir = tempfile.mkdtemp(prefix="bench_trl_")
    config = GRPOConfig(
        output_dir=out_dir,
        use_cpu=not torch.cuda.is_available(),  # the GPU when there is one (bench/gpu_check.sh), like pettingllms' side
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        report_to="none",
        disable_tqdm=True,
        save_strategy="no",
        logging_steps=10_000,
        seed=SEED,
        data_seed=SEED,
        shuffle_dataset=False,
        per_device_train_batch_size=K,  # one step = one prompt x K completions
        gradient_accumulation_steps=1,
        num_generations=K,
        max_completion_length=MAX_NEW_TOKENS,
        temperature=TEMPERATURE,
        top_k=0,
        top_p=1.0,
        beta=0.0,
        epsilon=CLIP_EPS,
        loss_type="dapo",  # token mean over the batch, as ours
        scale_rewards="group",
        num_iterations=1,
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=len(prompts),
        use_vllm=False,
        dataloader_num_workers=0,
    )
    lora = LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPES[dtype])  # the base in ours' dtype; PEFT keeps LoRA fp32
    tokenizer = AutoTokenizer.from_pretrained(folder)
    dataset = Dataset.from_list([{"prompt": m, "answer": a} for m, a in prompts])
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=trl_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[StepClock()],
    )
    trl_ids = trainer._tokenize_prompts([prompts[0][0]])[0][0]
    if list(trl_ids) != list(check_prompt):
        raise SystemExit("TRL and pettingllms tokenise the prompt differently; the bench would not compare the same work")
    generate_seconds: list[float] = []
    original = trainer._generate_single_turn

    def timed_generate(*args, **kwargs):
        began = time.perf_counter()
        result = original(*args, **kwargs)
        generate_seconds.append(time.perf_counter() - began)
        return result

    trainer._generate_single_turn = timed_generate
    trainer.train()
    durations = [b - a for a, b in zip(step_ends, step_ends[1:], strict=False)]
    timing = Timing("TRL", tokens=tokens_per_step[warmup:], seconds=durations[warmup:])
    timing.parts["generate"] = sum(generate_seconds[warmup:])
    timing.parts["rest"] = sum(timing.seconds) - timing.parts["generate"]
    if len(timing.tokens) != len(timing.seconds):
        raise SystemExit(f"TRL ran {len(durations)} steps but scored {len(tokens_per_step)} batches; cannot pair them")
    return timing


def default_threads() -> int:
    """1 when other processes keep the cores busy: OpenMP threads then wait on each other (seen here: 6x slower)."""
    cores = os.cpu_count() or 1
    return 1 if os.getloadavg()[0] >= cores else torch.get_num_threads()


# --- main ---------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 timed steps per side (under 5 minutes on 2 CPU cores)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per side (default 12, or 2 with --quick)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per side before timing")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: 1 on a busy machine, else torch's)")
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto", help="both sides' base dtype")
    args = parser.parse_args()
    torch.set_num_threads(args.threads or default_threads())
    dtype = resolve_precision(ModelSpec(source=MODEL, dtype=args.dtype), distributed.device()).dtype
    steps = args.steps or (2 if args.quick else 12)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    prompts = make_prompts(args.warmup + steps)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(pull(MODEL))
    first = list(tokenizer.apply_chat_template(prompts[0][0], add_generation_prompt=True, tokenize=True, return_dict=False))
    first = first if not isinstance(first[0], list) else first[0]
    print(
        f"model {MODEL} dtype={dtype}, LoRA r={LORA_R} all-linear, K={K}, max_new_tokens={MAX_NEW_TOKENS}, "
        f"prompt {len(first)} tokens, {steps} timed steps after {args.warmup} warm-up; torch threads {torch.get_num_threads()} "
        f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    ours = bench_pettingllms(prompts, args.warmup, first, dtype)
    print(ours.line(), flush=True)
    trl = bench_trl(prompts, args.warmup, first, dtype)
    print(trl.line(), flush=True)
    print(f"pettingllms_tokens_per_second={ours.tokens_per_second:.2f}")
    print(f"trl_tokens_per_second={trl.tokens_per_second:.2f}")
    print(f"speedup_vs_trl={ours.tokens_per_second / trl.tokens_per_second:.3f}")


if __name__ == "__main__":
    main()
