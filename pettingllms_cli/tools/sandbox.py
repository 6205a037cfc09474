"""A Python sandbox: model-written code runs in a fresh, limited process per call.

What each call gets (and what it cannot do):
- a separate process (`python -I -B -S`: isolated mode, standard library only, no bytecode files) in its own
  process group, killed as a group when the wall-clock limit passes;
- `setrlimit` limits: CPU seconds, address space (512 MB by default, so a 10 GB allocation
  is a `MemoryError`), file size (also caps stdout/stderr, which go to files), open files,
  and processes (`RLIMIT_NPROC`; note the kernel does not enforce it for root);
- a throw-away working directory (also HOME and TMPDIR), deleted after the call; environment
  variables are not inherited;
- no network: where the kernel allows it the child is moved into an empty network namespace
  (`unshare(CLONE_NEWNET)`, with a user namespace if unprivileged), so only a loopback-less
  stack exists; in every case a prelude installs an audit hook (PEP 578) before the user code
  runs that refuses sockets, `ctypes`, fork/exec/spawn/subprocess, and file writes, renames
  and deletions outside the working directory.

Honest limits: the audit hook is a guard against accidents and naive escapes by model
output, not a security boundary against a determined attacker with native code; the network
namespace and rlimits are kernel-enforced. Run untrusted code from people in a container.
"""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

MEMORY_MB = 512
TIMEOUT_S = 5.0
MAX_OUTPUT = 8000  # characters of stdout/stderr kept
FILE_LIMIT = 1 << 20  # bytes any file (stdout included) may grow to
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000

try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # no libc handle on this platform: the audit hook still blocks sockets
    _LIBC = None

# Runs before the user's code, in the child; its working directory is the only writable folder.
PRELUDE = r"""
def _install():
    import os, sys
    root = os.path.realpath(os.getcwd())
    deny = frozenset({
        "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.spawn", "os.system", "os.kill", "os.killpg",
        "subprocess.Popen", "pty.spawn", "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
        "socket.sendto", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "sys.addaudithook", "os.chdir",
        "os.setuid", "os.chroot", "resource.setrlimit"})
    path_events = frozenset({"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.link",
                             "os.symlink", "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile"})
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    realpath, fsdecode, sep, devnull = os.path.realpath, os.fsdecode, os.sep, os.devnull

    def inside(p):
        if isinstance(p, int):
            return True
        p = realpath(fsdecode(p))
        return p == root or p.startswith(root + sep) or p == devnull

    def hook(event, args):
        if event in deny or (event == "import" and args[0] in ("ctypes", "_ctypes")):
            raise PermissionError(f"sandbox: {event} {args[0] if event == 'import' else ''}is not allowed")
        if event == "open" and args[0] is not None:
            mode, flags = args[1] or "", args[2] or 0
            writes = any(c in mode for c in "wax+") or bool(flags & write_flags)
            if writes and not inside(args[0]):
                raise PermissionError(f"sandbox: writing outside the working folder is not allowed: {args[0]}")
        elif event in path_events and not all(inside(a) for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))):
            raise PermissionError(f"sandbox: {event} outside the working folder is not allowed")

    with open("main.py", encoding="utf-8") as f:
        code = compile(f.read(), "main.py", "exec")
    sys.addaudithook(hook)  # hooks cannot be removed; state lives in this closure, not in globals
    return code

_code = _install()
del _install
exec(_code, {"__name__": "__main__", "__builtins__": __builtins__})
"""


@dataclass
class SandboxResult:
    ok: bool
    stdout: str
    stderr: str
    error: str | None = None  # None | "timeout" | "memory" | "killed" | "exception"
    returncode: int | None = None
    truncated: bool = False

    def feedback(self, limit: int = 300) -> str:
        """A short line for a prompt: the output, or what went wrong."""
        if self.ok:
            return self.stdout.strip()[:limit] or "(no output)"
        last = self.stderr.strip().splitlines()[-1:] or [self.error or "error"]
        return f"{self.error}: {last[0][:limit]}"


def _limits(cpu_s: int, memory_mb: int) -> None:
    """In the child before exec: own session, no network, resource caps."""
    _leave_network()
    caps = {
        resource.RLIMIT_CPU: (cpu_s, cpu_s + 1),
        resource.RLIMIT_AS: (memory_mb << 20, memory_mb << 20),
        resource.RLIMIT_FSIZE: (FILE_LIMIT, FILE_LIMIT),
        resource.RLIMIT_NOFILE: (64, 64),
        resource.RLIMIT_NPROC: (1, 1),  # the child exists already; any fork from it fails
        resource.RLIMIT_CORE: (0, 0),
    }
    for which, value in caps.items():
        try:
            resource.setrlimit(which, value)
        except (ValueError, OSError):
            pass  # a limit the platform refuses; the others still apply
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG instead of a kill


def _leave_network() -> None:
    """Move into an empty network namespace if the kernel lets us (best effort, silent)."""
    if _LIBC is None or not sys.platform.startswith("linux"):
        return
    if _LIBC.unshare(CLONE_NEWNET) != 0:
        _LIBC.unshare(CLONE_NEWUSER | CLONE_NEWNET)


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
    *,
    pass_fds: tuple[int, ...] = (),
) -> SandboxResult:
    """Run `code` in a fresh limited process; nothing it does outlives the call.

    >>> run_python("print(6 * 7)").stdout
    '42\\n'
    """
    workdir = Path(tempfile.mkdtemp(prefix="pettingllms_sbx_"))
    logs = Path(tempfile.mkdtemp(prefix="pettingllms_sbx_out_"))  # outside workdir: the code cannot touch them
    try:
        # A lone surrogate (text no tokenizer decodes to, but a caller may pass) cannot be UTF-8: write it as `?`.
        (workdir / "main.py").write_text(code, encoding="utf-8", errors="replace")
        return _run(workdir, logs, stdin.encode("utf-8", errors="replace"), timeout, memory_mb, max_output, pass_fds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)


def _run(
    workdir: Path, logs: Path, stdin: bytes, timeout: float, memory_mb: int, max_output: int, pass_fds: tuple[int, ...] = ()
) -> SandboxResult:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }
    cpu_s = max(1, int(timeout + 0.999))
    with open(logs / "out", "wb") as out, open(logs / "err", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", "-S", "-c", PRELUDE],
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            start_new_session=True,
            pass_fds=pass_fds,
            preexec_fn=lambda: _limits(cpu_s, memory_mb),
        )
        timed_out = False
        try:
            proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc.pid)
            proc.wait()
    stdout, cut_out = _read(logs / "out", max_output)
    stderr, cut_err = _read(logs / "err", max_output)
    error = _classify(proc.returncode, stderr, timed_out)
    return SandboxResult(error is None, stdout, stderr, error, proc.returncode, cut_out or cut_err)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # already gone
