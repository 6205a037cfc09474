"""The run directory: creating it, checking it for --resume, probing that it is writable, atomic files.

A file here is either written whole or not at all (`write_atomic`), so a kill at any moment
leaves the previous content; `truncate_metrics` cuts metrics.jsonl back to a checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import yaml

from pettingllms_cli.errors import UserError
from pettingllms_cli.policy import Team
from pettingllms_cli.spec import Experiment, dump_spec

# Spec fields that change no step's computation: --resume accepts new values for them without --force.
RESUME_FREE_FIELDS = {"train.steps", "train.log_every", "train.checkpoint_every", "train.max_skipped_in_a_row", "output_dir"}


# --- setup ---------------------------------------------------------------------------------------
def prepare_run_dir(spec: Experiment, run_dir: Path, resume: bool, overwrite: bool, force: bool) -> dict:
    """Create the run directory (or check it for --resume), probe that it is writable, write spec.yaml.

    Returns the spec fields a forced resume changes ({} otherwise).
    """
    if resume and overwrite:
        raise UserError("--resume and --overwrite contradict each other: --resume continues the run, --overwrite deletes it")
    spec_file = run_dir / "spec.yaml"
    changes: dict = {}
    if resume and spec_file.is_file():
        changes = spec_changes(read_saved_spec(spec_file), spec.model_dump(mode="json"))
        if changes and not force:
            listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in list(changes.items())[:4])
            more = f" (+{len(changes) - 4} more)" if len(changes) > 4 else ""
            raise UserError(
                f"{run_dir}: --resume with a different spec than the run's spec.yaml ({listed}{more}); "
                "use the same spec, another --out, or add --force to continue with the new spec"
            )
    elif run_dir.is_dir() and not resume and any(run_dir.iterdir()):
        if not overwrite:
            raise UserError(f"{run_dir} already holds a run; pass --resume to continue it, --overwrite to replace it, or --out")
        shutil.rmtree(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe_writable(run_dir)
        write_atomic(spec_file, dump_spec(spec))
    except OSError as e:
        why = e.strerror or e
        raise UserError(f"{run_dir}: cannot write the run directory ({why}); choose another --out or free disk space") from None
    return changes


def read_saved_spec(path: Path) -> dict:
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        saved = None
    if not isinstance(saved, dict):
        raise UserError(f"{path}: damaged spec file; restore it or start a new run with another --out")
    return saved


def spec_changes(saved: dict, now: dict) -> dict[str, tuple]:
    """{dotted.key: (old, new)} for fields that differ, except those in RESUME_FREE_FIELDS."""
    old, new = _flatten(saved), _flatten(now)
    keys = sorted((set(old) | set(new)) - RESUME_FREE_FIELDS)
    return {k: (old.get(k, "<absent>"), new.get(k, "<absent>")) for k in keys if old.get(k, "<absent>") != new.get(k, "<absent>")}


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def probe_writable(run_dir: Path) -> None:
    """Write, sync and delete a small file: an unwritable folder or a full disk fails here, before training."""
    probe = run_dir / f".write-probe-{os.getpid()}"
    try:
        with probe.open("wb") as f:
            f.write(b"\0" * 65536)
            f.flush()
            os.fsync(f.fileno())
    finally:
        probe.unlink(missing_ok=True)


def check_disk_space(team: Team, spec: Experiment, run_dir: Path) -> None:
    """Refuse to start when the run's checkpoints (adapters + two AdamW moments each) will not fit."""
    per_checkpoint = 3 * sum(p.numel() * p.element_size() for params in team.params.values() for p in params)
    saves = spec.train.steps // spec.train.checkpoint_every + 1
    need = saves * per_checkpoint + 2**20
    free = shutil.disk_usage(run_dir).free
    if free < need:
        raise UserError(
            f"{run_dir}: {free / 2**20:.1f} MiB free, but {saves} checkpoint(s) need about {need / 2**20:.1f} MiB; "
            "free disk space, raise train.checkpoint_every or choose another --out"
        )


# --- files ----------------------------------------------------------------------------------
def append_jsonl(path: Path, record: dict) -> None:
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    except OSError as e:
        raise UserError(f"{path}: cannot write ({e.strerror or e}); free disk space, then rerun with --resume") from None


def truncate_metrics(path: Path, step: int) -> None:
    """Keep only the lines of steps <= `step` (and drop a line cut short by a kill), so no step is lost or repeated."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= step:
            kept.append(line + "\n")
    write_atomic(path, "".join(kept))


def write_atomic(path: Path, text: str) -> None:
    """Write a whole file or nothing: a kill mid-write leaves the old content."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: Path, obj: dict) -> None:
    try:
        write_atomic(path, json.dumps(obj, indent=2, default=str))
    except OSError as e:
        raise UserError(f"{path}: cannot write ({e.strerror or e}); free disk space, then rerun with --resume") from None


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())
