"""The one way files of records are written and read: whole or not at all, damaged ones read as missing."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from pettingllms_cli.errors import UserError

RESUME = "free disk space, then rerun with --resume"


def write_atomic(path: Path, content: str | bytes) -> None:
    """Write a whole file or nothing: a kill or a full disk mid-write leaves the old content (or none)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        if isinstance(content, bytes):
            tmp.write_bytes(content)
        else:
            tmp.write_text(content, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: Path, obj: dict, then: str = RESUME) -> None:
    """`obj` as indented JSON, atomically; a full disk or an unwritable folder is one line that ends with `then`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(obj, indent=2, default=str))
    except OSError as e:
        raise UserError(f"{path}: cannot write ({e.strerror or e}); {then}") from None


def read_json(path: Path) -> dict | None:
    """A JSON object file, or None when it is missing or damaged (cut short by a crash, edited by hand)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def append_jsonl(path: Path, record: dict) -> None:
    """One more line of records (metrics.jsonl, resumes.jsonl)."""
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    except OSError as e:
        raise UserError(f"{path}: cannot write ({e.strerror or e}); {RESUME}") from None


def clean_metrics(metrics: dict, digits: int = 6) -> dict:
    """The one cleaner every metrics.jsonl value goes through: floats rounded, NaN and inf written as null.

    >>> clean_metrics({"loss/a": float("nan"), "reward/a": 0.1234567891, "step": 3})
    {'loss/a': None, 'reward/a': 0.123457, 'step': 3}
    """
    return {k: (round(v, digits) if math.isfinite(v) else None) if isinstance(v, float) else v for k, v in metrics.items()}
