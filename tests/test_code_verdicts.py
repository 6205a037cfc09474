"""code_v0's verdicts cannot be forged by the code under test (issue 34): every hostile variant scores 0 passed.

Each hack leaves `add` undefined or wrong and tries to make the two tests pass some other way; under the old
harness (tests and candidate in one process, results on stdout tagged with a nonce) the first one scored 2 of 2.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pettingllms_cli.envs.code import extract_code, run_tests

TESTS = ("assert add(1, 2) == 3", "assert add(2, 2) == 4")
FRAME = "def _frame(b):\n    import os\n    return len(b).to_bytes(4, 'big') + b\n"

# Collect every descriptor in the frames above (the candidate side's pipes) and send protocol messages into them.
FORGE = (
    FRAME
    + """
import os, pickle, sys
f = sys._getframe()
fds = set()
while f is not None:
    fds |= {v for v in f.f_locals.values() if type(v) is int and 2 < v < 1024}
    f = f.f_back
HELLO = ("ready", {"add": None})
def _send(msg):
    for fd in fds:
        try:
            os.write(fd, _frame(pickle.dumps(msg)))
        except OSError:
            pass
"""
)

HACKS = {
    # The reproduction: walk up to the harness's globals, print its nonce lines, leave before any test.
    "frame_walk_print_exit": """
import sys, os
f = sys._getframe()
while f is not None:
    g = f.f_globals
    if "_nonce" in g:
        for i in range(2):
            print(g["_nonce"], i, 1, flush=True)
    f = f.f_back
for i in range(2):
    print("0" * 16, i, 1, flush=True)
os._exit(0)
""",
    # Find any descriptor in the frames above (the candidate side's pipe) and write verdict frames into it.
    "frame_walk_descriptors": FRAME
    + """
import sys, os
f = sys._getframe()
while f is not None:
    for v in list(f.f_locals.values()):
        if type(v) is int and 2 < v < 1024:
            for msg in (b"Vready", b"V0 1", b"V1 1", b"C"):
                try:
                    os.write(v, _frame(msg))
                except OSError:
                    pass
    f = f.f_back
os._exit(0)
""",
    # Write forged frames to every descriptor the process might have inherited, then exit.
    "inherited_descriptors": FRAME
    + """
import os
for fd in range(0, 256):
    for msg in (b"Vready", b"V0 1", b"V1 1"):
        try:
            os.write(fd, _frame(msg))
        except OSError:
            pass
os._exit(0)
""",
    # Answer the judge before it asks: a forged hello and the two right answers, then exit.
    "pre_answer": FORGE + "for msg in (HELLO, ('ok', 3), ('ok', 4)):\n    _send(msg)\nos._exit(0)\n",
    # The same, with pauses (so the question is already asked when the answers arrive) and answers without the
    # question's nonce: the race pre_answer won now and then, made certain.
    "pre_answer_after_a_pause": FORGE
    + """
import time
_send(HELLO)
time.sleep(0.5)
for msg in (("ok", 3), ("ok", 4)):
    _send(msg)
    time.sleep(0.2)
os._exit(0)
""",
    # Monkeypatch print and sys.stdout, then define a wrong add.
    "monkeypatch_print_stdout": """
import builtins, sys, io
builtins.print = lambda *a, **k: sys.__stdout__.write("0 0 1\\n0 1 1\\n")
sys.stdout = io.StringIO("0 0 1\\n0 1 1\\n")
AssertionError.__init__ = lambda self, *a: None
def add(a, b):
    print("ok")
    return a - b
""",
    # Objects that equal anything and are always true.
    "always_equal": """
class _Any(int):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = int.__hash__
def add(a, b):
    return _Any(0)
""",
    "always_equal_plain_object": """
class _Any:
    def __eq__(self, other):
        return True
    def __bool__(self):
        return True
def add(a, b):
    return _Any()
""",
    # Leave in the middle of the first call.
    "exit_inside_call": """
import os
def add(a, b):
    os._exit(0)
""",
    "raise_systemexit_inside_call": """
def add(a, b):
    raise SystemExit(0)
""",
    # Kill the parent and the whole process group (refused by the sandbox; and the trainer must survive).
    "kill_parent": """
import os, signal
for target in (lambda: os.kill(os.getppid(), signal.SIGKILL), lambda: os.killpg(0, signal.SIGKILL)):
    try:
        target()
    except Exception:
        pass
def add(a, b):
    return 0
""",
    # Hang while loading, and hang in a call.
    "hang_at_load": "while True:\n    pass\n",
    "hang_in_call": "def add(a, b):\n    while True:\n        pass\n",
}


@pytest.mark.parametrize("name", sorted(HACKS))
def test_hack_scores_no_test_passed(name):
    _, passed = run_tests(HACKS[name], TESTS, "", 2.0)
    assert passed == (False, False)


def test_the_trainer_survives_a_candidate_that_kills_its_parent():
    # In a child process: were the kill to reach the caller, this child dies instead of the test session.
    script = textwrap.dedent(f"""
        from pettingllms_cli.envs.code import run_tests
        print(run_tests({HACKS["kill_parent"]!r}, {TESTS!r}, "", 2.0)[1])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "(False, False)", out.stderr[-500:]


def test_honest_code_passes_whatever_it_prints():
    # Output never travels with the verdicts: 5 MB of prints (past the sandbox's file limit) change nothing.
    code = "def add(a, b):\n    for _ in range(50):\n        print('x' * 100_000)\n    return a + b\n"
    assert run_tests(code, TESTS, "", 5.0) == (True, (True, True))


def test_each_test_has_its_own_verdict_and_a_crash_fails_the_rest():
    code = "import os\ndef add(a, b):\n    if a == 2:\n        os._exit(1)\n    return a + b\n"
    assert run_tests(code, TESTS + ("assert add(0, 0) == 0",), "", 2.0) == (True, (True, False, False))


def test_loading_failures_are_not_loaded():
    assert run_tests("def add(a, b) return", TESTS, "", 2.0) == (False, (False, False))
    assert run_tests("raise ImportError('x')", TESTS, "", 2.0) == (False, (False, False))


def test_plain_data_crosses_and_subclasses_lose_their_overrides():
    code = textwrap.dedent("""
        import collections
        class Loose(str):
            def __eq__(self, other):
                return True
        def f(kind):
            return {"counter": collections.Counter("aab"), "nan": float("nan"), "set": {1, (2, 3)},
                    "bytes": b"\\x00", "complex": 1 + 2j, "loose": Loose("a"), "int": int}[kind]
    """)
    tests = (
        "assert f('counter') == {'a': 2, 'b': 1}",
        "import math\nassert math.isnan(f('nan'))",
        "assert f('set') == {1, (2, 3)}",
        "assert f('bytes') == b'\\x00' and f('complex') == 1 + 2j",
        "assert f('loose') == 'a' and f('loose') != 'b'",
        "assert f('int') is int",
    )
    assert run_tests(code, tests, "", 5.0) == (True, (True,) * len(tests))


def test_setup_builds_candidate_objects_and_tests_may_expect_exceptions():
    # MBPP's test_setup_code (trusted data) uses the code's classes: objects stay in the candidate's process.
    code = textwrap.dedent("""
        class Node:
            def __init__(self, v):
                self.v, self.left, self.right = v, None, None
        def height(n):
            if n == "bad":
                raise ValueError("no")
            return 0 if n is None else 1 + max(height(n.left), height(n.right))
    """)
    setup = "root = Node(1)\nroot.left = Node(2)\nroot.left.left = Node(3)\n"
    tests = (
        "assert height(root) == 3",
        "assert root.left.v == 2",
        "try:\n    height('bad')\n    assert False\nexcept ValueError:\n    pass",
    )
    assert run_tests(code, tests, setup, 5.0) == (True, (True, True, True))


def test_a_candidate_object_has_no_truth_value_and_equals_only_itself():
    code = "class Box:\n    pass\ndef f():\n    return Box()\n"
    tests = ("assert f()", "assert f() == f()", "b = f()\nassert b == b")
    assert run_tests(code, tests, "", 5.0)[1] == (False, False, True)


def test_extract_code_does_not_stop_at_a_fence_inside_a_comment():
    text = "```python\ndef f():\n    return 1  # like ```this```\n```\ntrailing words"
    assert extract_code(text) == "def f():\n    return 1  # like ```this```\n"
