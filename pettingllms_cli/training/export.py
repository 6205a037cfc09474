"""`pettingllms export`: a trained team as standalone folders a serving engine loads, one per agent.

Each folder holds the PEFT adapter (its `base_model_name_or_path` the base's hub id where there is one), `base.json`
(the exact local weights it was trained on, e.g. de-quantised from a GGUF file), the tokenizer with its chat template,
`prompt.json` (training/export_prompt.py) and a model card; `--merge` adds `merged/`, full weights in safetensors.
The export is written beside `--out` and moved into place whole; `export.json` marks a folder as an export, the only
kind of non-empty folder `--overwrite` replaces.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from transformers import AutoConfig, AutoTokenizer

from pettingllms_cli.analysis.evaluate import eval_problems
from pettingllms_cli.envs.loading import HELD_OUT_SEED
from pettingllms_cli.errors import UserError
from pettingllms_cli.jsonio import write_json
from pettingllms_cli.models.loader import load_model, resolve
from pettingllms_cli.training.checkpoint import ADAPTER_FILE
from pettingllms_cli.training.export_prompt import base_record, model_card, prompt_record, read_json, top_readme
from pettingllms_cli.training.trained import Trained, trained

MANIFEST = "export.json"  # marks a folder as a pettingllms export
ADAPTER_CONFIG = "adapter_config.json"


def export(run: Path | str, out: Path | str, checkpoint: int | None = None, merge: bool = False, overwrite: bool = False) -> Path:
    """Write RUN's trained agents under OUT (one folder each, plus README.md and export.json); returns OUT."""
    out = Path(out)
    check_out(out, overwrite)
    found = trained(Path(run), checkpoint)
    spec = found.spec
    if merge:
        nf4 = sorted(name for name, m in spec.models.items() if m.quantization == "nf4")
        if nf4:
            raise UserError(
                f"--merge: models {', '.join(nf4)} trained on an nf4 (4-bit) base, so merging into full-precision weights "
                "would give another model than the one trained; export without --merge and serve the adapter on the nf4 base"
            )
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        agents = write_agents(found, tmp, merge)
        (tmp / "README.md").write_text(top_readme(spec, agents, merge))
        manifest = {"format": "pettingllms-export/1", "run": str(found.run_dir or found.checkpoint), "step": found.step}
        write_json(tmp / MANIFEST, manifest | {"checkpoint": str(found.checkpoint), "agents": agents, "merged": merge})
        if out.exists():
            shutil.rmtree(out)  # an earlier export (check_out), replaced with --overwrite
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def check_out(out: Path, overwrite: bool) -> None:
    """OUT must be new, empty, or (with --overwrite) an earlier export; nothing else is ever deleted."""
    if not str(out).strip():
        raise UserError("--out is empty; name a new folder, e.g. --out exports/my_team")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: a file, not a folder; name a new folder")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not (out / MANIFEST).is_file():
        raise UserError(f"--out {out}: a non-empty folder that is not a pettingllms export; name a new or empty folder")
    if not overwrite:
        raise UserError(f"--out {out}: holds an earlier export; pass --overwrite to replace it, or name another folder")


def write_agents(found: Trained, into: Path, merge: bool) -> dict[str, dict]:
    """Each agent's folder; returns what the manifest and README say about each."""
    spec = found.spec
    assignment = found.assignment()
    problem = eval_problems(spec, "test", HELD_OUT_SEED, 1)[0]  # a real question shows where `{question}` goes
    held_out = read_json(found.run_dir / "eval_after.json") if found.run_dir else None
    agents = {}
    for agent in sorted(spec.agents):
        roles = [r for r, a in assignment.items() if a == agent] or list(spec.agents[agent].roles)
        agents[agent] = write_agent(found, agent, roles, problem, held_out, into / agent, merge)
    return agents


def write_agent(found: Trained, agent: str, roles: list[str], problem, held_out: dict | None, folder: Path, merge: bool) -> dict:
    spec = found.spec
    model = spec.models[spec.agents[agent].model]
    local = resolve(model.source, model.revision)
    base = base_record(model, local)
    shutil.copytree(found.checkpoint / agent, folder)
    config = json.loads((folder / ADAPTER_CONFIG).read_text())
    config["base_model_name_or_path"] = base["hub_id"] or base["local_path"]
    if model.revision is not None:  # PEFT's AutoPeftModel loads the base at it: the weights the adapter trained on
        config["revision"] = base["revision"] = model.revision
    write_json(folder / ADAPTER_CONFIG, config)
    write_json(folder / "base.json", base)
    tokenizer = AutoTokenizer.from_pretrained(local)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token  # as pettingllms loads it (models/loader.py)
    tokenizer.save_pretrained(folder)
    context = getattr(AutoConfig.from_pretrained(local), "max_position_embeddings", None)
    write_json(folder / "prompt.json", prompt_record(spec, agent, roles, problem, tokenizer, context))
    (folder / "README.md").write_text(model_card(agent, roles, spec, base, found.step, held_out))
    if merge:
        merge_into(model, folder)
    return {"roles": roles, "base": base, "adapter": ADAPTER_FILE}


def merge_into(model_spec, folder: Path) -> None:
    """`merged/`: the base with the adapter merged in (PEFT `merge_and_unload`), in the spec's dtype, as safetensors."""
    from peft import PeftModel

    base, tokenizer = load_model(model_spec)
    merged = PeftModel.from_pretrained(base, folder).merge_and_unload()
    merged.save_pretrained(folder / "merged", safe_serialization=True)
    tokenizer.save_pretrained(folder / "merged")
