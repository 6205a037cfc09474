"""Escape attempts by model-written code: each is contained, fails, and changes nothing on disk."""

from __future__ import annotations

import glob
import tempfile
import time
from pathlib import Path

import pytest

from pettingllms_cli.tools.sandbox import run_python


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
    result = run_python(f"import subprocess\nsubprocess.run(['touch', '{untouched / 'evil'}'])")
    assert not result.ok and "not allowed" in result.stderr


def test_ten_gigabyte_allocation_fails_with_memory_error():
    result = run_python("x = bytearray(10 * 1024 ** 3)\nprint('allocated')")
    assert not result.ok and result.error == "memory" and "allocated" not in result.stdout


def test_writing_outside_its_folder_is_refused(untouched):
    target = untouched / "keep.txt"
    code = f"open({str(target)!r}, 'w').write('pwned')"
    result = run_python(code)
    assert not result.ok and "outside the working folder" in result.stderr


def test_deleting_or_renaming_outside_is_refused(untouched):
    target = untouched / "keep.txt"
    for code in (f"import os\nos.remove({str(target)!r})", f"import os\nos.rename({str(target)!r}, 'x')"):
        result = run_python(code)
        assert not result.ok and "not allowed" in result.stderr


def test_writing_inside_its_folder_works_and_is_thrown_away(untouched):
    result = run_python("import os\nopen('note.txt', 'w').write('hi')\nprint(os.getcwd())")
    assert result.ok
    assert not Path(result.stdout.strip()).exists()  # the work dir was deleted after the call


def test_opening_a_socket_is_refused(untouched):
    code = "import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 80))"
    result = run_python(code)
    assert not result.ok and "socket" in result.stderr


def test_ctypes_is_refused():
    result = run_python("import ctypes\nprint(ctypes.CDLL(None))")
    assert not result.ok and "not allowed" in result.stderr


def test_environment_is_stripped(monkeypatch):
    monkeypatch.setenv("PETTINGLLMS_SECRET", "s3cret")
    result = run_python("import os\nprint(sorted(os.environ))")
    assert result.ok and "PETTINGLLMS_SECRET" not in result.stdout


def test_output_is_capped():
    result = run_python("print('x' * 10**6)", max_output=1000)
    assert len(result.stdout) <= 1000 and result.truncated
