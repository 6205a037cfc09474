"""The sandbox launcher: a short program that confines itself, then executes the sandboxed Python.

`tools/sandbox.py` starts it as `python -I -S -c BOOT <config>` (the config dict, marshalled and hex-encoded:
`marshal` is built in, so the launcher imports next to nothing); it runs as three processes:

- the launcher (outside the new PID namespace) enters new mount, PID, network, IPC and UTS namespaces (plus a
  user namespace when it is not root), builds a new root that holds only read-only bind mounts of what the
  interpreter needs (the Python install, the system libraries, /etc/ld.so.cache, /dev/null, /dev/zero,
  /dev/urandom) and a size-limited tmpfs at the work folder's path, and moves into it with `pivot_root`: every
  other path of the machine does not exist for the sandbox (no /etc/passwd, ~/.ssh, /proc, docker.sock). It
  forks `init` and waits; on SIGTERM it kills `init`; it exits as the program did (an exit code, or the signal).
- `init` (PID 1 of the namespace) forks the program and reaps orphans until the program ends, then exits: the
  kernel kills every process left in the namespace (double forks and `setsid` daemons included) before the
  launcher's `waitpid` returns, so nothing outlives the call.
- the program sets rlimits, drops to uid 65534 when the launcher is root (no capabilities; the kernel then
  counts RLIMIT_NPROC for it), restricts itself with Landlock (tools/landlock.py: write only in the work folder,
  read only the bound paths, execute only the interpreter and its loader, no TCP, no signals out of its domain)
  and executes `python -I -B -S`.

Exit code 121 with a `sandbox setup:` line on stderr means a step of the confinement failed: the program never ran.
"""

from __future__ import annotations

import _signal as signal  # the C module: `signal` imports enum, a fifth of the launcher's start-up
import ctypes
import marshal
import os
import resource
import struct
import sys

from pettingllms_cli.tools import landlock

SETUP_FAILED = 121
NOBODY = 65534
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP = 1, 24
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
# statvfs flags -> mount flags a bind remount must keep (the kernel refuses to clear a locked one).
KEPT_FLAGS = {2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME, 4096: MS_RELATIME}

_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    """A confinement step failed; the program must not run."""


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def enter_namespaces(as_root: bool) -> bool:
    """Enter new namespaces; returns True when a user namespace was needed (not root, or root without CAP_SYS_ADMIN)."""
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    if as_root and _libc.unshare(flags) == 0:
        return False
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(flags | CLONE_NEWUSER), "unshare (user, mount, pid, net namespaces)")
    for name, text in (("uid_map", f"{uid} {uid} 1"), ("setgroups", "deny"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:  # the same ids inside: files keep their owner
            f.write(text)
    return True


def build_root(new: str, binds: list[str], workdir: str, disk_bytes: int, code: bytes, owner: int | None) -> None:
    """A fresh root at `new` with read-only `binds` and a writable tmpfs at `workdir`; then pivot into it."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted here propagates to the machine
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path in binds:
        _bind(path, new)
    inner = new + workdir
    os.makedirs(inner, exist_ok=True)
    ids = f",uid={owner},gid={owner}" if owner is not None else ""
    _mount("tmpfs", inner, "tmpfs", MS_NOSUID | MS_NODEV, f"size={disk_bytes},mode=0700{ids}")
    with open(inner + "/main.py", "wb") as f:
        f.write(code)
    if owner is not None:
        os.chown(inner + "/main.py", owner, owner)
    os.chdir(new)
    number = PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise SetupError(f"pivot_root: unknown system call number on {os.uname().machine}")
    _check(_libc.syscall(ctypes.c_long(number), b".", b"."), "pivot_root")  # the old root now sits under the new one
    _check(_libc.umount2(b".", MNT_DETACH), "detach the old root")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(workdir)


def _bind(path: str, new: str) -> None:
    """Bind `path` read-only at the same place under `new` (a symlink is recreated and its target bound); a path
    that shows already (inside an earlier bind) is skipped, so system folders and links must come first."""
    dest = new + path
    if not os.path.lexists(path) or os.path.lexists(dest):
        return
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if os.path.islink(path):  # /lib64 -> usr/lib64: the loader's path must resolve inside too
        if not os.path.lexists(dest):
            os.symlink(os.readlink(path), dest)
        _bind(os.path.realpath(path), new)
        return
    if os.path.isdir(path):
        os.makedirs(dest, exist_ok=True)
    else:
        open(dest, "a").close()
    _mount(path, dest, None, MS_BIND | MS_REC)
    kept = sum(flag for st, flag in KEPT_FLAGS.items() if os.statvfs(path).f_flag & st)
    _mount(None, dest, None, MS_BIND | MS_REMOUNT | MS_RDONLY | kept)


SYSTEM_PATHS = (
    "/lib", "/lib64", "/lib32", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/etc/ld.so.cache", "/etc/localtime",
    "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random",
)  # fmt: skip


def interpreter_paths(executable: str, base_prefix: str) -> tuple[list[str], list[str]]:
    """(paths bound read-only, files Landlock lets execute) for running `executable`: its install, the system
    libraries and its ELF loader; only those that exist here."""
    python = os.path.realpath(executable)
    loader = elf_interpreter(python)
    runnable = [python] + ([loader] if loader else [])
    binds = [*SYSTEM_PATHS, os.path.realpath(base_prefix), *runnable]
    return [p for p in dict.fromkeys(binds) if os.path.lexists(p)], runnable


def elf_interpreter(path: str) -> str | None:
    """The program loader an ELF executable names (PT_INTERP), e.g. /lib64/ld-linux-x86-64.so.2; None if static."""
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if head[:4] != b"\x7fELF":
        return None
    wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
    phoff, phentsize, phnum = (
        struct.unpack_from(order + "Q", head, 0x20)[0] if wide else struct.unpack_from(order + "I", head, 0x1C)[0],
        *struct.unpack_from(order + "HH", head, 0x36 if wide else 0x2A),
    )
    for i in range(phnum):
        at = phoff + i * phentsize
        if at + phentsize > len(head):
            break
        if struct.unpack_from(order + "I", head, at)[0] == 3:  # PT_INTERP
            layout = order + ("Q16xQ" if wide else "I8xI")  # p_offset, (p_vaddr, p_paddr), p_filesz
            offset, size = struct.unpack_from(layout, head, at + (8 if wide else 4))
            return head[offset : offset + size].rstrip(b"\0").decode()
    return None


def set_limits(config: dict) -> None:
    """rlimits of the program; RLIMIT_NPROC comes after the uid change (setuid would flag the exec otherwise)."""
    cpu_s, memory = config["cpu_s"], config["memory_mb"] << 20
    for which, value in (
        (resource.RLIMIT_CPU, (cpu_s, cpu_s + 1)),
        (resource.RLIMIT_AS, (memory, memory)),
        (resource.RLIMIT_FSIZE, (config["file_limit"], config["file_limit"])),
        (resource.RLIMIT_NOFILE, (64, 64)),
        (resource.RLIMIT_CORE, (0, 0)),
    ):
        resource.setrlimit(which, value)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write fails with EFBIG instead of a kill


def drop_privileges(owner: int | None, processes: int) -> None:
    """No capability survives the exec: empty bounding set, then (root launcher) uid and gid 65534."""
    for cap in range(64):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # fails harmlessly past the last capability
    if owner is not None:
        os.setgroups([])
        os.setresgid(owner, owner, owner)
        os.setresuid(owner, owner, owner)
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))  # 1: it exists already, any fork fails


def run_program(config: dict, owner: int | None) -> None:
    """In the program's process: limits, privileges, Landlock, exec. Never returns."""
    set_limits(config)
    drop_privileges(owner, config["processes"])
    if config["landlock"]:
        landlock.restrict(read=config["binds"], read_exec=config["executables"], write=[config["workdir"], os.devnull])
    os.execve(config["argv"][0], config["argv"], config["env"])


def init(config: dict, owner: int | None, report: int) -> None:
    """PID 1 of the namespace: fork the program, reap orphans until it ends, report its wait status, exit."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the launcher dies: so does the namespace
    program = os.fork()
    if program == 0:
        os.close(report)
        _run_or_fail(run_program, config, owner)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == program:
            os.write(report, struct.pack("i", status))
            os._exit(0)  # the kernel now kills what is left in the namespace


def _run_or_fail(step, *args: object) -> None:
    try:
        step(*args)
    except (SetupError, OSError, ValueError) as e:
        os.write(2, f"sandbox setup: {e}\n".encode())
    os._exit(SETUP_FAILED)


def launch(config: dict) -> None:
    """The launcher's whole job (see the module docstring); exits as the program did."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    workdir = config["workdir"]
    with open(os.path.join(workdir, "main.py"), "rb") as f:
        code = f.read()
    as_root = os.geteuid() == 0 and not config["user_namespace"]
    try:
        user_ns = enter_namespaces(as_root)
        owner = NOBODY if as_root and not user_ns else None
        build_root(workdir, config["binds"], workdir, config["disk_bytes"], code, owner)
    except (SetupError, OSError) as e:
        os.write(2, f"sandbox setup: {e}\n".encode())
        os._exit(SETUP_FAILED)
    read, report = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        init(config, owner, report)
    os.close(report)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(child, signal.SIGKILL))  # the caller's time is up
    while True:
        try:
            os.waitpid(child, 0)  # returns once every process of the namespace is gone
            break
        except InterruptedError:
            continue
    data = os.read(read, 4)
    status = struct.unpack("i", data)[0] if len(data) == 4 else -1
    exit_as(status)


def exit_as(status: int) -> None:
    """Leave with the program's exit code, or die by its signal; -1 (no report): killed from outside."""
    if status == -1:
        os._exit(SETUP_FAILED + 1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


if __name__ == "__main__":
    launch(marshal.loads(bytes.fromhex(sys.argv[1])))
