"""A Python sandbox: model-written code runs in a fresh, confined process per call; the kernel enforces it.

`strict` mode (the default; tools/jail.py runs it, tools/landlock.py holds the Landlock calls):
- **files**: the program runs in its own mount namespace whose root holds only read-only bind mounts of the
  Python install, the system libraries, /etc/ld.so.cache and /dev/null, /dev/zero, /dev/urandom, plus a tmpfs
  at the work folder's path (the only writable place, `disk_mb` large, gone with the namespace). Landlock then
  limits the process itself: write only in the work folder, read only those paths, execute only the interpreter
  and its loader. Nothing else of the machine exists for it: not /etc/passwd, ~/.ssh, /proc, /dev/shm or any
  unix socket; `os.*at` calls, `ctypes`, sqlite3, `mknod` and C extensions meet the same kernel checks.
- **network**: an empty network namespace (no interface is up) and, with Landlock ABI 4+, no TCP bind/connect.
- **processes**: a new PID namespace whose init reaps the program; when the program ends (or the time is up)
  init exits and the kernel kills every process left in it, `setsid` daemons and double forks included, before
  the call returns. The parent is outside the namespace: `getppid()` is 0, pids of the caller cannot be named,
  and Landlock ABI 6+ refuses signals to processes outside the domain.
- **limits**: rlimits on CPU seconds, address space (512 MB: a 10 GB allocation is a `MemoryError`), file size
  (also stdout/stderr, which go to files), open files, processes (`RLIMIT_NPROC` 1: as root the program runs as
  uid 65534 so the kernel counts it), the wall clock, and the bytes the work folder may hold (the tmpfs size).

Where the kernel lacks Landlock or namespaces, `require("strict")` (called by the CLI before any model loads) is
a one-line error naming what is missing and the opt-in `tools.sandbox: best_effort`; with it the sandbox says
once what it lacks and runs what it can: namespaces without Landlock, or, without namespaces, the weaker mode of
earlier versions (rlimits, its own session killed as a group, a best-effort network namespace, a byte count of
the folder checked after the call, and a PEP 578 audit hook refusing known doors: sockets, `ctypes`, forks,
writes outside the folder). That hook is a list of known doors, not a boundary. docs/sandbox.md has the details.
"""

from __future__ import annotations

import functools
import marshal
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pettingllms_cli.errors import UserError
from pettingllms_cli.tools import jail, landlock, weak_sandbox

MEMORY_MB = 512
TIMEOUT_S = 5.0
MAX_OUTPUT = 8000  # characters of stdout/stderr kept
FILE_LIMIT = 1 << 20  # bytes any file (stdout included) may grow to
DISK_MB = 64  # bytes the work folder may hold, all files together
USER_NAMESPACE = False  # True: a root caller takes the unprivileged path too (user namespace; the tests run both)
STOP_GRACE_S = 5.0  # after the time is up: how long the launcher may take to empty the namespace
SandboxMode = Literal["strict", "best_effort"]
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds pettingllms_cli, for the launcher
BOOT = (
    "import marshal, sys; sys.path.insert(0, {root!r}); from pettingllms_cli.tools.jail import launch; "
    "launch(marshal.loads(bytes.fromhex(sys.argv[1])))"
)
# The program's own prelude in the confined modes: read main.py and run it as __main__ (the kernel is the guard).
RUN_MAIN = (
    'with open("main.py", encoding="utf-8") as f:\n    _c = compile(f.read(), "main.py", "exec")\n'
    'exec(_c, {"__name__": "__main__"})\n'
)


@dataclass(frozen=True)
class Limits:
    """What one call may use: wall-clock seconds, memory, characters of output kept, bytes in its folder, processes."""

    timeout: float
    memory_mb: int
    max_output: int
    disk_bytes: int
    processes: int

    @property
    def cpu_s(self) -> int:
        return max(1, int(self.timeout + 0.999))


@dataclass(frozen=True)
class Support:
    """What this kernel offers the sandbox: Landlock's ABI version (0: none) and why namespaces fail (None: they work)."""

    landlock_abi: int
    namespaces_error: str | None = None

    def missing(self) -> list[str]:
        """The features strict mode needs and this kernel lacks, named for people.

        >>> Support(0, "unshare: Operation not permitted").missing()
        ['Landlock (Linux 5.13+)', 'namespaces (unshare: Operation not permitted)']
        """
        gaps = [] if self.landlock_abi > 0 else ["Landlock (Linux 5.13+)"]
        return gaps + ([f"namespaces ({self.namespaces_error})"] if self.namespaces_error else [])


@functools.cache
def probe() -> Support:
    """Ask the kernel once per process: the Landlock ABI, and whether the launcher can build its namespaces."""
    abi = landlock.abi()
    workdir, logs = Path(tempfile.mkdtemp(prefix="pettingllms_sbx_")), Path(tempfile.mkdtemp(prefix="pettingllms_sbx_out_"))
    try:
        (workdir / "main.py").write_text("print('ok')\n")
        result = _run_jailed(workdir, logs, b"", Limits(10.0, MEMORY_MB, 200, DISK_MB << 20, 1), abi > 0)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)
    if result.ok and result.stdout.strip() == "ok":
        return Support(abi)
    lines = result.stderr.strip().splitlines() or [result.error or "the launcher failed"]
    return Support(abi, lines[-1].removeprefix("sandbox setup: ")[:200])


_mode: SandboxMode = "strict"  # the process's choice, made once at start by `require`
_warned: set[str] = set()


def require(mode: SandboxMode, probe: Callable[[], Support] | None = None, warn: Callable[[str], None] = print) -> Support:
    """Choose the mode before any model loads: strict on a kernel that lacks a feature is a UserError naming it and
    the opt-in; best_effort says once, in one line, what is missing and that it runs the weaker mode."""
    global _mode
    support = (probe or globals()["probe"])()
    missing = support.missing()
    if missing and mode == "strict":
        raise UserError(_refusal(missing))
    _mode = mode
    if missing and (line := _weaker_line(support)) not in _warned:
        _warned.add(line)
        warn(line)
    return support


def _refusal(missing: list[str]) -> str:
    return (
        f"sandbox: this kernel lacks {' and '.join(missing)}, so model code cannot run confined; "
        "set `tools: {sandbox: best_effort}` in the spec to run it in a weaker sandbox (docs/sandbox.md)"
    )


def _weaker_line(support: Support) -> str:
    weaker = "namespaces without Landlock" if support.namespaces_error is None else "rlimits and an audit hook, no namespaces"
    lacks = " and ".join(support.missing())
    return f"sandbox: best_effort: this kernel lacks {lacks}; model code runs with {weaker} (docs/sandbox.md)"


@dataclass
class SandboxResult:
    ok: bool
    stdout: str
    stderr: str
    error: str | None = None  # None | "timeout" | "memory" | "killed" | "exception" | "sandbox" | "disk"
    returncode: int | None = None
    truncated: bool = False

    def feedback(self, limit: int = 300) -> str:
        """A short line for a prompt: the output, or what went wrong."""
        if self.ok:
            return self.stdout.strip()[:limit] or "(no output)"
        last = self.stderr.strip().splitlines()[-1:] or [self.error or "error"]
        return f"{self.error}: {last[0][:limit]}"


def _read(path: Path, limit: int) -> tuple[str, bool]:
    with open(path, "rb") as f:
        data = f.read(limit * 4 + 1)
    text = data.decode("utf-8", errors="replace")
    return text[:limit], len(text) > limit or len(data) > limit * 4


def _classify(returncode: int, stderr: str, timed_out: bool) -> str | None:
    """The error kind of a finished child.

    >>> _classify(0, "", False) is None
    True
    >>> _classify(1, "Traceback ...\\nMemoryError", False)
    'memory'
    >>> _classify(-9, "", True)
    'timeout'
    """
    if returncode == jail.SETUP_FAILED and "sandbox setup:" in stderr:
        return "sandbox"  # the confinement failed, the program never ran
    if timed_out or returncode == -signal.SIGXCPU:
        return "timeout"
    if "MemoryError" in stderr:
        return "memory"
    if returncode < 0:
        return "killed"
    return None if returncode == 0 else "exception"


def run_python(
    code: str,
    stdin: str = "",
    timeout: float = TIMEOUT_S,
    memory_mb: int = MEMORY_MB,
    max_output: int = MAX_OUTPUT,
    disk_mb: int = DISK_MB,
    *,
    pass_fds: tuple[int, ...] = (),
    processes: int = 1,
) -> SandboxResult:
    """Run `code` in a fresh confined process; nothing it does outlives the call or shows outside its folder.

    `disk_mb` caps the bytes its folder may hold, all files together; `processes` is RLIMIT_NPROC (1: it cannot
    fork; the kernel does not count root, which is why a root caller's program runs as uid 65534).

    `pass_fds`: descriptors the program keeps open at the same numbers (the pipes of tools/proxy.py, issue 34).

    >>> run_python("print(6 * 7)").stdout
    '42\\n'
    """
    support = probe()
    if support.missing() and _mode == "strict":
        raise UserError(_refusal(support.missing()))
    workdir = Path(tempfile.mkdtemp(prefix="pettingllms_sbx_"))
    logs = Path(tempfile.mkdtemp(prefix="pettingllms_sbx_out_"))  # outside workdir: the code cannot touch them
    try:
        # A lone surrogate (text no tokenizer decodes to, but a caller may pass) cannot be UTF-8: write it as `?`.
        (workdir / "main.py").write_text(code, encoding="utf-8", errors="replace")
        data = stdin.encode("utf-8", errors="replace")
        limits = Limits(timeout, memory_mb, max_output, disk_mb << 20, processes)
        if support.namespaces_error is None:
            return _run_jailed(workdir, logs, data, limits, support.landlock_abi > 0, pass_fds=pass_fds)
        return _run_weak(workdir, logs, data, limits, pass_fds=pass_fds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)


def _environment(workdir: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }


def _run_jailed(
    workdir: Path,
    logs: Path,
    stdin: bytes,
    limits: Limits,
    use_landlock: bool,
    pass_fds: tuple[int, ...] = (),
) -> SandboxResult:
    """Through the launcher (tools/jail.py): namespaces, a new root, Landlock when the kernel has it."""
    binds, executables = jail.interpreter_paths(sys.executable, sys.base_prefix)
    config = {
        "workdir": str(workdir.resolve()),
        "binds": binds,
        "executables": executables,
        "cpu_s": limits.cpu_s,
        "memory_mb": limits.memory_mb,
        "file_limit": FILE_LIMIT,
        "disk_bytes": limits.disk_bytes,
        "processes": limits.processes,
        "user_namespace": USER_NAMESPACE,
        "landlock": use_landlock,
        "argv": [executables[0], "-I", "-B", "-S", "-c", RUN_MAIN],
        "env": _environment(workdir.resolve()),
    }
    launcher = [sys.executable, "-I", "-S", "-B", "-c", BOOT.format(root=PACKAGE_ROOT), marshal.dumps(config).hex()]
    return _supervise(launcher, workdir, logs, stdin, limits, stop=_stop_jailed, pass_fds=pass_fds)


def _run_weak(
    workdir: Path,
    logs: Path,
    stdin: bytes,
    limits: Limits,
    pass_fds: tuple[int, ...] = (),
) -> SandboxResult:
    """The weaker mode (tools/weak_sandbox.py), then the folder's size checked against the byte cap."""
    result = _supervise(
        [sys.executable, "-I", "-B", "-S", "-c", weak_sandbox.PRELUDE],
        workdir,
        logs,
        stdin,
        limits,
        stop=_kill_group,
        preexec_fn=lambda: weak_sandbox.limits(limits.cpu_s, limits.memory_mb, FILE_LIMIT, limits.processes),
        env=_environment(workdir),
        pass_fds=pass_fds,
    )
    if folder_bytes(workdir) > limits.disk_bytes:
        result.ok, result.error = False, "disk"
        result.stderr += f"\nsandbox: the work folder grew past {limits.disk_bytes >> 20} MB\n"
    return result


def _supervise(
    argv: list[str],
    workdir: Path,
    logs: Path,
    stdin: bytes,
    limits: Limits,
    stop: Callable[[subprocess.Popen], None],
    **popen: object,
) -> SandboxResult:
    """Start `argv`, feed stdin, stop it when the time is up, and read what it printed."""
    with open(logs / "out", "wb") as out, open(logs / "err", "wb") as err:
        proc = subprocess.Popen(argv, cwd=workdir, stdin=subprocess.PIPE, stdout=out, stderr=err, start_new_session=True, **popen)
        timed_out = False
        try:
            proc.communicate(stdin, timeout=limits.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            stop(proc)
            proc.wait()
    stdout, cut_out = _read(logs / "out", limits.max_output)
    stderr, cut_err = _read(logs / "err", limits.max_output)
    error = _classify(proc.returncode, stderr, timed_out)
    return SandboxResult(error is None, stdout, stderr, error, proc.returncode, cut_out or cut_err)


def _stop_jailed(proc: subprocess.Popen) -> None:
    """Ask the launcher to end the namespace (it returns once every process in it is gone); kill it if it hangs."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone


def folder_bytes(folder: Path) -> int:
    """Bytes of every file under `folder` (links not followed)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass  # removed while counting
    return total
