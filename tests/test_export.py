"""`pettingllms export`: each agent, loaded from the export alone with plain transformers + PEFT (in a process that never
imports pettingllms), rebuilds the exact prompt from prompt.json and generates the tokens `play --json` played."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXPERIMENTS, run_cli

# A run that learns enough in 2 steps for its adapters to move its greedy tokens (lr 0.05); 2 turns: a retry's prompt too.
QUICK = [
    "algorithm.group_size=2",
    "train.problems_per_step=1",
    "env.eval_problems=1",
    "train.max_new_tokens=6",
    "algorithm.lr=0.05",
]
QUESTION = "Tom has 12 apples and buys 7 more. How many apples does Tom have?"

# Runs in a fresh interpreter: plain transformers + PEFT, the export's files and play's JSON, nothing of pettingllms.
REPLAY = r"""
import json, sys, torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
export, played, merged = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3] == "merged"
torch.set_num_threads(1)
first = {}
for action in played["actions"]:
    folder = f"{export}/{action['agent']}"
    p, base = json.load(open(f"{folder}/prompt.json")), json.load(open(f"{folder}/base.json"))
    tok = AutoTokenizer.from_pretrained(folder)
    if merged:
        model = AutoModelForCausalLM.from_pretrained(f"{folder}/merged")
    else:
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base["local_path"]), folder)
    role = p["roles"][action["role"]]
    q = played["problem"]["question"]
    if action["turn"] == 0 and action is played["actions"][0]:  # the first role sees the question alone
        messages = [{**m, "content": m["content"].replace("{question}", q)} for m in role["messages"]]
    else:  # later: the env's observation this turn (the team's results), between the exported examples and prefill
        messages = [{"role": "system", "content": role["system"]}] if role["system"] else []
        for user, assistant in role["examples"]:
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
        seen = action["prompt"][-2]["content"]
        messages += [{"role": "user", "content": seen}, {"role": "assistant", "content": role["prefill"]}]
    ids = tok.apply_chat_template(messages, continue_final_message=True, add_generation_prompt=False, return_dict=False)
    g = p["generation"]
    out = model.generate(torch.tensor([ids]), max_new_tokens=g["max_new_tokens"], do_sample=False,
                         eos_token_id=g["eos_token_id"], pad_token_id=g["pad_token_id"])
    new = out[0, len(ids):].tolist()
    text = role["prefill"] + tok.decode(new, skip_special_tokens=True)
    print(json.dumps({"prompt_same": ids == action["prompt_ids"], "tokens": new, "action": text}))
print(json.dumps({"imported_pettingllms": any(m.startswith("pettingllms") for m in sys.modules)}))
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny trained run, `play --json` on a fixed question, and its export (with --merge)."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("export")
    run = root / "run"
    sets = [arg for s in QUICK for arg in ("--set", s)]
    assert run_cli(["train", str(EXPERIMENTS / "smoke.yaml"), "--out", str(run), *sets], mp) == 0
    from pettingllms_cli.training.play import play

    played = play(run, question=QUESTION)
    (root / "played.json").write_text(json.dumps(played))
    assert run_cli(["export", str(run), "--out", str(root / "export"), "--merge"], mp) == 0
    mp.undo()
    return run, root / "export", root / "played.json", played


def replay(export: Path, played: Path, how: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-c", REPLAY, str(export), str(played), how], capture_output=True, text=True, cwd=export
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def test_each_exported_agent_reproduces_plays_actions(exported):
    _, export, played_file, played = exported
    assert {a["agent"] for a in played["actions"]} == {"caller", "verifier"} and len(played["actions"]) >= 3
    *rows, imported = replay(export, played_file, "adapter")
    assert imported == {"imported_pettingllms": False}
    for action, row in zip(played["actions"], rows, strict=True):
        assert row["prompt_same"], f"{action['role']}: the prompt rebuilt from prompt.json differs from the one played"
        assert row["tokens"] == action["tokens"] and row["action"] == action["action"]


def test_merged_weights_give_the_same_greedy_tokens(exported):
    _, export, played_file, played = exported
    *rows, _ = replay(export, played_file, "merged")
    assert [r["tokens"] for r in rows] == [a["tokens"] for a in played["actions"]]
    assert (export / "caller/merged/model.safetensors").is_file()


def test_the_adapters_matter(exported):
    """The trained adapters move the greedy tokens, so the equality above can fail on a wrong adapter or base."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    _, export, _, played = exported
    base_file = json.loads((export / "caller/base.json").read_text())["local_path"]
    ids = [played["actions"][0]["prompt_ids"]]
    import torch

    base = AutoModelForCausalLM.from_pretrained(base_file)
    plain = base.generate(torch.tensor(ids), max_new_tokens=6, do_sample=False)[0, len(ids[0]) :].tolist()
    tuned = PeftModel.from_pretrained(base, export / "caller").generate(
        input_ids=torch.tensor(ids), max_new_tokens=6, do_sample=False
    )
    assert tuned[0, len(ids[0]) :].tolist() == played["actions"][0]["tokens"][: len(tuned[0]) - len(ids[0])]
    assert plain != played["actions"][0]["tokens"], "the base alone already plays the trained tokens: the test cannot tell"


def test_export_files(exported):
    _, export, _, _ = exported
    for agent in ("caller", "verifier"):
        folder = export / agent
        config = json.loads((folder / "adapter_config.json").read_text())
        base = json.loads((folder / "base.json").read_text())
        assert config["base_model_name_or_path"] == base["local_path"]  # tiny-llama has no hub id
        prompt = json.loads((folder / "prompt.json").read_text())
        assert prompt["generation"]["do_sample"] is False and prompt["roles"]
        assert (
            "## " not in (folder / "README.md").read_text().split("---")[1] and "Held-out" in (folder / "README.md").read_text()
        )
    caller = json.loads((export / "caller/prompt.json").read_text())["roles"]["tool_caller"]
    assert caller["observation"] == "Question: {question}" and len(caller["examples"]) == 4
    assert caller["prefill"].startswith("<tool_call>")
    readme = (export / "README.md").read_text()
    assert "vllm serve" in readme and "--lora-modules caller=./caller verifier=./verifier" in readme
    assert json.loads((export / "export.json").read_text())["merged"] is True


def test_hub_id_and_dequantisation_are_recorded():
    from pettingllms_cli.spec import ModelSpec
    from pettingllms_cli.training.export_prompt import base_record

    record = base_record(ModelSpec(source="smollm2-135m-instruct"), Path("/cache/smollm2-135m-instruct"))
    assert record["hub_id"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert "Q4_1.gguf" in record["dequantised_from"] and record["local_path"] == "/cache/smollm2-135m-instruct"


def _error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_out_that_is_not_an_export_is_refused_and_kept(exported, tmp_path, monkeypatch, capsys):
    run, export, _, _ = exported
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        assert run_cli(["export", str(run), "--out", str(keep), *extra], monkeypatch) == 2
        assert "not a pettingllms export" in _error_line(capsys)
    assert (keep / "notes.txt").read_text() == "mine"
    assert run_cli(["export", str(run), "--out", str(export)], monkeypatch) == 2
    assert "--overwrite" in _error_line(capsys)


def test_overwrite_replaces_an_earlier_export(exported, tmp_path, monkeypatch):
    run, _, _, _ = exported
    out = tmp_path / "again"
    assert run_cli(["export", str(run), "--out", str(out), "--checkpoint", "1"], monkeypatch) == 0
    (out / "stale.txt").write_text("from before")
    assert run_cli(["export", str(run), "--out", str(out), "--overwrite"], monkeypatch) == 0
    assert not (out / "stale.txt").exists() and json.loads((out / "export.json").read_text())["step"] == 2


@pytest.mark.parametrize(
    ("args", "says"),
    [(["{tmp}", "--out", "{tmp}/x"], "not a run directory"), (["{run}", "--checkpoint", "7", "--out", "{tmp}/x"], "step_7")],
)
def test_bad_input_is_one_line(exported, tmp_path, monkeypatch, capsys, args, says):
    run = exported[0]
    args = [a.format(tmp=tmp_path, run=run) for a in args]
    assert run_cli(["export", *args], monkeypatch) == 2
    assert says in _error_line(capsys)


@pytest.mark.slow
def test_smollm2_export_reproduces_greedy_held_out_answers(tmp_path, monkeypatch):
    """The real base: 3 held-out problems played by a (briefly) trained quickstart team, reproduced from the export."""
    from pettingllms_cli.models.loader import source_problem

    if source_problem("smollm2-135m-instruct"):
        pytest.skip(source_problem("smollm2-135m-instruct"))
    run = tmp_path / "run"
    sets = ["train.problems_per_step=2", "env.eval_problems=3", "train.eval_every=null", "models.smol.dtype=float32"]
    args = ["train", str(EXPERIMENTS / "quickstart.yaml"), "--out", str(run), "--max-steps", "2"]
    assert run_cli([*args, *[a for s in sets for a in ("--set", s)]], monkeypatch) == 0
    assert run_cli(["export", str(run), "--out", str(tmp_path / "export")], monkeypatch) == 0
    assert json.loads((tmp_path / "export/caller/base.json").read_text())["hub_id"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    from pettingllms_cli.training.play import play

    for index in range(3):
        played = play(run, data="generated", index=index)
        (tmp_path / "played.json").write_text(json.dumps(played))
        rows = replay(tmp_path / "export", tmp_path / "played.json", "adapter")[:-1]
        assert [r["tokens"] for r in rows] == [a["tokens"] for a in played["actions"]]
        assert all(r["prompt_same"] for r in rows)
