"""Model-written code in the sandbox: limits, containment, and the mode choice (strict or best_effort).

The kernel-level escape suite is tests/test_sandbox_escapes.py; this module keeps the everyday contract.
"""

from __future__ import annotations

import glob
import os
import tempfile
import time
from pathlib import Path

import pytest

from pettingllms_cli.errors import UserError
from pettingllms_cli.tools import landlock, sandbox
from pettingllms_cli.tools.sandbox import Support, run_python
from tests.conftest import EXPERIMENTS, run_cli

MISSING = Support(0, "unshare (user, mount, pid, net namespaces): Operation not permitted")


@pytest.fixture
def untouched(tmp_path):
    """A folder outside the sandbox with one file; after the test, it must be exactly as it was."""
    (tmp_path / "keep.txt").write_text("original")
    before = sorted(p.name for p in tmp_path.iterdir())
    leftovers = set(glob.glob(str(Path(tempfile.gettempdir()) / "pettingllms_sbx_*")))
    yield tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "keep.txt").read_text() == "original"
    assert set(glob.glob(str(Path(tempfile.gettempdir()) / "pettingllms_sbx_*"))) <= leftovers  # work dirs are removed


def test_plain_code_runs_and_reads_stdin():
    result = run_python("import sys\nprint(sum(map(int, sys.stdin.read().split())))", stdin="2 3 4")
    assert result.ok and result.stdout.strip() == "9" and result.error is None


def test_infinite_loop_times_out(untouched):
    start = time.monotonic()
    result = run_python("while True:\n    pass", timeout=1.0)
    assert not result.ok and result.error == "timeout"
    assert time.monotonic() - start < 10


def test_fork_bomb_is_refused(untouched):
    code = "import os\nwhile True:\n    os.fork()"
    result = run_python(code, timeout=2.0)
    assert not result.ok and result.error in ("exception", "timeout")
    assert "fork" in result.stderr or result.error == "timeout"


def test_subprocess_is_refused(untouched):
    result = run_python(f"import subprocess\nsubprocess.run(['touch', '{untouched / 'evil'}'], check=True)")
    assert not result.ok  # no fork (RLIMIT_NPROC), and no `touch` in its root; `untouched` checks the folder


def test_ten_gigabyte_allocation_fails_with_memory_error():
    result = run_python("x = bytearray(10 * 1024 ** 3)\nprint('allocated')")
    assert not result.ok and result.error == "memory" and "allocated" not in result.stdout


def test_writing_outside_its_folder_is_refused(untouched):
    target = untouched / "keep.txt"
    code = f"open({str(target)!r}, 'w').write('pwned')"
    result = run_python(code)
    assert not result.ok and "pwned" not in (untouched / "keep.txt").read_text()


def test_deleting_or_renaming_outside_is_refused(untouched):
    target = untouched / "keep.txt"
    for code in (f"import os\nos.remove({str(target)!r})", f"import os\nos.rename({str(target)!r}, 'x')"):
        result = run_python(code)
        assert not result.ok and (untouched / "keep.txt").exists()


def test_writing_inside_its_folder_works_and_is_thrown_away(untouched):
    result = run_python("import os\nopen('note.txt', 'w').write('hi')\nprint(os.getcwd())")
    assert result.ok
    assert not Path(result.stdout.strip()).exists()  # the work dir was deleted after the call


def test_opening_a_socket_is_refused(untouched):
    code = "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 80))"
    result = run_python(code)
    assert not result.ok and ("Permission denied" in result.stderr or "unreachable" in result.stderr)


def test_ctypes_loads_but_the_kernel_still_refuses(untouched):
    """No list of forbidden modules: native code meets the same kernel checks as Python code."""
    code = f"import ctypes, os\nprint(ctypes.CDLL(None).open(b'{untouched}/evil', os.O_WRONLY | os.O_CREAT, 0o644))"
    result = run_python(code)
    assert result.ok and result.stdout.strip() == "-1"


def test_environment_is_stripped(monkeypatch):
    monkeypatch.setenv("PETTINGLLMS_SECRET", "s3cret")
    result = run_python("import os\nprint(sorted(os.environ))")
    assert result.ok and "PETTINGLLMS_SECRET" not in result.stdout


def test_output_is_capped():
    result = run_python("print('x' * 10**6)", max_output=1000)
    assert len(result.stdout) <= 1000 and result.truncated


def test_its_folder_holds_at_most_disk_mb(untouched):
    code = "for i in range(20):\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))\n    print(i, flush=True)"
    result = run_python(code, disk_mb=4)
    assert not result.ok and "No space left" in result.stderr
    assert len(result.stdout.split()) <= 4


# --- the mode: strict refuses an unsupported kernel, best_effort says so once ----------------------------------
@pytest.fixture
def fresh_mode(monkeypatch):
    """The process-wide mode and its one warning, as at start."""
    monkeypatch.setattr(sandbox, "_mode", "strict")
    monkeypatch.setattr(sandbox, "_warned", set())


def test_strict_on_an_unsupported_kernel_is_one_line_naming_the_feature_and_the_opt_in(fresh_mode):
    with pytest.raises(UserError) as err:
        sandbox.require("strict", probe=lambda: MISSING)
    message = str(err.value)
    assert "\n" not in message and "Landlock" in message and "namespaces" in message and "best_effort" in message


def test_best_effort_says_what_is_missing_once(fresh_mode):
    lines: list[str] = []
    for _ in range(3):
        sandbox.require("best_effort", probe=lambda: MISSING, warn=lines.append)
    assert len(lines) == 1 and "Landlock" in lines[0] and "best_effort" in lines[0]


def test_a_supported_kernel_needs_no_opt_in(fresh_mode):
    lines: list[str] = []
    assert sandbox.require("strict", probe=lambda: Support(7), warn=lines.append).missing() == []
    assert lines == []


def test_run_python_refuses_unconfined_code_in_strict_mode(fresh_mode, monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda: MISSING)
    with pytest.raises(UserError, match="best_effort"):
        run_python("print(1)")


def test_best_effort_without_namespaces_runs_the_weaker_mode_and_caps_the_folder(fresh_mode, monkeypatch, untouched):
    monkeypatch.setattr(sandbox, "probe", lambda: MISSING)
    sandbox.require("best_effort", warn=lambda line: None)
    assert run_python("print(6 * 7)").stdout == "42\n"
    result = run_python("open('big', 'wb').write(b'x' * (3 << 20))", disk_mb=1)
    assert not result.ok and result.error == "disk"
    assert "not allowed" in run_python(f"open({str(untouched / 'keep.txt')!r}, 'w')").stderr  # the audit hook


def test_best_effort_without_landlock_still_runs_in_namespaces(fresh_mode, monkeypatch):
    if sandbox.probe().namespaces_error is not None:
        pytest.skip("no namespaces on this kernel")
    monkeypatch.setattr(sandbox, "probe", lambda: Support(0))
    sandbox.require("best_effort", warn=lambda line: None)
    result = run_python("import os\nprint(os.getpid(), os.path.exists('/etc/passwd'))")
    assert result.ok and result.stdout.split() == ["2", "False"]


def test_cli_refuses_an_unsupported_kernel_before_loading_a_model(fresh_mode, monkeypatch, capsys):
    monkeypatch.setattr(sandbox, "probe", lambda: MISSING)
    code = run_cli(["validate", str(EXPERIMENTS / "code_single.yaml")], monkeypatch)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "tools: {sandbox: best_effort}" in err


def test_cli_best_effort_runs_with_one_line(fresh_mode, monkeypatch, capsys):
    monkeypatch.setattr(sandbox, "probe", lambda: MISSING)
    args = ["validate", str(EXPERIMENTS / "code_single.yaml"), "--set", "tools.sandbox=best_effort"]
    assert run_cli(args, monkeypatch) == 0
    assert sum("sandbox: best_effort" in line for line in capsys.readouterr().out.splitlines()) == 1


def test_an_env_without_model_code_needs_no_sandbox(fresh_mode, monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda: MISSING)
    assert run_cli(["validate", str(EXPERIMENTS / "sql_single.yaml")], monkeypatch) == 0


# --- the Landlock wrapper ----------------------------------------------------------------------------------------
def _in_child(step) -> int:
    """Run `step()` in a forked child (Landlock cannot be undone); its exit code: 0 if it returned True."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if step() else 1)
        except BaseException:
            os._exit(2)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.skipif(landlock.abi() < 1, reason="no Landlock in this kernel")
@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6, 7])
def test_landlock_rulesets_of_every_abi_apply(version, tmp_path):
    """Each ABI's ruleset is accepted (rights the kernel does not know are left out) and confines the process."""
    if version > landlock.abi():
        pytest.skip(f"this kernel has ABI {landlock.abi()}")
    secret, folder = tmp_path / "secret", tmp_path / "folder"
    secret.write_text("x")
    folder.mkdir()

    def confined() -> bool:
        landlock.restrict(read=[], read_exec=[], write=[str(folder)], version=version)
        (folder / "ok").write_text("fine")
        try:
            secret.read_text()
        except PermissionError:
            return True
        return False

    assert _in_child(confined) == 0
    assert (folder / "ok").read_text() == "fine"


@pytest.mark.skipif(landlock.abi() < 6, reason="signal scoping needs Landlock ABI 6")
def test_landlock_scope_refuses_signals_to_processes_outside():
    parent = os.getpid()

    def signal_parent() -> bool:
        landlock.restrict(read=[], read_exec=[], write=[])
        try:
            os.kill(parent, 0)
        except PermissionError:
            return True
        return False

    assert _in_child(signal_parent) == 0


def test_landlock_abi_is_a_number():
    assert isinstance(landlock.abi(), int) and landlock.abi() >= 0
