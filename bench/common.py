"""What the bench scripts share: adapters with non-zero weights, so a LoRA forward does real work."""

from __future__ import annotations

import argparse
import os
import time
import warnings

import torch


def perturb_adapters(team, std: float = 0.02, seed: int = 0) -> None:
    """Fill every LoRA B matrix with N(0, std) noise (B starts at zero, which PEFT may skip as a no-op)."""
    with torch.no_grad():
        torch.manual_seed(seed)
        for model in team.models.values():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, std)


def quickstart_team(name: str, dtype: str = "auto"):
    """The quickstart's caller + verifier on SmolLM2-135M (one LoRA each), with non-zero adapters, the base in `dtype`."""
    from pettingllms_cli.policy.adapters import Team
    from pettingllms_cli.spec import parse_spec

    lora = {"r": 16, "alpha": 32}
    spec = parse_spec(
        {
            "name": name,
            "env": {"name": "math_tool_v0", "layout": "multi", "options": {"ops": "+-*/"}},
            "models": {"smol": {"source": "smollm2-135m-instruct", "dtype": dtype, "quantization": "none"}},
            "agents": {
                "caller": {"model": "smol", "roles": ["tool_caller"], "lora": lora},
                "verifier": {"model": "smol", "roles": ["verifier"], "lora": lora},
            },
        }
    )
    team = Team(spec)
    perturb_adapters(team)
    return team


def matmul_flops_per_cpu_second(n: int = 1024, reps: int = 20, dtype: torch.dtype = torch.float32) -> float:
    """FLOP per CPU second of n x n matmuls in `dtype` (CPU time: other jobs on the machine cancel out)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    began = time.process_time()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.process_time() - began)


def copy_bytes_per_cpu_second(mb: int = 256, reps: int = 4) -> float:
    """Bytes moved per CPU second by a large copy (reads and writes counted: 2 x size per copy)."""
    x = torch.empty(mb * 2**20 // 4).normal_()
    y = torch.empty_like(x)
    y.copy_(x)
    began = time.process_time()
    for _ in range(reps):
        y.copy_(x)
    return 2 * x.numel() * 4 * reps / (time.process_time() - began)


def base_dtype(team) -> torch.dtype:
    """The dtype the team's (first) base computes in."""
    model = next(iter(team.models.values()))
    return next(model.get_base_model().parameters()).dtype


class PrefillCount:
    """Counts the prompt tokens the sampler must run through the model (`decoding.prefill`), while installed.

    The necessary work, padding excluded: the prefix the prompts share once per distinct adapter (as
    prefill runs it) plus each prompt's own tokens. Each such token costs about 2 x params FLOP, as a
    generated one does, so with `generated` tokens the best a sampler can reach against the
    generated-tokens-only compute bound is generated / (generated + tokens) (`ceiling`).
    """

    def __init__(self) -> None:
        self.tokens = 0

    def __enter__(self) -> PrefillCount:
        from pettingllms_cli.policy import decoding

        self._decoding, self._prefill = decoding, decoding.prefill

        def counted(model, prompts, pad, k, adapters):
            shared = decoding.prefix_run_once(prompts)  # run once per distinct adapter, as prefill does
            copies = len(set(adapters)) if adapters else 1
            self.tokens += shared * copies + sum(len(p) - shared for p in prompts)
            return self._prefill(model, prompts, pad, k, adapters)

        decoding.prefill = counted
        return self

    def __exit__(self, *exc) -> None:
        self._decoding.prefill = self._prefill

    @staticmethod
    def ceiling(generated: int, prefill_tokens: int) -> float:
        return generated / max(generated + prefill_tokens, 1)


def default_threads() -> int:
    """1 when other processes keep the cores busy: OpenMP threads then wait on each other."""
    return 1 if os.getloadavg()[0] >= (os.cpu_count() or 1) else torch.get_num_threads()


def bench_args(doc: str | None, quick_help: str, quick_repeats: int, repeats: int) -> tuple[argparse.Namespace, int]:
    """The options every timing script takes (--quick, --repeats, --threads), applied: library warnings off and torch's
    threads set. Returns (args, timed repeats)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: 1 on a busy machine, else torch's)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads or default_threads())
    return args, args.repeats or (quick_repeats if args.quick else repeats)
