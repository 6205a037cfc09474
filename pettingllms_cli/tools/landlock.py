"""Landlock (Linux 5.13+) through its three system calls: a process limits its own file and TCP access.

Landlock needs no privilege: a process builds a ruleset (the access kinds it handles, and per folder or file
what stays allowed), then restricts itself; the limits hold for it and everything it executes or forks, and
cannot be lifted. What a kernel can enforce grows with its ABI version, so `ruleset` handles only what
`abi()` reports: 1 files, 2 renames and links across folders (REFER), 3 truncation, 4 TCP bind/connect,
5 device ioctls, 6 signals and abstract unix sockets to processes outside the domain (scopes).

Used by the sandbox launcher (tools/jail.py) between fork and exec; the sandboxed program never loads ctypes.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

# System call numbers: the same on every architecture (added after the syscall tables were unified).
CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
PR_SET_NO_NEW_PRIVS = 38

# Filesystem access rights (include/uapi/linux/landlock.h) and the ABI that introduced the later ones.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the only rights a rule on a file may hold
READ = READ_FILE | READ_DIR
READ_EXEC = READ | EXECUTE


class LandlockError(OSError):
    """The kernel refused a Landlock call (errno and the step that failed)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _syscall(number: int, *args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        errno = ctypes.get_errno()
        raise LandlockError(errno, f"landlock syscall {number}: {os.strerror(errno)}")
    return result


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (old kernel, disabled at boot, not Linux)."""
    if os.uname().sysname != "Linux":
        return 0
    try:
        return _syscall(CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    except (LandlockError, OSError, AttributeError):
        return 0


def handled_fs(version: int) -> int:
    """Every filesystem right the ABI knows: all of them are denied unless a rule allows them.

    >>> handled_fs(1) & REFER, handled_fs(3) & TRUNCATE > 0, handled_fs(7) == handled_fs(5)
    (0, True, True)
    """
    return FS_BY_ABI[min(version, 5)]


def restrict(read: Iterable[str], read_exec: Iterable[str], write: Iterable[str], version: int | None = None) -> int:
    """Restrict this process: read `read`, read and execute `read_exec`, do anything inside `write`; no TCP
    (ABI 4+); no signals or abstract unix sockets to processes outside (ABI 6+). Paths that do not exist are
    skipped. Returns the ABI version applied. Raises LandlockError where the kernel refuses.
    """
    version = abi() if version is None else version
    if version < 1:
        raise LandlockError(95, "Landlock is not available in this kernel")
    fs = handled_fs(version)
    attr = _RulesetAttr(fs, NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0, 0)
    if version >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    ruleset = _syscall(CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    try:
        for paths, rights in ((read, READ), (read_exec, READ_EXEC), (write, fs)):
            for path in paths:
                _allow(ruleset, path, rights & fs)
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # required without CAP_SYS_ADMIN
        _syscall(RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return version


def _allow(ruleset: int, path: str, rights: int) -> None:
    """Allow `rights` beneath `path` (a file gets only the rights a file can have)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # not on this system: nothing to allow
    try:
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        rule = _PathBeneath(rights, fd)
        _syscall(ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(rule), ctypes.c_uint32(0))
    finally:
        os.close(fd)
