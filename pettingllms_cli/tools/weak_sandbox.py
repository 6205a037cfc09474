"""The weaker sandbox mode, for kernels without namespaces (`tools.sandbox: best_effort` only).

What it does: rlimits, its own session killed as a group, an empty network namespace where `unshare` allows it,
and a PEP 578 audit hook installed before the user's code that refuses sockets, `ctypes`, fork/exec/spawn and
file writes, renames and deletions outside the work folder. The hook is a list of known doors (`os.*at` with
`dir_fd`, C extensions and sqlite3 pass it): a guard against accidents, not a boundary. tools/sandbox.py checks
the folder's size after the call.
"""

from __future__ import annotations

import ctypes
import resource
import signal
import sys

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


def limits(cpu_s: int, memory_mb: int, file_limit: int, processes: int = 1) -> None:
    """In the child before exec: own session, no network, resource caps."""
    _leave_network()
    caps = {
        resource.RLIMIT_CPU: (cpu_s, cpu_s + 1),
        resource.RLIMIT_AS: (memory_mb << 20, memory_mb << 20),
        resource.RLIMIT_FSIZE: (file_limit, file_limit),
        resource.RLIMIT_NOFILE: (64, 64),
        resource.RLIMIT_NPROC: (processes, processes),  # 1: the child exists already; any fork from it fails
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
