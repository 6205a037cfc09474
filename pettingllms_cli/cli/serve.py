"""`pettingllms serve`: the team behind an OpenAI-compatible endpoint, one `model` per agent."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pettingllms_cli.cli.common import app, check_ready, say


@app.command()
def serve(
    target: Annotated[
        Path, typer.Argument(metavar="SPEC_OR_RUN", help="A spec file (untrained adapters) or a run directory (trained ones).")
    ],
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port to listen on.")] = 8000,
    host: Annotated[str, typer.Option(help="Address to listen on; 0.0.0.0 exposes the team to the network.")] = "127.0.0.1",
    checkpoint: Annotated[
        int | None, typer.Option(min=0, help="Serve checkpoints/step_N (default: the newest complete one).")
    ] = None,
) -> None:
    """Serve the team's agents over HTTP: /v1/models lists them, /v1/chat/completions samples with `model` = an agent."""
    from pettingllms_cli.spec import load_spec
    from pettingllms_cli.training.serve import serve as run_serve

    if target.is_file():  # its models exist, before any weight loads
        check_ready(load_spec(target))
    run_serve(target, host, port, checkpoint, say)
