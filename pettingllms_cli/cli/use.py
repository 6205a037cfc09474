"""`play` and `export`: use a trained team on a new problem, or hand it to a serving engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from pettingllms_cli.cli.common import app, console, out_path, say
from pettingllms_cli.spec.limits import MAX_SEED

RunArg = Annotated[Path, typer.Argument(help="A run directory written by `pettingllms train` (or its checkpoints/step_N).")]
CheckpointOpt = Annotated[int | None, typer.Option(min=0, help="Use checkpoints/step_N (default: the newest complete one).")]


@app.command()
def play(
    run: RunArg,
    checkpoint: CheckpointOpt = None,
    question: Annotated[
        str | None,
        typer.Option(help="A new problem in free text: math, a function-calling request (with --functions) or a SQL question."),
    ] = None,
    functions: Annotated[
        Path | None,
        typer.Option(help="With --question, for function_call_v0/function_select_v0: a JSON list of BFCL function schemas."),
    ] = None,
    data: Annotated[str | None, typer.Option(help="A data file (or `generated`): play one of its held-out problems.")] = None,
    index: Annotated[
        int | None, typer.Option(min=0, help="With --data: which held-out problem, from 0 (as `eval` orders them).")
    ] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="Print the episode as JSON: every role's prompt, action and tokens.")
    ] = False,
    prompts: Annotated[bool, typer.Option(help="Show each role's prompt in the transcript.")] = False,
    temperature: Annotated[
        float | None, typer.Option(help="Sample at this temperature (> 0) instead of greedy decoding.")
    ] = None,
    seed: Annotated[int | None, typer.Option(min=0, max=MAX_SEED, help="Seed for sampling (default: the spec's seed).")] = None,
) -> None:
    """Play one episode with the trained team and the env's real tools (greedy by default)."""
    from pettingllms_cli.training.play import play as run_play
    from pettingllms_cli.training.play import show

    record = run_play(run, question, data, index, checkpoint, temperature, seed, functions)
    if json_:
        print(json.dumps(record, indent=2))
    else:
        show(record, console, prompts)


@app.command()
def export(
    run: RunArg,
    out: Annotated[str, typer.Option(help="A new or empty folder (or an earlier export, with --overwrite).")],
    checkpoint: CheckpointOpt = None,
    merge: Annotated[bool, typer.Option(help="Also write each agent's full merged weights (safetensors) under merged/.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace an earlier export at --out (never any other folder).")] = False,
) -> None:
    """Write each trained agent as a standalone folder: PEFT adapter, tokenizer, prompt.json, model card."""
    from pettingllms_cli.training.export import export as run_export

    where = run_export(run, out_path(out), checkpoint, merge, overwrite)
    say(f"wrote {where} ({where / 'README.md'} says how to serve it)")
