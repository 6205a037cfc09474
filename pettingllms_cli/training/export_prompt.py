"""What an exported agent needs beside its weights: `prompt.json` (how pettingllms builds and decodes its prompt),
where its base comes from, and the model card and top-level README texts (training/export.py writes them).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from pettingllms_cli.analysis.rollout_settings import rollout_settings
from pettingllms_cli.envs import Problem
from pettingllms_cli.envs.messages import OBSERVATION_CHARS, Message, continues, prefill
from pettingllms_cli.rollout.episodes import make_envs
from pettingllms_cli.spec import Experiment, ModelSpec
from pettingllms_cli.spec.builtin_models import BUILTINS, cache_root
from pettingllms_cli.tools.calls import ToolCall, render_tool_call

QUESTION = "{question}"  # replaced (str.replace, not str.format: prompts hold JSON braces) by the problem's question
# Hub ids of the built-in aliases whose weights came from a published model.
HUB_IDS = {"smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct", "gemma3-270m": "google/gemma-3-270m"}


def base_record(model: ModelSpec, local: Path | str) -> dict:
    """Where an agent's base comes from: the hub id (when there is one) and the exact local weights it was trained on."""
    source = model.source
    builtin = BUILTINS.get(source)
    hub = HUB_IDS.get(source) or (source if isinstance(local, str) or _looks_like_hub_id(source, local) else None)
    record = {"source": source, "hub_id": hub, "local_path": str(Path(local).resolve()) if isinstance(local, Path) else local}
    record["quantization"] = model.quantization
    if builtin and (builtin.gguf or builtin.requires):
        gguf = builtin.gguf or f"{cache_root() / 'gguf' / source}.gguf"
        record["dequantised_from"] = f"{gguf} ({builtin.package.split()[0]})"
        record["note"] = (
            f"trained on weights de-quantised to float32 from a GGUF file, not on {hub}'s own weights: "
            f"load local_path (`pettingllms models pull {source}`) to reproduce the trained behaviour exactly; on {hub} "
            "the adapter runs close to, not exactly as, trained"
        )
    elif str(source).endswith(".gguf"):
        record["dequantised_from"] = str(source)
        record["note"] = "trained on weights de-quantised to float32 from this GGUF file: load local_path to reproduce it"
    return record


def _looks_like_hub_id(source: str, local: Path) -> bool:
    return source.count("/") == 1 and not source.startswith((".", "/")) and not Path(source).expanduser().exists()


def role_prompt(messages: list[Message], question: str) -> dict:
    """One role's prompt as the env builds it on the first turn, its question replaced by the `{question}` placeholder."""
    shown = [{**m, "content": m["content"].replace(question, QUESTION)} if question else dict(m) for m in messages]
    body = shown[:-1] if continues(shown) else shown
    system = body[0]["content"] if body and body[0]["role"] == "system" else None
    middle = body[1 if system is not None else 0 : -1]
    examples = [[middle[i]["content"], middle[i + 1]["content"]] for i in range(0, len(middle) - 1, 2)]
    return {
        "system": system,
        "examples": examples,  # [user, assistant] worked examples, in order
        "observation": body[-1]["content"] if body else "",  # the final user message: what the env shows this turn
        "prefill": prefill(shown),  # the start of the answer the model continues; the action is prefill + generated text
        "messages": shown,  # all of the above as the chat messages pettingllms renders
    }


def prompt_record(spec: Experiment, agent: str, roles: list[str], problem: Problem, tokenizer, context: int | None) -> dict:
    """`prompt.json`: enough to rebuild the exact prompt of each of the agent's roles and decode as pettingllms does."""
    model = spec.models[spec.agents[agent].model]
    env = make_envs(rollout_settings(spec), [problem])[0]
    max_new = spec.train.max_new_tokens
    return {
        "format": "pettingllms-prompt/1",
        "agent": agent,
        "env": spec.env.name,
        "layout": spec.env.layout,
        "roles": {role: role_prompt(env.observe(role), problem.question) for role in roles},
        "example_question": problem.question,
        "render": {
            "chat_template": model.prompt_template is None and tokenizer.chat_template is not None,
            "prompt_template": model.prompt_template,  # set: plain text, messages joined as `role: content` lines
            "continue_final_message": "when the messages end with the prefill (an assistant message)",
            "observation_chars": OBSERVATION_CHARS,  # each message is cut to this many characters, marked
            "max_prompt_tokens": max(1, context - max(max_new, spec.coordination.intent_tokens)) if context else None,
        },
        "generation": {
            "do_sample": False,
            "max_new_tokens": max_new,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
            "training_temperature": spec.train.temperature,
        },
        "tool_call_format": render_tool_call(ToolCall("NAME", {"ARGUMENT": "VALUE"})),
        "later_turns": (
            "The first role's observation is the question; a later role's (and a retry's) shows the team's earlier actions "
            "and the tools' results, as `pettingllms play RUN --json` prints under each action's `prompt`."
        ),
    }


def model_card(agent: str, roles: list[str], spec: Experiment, base: dict, step: int | None, held_out: dict | None) -> str:
    """The agent's README.md: base, roles, env, training, held-out figures, date."""
    figures = "not measured (no eval_after.json in the run)"
    if held_out:
        ci = held_out.get("team_success_ci") or [None, None]
        figures = (
            f"team success {_num(held_out.get('team_success_rate'))} on {held_out.get('episodes')} held-out problems "
            f"(95% CI {_num(ci[0])}..{_num(ci[1])}, {held_out.get('decoding', 'greedy')})"
        )
    base_line = base["hub_id"] or base["local_path"]
    lines = [
        "---",
        f"base_model: {base['hub_id']}" if base["hub_id"] else "base_model: null",
        "library_name: peft",
        "tags: [pettingllms, lora, multi-agent-rl]",
        "---",
        f"# {spec.name}: agent `{agent}`",
        "",
        f"- **Base:** {base_line} (trained on `{base['local_path']}`)",
        *([f"- **Base weights:** {base['note']}"] if base.get("note") else []),
        f"- **Roles:** {', '.join(roles)} in env `{spec.env.name}` (layout `{spec.env.layout}`)",
        f"- **Training:** {spec.algorithm.rollout} rollouts, {step} training steps (LoRA r={spec.agents[agent].lora.r})",
        f"- **Held-out:** {figures}",
        f"- **Exported:** {datetime.date.today().isoformat()}",
        "",
        "`prompt.json` rebuilds the exact prompt (system prompt, worked examples, prefill) each role was trained on;",
        "the action is the prefill followed by the generated text. See the export's top-level README.md.",
    ]
    return "\n".join(lines) + "\n"


def top_readme(spec: Experiment, agents: dict[str, dict], merged: bool) -> str:
    """The export's README.md: what is here, the vLLM command for the team, and a plain transformers + PEFT snippet."""
    first = next(iter(agents))
    role = next(iter(agents[first]["roles"]))
    serve = serve_commands(spec, agents)
    rows = [f"| `{n}/` | {', '.join(a['roles'])} | {a['base']['hub_id'] or a['base']['local_path']} |" for n, a in agents.items()]
    snippet = SNIPPET.format(agent=first, role=role)
    merged_line = (
        "Each agent's `merged/` holds full weights (LoRA merged in, safetensors): load it without PEFT.\n\n" if merged else ""
    )
    return (
        f"# {spec.name}: the trained team, exported by pettingllms\n\n"
        f"| folder | roles | base |\n|---|---|---|\n{chr(10).join(rows)}\n\n"
        "Each folder is a PEFT adapter with its tokenizer, `prompt.json` (the exact prompt of each role) and a model card; "
        "`base.json` says which weights it was trained on.\n\n"
        f"{merged_line}"
        f"## Serve the team with vLLM\n\n```bash\n{chr(10).join(serve)}\n```\n\n"
        "Ask for an agent by its folder name as the `model`, with the role's `messages` from its prompt.json and "
        "`continue_final_message: true`, `add_generation_prompt: false` when the role has a prefill.\n\n"
        f"## One action with plain transformers + PEFT\n\n```python\n{snippet}```\n"
    )


LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM's --max-lora-rank accepts


def serve_commands(spec: Experiment, agents: dict[str, dict]) -> list[str]:
    """One `vllm serve` per base, each with the adapters of the agents on it."""
    by_base: dict[str, list[str]] = {}
    for name, a in agents.items():
        by_base.setdefault(a["base"]["hub_id"] or a["base"]["local_path"], []).append(name)
    commands = []
    for base, names in sorted(by_base.items()):
        rank = max(spec.agents[n].lora.r for n in names)
        max_rank = next((r for r in LORA_RANKS if r >= rank), rank)
        modules = " ".join(f"{n}=./{n}" for n in names)
        commands.append(f"vllm serve {base} --enable-lora --max-lora-rank {max_rank} --lora-modules {modules}")
    return commands


SNIPPET = """import json, os, torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
folder = "{agent}"  # this export's agent folder
p, base = json.load(open(f"{{folder}}/prompt.json")), json.load(open(f"{{folder}}/base.json"))
tok = AutoTokenizer.from_pretrained(folder)
weights = base["local_path"] if os.path.isdir(base["local_path"]) else base["hub_id"]  # local: exactly as trained
model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(weights), folder)
role = p["roles"]["{role}"]
messages = [{{**m, "content": m["content"].replace("{{question}}", p["example_question"])}} for m in role["messages"]]
prefilled = bool(role["prefill"])  # the action is the prefill plus what the model generates
ids = tok.apply_chat_template(messages, continue_final_message=prefilled, add_generation_prompt=not prefilled, return_dict=False)
g = p["generation"]  # greedy, as pettingllms plays
out = model.generate(torch.tensor([ids]), max_new_tokens=g["max_new_tokens"], do_sample=False, eos_token_id=g["eos_token_id"])
print(role["prefill"] + tok.decode(out[0, len(ids):], skip_special_tokens=True))
"""


def _num(value) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else str(value)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
