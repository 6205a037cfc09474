"""One writer per run directory.

`writer_lock` holds an flock on LOCK_FILE, which the kernel releases when the holder dies (even by
SIGKILL), so a stale lock never blocks a resume; a second writer is refused at once with one line
naming the live pid.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pettingllms_cli import distributed
from pettingllms_cli.errors import UserError

LOCK_FILE = ".pettingllms.lock"  # holds the writer's pid and command; flock'ed while it writes
_held: dict[Path, list] = {}  # resolved run dir -> [fd, depth, lock path]: this process's locks (re-entrant)


@contextmanager
def writer_lock(run_dir: Path, then: str) -> Iterator[None]:
    """Hold the run directory's writer lock (rank 0 takes it for all ranks); `then` ends the refusal message.

    A second writer is refused at once with one line naming the live pid; re-entrant in one process.
    """
    distributed.on_main(acquire_lock, run_dir, then)
    try:
        yield
    finally:
        if distributed.is_main():
            release_lock(run_dir)


def acquire_lock(run_dir: Path, then: str) -> None:
    key = run_dir.resolve()
    if key in _held:
        _held[key][1] += 1
        return
    path = run_dir / LOCK_FILE
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = _open_locked(path)
    except OSError as e:
        raise UserError(f"{run_dir}: cannot write the run directory ({e.strerror or e}); choose another --out") from None
    if fd is None:
        pid, command = lock_holder(path)
        wait = f"wait for it to end (`tail --pid={pid} -f /dev/null`) or stop it (`kill {pid}`)" if pid else "wait for it to end"
        raise UserError(f"{run_dir}: another process (pid {pid or '?'}: {command}) is writing this run directory; {wait}, {then}")
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"pid": os.getpid(), "command": shlex.join(["pettingllms", *sys.argv[1:]])}).encode())
    _held[key] = [fd, 1, path]


def _open_locked(path: Path) -> int | None:
    """An fd holding the exclusive flock on `path`, or None while another process holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder unlinked the file as we opened it: lock the one now at `path`


def release_lock(run_dir: Path) -> None:
    key = run_dir.resolve()
    held = _held.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] > 0:
        return
    fd, _, path = _held.pop(key)
    path.unlink(missing_ok=True)  # still locked here: a process that opened it meanwhile sees the inode gone and retries
    os.close(fd)


def lock_holder(path: Path) -> tuple[int | None, str]:
    """(pid, command) the lock file names; (None, "?") while the holder has not written them yet."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        return int(record["pid"]), str(record["command"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, "?"
