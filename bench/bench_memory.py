"""Peak resident memory of N LoRA agents on one base (`per_agent`) vs N base copies (`separate`), fp32 vs nf4.

    python bench/bench_memory.py [--quick]

Each configuration runs in a fresh subprocess that imports the stack, loads the base(s) of
SmolLM2-135M-Instruct, adds one LoRA adapter (r=8, all linear layers) per agent, then for every
agent runs one training step as `update.py` does: the shared-prompt forward over K completions
of one ~190-token prompt (`group_logprobs`), backward, AdamW step. It reports, from /proc:

- `peak`: the process's peak resident memory (VmHWM = ru_maxrss), loading included;
- `load peak` / `train peak`: the peak while loading, and after it (the peak is reset between);
- `resident`: resident memory after the training steps (VmRSS), and its PSS, where a file page
  mapped by several bases counts once (`separate` copies of one fp32 file share its page cache;
  PSS also splits pages shared with other processes, so it moves with what else runs);
- `models`: resident after loading minus resident after the imports (what the weights cost).

Ratios to the 1-agent fp32 run follow; `nf4_over_fp32_resident_over_imports` compares what the base,
its tokenizer and one adapter's training cost once the imports are set aside (`resident - imports`).
Last line: `agents6_over_agents1=<peak of 6 per_agent agents over the peak of 1>` (fp32).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

MODEL = "smollm2-135m-instruct"
LORA_R, LORA_ALPHA = 8, 16
PROMPT_TOKENS, COMPLETION_TOKENS = 190, 32
CONFIGS = [  # (layout, agents, quantization)
    ("per_agent", 1, "none"),
    ("per_agent", 3, "none"),
    ("per_agent", 6, "none"),
    ("separate", 3, "none"),
    ("separate", 6, "none"),
    ("per_agent", 1, "nf4"),
    ("per_agent", 6, "nf4"),
]


# --- child: one configuration -------------------------------------------------------------------
def proc_status_mb(key: str) -> float:
    """A /proc/self/status memory field (VmRSS, VmHWM) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def pss_mb() -> float:
    """Proportional set size in MiB: a page mapped several times (one file, several bases) counts once."""
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    raise KeyError("Pss")


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux clear_refs 5); False where the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def default_threads(torch_default: int) -> int:
    """1 when other processes keep the cores busy: OpenMP threads then wait on each other (seen here: 6x slower)."""
    return 1 if os.getloadavg()[0] >= (os.cpu_count() or 1) else torch_default


def measure(layout: str, agents: int, quantization: str, k: int) -> dict:
    import torch
    from peft import get_peft_model

    torch.set_num_threads(default_threads(torch.get_num_threads()))

    from pettingllms_cli.memory import release_freed_memory, return_large_frees_to_os
    from pettingllms_cli.models.loader import load_model
    from pettingllms_cli.policy.adapters import lora_config
    from pettingllms_cli.policy.logprobs import group_logprobs
    from pettingllms_cli.spec import LoraSpec, ModelSpec

    return_large_frees_to_os()  # as the CLI does at start
    imports = proc_status_mb("VmRSS")
    names = [f"agent{i}" for i in range(agents)]
    spec = ModelSpec(source=MODEL, dtype="float32", quantization=quantization)
    lora = lora_config(LoraSpec(r=LORA_R, alpha=LORA_ALPHA, dropout=0.0))
    began = time.perf_counter()
    owners = {}  # agent -> the PeftModel that holds its adapter
    if layout == "per_agent":
        model = get_peft_model(load_model(spec)[0], lora, adapter_name=names[0])
        for name in names[1:]:
            model.add_adapter(name, lora)
        owners = dict.fromkeys(names, model)
    else:
        owners = {name: get_peft_model(load_model(spec)[0], lora, adapter_name=name) for name in names}
    with torch.no_grad():
        for model in {id(m): m for m in owners.values()}.values():
            model(input_ids=torch.zeros(1, 1, dtype=torch.long))  # fault in the mmapped weights: they count once touched
    load_seconds = time.perf_counter() - began
    loaded, load_peak = proc_status_mb("VmRSS"), proc_status_mb("VmHWM")
    can_reset = reset_peak()

    torch.manual_seed(0)
    prompt = torch.randint(0, 1000, (PROMPT_TOKENS,))  # [Lp]
    completions = torch.randint(0, 1000, (k, COMPLETION_TOKENS))  # [K, Lc]
    began = time.perf_counter()
    for name, model in owners.items():
        model.train()
        model.set_adapter(name)
        params = []
        for n, p in model.named_parameters():
            p.requires_grad_("lora_" in n and f".{name}." in n)
            if p.requires_grad:
                params.append(p)
        optimizer = torch.optim.AdamW(params, lr=1e-4)
        logp, _ = group_logprobs(model, prompt, completions, temperature=1.0)  # [K, Lc]
        (-logp.mean()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        release_freed_memory()  # as update.py does after each adapter
        model._bench_optimizer = optimizer  # keep AdamW state alive, as a Team does
    train_seconds = time.perf_counter() - began
    return {
        "layout": layout,
        "agents": agents,
        "quantization": quantization,
        "imports_mb": imports,
        "models_mb": loaded - imports,
        "load_peak_mb": load_peak,
        "train_peak_mb": proc_status_mb("VmHWM") if can_reset else float("nan"),
        "resident_mb": proc_status_mb("VmRSS"),
        "anon_mb": proc_status_mb("RssAnon"),
        "file_mb": proc_status_mb("RssFile"),
        "pss_mb": pss_mb(),
        "peak_mb": max(load_peak, proc_status_mb("VmHWM")),
        "threads": torch.get_num_threads(),
        "load_seconds": load_seconds,
        "train_seconds": train_seconds,
    }


# --- parent: every configuration in its own process ---------------------------------------------
def run_child(layout: str, agents: int, quantization: str, k: int) -> dict:
    cmd = [sys.executable, __file__, "--child", layout, str(agents), quantization, "--k", str(k)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"layout": layout, "agents": agents, "quantization": quantization, "error": tail}
    return json.loads(lines[-1])


def row(r: dict) -> str:
    name = f"{r['layout']:>9} x{r['agents']} {'nf4' if r['quantization'] == 'nf4' else 'fp32':>4}"
    if "error" in r:
        return f"{name}  FAILED: {r['error']}"
    return (
        f"{name}  peak {r['peak_mb']:7.0f} MB  load peak {r['load_peak_mb']:7.0f}  train peak {r['train_peak_mb']:7.0f}  "
        f"resident {r['resident_mb']:7.0f} (anon {r['anon_mb']:.0f}, file {r['file_mb']:.0f}; pss {r['pss_mb']:.0f})  "
        f"models {r['models_mb']:6.0f}  "
        f"(imports {r['imports_mb']:.0f}; load {r['load_seconds']:.1f}s, steps {r['train_seconds']:.1f}s, {r['threads']} threads)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="K=2 completions per training step instead of 8")
    parser.add_argument("--k", type=int, default=None, help="completions per agent's training step (default 8, 2 with --quick)")
    parser.add_argument("--child", nargs=3, metavar=("LAYOUT", "AGENTS", "QUANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    k = args.k or (2 if args.quick else 8)
    if args.child:
        warnings.filterwarnings("ignore")
        layout, agents, quantization = args.child
        print(json.dumps(measure(layout, int(agents), quantization, k)))
        return

    print(f"model {MODEL}, LoRA r={LORA_R} all-linear; step per agent: K={k} x {COMPLETION_TOKENS} after {PROMPT_TOKENS} tokens")
    from pettingllms_cli.models.loader import resolve

    resolve(MODEL)  # the one-time GGUF -> safetensors conversion, here, so it is in no configuration's peak
    results = {}
    for config in CONFIGS:
        results[config] = run_child(*config, k)
        print(row(results[config]), flush=True)
    base = results[("per_agent", 1, "none")]
    if "error" in base:
        raise SystemExit("the 1-agent fp32 configuration failed; no ratios")

    def ratio(config: tuple, key: str, minus: str | None = None) -> str:
        r = results[config]
        if "error" in r:
            return "nan"
        return f"{(r[key] - r.get(minus, 0)) / (base[key] - base.get(minus, 0)):.3f}"

    print(f"separate6_over_agents1={ratio(('separate', 6, 'none'), 'peak_mb')}")
    print(f"nf4_over_fp32_models={ratio(('per_agent', 1, 'nf4'), 'models_mb')}")
    print(f"nf4_over_fp32_resident={ratio(('per_agent', 1, 'nf4'), 'resident_mb')}")
    print(f"nf4_over_fp32_resident_over_imports={ratio(('per_agent', 1, 'nf4'), 'resident_mb', minus='imports_mb')}")
    print(f"nf4_over_fp32_peak={ratio(('per_agent', 1, 'nf4'), 'peak_mb')}")
    print(f"agents6_over_agents1={ratio(('per_agent', 6, 'none'), 'peak_mb')}")


if __name__ == "__main__":
    main()
