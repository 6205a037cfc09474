"""The run directory: creating it, checking it for --resume, probing that it is writable, atomic files.

One process writes it at a time (lock.py). A file here is either written whole or not at all
(`write_atomic`), so a kill at any moment leaves the previous content; `truncate_metrics` cuts
metrics.jsonl back to a checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import yaml
from pydantic import ValidationError

from pettingllms_cli.analysis.budget import flatten
from pettingllms_cli.errors import UserError
from pettingllms_cli.jsonio import write_atomic
from pettingllms_cli.spec import Experiment, dump_spec
from pettingllms_cli.training.lock import LOCK_FILE

# Spec fields that change no step's computation: --resume accepts new values for them without --force.
RESUME_FREE_FIELDS = {
    "train.steps",
    "train.log_every",
    "train.checkpoint_every",
    "train.max_skipped_in_a_row",
    "train.report_to",
    "output_dir",
}


def run_dir_of(path: Path) -> Path | None:
    """The run directory `path` lies in (a folder with spec.yaml and checkpoints or metrics), or None."""
    for folder in path.resolve().parents:
        if (folder / "spec.yaml").is_file() and ((folder / "checkpoints").is_dir() or (folder / "metrics.jsonl").is_file()):
            return folder
    return None


# What a run writes at its top level; anything else is someone's file, and --overwrite refuses to delete it.
RUN_ENTRIES = {
    "spec.yaml",
    "checkpoints",
    "metrics.jsonl",
    "resumes.jsonl",
    "resolved.json",
    "eval_before.json",
    "eval_after.json",
    "compare_eval.json",
    "compare_vote.json",
    "report.md",
    "report.html",
    "plots",
    "tb",  # train.report_to: tensorboard (tracking.py)
    "wandb",  # train.report_to: wandb
    LOCK_FILE,
}
LEFTOVER_RE = re.compile(r"^\.(.+\.tmp|write-probe)-\d+$")  # write_atomic's and probe_writable's files, cut by a kill


def holds_run(run_dir: Path) -> bool:
    """Whether `run_dir` holds anything besides a writer lock file."""
    return run_dir.is_dir() and any(child.name != LOCK_FILE for child in run_dir.iterdir())


def is_run(run_dir: Path) -> bool:
    """A run directory: spec.yaml plus checkpoints or metrics (what `train` writes before its first step)."""
    return (run_dir / "spec.yaml").is_file() and ((run_dir / "checkpoints").is_dir() or (run_dir / "metrics.jsonl").is_file())


def foreign_entries(run_dir: Path) -> list[str]:
    """Names in `run_dir` that no run writes (a user's files), sorted."""
    names = (child.name for child in run_dir.iterdir()) if run_dir.is_dir() else ()
    return sorted(n for n in names if n not in RUN_ENTRIES and not LEFTOVER_RE.match(n))


def not_a_run(run_dir: Path) -> str | None:
    """Why `run_dir` must not be cleared (it holds files but no run, or someone's files), or None (a run, or empty)."""
    if not holds_run(run_dir):
        return None
    foreign = foreign_entries(run_dir)
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        return f"{run_dir} is not a run directory: it holds {', '.join(foreign[:3])}{more}, which no run writes"
    if not is_run(run_dir):
        return f"{run_dir} is not a run directory (no spec.yaml with checkpoints or metrics.jsonl)"
    return None


def clear_run_dir(run_dir: Path) -> None:
    """--overwrite: delete the run's files but keep the lock file this process holds (so no one else can start).

    Only entries a run writes are deleted, and only inside the resolved folder: a link is removed, never followed.
    """
    if not_a_run(run_dir):  # the caller checked; checked again because this deletes
        raise UserError(f"{not_a_run(run_dir)}; refusing to delete it")
    for child in run_dir.resolve().iterdir():
        if child.name == LOCK_FILE:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


# --- setup ---------------------------------------------------------------------------------------
def prepare_run_dir(spec: Experiment, run_dir: Path, resume: bool, overwrite: bool, force: bool) -> dict:
    """Create the run directory (or check it for --resume), probe that it is writable, write spec.yaml.

    The caller holds the writer lock. On --resume an existing spec.yaml is left as it is: the
    resume writes the new one only once the checkpoint has loaded (`write_spec`), so a failed
    `--resume --force` leaves the run as it was. Returns the spec fields a forced resume changes.
    """
    if resume and overwrite:
        raise UserError("--resume and --overwrite contradict each other: --resume continues the run, --overwrite deletes it")
    spec_file = run_dir / "spec.yaml"
    changes: dict = {}
    if resume and is_run(run_dir):
        changes = spec_changes(read_saved_spec(spec_file), spec.model_dump(mode="json"))
        if changes and not force:
            listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in list(changes.items())[:4])
            more = f" (+{len(changes) - 4} more)" if len(changes) > 4 else ""
            raise UserError(
                f"{run_dir}: --resume with a different spec than the run's spec.yaml ({listed}{more}); "
                "use the same spec, another --out, or add --force to continue with the new spec"
            )
    elif not_a_run(run_dir):  # someone's folder: neither continued nor replaced
        raise UserError(f"{not_a_run(run_dir)}; choose another --out (only a run is ever replaced)")
    elif not resume and holds_run(run_dir):
        if not overwrite:
            raise UserError(f"{run_dir} already holds a run; pass --resume to continue it, --overwrite to replace it, or --out")
        clear_run_dir(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe_writable(run_dir)
        if not (resume and is_run(run_dir)):
            write_atomic(spec_file, dump_spec(spec))
        (run_dir / "checkpoints").mkdir(exist_ok=True)  # spec.yaml + checkpoints/: a run from the start (`is_run`)
    except OSError as e:
        why = e.strerror or e
        raise UserError(f"{run_dir}: cannot write the run directory ({why}); choose another --out or free disk space") from None
    return changes


def write_spec(run_dir: Path, spec: Experiment) -> None:
    """spec.yaml after a resume: the spec the run now continues with (changed only by --force)."""
    write_text_file(run_dir / "spec.yaml", dump_spec(spec), "then rerun with --resume")


def read_saved_spec(path: Path) -> dict:
    try:
        saved = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        saved = None
    if not isinstance(saved, dict):
        raise UserError(f"{path}: damaged spec file; restore it or start a new run with another --out")
    return saved


def as_current(saved: dict) -> dict:
    """A saved spec as today's schema writes it: a knob added since reads as its default, so upgrading does not make a
    finished run differ from its own spec. One the schema refuses stays as saved (and differs)."""
    try:
        return Experiment.model_validate(saved).model_dump(mode="json")
    except ValidationError:
        return saved


def spec_changes(saved: dict, now: dict) -> dict[str, tuple]:
    """{dotted.key: (old, new)} for fields that differ, except those in RESUME_FREE_FIELDS."""
    old, new = flatten(as_current(saved)), flatten(now)
    keys = sorted((set(old) | set(new)) - RESUME_FREE_FIELDS)
    return {k: (old.get(k, "<absent>"), new.get(k, "<absent>")) for k in keys if old.get(k, "<absent>") != new.get(k, "<absent>")}


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


def write_text_file(path: Path, content: str | bytes, then: str) -> None:
    """`write_atomic`, with a full disk or an unwritable folder as one line that ends with `then`."""
    try:
        write_atomic(path, content)
    except OSError as e:
        raise UserError(f"{path}: cannot write ({e.strerror or e}); free disk space, {then}") from None
