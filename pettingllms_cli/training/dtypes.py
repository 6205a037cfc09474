"""The dtype each base computes in, as this run resolved it: written to the run directory (resolved.json) and checked
on --resume, so a run that trained in bf16 does not silently continue in fp32 on other hardware (or back)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from pettingllms_cli import distributed
from pettingllms_cli.errors import UserError
from pettingllms_cli.jsonio import read_json, write_json
from pettingllms_cli.models.precision import resolve_precision
from pettingllms_cli.spec import Experiment
from pettingllms_cli.training.provenance import provenance

RESOLVED_FILE = "resolved.json"  # {"models": {name: {"dtype", "why"}}, "provenance": {"commit", "version", "started"}}


def resolved_dtypes(spec: Experiment, device: torch.device) -> dict[str, dict[str, str]]:
    """model name -> {"dtype", "why"} on `device`."""
    return {name: asdict(resolve_precision(model, device)) for name, model in sorted(spec.models.items())}


def dtype_changes(saved: dict | None, now: dict[str, dict[str, str]]) -> dict[str, tuple[str, str]]:
    """{models.<m>.dtype: (trained in, would continue in)} for bases whose resolved dtype differs from the saved record.

    >>> dtype_changes({"models": {"m": {"dtype": "bfloat16"}}}, {"m": {"dtype": "float32", "why": "auto"}})
    {'models.m.dtype': ('bfloat16', 'float32')}
    """
    before = (saved or {}).get("models", {})
    return {
        f"models.{name}.dtype": (before[name]["dtype"], now[name]["dtype"])
        for name in sorted(now)
        if isinstance(before.get(name), dict) and before[name].get("dtype") not in (None, now[name]["dtype"])
    }


def record_dtypes(spec: Experiment, run_dir: Path, resume: bool, force: bool) -> dict[str, tuple[str, str]]:
    """Write resolved.json; on --resume, refuse (without --force) a base whose dtype resolves differently than the run's.

    Returns the dtype changes a forced resume makes (recorded in resumes.jsonl with the spec's).
    """
    now = resolved_dtypes(spec, distributed.device())
    path = run_dir / RESOLVED_FILE
    saved = read_json(path) if resume else None
    changes = dtype_changes(saved, now) if resume else {}
    if changes and not force:
        key, (old, new) = next(iter(changes.items()))
        raise UserError(
            f"{run_dir}: the run trained {key} in {old}, but here it resolves to {new} ({now[key.split('.')[1]]['why']}); "
            f"resume where it resolves to {old}, or add --force to continue in {new}"
        )
    kept = saved.get("provenance") if isinstance(saved, dict) else None  # a resumed run keeps the commit it began with
    write_json(path, {"models": now, "provenance": kept or provenance()})  # the report's header names both
    return changes
