"""Escapes a model's code may try, each checked from outside: the outside folder is byte-identical, no process the
code started is left, the processes it aimed at still run, and no secret reaches its output. Then the other half:
honest programs (the bundled data sets' references, 20 MBPP records) still pass inside the sandbox.

Every escape runs twice: as this process runs it (root here: plain namespaces, the program as uid 65534) and
through the user namespace an unprivileged caller gets (`USER_NAMESPACE`).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pettingllms_cli.tools import sandbox
from pettingllms_cli.tools.sandbox import run_python

pytestmark = pytest.mark.skipif(bool(sandbox.probe().missing()), reason="this kernel lacks what strict mode needs")
DATA = Path(__file__).resolve().parents[1] / "pettingllms_cli" / "envs" / "data"
SECRET = "s3cret-" + uuid.uuid4().hex[:8]


@pytest.fixture(params=[False, True], ids=["as_caller", "user_namespace"])
def path_taken(request, monkeypatch):
    monkeypatch.setattr(sandbox, "USER_NAMESPACE", request.param)
    return request.param


@pytest.fixture
def outside(tmp_path):
    """A folder outside the sandbox (a file, a fake ~/.ssh key); it must end byte-identical, xattrs and modes too."""
    (tmp_path / "keep.txt").write_text("original")
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa").write_text(SECRET)
    before = snapshot(tmp_path)
    yield tmp_path
    assert snapshot(tmp_path) == before


@pytest.fixture
def sentinel():
    """A process outside the sandbox that the code aims at (kill, pidfd, setpriority): it must still run, unchanged."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    nice = os.getpriority(os.PRIO_PROCESS, proc.pid)
    yield proc.pid
    assert proc.poll() is None, "the sandbox reached a process outside it"
    assert os.getpriority(os.PRIO_PROCESS, proc.pid) == nice
    proc.kill()
    proc.wait()


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under `folder`: type and mode, content hash, extended attributes."""
    seen = {}
    for path in sorted([folder, *folder.rglob("*")]):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
        seen[str(path.relative_to(folder))] = (st.st_mode, digest, sorted(os.listxattr(path, follow_symlinks=False)))
    return seen


def survivors(marker: str) -> list[int]:
    """Pids whose command line holds `marker` (other than this test process)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass  # exited while we looked
    return found


ESCAPES = {
    "open_write": "open('{out}/a.txt', 'w').write('x')",
    "open_dir_fd": "import os\nd = os.open('{out}', os.O_RDONLY)\nos.open('b.txt', os.O_WRONLY | os.O_CREAT, dir_fd=d)",
    "unlink_dir_fd": "import os\nos.unlink('keep.txt', dir_fd=os.open('{out}', os.O_RDONLY))",
    "rename_dir_fd": "import os\nd = os.open('{out}', os.O_RDONLY)\nos.rename('keep.txt', 'moved', src_dir_fd=d, dst_dir_fd=d)",
    "rename_out": "open('x', 'w').write('x')\nimport os\nos.rename('x', '{out}/x')",
    "rename_in": "import os\nos.rename('{out}/keep.txt', 'stolen')",
    "hardlink_out": "import os\nos.link('{out}/keep.txt', 'l')\nopen('l', 'w').write('pwned')",
    "symlink_out": "import os\nos.symlink('/etc/passwd', '{out}/ln')",
    "symlink_write_through": "import os\nos.symlink('{out}/keep.txt', 'ln')\nopen('ln', 'w').write('pwned')",
    "mkfifo": "import os\nos.mkfifo('{out}/d.fifo')",
    "mknod": "import os, stat\nos.mknod('{out}/null', stat.S_IFCHR | 0o666, os.makedev(1, 3))",
    "setxattr": "import os\nos.setxattr('{out}/keep.txt', 'user.pwned', b'1')",
    "chmod": "import os\nos.chmod('{out}/keep.txt', 0o777)",
    "sqlite": "import sqlite3\nsqlite3.connect('{out}/c.db').execute('create table t(x)')",
    "ctypes_write": (
        "import ctypes, os\nlibc = ctypes.CDLL(None)\nfd = libc.open(b'{out}/e.txt', os.O_WRONLY | os.O_CREAT, 0o644)\n"
        "print(fd, libc.write(fd, b'pwned', 5))"
    ),
    "shm_open": "import _posixshmem, os\n_posixshmem.shm_open('/pettingllms_{marker}', os.O_CREAT | os.O_RDWR, 0o600)",
    "read_ssh_key": "print(open('{out}/.ssh/id_rsa').read())",
    "read_passwd": "print(open('/etc/passwd').read())",
    "read_parent_environ": "import os\nprint(open(f'/proc/{{os.getppid()}}/environ').read())",
    "kill_sentinel": "import os\nos.kill({sentinel}, 9)",
    "pidfd_sentinel": "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open({sentinel}), 9)",
    "setpriority_sentinel": "import os\nos.setpriority(os.PRIO_PROCESS, {sentinel}, 19)",
    "raw_socket_ctypes": "import ctypes\nprint('fd', ctypes.CDLL(None).socket(17, 3, 768))",  # AF_PACKET, SOCK_RAW, ETH_P_ALL
    "disk_many_files": "for i in range(200):\n    open(f'f{{i}}', 'wb').write(b'x' * (1 << 20))",
    "double_fork_setsid": (
        "import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'])\n"
        "    os._exit(0)\ntime.sleep(0.5)"
    ),
    "fork_exec_setsid": (
        "import _posixsubprocess, os, sys\nr, w = os.pipe()\nfor _ in range(3):\n"
        "    _posixsubprocess.fork_exec([sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'],"
        " [os.fsencode(sys.executable)], True, (), None, None, -1, -1, -1, -1, -1, -1, r, w, True, True, -1,"
        " None, None, None, -1, None, False)\nimport time; time.sleep(0.5)"
    ),
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_changes_nothing_outside(name, outside, sentinel, path_taken):
    marker = uuid.uuid4().hex
    code = ESCAPES[name].format(out=outside, sentinel=sentinel, marker=marker)
    # Forks allowed, so the PID namespace (not RLIMIT_NPROC) must be what kills the daemons.
    result = run_python(code, timeout=3.0, disk_mb=8, processes=16)
    assert result.error != "sandbox", result.stderr  # the confinement itself worked
    assert survivors(marker) == []
    assert SECRET not in result.stdout + result.stderr
    assert "root:x:0:0" not in result.stdout
    assert not any(p.name.startswith(f"pettingllms_{marker}") for p in Path("/dev/shm").iterdir())
    if name == "raw_socket_ctypes":
        assert result.stdout.strip() == "fd -1"
    if name == "disk_many_files":
        assert not result.ok and "No space left" in result.stderr


def test_a_double_fork_is_killed_when_the_call_ends_even_as_root(path_taken):
    """With forks allowed (root is not counted by RLIMIT_NPROC), daemons still die with the namespace."""
    marker = uuid.uuid4().hex
    code = ESCAPES["double_fork_setsid"].format(marker=marker) + "\nprint('forked')"
    result = run_python(code, timeout=3.0, processes=16)
    assert result.ok and "forked" in result.stdout
    assert survivors(marker) == []


def test_killing_its_parent_leaves_the_caller_running():
    """`os.kill(os.getppid(), 9)` and reading the parent's environ, from a caller process we can watch."""
    caller = (
        "import json, sys\nfrom pettingllms_cli.tools.sandbox import run_python\n"
        "r = run_python(sys.argv[1])\nprint(json.dumps([r.ok, r.stdout, r.stderr]))"
    )
    for code in ("import os\nos.kill(os.getppid(), 9)", "import os\nprint(open(f'/proc/{os.getppid()}/environ').read())"):
        env = {**os.environ, "PETTINGLLMS_SECRET": SECRET}
        done = subprocess.run([sys.executable, "-c", caller, code], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        ok, stdout, stderr = json.loads(done.stdout.splitlines()[-1])
        assert SECRET not in stdout + stderr


def test_no_tcp_connection_reaches_a_local_server():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        server.settimeout(0.5)
        code = f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))\ns.sendall(b'hi')"
        result = run_python(code)
        assert not result.ok
        with pytest.raises(TimeoutError):
            server.accept()


def test_a_planted_module_hijacks_neither_this_call_nor_the_next():
    plant = "open('random.py', 'w').write('print(\"HIJACK\")')\nimport random\nprint(random.random() < 2)"
    first = run_python(plant)
    second = run_python("import random\nprint(random.random() < 2)")
    assert first.ok and second.ok
    assert "HIJACK" not in first.stdout + second.stdout


def test_nothing_outlives_a_timeout():
    marker = uuid.uuid4().hex
    code = ESCAPES["double_fork_setsid"].format(marker=marker) + "\nwhile True:\n    pass"
    start = time.monotonic()
    result = run_python(code, timeout=1.0, processes=16)
    assert result.error == "timeout" and time.monotonic() - start < 10
    assert survivors(marker) == []


# --- honest programs still pass --------------------------------------------------------------------------
def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mbpp_program(record: dict) -> str:
    return "\n".join([record["code"], record.get("test_setup_code") or "", *record["test_list"], "print('passed')"])


def humaneval_program(record: dict) -> str:
    body = record["prompt"] + record["canonical_solution"]
    return f"{body}\n{record['test']}\ncheck({record['entry_point']})\nprint('passed')"


HONEST = [
    *[(f"bundled_mbpp_{r['task_id']}", mbpp_program(r)) for r in _jsonl(DATA / "mbpp_sample.jsonl")],
    *[(f"bundled_humaneval_{r['task_id']}", humaneval_program(r)) for r in _jsonl(DATA / "humaneval_sample.jsonl")],
    *[(f"mbpp_{r['task_id']}", mbpp_program(r)) for r in _jsonl(Path(__file__).parent / "data" / "mbpp_20.jsonl")],
]


@pytest.mark.parametrize("name,program", HONEST, ids=[name for name, _ in HONEST])
def test_honest_program_passes(name, program):
    result = run_python(program, timeout=10.0)
    assert result.ok and result.stdout.strip().endswith("passed"), result.stderr


def test_honest_program_uses_its_folder_tempfile_and_the_standard_library():
    code = (
        "import tempfile, json, sqlite3, os, decimal, datetime, re\n"
        "with tempfile.TemporaryDirectory() as d:\n    open(os.path.join(d, 'a'), 'w').write('x')\n"
        "c = sqlite3.connect('local.db'); c.execute('create table t(x)'); c.execute('insert into t values (1)')\n"
        "print(json.dumps([c.execute('select x from t').fetchone()[0], os.urandom(2).__len__(), str(decimal.Decimal(1))]))"
    )
    result = run_python(code)
    assert result.ok and result.stdout.strip() == '[1, 2, "1"]', result.stderr
