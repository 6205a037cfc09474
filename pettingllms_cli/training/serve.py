"""`pettingllms serve`: a spec's untrained team, or a run's trained one, behind an OpenAI-compatible endpoint where
each agent is a `model` with its own adapter (docs/external.md).

The app and its sampling are the external rollout's (rollout/gateway.py, rollout/chat.py): a program that trained
against the endpoint talks to the served team the same way.
"""

from __future__ import annotations

from pathlib import Path

import uvicorn
from fastapi import FastAPI

from pettingllms_cli.errors import UserError
from pettingllms_cli.policy.adapters import Team
from pettingllms_cli.rollout.chat import Completer
from pettingllms_cli.rollout.gateway import make_app
from pettingllms_cli.spec import load_spec
from pettingllms_cli.training.trained import trained


def load_team(target: Path, checkpoint: int | None = None) -> tuple[Team, str]:
    """The team SPEC_OR_RUN names and a line saying which: a spec file (untrained adapters) or a run (its newest
    checkpoint, or step `checkpoint`)."""
    target = Path(target)
    if target.is_file():
        if checkpoint is not None:
            raise UserError(f"--checkpoint {checkpoint}: {target} is a spec file, which has no checkpoints; pass a run directory")
        spec = load_spec(target)
        return Team(spec), f"{spec.name}, untrained (spec {target})"
    if not target.is_dir():
        raise UserError(f"{target}: no such file or directory; pass a spec file or a run directory")
    found = trained(target, checkpoint)
    return found.team(), f"{found.spec.name}, checkpoint {found.checkpoint}"


def app_for(team: Team) -> FastAPI:
    return make_app(Completer(team))


def serve(target: Path, host: str = "127.0.0.1", port: int = 8000, checkpoint: int | None = None, say=print) -> None:
    """Serve until interrupted (Ctrl-C)."""
    team, what = load_team(target, checkpoint)
    agents = ", ".join(sorted(team.spec.agents))
    say(f"serving {what}: agents {agents} at http://{host}:{port}/v1 (Ctrl-C stops)")
    uvicorn.run(app_for(team), host=host, port=port, log_level="warning")
